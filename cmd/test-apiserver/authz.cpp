#include "cmd/test-apiserver/authz.h"

#include <algorithm>
#include <fstream>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/node_authorizer.h"
#include "cmd/test-apiserver/util.h"

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
    if (a.contains("fieldSelector") && a["fieldSelector"].is_object()) {
      request.field_selector = stringAt(a["fieldSelector"], "rawSelector");
    }
  } else {
    request.path = stringAt(spec["nonResourceAttributes"], "path");
    request.verb = stringAt(spec["nonResourceAttributes"], "verb");
  }
  return "";
}

// The review as answered: the request's fields, then the decision as its status.
json accessAnswer(const json& review, const char* kind, const AccessDecision& decision) {
  json out = review;
  out["apiVersion"] = "authorization.k8s.io/v1";
  out["kind"] = kind;
  out["metadata"] = {{"creationTimestamp", nullptr}};
  out["status"] = {{"allowed", decision.allowed}};
  if (!decision.reason.empty()) out["status"]["reason"] = decision.reason;
  return out;
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

std::pair<int, json> reviewAccess(const json& review, const Authorizer& authorizer) {
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
  return {201, accessAnswer(review, "SubjectAccessReview", authorizer.authorize(request))};
}

std::pair<int, json> reviewSelfAccess(const json& review, const ReviewUser& user,
                                      const Authorizer& authorizer) {
  if (!review.is_object() || !review.contains("spec") || !review["spec"].is_object()) {
    return {400, statusObject(
                     400, "the body of a SelfSubjectAccessReview must be an object with a spec")};
  }
  json spec = review["spec"];
  spec["user"] = user.username;
  spec["groups"] = user.groups;
  AccessRequest request;
  const std::string invalid = accessRequestFrom(spec, request);
  if (!invalid.empty()) {
    json details = {{"group", "authorization.k8s.io"}, {"kind", "SelfSubjectAccessReview"}};
    return {422,
            statusObject(422,
                         "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: " + invalid,
                         "Invalid", details)};
  }
  return {201, accessAnswer(review, "SelfSubjectAccessReview", authorizer.authorize(request))};
}

std::pair<int, json> reviewSelfRules(const json& review, const ReviewUser& user,
                                     const Authorizer& authorizer) {
  const std::string ns =
      review.is_object() && review.contains("spec") ? stringAt(review["spec"], "namespace") : "";
  if (ns.empty()) return {400, statusObject(400, "no namespace on request")};
  json out = review;
  out["apiVersion"] = "authorization.k8s.io/v1";
  out["kind"] = "SelfSubjectRulesReview";
  out["metadata"] = {{"creationTimestamp", nullptr}};
  out["status"] = authorizer.rulesFor(user, ns);
  return {201, std::move(out)};
}

json reviewSelf(const ReviewUser& user) {
  json info = {{"username", user.username}, {"groups", user.groups}};
  if (!user.uid.empty()) info["uid"] = user.uid;
  if (!user.extra.empty()) info["extra"] = user.extra;
  return {{"apiVersion", "authentication.k8s.io/v1"},
          {"kind", "SelfSubjectReview"},
          {"metadata", {{"creationTimestamp", nullptr}}},
          {"status", {{"userInfo", std::move(info)}}}};
}

json forbiddenStatus(const AccessRequest& request, const std::string& reason) {
  std::string message;
  std::string resource = request.resource;
  if (!request.resource_request) {
    message = "forbidden: User \"" + request.user + "\" cannot " + request.verb + " path \"" +
              request.path + "\"";
  } else {
    if (!request.subresource.empty()) resource += "/" + request.subresource;
    const std::string scope =
        request.ns.empty() ? "at the cluster scope" : "in the namespace \"" + request.ns + "\"";
    const std::string qualified =
        request.api_group.empty() ? request.resource : request.resource + "." + request.api_group;
    message = qualified + (request.name.empty() ? "" : " \"" + request.name + "\"") +
              " is forbidden: User \"" + request.user + "\" cannot " + request.verb +
              " resource \"" + resource + "\" in API group \"" + request.api_group + "\" " + scope;
  }
  if (!reason.empty()) message += ": " + reason;
  json details = {{"kind", request.resource}};
  if (!request.name.empty()) details["name"] = request.name;
  if (!request.api_group.empty()) details["group"] = request.api_group;
  return statusObject(403, message, "Forbidden",
                      request.resource_request ? std::move(details) : json(nullptr));
}

base::StatusOr<std::vector<AuthorizationMode>> parseAuthorizationModes(const std::string& text) {
  std::vector<AuthorizationMode> modes;
  for (const std::string& name : splitString(text, ',')) {
    AuthorizationMode mode;
    if (name == "AlwaysAllow") {
      mode = AuthorizationMode::kAlwaysAllow;
    } else if (name == "ABAC") {
      mode = AuthorizationMode::kAbac;
    } else if (name == "Node") {
      mode = AuthorizationMode::kNode;
    } else {
      return base::invalidArgumentError("--authorization-mode: unknown mode \"" + name +
                                        "\" (supported: AlwaysAllow, ABAC, Node)");
    }
    if (std::find(modes.begin(), modes.end(), mode) != modes.end()) {
      return base::invalidArgumentError("--authorization-mode: mode \"" + name +
                                        "\" is given more than once");
    }
    modes.push_back(mode);
  }
  return modes;
}

Authorizer::Authorizer(
    std::vector<AuthorizationMode> modes, std::vector<AbacPolicy> policies,
    std::function<std::vector<std::shared_ptr<const json>>(const std::string&, const std::string&)>
        pods_on_node)
    : modes_(std::move(modes)),
      policies_(std::move(policies)),
      pods_on_node_(std::move(pods_on_node)) {}

bool Authorizer::has(AuthorizationMode mode) const {
  return std::find(modes_.begin(), modes_.end(), mode) != modes_.end();
}

bool Authorizer::allowsAll() const { return has(AuthorizationMode::kAlwaysAllow); }

AccessDecision Authorizer::authorize(const AccessRequest& request) const {
  if (contains(request.groups, kMastersGroup)) return {true, ""};
  std::string reasons;
  for (AuthorizationMode mode : modes_) {
    AccessDecision decision{true, ""};
    if (mode == AuthorizationMode::kAbac) decision = testapiserver::authorize(policies_, request);
    if (mode == AuthorizationMode::kNode) decision = authorizeNode(request, pods_on_node_);
    if (decision.allowed) return decision;
    // kube-apiserver's union authorizer: the reasons of every mode that had no opinion.
    if (!decision.reason.empty()) reasons += (reasons.empty() ? "" : "\n") + decision.reason;
  }
  return {false, reasons};
}

json Authorizer::rulesFor(const ReviewUser& user, const std::string& ns) const {
  json resource_rules = json::array();
  json non_resource_rules = json::array();
  const auto all = [&] {
    resource_rules.push_back({{"verbs", {"*"}}, {"apiGroups", {"*"}}, {"resources", {"*"}}});
    non_resource_rules.push_back({{"verbs", {"*"}}, {"nonResourceURLs", {"*"}}});
  };
  if (allowsAll() || contains(user.groups, kMastersGroup)) all();
  if (has(AuthorizationMode::kAbac)) {
    AccessRequest subject;
    subject.user = user.username;
    subject.groups = user.groups;
    for (const AbacPolicy& p : policies_) {
      if (!subjectMatches(p, subject)) continue;
      const json verbs = p.readonly ? json{"get", "list", "watch"} : json{"*"};
      // Paths have no namespace: their rules hold in any (as authorize() decides them).
      if (!p.resource.empty() && (p.ns == "*" || p.ns == ns)) {
        resource_rules.push_back(
            {{"verbs", verbs}, {"apiGroups", {p.api_group}}, {"resources", {p.resource}}});
      }
      if (!p.non_resource_path.empty()) {
        non_resource_rules.push_back(
            {{"verbs", verbs}, {"nonResourceURLs", {p.non_resource_path}}});
      }
    }
  }
  json rules = {{"resourceRules", std::move(resource_rules)},
                {"nonResourceRules", std::move(non_resource_rules)},
                {"incomplete", false}};
  if (has(AuthorizationMode::kNode) && nodeIdentity(user.username, user.groups)) {
    rules["incomplete"] = true;
    rules["evaluationError"] = "node authorizer does not support user rule resolution";
  }
  return rules;
}

}  // namespace nodeagent::testapiserver
