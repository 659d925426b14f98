#include <catch2/catch.hpp>

#include "api/kubeconfig.h"
#include "test/support/test_util.h"

using namespace nodeagent::api;
using nodeagent::testing::TempDir;
using nodeagent::testing::writeFile;

namespace {
// "-----BEGIN CERTIFICATE-----\nCA\n" in base64.
constexpr const char* kCaData = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCg==";
}  // namespace

TEST_CASE("kubeconfig: current-context picks cluster and user, relative paths resolve",
          "[unit][apiclient]") {
  TempDir dir;
  std::filesystem::create_directories(dir / "pki");
  writeFile(dir / "pki/ca.crt", "CA-FROM-FILE");
  writeFile(dir / "pki/client.crt", "CERT-FROM-FILE");
  writeFile(dir / "pki/client.key", "KEY-FROM-FILE");
  writeFile(dir / "token", "tok-from-file\n");
  writeFile(dir / "kubeconfig", R"(
apiVersion: v1
kind: Config
current-context: main
contexts:
- name: other
  context: {cluster: c2, user: u2}
- name: main
  context: {cluster: c1, user: u1, namespace: kube-system}
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority: pki/ca.crt
    tls-server-name: apiserver.local
- name: c2
  cluster: {server: "http://127.0.0.1:8080"}
users:
- name: u1
  user:
    tokenFile: token
    client-certificate: pki/client.crt
    client-key: pki/client.key
- name: u2
  user: {token: abc}
)");
  auto cfg = loadKubeconfig(dir / "kubeconfig");
  REQUIRE(cfg.ok());
  CHECK(cfg->server == "https://10.0.0.1:6443");
  CHECK(cfg->ca_pem == "CA-FROM-FILE");
  CHECK(cfg->tls_server_name == "apiserver.local");
  CHECK(cfg->bearer_token == "tok-from-file");
  CHECK(cfg->client_cert_pem == "CERT-FROM-FILE");
  CHECK(cfg->client_key_pem == "KEY-FROM-FILE");
  CHECK(cfg->namespace_ == "kube-system");

  auto other = loadKubeconfig(dir / "kubeconfig", "other");
  REQUIRE(other.ok());
  CHECK(other->server == "http://127.0.0.1:8080");
  CHECK(other->bearer_token == "abc");
  CHECK(other->ca_pem.empty());
}

TEST_CASE("kubeconfig: *-data wins over paths and token over tokenFile", "[unit][apiclient]") {
  std::string yaml = std::string(R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters:
- name: c
  cluster:
    server: https://h:1
    certificate-authority: /does/not/exist
    certificate-authority-data: )") +
                     kCaData + R"(
users:
- name: u
  user:
    token: inline
    tokenFile: /does/not/exist
    client-certificate-data: Q0VSVA==
    client-certificate: /does/not/exist
    client-key-data: S0VZ
    client-key: /does/not/exist
)";
  auto cfg = parseKubeconfig(yaml, "/nowhere", "test");
  REQUIRE(cfg.ok());
  CHECK(cfg->ca_pem == "-----BEGIN CERTIFICATE-----\nCA\n");
  CHECK(cfg->bearer_token == "inline");
  CHECK(cfg->client_cert_pem == "CERT");
  CHECK(cfg->client_key_pem == "KEY");
}

TEST_CASE("kubeconfig: insecure-skip-tls-verify, basic auth, and no user at all",
          "[unit][apiclient]") {
  auto cfg = parseKubeconfig(R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://h:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {username: admin, password: pw}}]
)",
                             "/nowhere", "test");
  REQUIRE(cfg.ok());
  CHECK(cfg->insecure_skip_tls_verify);
  CHECK(cfg->ca_pem.empty());
  CHECK(cfg->username == "admin");
  CHECK(cfg->password == "pw");
  CHECK(cfg->bearer_token.empty());

  auto anonymous = parseKubeconfig(R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://h:1"}}]
)",
                                   "/nowhere", "test");
  REQUIRE(anonymous.ok());
  CHECK_FALSE(anonymous->insecure_skip_tls_verify);  // verification is on unless asked otherwise
  CHECK(anonymous->bearer_token.empty());
  CHECK(anonymous->client_cert_pem.empty());
}

TEST_CASE("kubeconfig: unsupported and broken configs are clear errors", "[unit][apiclient]") {
  auto check_error = [](const std::string& yaml, const std::string& needle) {
    auto cfg = parseKubeconfig(yaml, "/nowhere", "/etc/kc");
    REQUIRE_FALSE(cfg.ok());
    INFO(cfg.status().toString());
    CHECK(cfg.status().message().find(needle) != std::string::npos);
    CHECK(cfg.status().message().find("/etc/kc") != std::string::npos);
  };
  const std::string head = R"(
current-context: x
contexts: [{name: x, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://h:1"}}]
)";
  check_error(head + "users: [{name: u, user: {exec: {command: aws}}}]", "users[u].user.exec");
  check_error(head + "users: [{name: u, user: {auth-provider: {name: gcp}}}]",
              "users[u].user.auth-provider");
  check_error(head + "users: [{name: u, user: {tokenFile: missing}}]", "tokenFile");
  check_error(head + "users: [{name: u, user: {client-certificate-data: Q0VSVA==}}]",
              "client-key must be set together");
  check_error(head + "users: [{name: v, user: {}}]", "no entry named \"u\"");
  check_error("current-context: x\n", "contexts");
  check_error("contexts: []\n", "current-context");
  check_error(": : :\n  - [", "invalid YAML");
  check_error(R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://h", insecure-skip-tls-verify: true,
                              certificate-authority-data: Q0E=}}]
)",
              "insecure-skip-tls-verify cannot be combined");
  check_error(R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://h", insecure-skip-tls-verify: maybe}}]
)",
              "clusters[c].cluster.insecure-skip-tls-verify: expected a boolean");
  check_error(
      head +
          "users: [{name: u, user: {client-key: missing.key, client-certificate-data: Q0VSVA==}}]",
      "users[u].user.client-key");
  check_error(R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "ftp://h"}}]
)",
              "server");
  check_error(R"(
current-context: x
contexts: [{name: x, context: {cluster: c}}]
clusters: [{name: c, cluster: {server: "https://h", certificate-authority-data: "!!notbase64"}}]
)",
              "certificate-authority-data");
}

TEST_CASE("kubeconfig: base64 decoding", "[unit][apiclient]") {
  CHECK(*decodeBase64("aGVsbG8=") == "hello");
  CHECK(*decodeBase64("aGVs\nbG8") == "hello");
  CHECK_FALSE(decodeBase64("a*b").ok());
}
