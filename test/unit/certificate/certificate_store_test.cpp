// The client certificate's files (kubelet's certificate store and bootstrap files): the pem and
// its symlink, the pending key reused on restart, and the bootstrapped kubeconfig.
#include "agent/certificate/certificate_store.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "agent/certificate/bootstrap.h"
#include "agent/certificate/pki.h"
#include "api/kubeconfig.h"
#include "test/support/test_util.h"

namespace nodeagent::certificate {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

KeyPair clientPair(const KeyPair& ca, const std::string& node,
                   std::chrono::seconds validity = std::chrono::hours(2)) {
  CertificateRequest request = nodeClientSubject(node);
  request.validity = validity;
  auto pair = issueCertificate(ca, request);
  REQUIRE(pair.ok());
  return *pair;
}

unsigned modeOf(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 0777;
}

}  // namespace

TEST_CASE("certificate store: update writes one pem and moves the current symlink to it",
          "[unit][certificate]") {
  testing::TempDir dir("cert-store");
  auto ca = generateCa("test-ca");
  REQUIRE(ca.ok());
  CertificateStore store(dir / "pki");
  CHECK(store.currentPath() == dir / "pki" / "kubelet-client-current.pem");
  CHECK(store.current().status().code() == base::StatusCode::kNotFound);

  const KeyPair first = clientPair(*ca, "n1");
  const auto t0 = base::SystemTime(std::chrono::seconds(1767225600));  // 2026-01-01T00:00:00Z
  auto stored = store.update(first, t0);
  REQUIRE(stored.ok());
  const fs::path first_file = dir / "pki" / "kubelet-client-2026-01-01-00-00-00.pem";
  CHECK(fs::is_symlink(store.currentPath()));
  CHECK(fs::read_symlink(store.currentPath()) == first_file.filename());
  CHECK(modeOf(first_file) == 0600);
  const std::string text = testing::readFile(first_file);
  CHECK(text.find(first.cert_pem) == 0);
  CHECK(text.find(first.key_pem) != std::string::npos);
  CHECK(stored->info.common_name == "system:node:n1");

  auto current = store.current();
  REQUIRE(current.ok());
  CHECK(current->pair.key_pem == first.key_pem);
  CHECK(current->info.organizations == std::vector<std::string>{"system:nodes"});

  // A second certificate in the same second: a new file, the old one kept, no temporary left.
  const KeyPair second = clientPair(*ca, "n1");
  REQUIRE(store.update(second, t0).ok());
  CHECK(fs::read_symlink(store.currentPath()) == "kubelet-client-2026-01-01-00-00-00-1.pem");
  CHECK(fs::exists(first_file));
  CHECK(!fs::exists(dir / "pki" / "kubelet-client-updated.pem"));
  REQUIRE(store.current().ok());
  CHECK(store.current()->pair.key_pem == second.key_pem);

  // A pair whose key is another's is refused and changes nothing.
  CHECK(!store.update({first.cert_pem, second.key_pem}, t0).ok());
  CHECK(store.current()->pair.key_pem == second.key_pem);
}

TEST_CASE("certificate store: a pending key file is reused on restart and replaced when bad",
          "[unit][certificate]") {
  testing::TempDir dir("cert-key");
  const fs::path path = dir / "pki" / kBootstrapKeyFile;
  auto first = loadOrGenerateKeyFile(path);
  REQUIRE(first.ok());
  CHECK(modeOf(path) == 0600);
  auto again = loadOrGenerateKeyFile(path);
  REQUIRE(again.ok());
  CHECK(*again == *first);
  testing::writeFile(path, "garbage");
  auto replaced = loadOrGenerateKeyFile(path);
  REQUIRE(replaced.ok());
  CHECK(*replaced != *first);
  CHECK(publicKeyDer(*replaced).ok());
}

TEST_CASE("certificate store: one pem splits into its certificate and key", "[unit][certificate]") {
  auto ca = generateCa("test-ca");
  REQUIRE(ca.ok());
  const KeyPair pair = clientPair(*ca, "n1");
  auto split = splitCertificateAndKey(pair.key_pem + pair.cert_pem + ca->cert_pem);
  REQUIRE(split.ok());
  CHECK(split->key_pem == pair.key_pem);
  CHECK(split->cert_pem == pair.cert_pem + ca->cert_pem);
  CHECK(!splitCertificateAndKey(pair.cert_pem).ok());
  CHECK(!splitCertificateAndKey(pair.key_pem).ok());
}

TEST_CASE(
    "bootstrap: the written kubeconfig points at the current pem and stays valid until "
    "the certificate expires",
    "[unit][certificate]") {
  testing::TempDir dir("cert-kubeconfig");
  auto ca = generateCa("test-ca");
  REQUIRE(ca.ok());
  CertificateStore store(dir / "pki");
  auto stored = store.update(clientPair(*ca, "n1", std::chrono::hours(2)),
                             base::SystemTime(std::chrono::seconds(1767225600)));
  REQUIRE(stored.ok());
  api::RestConfig bootstrap;
  bootstrap.server = "https://127.0.0.1:6443";
  bootstrap.ca_pem = ca->cert_pem;
  bootstrap.bearer_token = "abcdef.0123456789abcdef";
  const fs::path kubeconfig = dir / "kubeconfig";
  std::string why;
  CHECK(!kubeconfigStillValid(kubeconfig, stored->info.not_before, &why));
  CHECK(why.find("does not exist") != std::string::npos);

  REQUIRE(writeBootstrappedKubeconfig(kubeconfig, bootstrap, store.currentPath()).ok());
  CHECK(modeOf(kubeconfig) == 0600);
  auto loaded = api::loadKubeconfig(kubeconfig);
  REQUIRE(loaded.ok());
  CHECK(loaded->server == bootstrap.server);
  CHECK(loaded->ca_pem == ca->cert_pem);
  CHECK(loaded->bearer_token.empty());  // the token stays in the bootstrap kubeconfig
  CHECK(loaded->client_key_pem.find("PRIVATE KEY") != std::string::npos);
  CHECK(loaded->namespace_ == "default");
  CHECK(testing::readFile(kubeconfig).find(store.currentPath().string()) != std::string::npos);

  CHECK(kubeconfigStillValid(kubeconfig, stored->info.not_after - 1s, &why));
  CHECK(!kubeconfigStillValid(kubeconfig, stored->info.not_after + 1s, &why));
  CHECK(why.find("is expired") != std::string::npos);
}

}  // namespace nodeagent::certificate
