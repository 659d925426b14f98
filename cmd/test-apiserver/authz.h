// The test apiserver's answers to the reviews a kubelet sends when it delegates its API's
// authentication and authorization (kubelet --authentication-token-webhook and
// --authorization-mode=Webhook): TokenReview from the --token-auth-file users, SubjectAccessReview
// from kube-apiserver's two fixed rules (the system:masters group may do everything) and an ABAC
// policy file (--authorization-policy-file).
//
// Policy file: kube-apiserver's ABAC format, one JSON object a line; blank lines and lines whose
// first non-blank character is '#' are skipped:
//
//   {"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy",
//    "spec":{"user":"alice","group":"ops","namespace":"*","resource":"nodes","apiGroup":"*",
//            "readonly":true,"nonResourcePath":"/healthz"}}
//
// The subset read: apiVersion and kind as above (required), spec with any of user, group,
// namespace, resource, apiGroup, nonResourcePath (strings) and readonly (a bool); any other spec
// field, or a field of another type, is an error naming the file, line and field. Matching is
// kube-apiserver's (pkg/auth/authorizer/abac): the user and group ("*" any) must both match where
// given and at least one be given; readonly policies allow only get, list and watch; a resource
// request matches namespace, resource and apiGroup, each exactly or by "*" (a subresource is not
// compared, so "nodes" covers nodes/proxy); a non-resource request matches nonResourcePath "*",
// the exact path, or a prefix ending in "*".
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

struct AbacPolicy {
  std::string user;
  std::string group;
  bool readonly = false;
  std::string api_group;
  std::string resource;
  std::string ns;
  std::string non_resource_path;
};

// One policy line; InvalidArgument naming the field otherwise.
base::StatusOr<AbacPolicy> parseAbacPolicy(const std::string& line);
// The whole file; InvalidArgument naming the file and line of the first bad line.
base::StatusOr<std::vector<AbacPolicy>> parseAbacPolicyFile(const std::filesystem::path& path);

// What a SubjectAccessReview asks about (authorizer.Attributes).
struct AccessRequest {
  std::string user;
  std::vector<std::string> groups;
  bool resource_request = false;
  std::string verb;
  std::string ns;
  std::string api_group;
  std::string resource;
  std::string subresource;
  std::string name;
  std::string path;  // non-resource requests
};

struct AccessDecision {
  bool allowed = false;
  std::string reason;  // kube-apiserver's: "" when allowed
};

// system:masters first, then the policies in file order.
AccessDecision authorize(const std::vector<AbacPolicy>& policies, const AccessRequest& request);

// A token auth file user or a service account as TokenReview reports it.
struct ReviewUser {
  std::string username;
  std::string uid;
  std::vector<std::string> groups;
  std::map<std::string, std::vector<std::string>> extra;
};

// What the server's authenticators say of a bearer token.
struct TokenVerdict {
  bool authenticated = false;
  ReviewUser user;
  // Those of the audiences asked for that the token is valid for.
  std::vector<std::string> audiences;
  std::string error;  // why the token was refused, when an authenticator knows
};

// Authenticates `token` for `audiences` (never empty: the review's, or the server's API audiences).
using TokenAuthenticator = std::function<TokenVerdict(const std::string& token,
                                                      const std::vector<std::string>& audiences)>;

// The answer to a POST of a TokenReview: {http code, body}. The review's spec.audiences, or
// `api_audiences` when it names none, are the audiences asked for. An empty `authenticate`: no
// authenticator is configured and the review comes back without a verdict, as from kube-apiserver
// without one.
std::pair<int, nlohmann::json> reviewToken(const nlohmann::json& review,
                                           const TokenAuthenticator& authenticate,
                                           const std::vector<std::string>& api_audiences);

// The answer to a POST of a SubjectAccessReview: {http code, body} (422 for a spec that asks
// nothing or both kinds of attributes, 400 for a body that is no review).
std::pair<int, nlohmann::json> reviewAccess(const nlohmann::json& review,
                                            const std::vector<AbacPolicy>& policies);

}  // namespace nodeagent::testapiserver
