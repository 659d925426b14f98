// The test apiserver's answers to the reviews a kubelet sends when it delegates its API's
// authentication and authorization (kubelet --authentication-token-webhook and
// --authorization-mode=Webhook): TokenReview from the --token-auth-file users, SubjectAccessReview
// from kube-apiserver's fixed rule (the system:masters group may do everything) and the modes of
// --authorization-mode in order (AlwaysAllow, an ABAC policy file (--authorization-policy-file),
// the Node authorizer (node_authorizer.h)); the same authorizer decides the server's own requests
// and the self reviews kubectl auth sends.
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
#include <memory>
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
  // A list's or watch's fieldSelector as sent (a review's resourceAttributes.fieldSelector
  // .rawSelector): the Node authorizer lets a node list its own pods by spec.nodeName.
  std::string field_selector;
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

// What the server enforces on its own requests and answers in access reviews
// (--authorization-mode, a comma-separated list as kube-apiserver's): AlwaysAllow, ABAC (the
// policies; none without a policy file) and Node (node_authorizer.h). As kube-apiserver, members
// of system:masters may do everything, then the modes are asked in order and the first that
// allows wins (none denies: they allow or have no opinion); a request none allows is refused with
// their reasons, one a line.
enum class AuthorizationMode { kAlwaysAllow, kAbac, kNode };

// "AlwaysAllow", "ABAC", "Node" or a comma-separated list of them, each at most once;
// InvalidArgument naming the supported modes otherwise.
base::StatusOr<std::vector<AuthorizationMode>> parseAuthorizationModes(const std::string& text);

class Authorizer {
 public:
  Authorizer() = default;  // AlwaysAllow
  // `pods_on_node` is the Node mode's graph (node_authorizer.h); unused without it.
  Authorizer(std::vector<AuthorizationMode> modes, std::vector<AbacPolicy> policies,
             std::function<std::vector<std::shared_ptr<const nlohmann::json>>(const std::string&,
                                                                              const std::string&)>
                 pods_on_node = {});
  Authorizer(AuthorizationMode mode, std::vector<AbacPolicy> policies)
      : Authorizer(std::vector<AuthorizationMode>{mode}, std::move(policies)) {}

  // Whether AlwaysAllow is among the modes: every request is allowed.
  bool allowsAll() const;
  bool has(AuthorizationMode mode) const;
  AccessDecision authorize(const AccessRequest& request) const;
  // kube-apiserver's RulesFor, as a SelfSubjectRulesReview's status: the resource and
  // non-resource rules that apply to `user` in namespace `ns` (everything for AlwaysAllow and
  // system:masters; for ABAC each matching policy's resource or path with get/list/watch when
  // readonly, else "*"; the Node mode lists none for a node and marks the answer incomplete, as
  // kube-apiserver's).
  nlohmann::json rulesFor(const ReviewUser& user, const std::string& ns) const;

 private:
  std::vector<AuthorizationMode> modes_ = {AuthorizationMode::kAlwaysAllow};
  std::vector<AbacPolicy> policies_;
  std::function<std::vector<std::shared_ptr<const nlohmann::json>>(const std::string&,
                                                                   const std::string&)>
      pods_on_node_;
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
                                            const Authorizer& authorizer);
// The same for a SelfSubjectAccessReview by `user` (authorization.k8s.io/v1: `kubectl auth
// can-i`), and a SelfSubjectRulesReview (`kubectl auth can-i --list`; 400 without a namespace).
std::pair<int, nlohmann::json> reviewSelfAccess(const nlohmann::json& review,
                                                const ReviewUser& user,
                                                const Authorizer& authorizer);
std::pair<int, nlohmann::json> reviewSelfRules(const nlohmann::json& review, const ReviewUser& user,
                                               const Authorizer& authorizer);
// A SelfSubjectReview's answer (authentication.k8s.io/v1: `kubectl auth whoami`).
nlohmann::json reviewSelf(const ReviewUser& user);

// kube-apiserver's 403 Forbidden Status for a denied request, e.g. `pods "web" is forbidden:
// User "bob" cannot get resource "pods" in API group "" in the namespace "default": No policy
// matched.`
nlohmann::json forbiddenStatus(const AccessRequest& request, const std::string& reason);

}  // namespace nodeagent::testapiserver
