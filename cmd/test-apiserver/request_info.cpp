#include "cmd/test-apiserver/request_info.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "cmd/test-apiserver/selectors.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

std::string resourceVerb(const std::string& method, bool named, bool watch) {
  if (method == "GET" || method == "HEAD") {
    if (watch) return "watch";
    return named ? "get" : "list";
  }
  if (method == "POST") return "create";
  if (method == "PUT") return "update";
  if (method == "PATCH") return "patch";
  if (method == "DELETE") return named ? "delete" : "deletecollection";
  return asciiLower(method);
}

// The name a field selector requires with metadata.name=<name> (or ==); "" when it requires none
// or the name could not be a path segment.
std::string selectedName(const std::string& field_selector) {
  auto selector = FieldSelector::parse(field_selector);
  if (!selector.ok()) return "";
  for (const FieldSelector::Term& term : selector->terms()) {
    if (term.field != "metadata.name" || term.negated) continue;
    const std::string& name = term.value;
    if (name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('%') != std::string::npos) {
      return "";
    }
    return name;
  }
  return "";
}

}  // namespace

AccessRequest requestAttributes(const std::string& method, const std::string& path,
                                bool watch_param, const std::string& field_selector) {
  AccessRequest request;
  request.path = path;
  request.field_selector = field_selector;
  request.verb = asciiLower(method);
  std::vector<std::string> parts;
  for (std::string& part : splitString(path, '/')) {
    if (!part.empty()) parts.push_back(std::move(part));
  }
  size_t i = 0;
  if (parts.size() >= 2 && parts[0] == "api") {
    i = 2;
  } else if (parts.size() >= 3 && parts[0] == "apis") {
    request.api_group = parts[1];
    i = 3;
  } else {
    return request;
  }
  std::vector<std::string> rest(parts.begin() + static_cast<std::ptrdiff_t>(i), parts.end());
  bool watch_path = false;
  if (!rest.empty() && rest[0] == "watch") {
    watch_path = true;
    rest.erase(rest.begin());
  }
  if (rest.empty()) {
    request.api_group.clear();
    return request;  // a discovery document
  }
  if (rest[0] == "namespaces" && rest.size() > 1) {
    request.ns = rest[1];
    // namespaces/<name>/status and /finalize are the namespace's own subresources.
    if (rest.size() > 2 && rest[2] != "status" && rest[2] != "finalize") {
      rest.erase(rest.begin(), rest.begin() + 2);
    }
  }
  request.resource_request = true;
  request.resource = rest[0];
  if (rest.size() >= 2) request.name = rest[1];
  if (rest.size() >= 3) request.subresource = rest[2];
  const bool watch = watch_path || (watch_param && request.name.empty());
  // ?watch=true turns only a list into a watch (a named GET stays a get, as it is served).
  request.verb = resourceVerb(method, !request.name.empty(), watch);
  if (request.name.empty() && (request.verb == "list" || request.verb == "watch")) {
    request.name = selectedName(field_selector);
  }
  return request;
}

bool alwaysAllowed(const AccessRequest& request) {
  if (!request.resource_request) {
    const std::string& p = request.path;
    const auto under = [&p](const std::string& root) {
      return p == root || p.starts_with(root + "/");
    };
    return request.verb == "get" &&
           (under("/api") || under("/apis") || under("/openapi") || under("/version") ||
            under("/healthz") || under("/livez") || under("/readyz"));
  }
  if (request.verb != "create") return false;
  return (request.api_group == "authorization.k8s.io" &&
          (request.resource == "selfsubjectaccessreviews" ||
           request.resource == "selfsubjectrulesreviews")) ||
         (request.api_group == "authentication.k8s.io" && request.resource == "selfsubjectreviews");
}

}  // namespace nodeagent::testapiserver
