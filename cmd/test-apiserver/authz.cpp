#include "cmd/test-apiserver/authz.h"

#include <algorithm>
#include <fstream>

#include "cmd/test-apiserver/api_status.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

constexpr char kAbacApiVersion[] = "abac.authorization.kubernetes.io/v1beta1";
constexpr char kMastersGroup[] = "system:masters";

base::Status readSpecField(const std::string& key, const json& value, AbacPolicy& policy) {
  if (key == "readonly") {
    if (!value.is_boolean()) return base::invalidArgumentError("spec.readonly must be a bool");
    policy.readonly = value.get<bool>();
    return base::okStatus();
  }
  std::string* field = key == "user"              ? &policy.user
                       : key == "group"           ? &policy.group
                       : key == "apiGroup"        ? &policy.api_group
                       : key == "resource"        ? &policy.resource
                       : key == "namespace"       ? &policy.ns
                       : key == "nonResourcePath" ? &policy.non_resource_path
                                                  : nullptr;
  if (field == nullptr) return base::invalidArgumentError("spec." + key + " is not supported");
  if (!value.is_string()) return base::invalidArgumentError("spec." + key + " must be a string");
  *field = value.get<std::string>();
  return base::okStatus();
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool subjectMatches(const AbacPolicy& p, const AccessRequest& r) {
  bool matched = false;
  if (!p.user.empty()) {
    if (p.user != "*" && p.user != r.user) return false;
    matched = true;
  }
  if (!p.group.empty()) {
    if (p.group != "*" && !contains(r.groups, p.group)) return false;
    matched = true;
  }
  return matched;
}

bool verbMatches(const AbacPolicy& p, const AccessRequest& r) {
  const bool read_only = r.verb == "get" || r.verb == "list" || r.verb == "watch";
  return read_only || !p.readonly;
}

bool resourceMatches(const AbacPolicy& p, const AccessRequest& r) {
  return r.resource_request && (p.ns == "*" || p.ns == r.ns) &&
         (p.resource == "*" || p.resource == r.resource) &&
         (p.api_group == "*" || p.api_group == r.api_group);
}

bool nonResourceMatches(const AbacPolicy& p, const AccessRequest& r) {
  if (r.resource_request) return false;
  const std::string& rule = p.non_resource_path;
  if (rule == "*" || rule == r.path) return true;
  if (!rule.ends_with('*')) return false;
  const std::string prefix = rule.substr(0, rule.find_last_not_of('*') + 1);
  return r.path.starts_with(prefix);
}

std::string stringAt(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key) || !obj[key].is_string()) return "";
  return obj[key].get<std::string>();
}

// The review's spec as an AccessRequest; an error message when the spec is invalid.
std::string accessRequestFrom(const json& spec, AccessRequest& request) {
  request.user = stringAt(spec, "user");
  if (spec.contains("groups") && spec["groups"].is_array()) {
    for (const json& g : spec["groups"]) {
      if (g.is_string()) request.groups.push_back(g.get<std::string>());
    }
  }
  const bool has_resource =
      spec.contains("resourceAttributes") && spec["resourceAttributes"].is_object();
  const bool has_non_resource =
      spec.contains("nonResourceAttributes") && spec["nonResourceAttributes"].is_object();
  if (request.user.empty() && request.groups.empty()) {
    return "spec.user: Invalid value: \"\": at least one of user or group must be specified";
  }
  if (has_resource == has_non_resource) {
    return has_resource ? "spec.nonResourceAttributes: Invalid value: \"null\": cannot be "
                          "specified in combination with resourceAttributes"
                        : "spec.resourceAttributes: Invalid value: \"null\": exactly one of "
                          "nonResourceAttributes or resourceAttributes must be specified";
  }
  request.resource_request = has_resource;
  if (has_resource) {
    const json& a = spec["resourceAttributes"];
    request.ns = stringAt(a, "namespace");
    request.verb = stringAt(a, "verb");
    request.api_group = stringAt(a, "group");
    request.resource = stringAt(a, "resource");
    request.subresource = stringAt(a, "subresource");
    request.name = stringAt(a, "name");
  } else {
    request.path = stringAt(spec["nonResourceAttributes"], "path");
    request.verb = stringAt(spec["nonResourceAttributes"], "verb");
  }
  return "";
}

}  // namespace

