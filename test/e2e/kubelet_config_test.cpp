// The kubelet API configured from a KubeletConfiguration file (port, authentication,
// authorization), as kubeadm writes one, and reported back by /configz.
#include <signal.h>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

#include "test/integration/apiserver_test_util.h"
#include "test/support/cgroup_root.h"
#include "test/support/integration_env.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

using namespace nodeagent;
using namespace std::chrono_literals;

TEST_CASE(
    "the kubelet API takes port, client CA, anonymous access and authorization mode from "
    "--config and reports them at /configz",
    "[e2e][kubelet-api]") {
  testing::TempDir dir("nodeagent-e2e-kubelet-config");
  testing::TestPki pki(dir / "pki");
  const int port = testing::unusedLoopbackPort();
  testing::writeFile(dir / "config.yaml",
                     "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                     "port: " +
                         std::to_string(port) +
                         "\naddress: 127.0.0.1\n"
                         "authentication:\n  anonymous:\n    enabled: true\n"
                         "  webhook:\n    enabled: false\n    cacheTTL: 30s\n"
                         "  x509:\n    clientCAFile: " +
                         pki.caFile().string() +
                         "\n"
                         "authorization:\n  mode: AlwaysAllow\n");
  const std::string cgroup_root = testing::isolatedCgroupRoot();
  testing::ChildProcess agent(
      {testing::binaryPath("nodeagent").string(), "--config=" + (dir / "config.yaml").string(),
       "--root-dir=" + (dir / "root").string(), "--runtime=fake", "--allow-no-sources",
       "--read-only-port=0", "--healthz-port=0", "--cgroup-root=" + cgroup_root},
      dir / "agent.out", dir / "agent.err");
  httplib::SSLClient client("127.0.0.1", port);
  client.enable_server_certificate_verification(false);
  std::string body;
  REQUIRE(testing::eventually(
      [&] {
        auto res = client.Get("/configz");
        if (!res || res->status != 200) return false;
        body = res->body;
        return true;
      },
      20s));
  const auto config = nlohmann::json::parse(body)["kubeletconfig"];
  CHECK(config["port"] == port);
  CHECK(config["authentication"]["anonymous"]["enabled"] == true);
  CHECK(config["authentication"]["webhook"]["cacheTTL"] == "30s");
  CHECK(config["authentication"]["x509"]["clientCAFile"] == pki.caFile().string());
  CHECK(config["authorization"]["mode"] == "AlwaysAllow");
  // Anonymous requests are let in, but a certificate that does not verify is refused outright
  // (kubelet's authenticators fail on it rather than fall back to anonymous).
  testing::TestPki other(dir / "other", "other-ca");
  auto forged = other.issueClient("mallory", {"system:masters"});
  httplib::SSLClient forged_client("127.0.0.1", port, forged.cert_file.string(),
                                   forged.key_file.string());
  forged_client.enable_server_certificate_verification(false);
  auto refused = forged_client.Get("/configz");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  // A self-signed serving certificate was made under <root-dir>/pki.
  CHECK(std::filesystem::exists(dir / "root" / "pki" / "kubelet.crt"));
  agent.signal(SIGTERM);
  CHECK(agent.wait(20s) == 0);
  testing::removeCgroupTree(cgroup_root);
}
