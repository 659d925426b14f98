// Bootstrap token authentication as kube-apiserver's --enable-bootstrap-token-auth: a bearer
// token `<id>.<secret>` (6 and 16 characters of [a-z0-9]) authenticates as
// `system:bootstrap:<id>` in `system:bootstrappers` and the token's `auth-extra-groups` when the
// Secret `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` holds that
// token-id and token-secret, says `usage-bootstrap-authentication: "true"`, has not passed its
// `expiration` (RFC 3339) and is not being deleted. Extra groups must be
// `system:bootstrappers:...`; a Secret with any other makes the token fail, as kube-apiserver.
#pragma once

#include <optional>
#include <string>

#include "base/clock.h"
#include "cmd/test-apiserver/authz.h"
#include "cmd/test-apiserver/store.h"

namespace nodeagent::testapiserver {

// The token's user (groups without system:authenticated), nullopt when it is no valid bootstrap
// token.
std::optional<ReviewUser> authenticateBootstrapToken(const Store& store, const std::string& token,
                                                     base::SystemTime now);

}  // namespace nodeagent::testapiserver