base::StatusOr<AbacPolicy> parseAbacPolicy(const std::string& line) {
  const json doc = json::parse(line, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return base::invalidArgumentError("not a JSON object");
  }
  if (stringAt(doc, "apiVersion") != kAbacApiVersion) {
    return base::invalidArgumentError(std::string("apiVersion must be ") + kAbacApiVersion);
  }
  if (stringAt(doc, "kind") != "Policy") return base::invalidArgumentError("kind must be Policy");
  if (!doc.contains("spec") || !doc["spec"].is_object()) {
    return base::invalidArgumentError("spec must be an object");
  }
  AbacPolicy policy;
  for (const auto& [key, value] : doc["spec"].items()) {
    RETURN_IF_ERROR(readSpecField(key, value, policy));
  }
  if (policy.user.empty() && policy.group.empty()) {
    return base::invalidArgumentError("spec.user or spec.group must be set");
  }
  return policy;
}

base::StatusOr<std::vector<AbacPolicy>> parseAbacPolicyFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in)
    return base::invalidArgumentError("cannot read authorization policy file " + path.string());
  std::vector<AbacPolicy> policies;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    auto policy = parseAbacPolicy(line);
    if (!policy.ok()) {
      return base::invalidArgumentError("authorization policy file " + path.string() + " line " +
                                        std::to_string(lineno) + ": " + policy.status().message());
    }
    policies.push_back(std::move(*policy));
  }
  return policies;
}

AccessDecision authorize(const std::vector<AbacPolicy>& policies, const AccessRequest& request) {
  if (contains(request.groups, kMastersGroup)) return {true, ""};
  for (const AbacPolicy& p : policies) {
    if (subjectMatches(p, request) && verbMatches(p, request) &&
        (resourceMatches(p, request) || nonResourceMatches(p, request))) {
      return {true, ""};
    }
  }
  return {false, "No policy matched."};
}

std::pair<int, json> reviewToken(const json& review, const TokenAuthenticator& authenticate,
                                 const std::vector<std::string>& api_audiences) {
  if (!review.is_object() || !review.contains("spec") || !review["spec"].is_object()) {
    return {400, statusObject(400, "the body of a TokenReview must be an object with a spec")};
  }
  const json& spec = review["spec"];
  const std::string token = stringAt(spec, "token");
  if (token.empty()) {
    return {400, statusObject(400, "token is required for TokenReview in authentication")};
  }
  std::vector<std::string> audiences;
  if (spec.contains("audiences") && spec["audiences"].is_array()) {
    for (const json& a : spec["audiences"]) {
      if (a.is_string()) audiences.push_back(a.get<std::string>());
    }
  }
  if (audiences.empty()) audiences = api_audiences;
  json out = review;
  out["apiVersion"] = "authentication.k8s.io/v1";
  out["kind"] = "TokenReview";
  out["metadata"] = {{"creationTimestamp", nullptr}};
  json status = {{"user", json::object()}};
  if (authenticate) {
    const TokenVerdict verdict = authenticate(token, audiences);
    status["authenticated"] = verdict.authenticated;
    if (verdict.authenticated) {
      const ReviewUser& u = verdict.user;
      json groups = u.groups;
      if (!contains(u.groups, "system:authenticated")) groups.push_back("system:authenticated");
      status["user"] = {{"username", u.username}, {"uid", u.uid}, {"groups", groups}};
      if (!u.extra.empty()) status["user"]["extra"] = u.extra;
      if (!verdict.audiences.empty()) status["audiences"] = verdict.audiences;
    }
    if (!verdict.error.empty()) status["error"] = verdict.error;
  }
  out["status"] = std::move(status);
  return {201, std::move(out)};
}

std::pair<int, json> reviewAccess(const json& review, const std::vector<AbacPolicy>& policies) {
  if (!review.is_object() || !review.contains("spec") || !review["spec"].is_object()) {
    return {400,
            statusObject(400, "the body of a SubjectAccessReview must be an object with a spec")};
  }
  AccessRequest request;
  const std::string invalid = accessRequestFrom(review["spec"], request);
  if (!invalid.empty()) {
    json details = {{"group", "authorization.k8s.io"}, {"kind", "SubjectAccessReview"}};
    return {422, statusObject(
                     422, "SubjectAccessReview.authorization.k8s.io \"\" is invalid: " + invalid,
                     "Invalid", details)};
  }
  const AccessDecision decision = authorize(policies, request);
  json out = review;
  out["apiVersion"] = "authorization.k8s.io/v1";
  out["kind"] = "SubjectAccessReview";
  out["metadata"] = {{"creationTimestamp", nullptr}};
  out["status"] = {{"allowed", decision.allowed}};
  if (!decision.reason.empty()) out["status"]["reason"] = decision.reason;
  return {201, std::move(out)};
}

}  // namespace nodeagent::testapiserver
