#include "agent/certificate/bootstrap.h"

#include <system_error>

#include <nlohmann/json.hpp>

#include "agent/certificate/certificate_store.h"
#include "agent/certificate/pki.h"
#include "base/log.h"

namespace nodeagent::certificate {
namespace {

NODEAGENT_LOGGER("certificate");

std::string quoted(const std::string& s) { return nlohmann::json(s).dump(); }

// The key to ask with: the current certificate's (a node re-bootstrapping keeps its key, as
// kubelet does), else the pending request's, else a new one kept for the next start.
base::StatusOr<std::string> bootstrapKey(const CertificateStore& store,
                                         const std::filesystem::path& cert_dir) {
  if (auto current = store.current(); current.ok()) return current->pair.key_pem;
  return loadOrGenerateKeyFile(cert_dir / kBootstrapKeyFile);
}

// Creates the request, retrying while the apiserver cannot be reached (kubelet's waitForServer).
base::StatusOr<CreatedCsr> createRequest(api::RestClient& client, base::Clock& clock,
                                         const CsrSpec& spec, const std::string& key,
                                         const BootstrapOptions& options, std::stop_token stop) {
  const auto started = clock.now();
  while (true) {
    auto created = requestCertificate(client, spec, key, clock.wallNow());
    if (created.ok() || !isTransientApiError(created.status()) ||
        clock.now() - started >= options.create_retry_for) {
      return created;
    }
    log()->info("Failed to connect to apiserver err={}", created.status().message());
    if (!api::waitOrStop(std::chrono::seconds(2), stop)) {
      return base::cancelledError("creating the certificate signing request");
    }
  }
}

}  // namespace

const std::vector<std::string>& nodeClientUsages() {
  static const std::vector<std::string> kUsages = {"digital signature", "client auth"};
  return kUsages;
}

CertificateRequest nodeClientSubject(const std::string& node_name) {
  CertificateRequest subject;
  subject.common_name = "system:node:" + node_name;
  subject.organizations = {"system:nodes"};
  subject.client_auth = true;
  return subject;
}

bool kubeconfigStillValid(const std::filesystem::path& kubeconfig, base::SystemTime now,
                          std::string* why) {
  auto say = [&](std::string text) {
    if (why != nullptr) *why = std::move(text);
    return false;
  };
  std::error_code ec;
  if (!std::filesystem::exists(kubeconfig, ec)) return say(kubeconfig.string() + " does not exist");
  auto config = api::loadKubeconfig(kubeconfig);
  if (!config.ok()) return say(config.status().message());
  if (config->client_cert_pem.empty()) {
    return say("the kubeconfig " + kubeconfig.string() + " has no client certificate");
  }
  auto info = inspectCertificate(config->client_cert_pem);
  if (!info.ok()) return say("its client certificate: " + info.status().message());
  if (now > info->not_after) {
    return say("part of the existing bootstrap client certificate in " + kubeconfig.string() +
               " is expired");
  }
  return true;
}

base::Status writeBootstrappedKubeconfig(const std::filesystem::path& kubeconfig,
                                         const api::RestConfig& bootstrap,
                                         const std::filesystem::path& pem_path) {
  std::string text =
      "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n"
      "    server: " +
      quoted(bootstrap.server) + "\n";
  if (!bootstrap.ca_pem.empty()) {
    text += "    certificate-authority-data: " + api::encodeBase64(bootstrap.ca_pem) + "\n";
  }
  if (bootstrap.insecure_skip_tls_verify) text += "    insecure-skip-tls-verify: true\n";
  if (!bootstrap.tls_server_name.empty()) {
    text += "    tls-server-name: " + quoted(bootstrap.tls_server_name) + "\n";
  }
  const std::string pem = quoted(std::filesystem::absolute(pem_path).string());
  text += "users:\n- name: default-auth\n  user:\n    client-certificate: " + pem +
          "\n    client-key: " + pem +
          "\ncontexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n"
          "    user: default-auth\n    namespace: default\ncurrent-context: default-context\n";
  RETURN_IF_ERROR(ensureDirectory(kubeconfig.parent_path()));
  return writeFileAtomically(kubeconfig, text, 0600);
}

base::Status loadClientCert(const BootstrapOptions& options, base::Clock& clock,
                            std::stop_token stop) {
  std::string why;
  if (kubeconfigStillValid(options.kubeconfig, clock.wallNow(), &why)) {
    log()->info("Kubeconfig exists and is valid, skipping bootstrap path={}",
                options.kubeconfig.string());
    return base::okStatus();
  }
  log()->info(
      "Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file "
      "bootstrap_kubeconfig={} reason=\"{}\"",
      options.bootstrap_kubeconfig.string(), why);
  auto bootstrap = api::loadKubeconfig(options.bootstrap_kubeconfig);
  if (!bootstrap.ok()) {
    return bootstrap.status().withContext("unable to load bootstrap kubeconfig");
  }
  auto client = api::RestClient::create(*bootstrap, options.client, clock);
  if (!client.ok()) return client.status().withContext("unable to load bootstrap kubeconfig");
  const std::filesystem::path cert_dir = std::filesystem::absolute(options.cert_dir);
  CertificateStore store(cert_dir);
  ASSIGN_OR_RETURN(std::string key, bootstrapKey(store, cert_dir));
  const CertificateRequest subject = nodeClientSubject(options.node_name);
  CsrSpec spec;
  spec.usages = nodeClientUsages();
  ASSIGN_OR_RETURN(spec.request_pem, makeSigningRequest(key, subject));
  ASSIGN_OR_RETURN(spec.name,
                   nodeCsrName(key, subject.common_name, subject.organizations, spec.usages));
  ASSIGN_OR_RETURN(CreatedCsr csr, createRequest(**client, clock, spec, key, options, stop));
  ASSIGN_OR_RETURN(std::string cert, waitForCertificate(**client, clock, csr, options.wait, stop));
  RETURN_IF_ERROR(store.update({cert, key}, clock.wallNow()).status());
  std::error_code ec;
  std::filesystem::remove(cert_dir / kBootstrapKeyFile, ec);
  RETURN_IF_ERROR(writeBootstrappedKubeconfig(options.kubeconfig, *bootstrap, store.currentPath()));
  log()->info("Wrote the kubeconfig of the bootstrapped node path={} client_certificate={}",
              options.kubeconfig.string(), store.currentPath().string());
  return base::okStatus();
}

}  // namespace nodeagent::certificate
