// Small pieces of the kubelet API's request handling, shared by its handlers
// (agent/server/kubelet_*.cpp): query parameters, path segments and Status answers.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/server/http_server.h"

namespace nodeagent::agent {

// The decoded `name=value` pairs of a query string, in order (api::parseQuery); a query with a
// malformed escape counts as empty.
std::vector<std::pair<std::string, std::string>> parseQuery(std::string_view query);
// The first value of `name`, or nullopt.
std::optional<std::string> queryValue(const std::vector<std::pair<std::string, std::string>>& q,
                                      std::string_view name);
// kubelet's remotecommand flags: "1" or "true" (any case) is true.
bool queryFlag(const std::vector<std::pair<std::string, std::string>>& q, std::string_view name);

// The path's segments after `prefix` ("/exec/ns/pod/c" with "/exec/" → {"ns","pod","c"}),
// percent-decoded; nullopt when one does not decode.
std::optional<std::vector<std::string>> pathSegments(std::string_view path,
                                                     std::string_view prefix);

// A metav1.Status JSON object: {"kind":"Status","apiVersion":"v1","metadata":{},
// "status":"Failure","message":...,"reason":...,"code":...}.
std::string statusJson(int code, std::string_view reason, std::string_view message);
// A Failure answer with a Status body; the reason follows the code (BadRequest, NotFound,
// Forbidden, Unauthorized, InternalError...).
HttpResponse statusResponse(int code, std::string_view message);

}  // namespace nodeagent::agent
