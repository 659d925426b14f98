// test-apiserver in-process as a locked-down cluster that nodes join the kubelet way: TLS with
// its CA in <dir>/certs (also the client CA), the bootstrap token abcdef.0123456789abcdef (its
// Secret created), the CSR signer and auto-approver, --authorization-mode=Node,ABAC where
// bootstrappers may only request CSRs (kubeadm's nodeclient binding), and NodeRestriction.
// Used by the hollow fleet's test and benchmark.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "test/support/test_util.h"

namespace nodeagent::testing {

// An ABAC policy line: bootstrappers may request node client certificates (kubeadm's nodeclient
// binding).
inline constexpr char kBootstrapperCsrPolicy[] =
    R"({"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy",)"
    R"("spec":{"group":"system:bootstrappers","namespace":"*",)"
    R"("apiGroup":"certificates.k8s.io","resource":"certificatesigningrequests"}})"
    "\n";

class JoinableCluster {
 public:
  // `threads`: the server's request threads. Each open watch and each idle keep-alive
  // connection holds one (httplib), so many nodes need many.
  static base::StatusOr<std::unique_ptr<JoinableCluster>> start(const std::filesystem::path& dir,
                                                                int threads = 256) {
    writeFile(dir / "tokens.csv", "admin-token,admin,1,\"system:masters\"\n");
    writeFile(dir / "policy.jsonl", kBootstrapperCsrPolicy);
    testapiserver::ServerOptions opts;
    opts.threads = threads;
    opts.cert_dir = (dir / "certs").string();
    opts.token_auth_file = (dir / "tokens.csv").string();
    opts.client_ca_file = (dir / "certs" / "ca.crt").string();
    opts.enable_bootstrap_token_auth = true;
    opts.authorization_mode = "Node,ABAC";
    opts.authorization_policy_file = (dir / "policy.jsonl").string();
    auto server = testapiserver::TestApiServer::start(opts);
    if (!server.ok()) return server.status();
    // The token's id and secret, base64-encoded.
    auto token = (*server)->store().create(
        "secrets", "kube-system",
        {{"apiVersion", "v1"},
         {"kind", "Secret"},
         {"metadata", {{"name", "bootstrap-token-abcdef"}, {"namespace", "kube-system"}}},
         {"type", "bootstrap.kubernetes.io/token"},
         {"data",
          {{"token-id", "YWJjZGVm"},
           {"token-secret", "MDEyMzQ1Njc4OWFiY2RlZg=="},
           {"usage-bootstrap-authentication", "dHJ1ZQ=="}}}});
    if (!token.ok()) return token.status();
    auto cluster = std::unique_ptr<JoinableCluster>(new JoinableCluster(std::move(*server), dir));
    writeFile(cluster->bootstrap_kubeconfig_,
              "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n"
              "  cluster:\n    server: " +
                  cluster->server_->url() +
                  "\n    certificate-authority: " + (dir / "certs" / "ca.crt").string() +
                  "\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n"
                  "- name: u\n  user:\n    token: abcdef.0123456789abcdef\n");
    return cluster;
  }

  testapiserver::TestApiServer& server() { return *server_; }
  const std::filesystem::path& bootstrapKubeconfig() const { return bootstrap_kubeconfig_; }

  // Nodes whose Ready condition is True.
  int readyNodes() {
    auto list = server_->store().listJson("nodes", "", {});
    if (!list.ok()) return 0;
    int n = 0;
    for (const auto& node : (*list)["items"]) {
      for (const auto& c : node["status"].value("conditions", nlohmann::json::array())) {
        if (c.value("type", "") == "Ready" && c.value("status", "") == "True") ++n;
      }
    }
    return n;
  }
  // Pods of `ns` in phase Running.
  int runningPods(const std::string& ns = "default") {
    auto list = server_->store().listJson("pods", ns, {});
    if (!list.ok()) return 0;
    int n = 0;
    for (const auto& p : (*list)["items"]) {
      if (p["status"].value("phase", "") == "Running") ++n;
    }
    return n;
  }

 private:
  JoinableCluster(std::unique_ptr<testapiserver::TestApiServer> server,
                  const std::filesystem::path& dir)
      : server_(std::move(server)), bootstrap_kubeconfig_(dir / "bootstrap.conf") {}

  std::unique_ptr<testapiserver::TestApiServer> server_;
  std::filesystem::path bootstrap_kubeconfig_;
};

}  // namespace nodeagent::testing
