#include "agent/server/kubelet_request.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "api/rest_client.h"

namespace nodeagent::agent {
namespace {

std::string_view reasonFor(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 409:
      return "Conflict";
    case 503:
      return "ServiceUnavailable";
    default:
      return "InternalError";
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parseQuery(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    auto name = api::urlDecode(item.substr(0, eq));
    auto value =
        api::urlDecode(eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1));
    if (name && value) out.emplace_back(std::move(*name), std::move(*value));
  }
  return out;
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
  std::string lower = *v;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower == "1" || lower == "true";
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
  return HttpResponse{code, "application/json", statusJson(code, reasonFor(code), message),
                      nullptr};
}

}  // namespace nodeagent::agent
