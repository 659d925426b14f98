// kubelet's TLS bootstrap (pkg/kubelet/certificate/bootstrap LoadClientCert): when --kubeconfig is
// missing or its client certificate no longer valid, the agent asks the apiserver for one with
// the --bootstrap-kubeconfig's credentials (a bootstrap token): an ECDSA P-256 key (kept in
// <cert-dir>/kubelet-client.key.tmp until the certificate arrives, so a restart asks again with
// it), a CertificateSigningRequest for CN=system:node:<node>, O=system:nodes with the kubelet
// client signer, the wait for its approval and certificate, `kubelet-client-<time>.pem` and the
// `kubelet-client-current.pem` symlink in --cert-dir, and a kubeconfig that points at that file.
// Blocking: the daemon runs it before it builds its apiserver clients.
#pragma once

#include <filesystem>
#include <stop_token>
#include <string>
#include <vector>

#include "agent/certificate/csr.h"
#include "agent/certificate/pki.h"
#include "api/kubeconfig.h"
#include "api/rest_client.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::certificate {

// The usages of a node client certificate with an ECDSA key (kubelet adds key encipherment only
// for RSA keys).
const std::vector<std::string>& nodeClientUsages();
// CN=system:node:<node>, O=system:nodes.
CertificateRequest nodeClientSubject(const std::string& node_name);

struct BootstrapOptions {
  std::filesystem::path kubeconfig;
  std::filesystem::path bootstrap_kubeconfig;
  std::filesystem::path cert_dir;
  std::string node_name;
  // kubelet waits an hour for the certificate, logging while it waits.
  CsrWaitOptions wait;
  // How long a refused or unreachable apiserver is retried when creating the request (kubelet
  // waits a minute for /healthz).
  base::Duration create_retry_for = std::chrono::minutes(1);
  api::RestClientOptions client;
};

// kubelet's isClientConfigStillValid: whether `kubeconfig` exists, loads, and its client
// certificate has not expired at `now`. `why` says what is wrong when not.
bool kubeconfigStillValid(const std::filesystem::path& kubeconfig, base::SystemTime now,
                          std::string* why);

// Writes the kubeconfig of a bootstrapped node (mode 0600, atomically): the bootstrap
// kubeconfig's server and CA (as data), the client certificate and key both `pem_path`, context
// namespace default.
base::Status writeBootstrappedKubeconfig(const std::filesystem::path& kubeconfig,
                                         const api::RestConfig& bootstrap,
                                         const std::filesystem::path& pem_path);

// Makes `kubeconfig` usable: nothing when it is still valid, else the bootstrap above. Errors say
// which step failed (the bootstrap kubeconfig, the request, a Denied or Failed request, the
// timeout). Cancelled when `stop` fires.
base::Status loadClientCert(const BootstrapOptions& options, base::Clock& clock,
                            std::stop_token stop);

}  // namespace nodeagent::certificate
