#include "cmd/nodeagent/client_certificate.h"

#include "agent/certificate/bootstrap.h"
#include "agent/certificate/certificate_store.h"
#include "base/log.h"
#include "cmd/nodeagent/daemon.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("nodeagent")

// The certificate the clients start with: --cert-dir's current one when it is valid now and
// lasts longer than the kubeconfig's (a restart after a rotation), else the kubeconfig's.
std::optional<certificate::StoredCertificate> startingCertificate(const DaemonConfig& config,
                                                                  base::SystemTime now) {
  const api::RestConfig& rc = *config.kubeconfig;
  std::optional<certificate::StoredCertificate> from_kubeconfig;
  if (!rc.client_cert_pem.empty()) {
    if (auto info = certificate::inspectCertificate(rc.client_cert_pem); info.ok()) {
      from_kubeconfig = certificate::StoredCertificate{
          {rc.client_cert_pem, rc.client_key_pem}, *info, config.flags.kubeconfig};
    }
  }
  certificate::CertificateStore store(certDirectory(config.flags));
  auto stored = store.current();
  if (!stored.ok() || now < stored->info.not_before || now > stored->info.not_after) {
    return from_kubeconfig;
  }
  if (from_kubeconfig && from_kubeconfig->info.not_after >= stored->info.not_after) {
    return from_kubeconfig;
  }
  return *stored;
}

}  // namespace

base::Status prepareClientCertificate(DaemonConfig& config, base::Clock& clock) {
  const DaemonFlags& f = config.flags;
  if (!f.bootstrap_kubeconfig.empty()) {
    certificate::BootstrapOptions bo;
    bo.kubeconfig = f.kubeconfig;
    bo.bootstrap_kubeconfig = f.bootstrap_kubeconfig;
    bo.cert_dir = certDirectory(f);
    bo.node_name = config.node_name;
    RETURN_IF_ERROR(certificate::loadClientCert(bo, clock, {}));
    auto rc = api::loadKubeconfig(f.kubeconfig);
    if (!rc.ok()) return rc.status().withContext("--kubeconfig");
    config.kubeconfig = std::move(*rc);
  }
  if (!f.rotate_certificates || !config.kubeconfig) return base::okStatus();
  auto start = startingCertificate(config, clock.wallNow());
  if (start && start->pair.cert_pem != config.kubeconfig->client_cert_pem) {
    log()->info("Using the current client certificate of the certificate store cert={}",
                start->path.string());
    config.kubeconfig->client_cert_pem = start->pair.cert_pem;
    config.kubeconfig->client_key_pem = start->pair.key_pem;
  }
  return base::okStatus();
}

std::shared_ptr<certificate::ClientCertificateManager> makeClientCertificateManager(
    const DaemonConfig& config, asio::any_io_executor ex, asio::any_io_executor blocking,
    base::Clock& clock, base::Random& random, ApiClients& clients,
    std::function<void()> on_expired) {
  if (!config.flags.rotate_certificates || !clients.rest) return nullptr;
  auto start = startingCertificate(config, clock.wallNow());
  if (!start) {
    log()->warn(
        "Client certificate rotation is off: --kubeconfig authenticates without a client "
        "certificate");
    return nullptr;
  }
  certificate::ClientCertificateManagerOptions mo;
  mo.node_name = config.node_name;
  mo.blocking = std::move(blocking);
  mo.on_expired = std::move(on_expired);
  mo.on_rotated = [&clients](const certificate::StoredCertificate& stored) {
    log()->info(
        "Certificate rotation detected, shutting down client connections to start using new "
        "credentials");
    for (api::RestClient* c : {clients.rest.get(), clients.events.get(), clients.webhooks.get()}) {
      if (c == nullptr) continue;
      if (auto st = c->setClientCertificate(stored.pair.cert_pem, stored.pair.key_pem); !st.ok()) {
        log()->error("Cannot use the rotated client certificate err={}", st.message());
      }
    }
  };
  auto requester = std::make_shared<certificate::ApiCertificateRequester>(
      *clients.rest, clock, certificate::CsrWaitOptions{std::chrono::minutes(15)});
  auto manager = std::make_shared<certificate::ClientCertificateManager>(
      std::move(ex), clock, random, certificate::CertificateStore(certDirectory(config.flags)),
      std::move(requester), std::move(mo));
  manager->start(std::move(*start));
  return manager;
}

}  // namespace nodeagent::cmd
