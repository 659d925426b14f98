#include "agent/server/kubelet_request.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "api/api_errors.h"
#include "api/rest_client.h"
#include "base/strings.h"

namespace nodeagent::agent {

std::vector<std::pair<std::string, std::string>> parseQuery(std::string_view query) {
  auto pairs = api::parseQuery(query);
  return pairs.ok() ? std::move(*pairs) : api::Query{};
}

std::optional<std::string> queryValue(const std::vector<std::pair<std::string, std::string>>& q,
                                      std::string_view name) {
  for (const auto& [n, v] : q) {
    if (n == name) return v;
  }
  return std::nullopt;
}

bool queryFlag(const std::vector<std::pair<std::string, std::string>>& q, std::string_view name) {
  auto v = queryValue(q, name);
  if (!v) return false;
  return *v == "1" || base::iequals(*v, "true");
}

std::optional<std::vector<std::string>> pathSegments(std::string_view path,
                                                     std::string_view prefix) {
  if (path.substr(0, prefix.size()) != prefix) return std::nullopt;
  path.remove_prefix(prefix.size());
  std::vector<std::string> out;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view seg = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (seg.empty()) continue;
    auto decoded = api::urlDecode(seg);
    if (!decoded) return std::nullopt;
    out.push_back(std::move(*decoded));
  }
  return out;
}

std::string statusJson(int code, std::string_view reason, std::string_view message) {
  nlohmann::json status{
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason},
      {"code", code}};
  return status.dump();
}

HttpResponse statusResponse(int code, std::string_view message) {
  return HttpResponse{code, "application/json",
                      statusJson(code, api::statusReasonForCode(code), message), nullptr};
}

}  // namespace nodeagent::agent
