// The daemon's client certificate: the TLS bootstrap before the apiserver clients exist
// (--bootstrap-kubeconfig), the certificate a rotation left in --cert-dir preferred at start
// (--rotate-certificates), and the certificate manager whose rotations the clients follow.
#pragma once

#include <functional>
#include <memory>

#include "agent/certificate/certificate_manager.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/random.h"
#include "base/status.h"
#include "cmd/nodeagent/daemon_config.h"

namespace nodeagent::cmd {

struct ApiClients;

// Blocking, before the apiserver clients are built. With --bootstrap-kubeconfig: the bootstrap
// (nothing when --kubeconfig is still valid), then --kubeconfig loaded into `config`. With
// --rotate-certificates: the current certificate of --cert-dir replaces the kubeconfig's when it
// is valid and newer (kubelet's certificate store comes first).
base::Status prepareClientCertificate(DaemonConfig& config, base::Clock& clock);

// The client certificate manager of --rotate-certificates (null without it, or when the
// kubeconfig authenticates without a client certificate). Its rotations go to every client of
// `clients`. `blocking` runs its requests (a thread of its own: the wait for approval is long).
// `on_expired` runs when the certificate has expired and the apiserver refuses the rotation (the
// daemon exits then, as kubelet, so that a restart bootstraps again).
std::shared_ptr<certificate::ClientCertificateManager> makeClientCertificateManager(
    const DaemonConfig& config, asio::any_io_executor ex, asio::any_io_executor blocking,
    base::Clock& clock, base::Random& random, ApiClients& clients,
    std::function<void()> on_expired);

}  // namespace nodeagent::cmd
