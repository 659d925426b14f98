// Service account tokens as kube-apiserver issues and checks them: the serviceaccounts/token
// subresource (a TokenRequest answered with a signed JWT, pkg/registry/core/serviceaccount/
// storage/token.go) and the authenticator of those tokens (pkg/serviceaccount/jwt.go and
// claims.go), which TokenReview and the server's own request authentication ask.
//
// A token carries kube-apiserver's claims: iss, sub "system:serviceaccount:<ns>:<name>", aud,
// exp, iat, nbf, jti and "kubernetes.io" {namespace, serviceaccount {name, uid}, and the object it
// is bound to: pod {name, uid} (with node {name, uid} when the pod is on a known node), secret
// or node}. It authenticates while its signature verifies, it has not expired (one minute of
// leeway, as go-jose's), one of its audiences is asked for, its service account exists with the
// same UID, and its bound object exists with the same UID and was not deleted more than a minute
// ago.
//
// Threading: any thread; the store is the only state.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/authz.h"
#include "cmd/test-apiserver/jwt.h"
#include "cmd/test-apiserver/store.h"

namespace nodeagent::testapiserver {

inline constexpr char kDefaultServiceAccountIssuer[] =
    "https://kubernetes.default.svc.cluster.local";

struct ServiceAccountTokenOptions {
  std::string issuer = kDefaultServiceAccountIssuer;  // --service-account-issuer
  // --api-audiences: the audiences of a TokenRequest that names none, and those a token must have
  // one of to authenticate a request to this server. Empty: the issuer.
  std::vector<std::string> api_audiences;
  // --service-account-extend-token-expiration: a pod-bound token asked for 3607 s (kubelet's
  // projected default) for API audiences lives a year, its claims saying when to warn.
  bool extend_expiration = true;
};

class ServiceAccountTokens {
 public:
  // `store` gives the service accounts, bound objects and the clock; it must outlive this.
  ServiceAccountTokens(Store& store, std::unique_ptr<JwtKey> key,
                       ServiceAccountTokenOptions options);

  // POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token with `request` (a TokenRequest):
  // {201, the TokenRequest with status.token and status.expirationTimestamp} or {code, Status}
  // with kube-apiserver's words: 404 for a missing service account or bound object, 422 for an
  // expirationSeconds under 600 (or over 2^32) or a metadata.name/namespace that differs from the
  // path, 400 for a bound object of another kind or a pod of another service account, 409 for a
  // bound object whose UID differs.
  std::pair<int, nlohmann::json> requestToken(const std::string& ns, const std::string& name,
                                              const nlohmann::json& request) const;

  // The verdict on `token` for `audiences`; nullopt when it is not a token of this issuer (no
  // JWT, or another "iss"), which other authenticators may know.
  std::optional<TokenVerdict> authenticate(const std::string& token,
                                           const std::vector<std::string>& audiences) const;

  const std::vector<std::string>& apiAudiences() const { return options_.api_audiences; }
  const JwtKey& key() const { return *key_; }

 private:
  // The claims a valid token's service account and bound object give, or why it is invalid.
  base::StatusOr<ReviewUser> validate(const nlohmann::json& claims) const;

  Store& store_;
  std::unique_ptr<JwtKey> key_;
  ServiceAccountTokenOptions options_;
};

}  // namespace nodeagent::testapiserver
