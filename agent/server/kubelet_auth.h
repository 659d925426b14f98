// The kubelet API's authentication and authorization, as kubelet's server/auth.go and the
// webhook authenticators it builds from its flags: x509 client certificates (verified by the TLS
// layer against --client-ca-file; CN is the user, O the groups), bearer tokens checked with a
// TokenReview against the apiserver (--authentication-token-webhook, answers cached for
// --authentication-token-webhook-cache-ttl), anonymous requests only with --anonymous-auth; then
// AlwaysAllow or a SubjectAccessReview (--authorization-mode=Webhook, answers cached) with
// kubelet's request attributes. 401 and 403 answers are Status objects as kubelet writes them.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::api {
class AsyncRestClient;
}

namespace nodeagent::agent {

struct UserInfo {
  std::string name;
  std::string uid;
  std::vector<std::string> groups;
};

// kubelet's authorizer.Attributes for a request (server/auth.go, GetRequestAttributes): resource
// "nodes" (API group "", version v1), the node's name, and a subresource chosen by path: /stats,
// /metrics, /logs and /spec and the paths below them (not "/statsfoo") give stats, metrics, log
// and spec, anything else proxy. The verb comes from the method: GET get, POST create, PUT
// update, PATCH patch, DELETE delete, any other (HEAD too) "" as kubelet's (a SubjectAccessReview
// with no verb, which RBAC denies). `path` is the request's path as routed; a query is dropped.
struct RequestAttributes {
  UserInfo user;
  std::string verb;
  std::string resource = "nodes";
  std::string subresource;
  std::string name;  // the node
  std::string path;
};
RequestAttributes requestAttributes(UserInfo user, std::string_view method, std::string_view path,
                                    std::string_view node_name);

struct AuthOptions {
  bool anonymous = false;      // --anonymous-auth (false here; kubelet 1.18 defaults to true)
  bool token_webhook = false;  // --authentication-token-webhook
  base::Duration token_cache_ttl = std::chrono::minutes(2);
  bool authorize_webhook = false;  // --authorization-mode=Webhook (else AlwaysAllow)
  base::Duration authorized_ttl = std::chrono::minutes(5);  // kubelet's defaults
  base::Duration unauthorized_ttl = std::chrono::seconds(30);
  std::string node_name;
};

// An authentication result: who, or why not (the 401's log line).
struct AuthnResult {
  std::optional<UserInfo> user;
  std::string error;
};
struct AuthzResult {
  bool allowed = false;
  std::string reason;
  // Non-empty when the authorizer could not decide (the webhook failed or answered nonsense):
  // not allowed, and kubelet answers 500 (authorizationErrorBody) rather than 403.
  std::string error;
};

// Threading: any strand; the webhook calls run on the API pool of `client` and the caller's
// coroutine resumes on its own executor. Caches are shared and locked briefly.
class KubeletAuth {
 public:
  // `client` may be null when neither webhook is enabled; it must outlive this.
  KubeletAuth(AuthOptions options, const api::AsyncRestClient* client, base::Clock& clock);
  ~KubeletAuth();

  // `client_cert_user`: the user of a client certificate the TLS layer verified, if any (one
  // with an empty name counts as none, as kubelet's CN conversion); `authorization`: the
  // request's Authorization header ("" when none). As kubelet's authenticator chain: a
  // certificate wins over a token; only "Bearer <token>" is a token, checked only with the token
  // webhook on (else ignored); an authenticated user gets the group "system:authenticated"; a
  // request with no credential that counts is anonymous ("system:anonymous", group
  // "system:unauthenticated") when allowed, else unauthenticated. A rejected token is
  // unauthenticated (never anonymous); so is a webhook that cannot be reached (error names it).
  asio::awaitable<AuthnResult> authenticate(std::optional<UserInfo> client_cert_user,
                                            std::string authorization);
  asio::awaitable<AuthzResult> authorize(RequestAttributes attributes);

  const AuthOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// kubelet's answers, each as a Status JSON object (kubelet writes the bare message text): 401
// `Unauthorized`, 403 `Forbidden (user=..., verb=..., resource=..., subresource=...)` and 500
// `Authorization error (user=..., ...)`. Like kubelet's, the 403 body does not carry the
// authorizer's reason (the caller may log it).
std::string unauthorizedBody();
std::string forbiddenBody(const RequestAttributes& attributes, const std::string& reason);
std::string authorizationErrorBody(const RequestAttributes& attributes);

}  // namespace nodeagent::agent
