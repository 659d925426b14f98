// The nodeagent binary joins build/test-apiserver the kubelet way: TLS bootstrap with a bootstrap
// token (the CSR, its approval by the server's approver or by kubectl certificate approve, the
// pem, its symlink and the kubeconfig written, a restart that skips the bootstrap), client
// certificate rotation with connections moved to the new certificate, --node-labels that a node
// may not set refused at start, and an agent holding another node's certificate refused by the
// Node authorizer and NodeRestriction (--authorization-mode=Node) without harm to either node.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/certificate/pki.h"
#include "api/kubeconfig.h"
#include "base/clock.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/integration_env.h"

using namespace nodeagent::testing;
using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr char kToken[] = "abcdef.0123456789abcdef";

// test-apiserver over TLS with bootstrap tokens and client certificates, an admin kubectl, and
// one nodeagent (fake runtime) named n1.
struct Cluster {
  TempDir dir{"node-bootstrap"};
  std::unique_ptr<SpawnedApiServer> server;
  std::unique_ptr<Kubectl> kubectl;
  std::unique_ptr<ChildProcess> agent;

  explicit Cluster(std::vector<std::string> extra = {}) {
    writeFile(dir / "tokens.csv", "admin-token,admin,1,\"system:masters\"\n");
    std::vector<std::string> args = {
        "--cert-dir=" + certs().string(), "--token-auth-file=" + (dir / "tokens.csv").string(),
        "--client-ca-file=" + (certs() / "ca.crt").string(), "--enable-bootstrap-token-auth"};
    args.insert(args.end(), extra.begin(), extra.end());
    server = std::make_unique<SpawnedApiServer>(dir, args);
    REQUIRE(server->ok());
    kubectl = std::make_unique<Kubectl>(dir, *server);
  }
  ~Cluster() {
    if (agent) {
      agent->signal(SIGTERM);
      agent->wait(10s);
    }
  }

  fs::path certs() const { return dir / "certs"; }
  fs::path pki() const { return dir / "pki"; }
  fs::path kubeletConf() const { return dir / "kubelet.conf"; }

  void createBootstrapToken() {
    auto made =
        kubectl->run({"create", "secret", "generic", "bootstrap-token-abcdef", "-n", "kube-system",
                      "--type=bootstrap.kubernetes.io/token", "--from-literal=token-id=abcdef",
                      "--from-literal=token-secret=0123456789abcdef",
                      "--from-literal=usage-bootstrap-authentication=true"});
    INFO(made.err);
    REQUIRE(made.exit_code == 0);
  }

  // A kubeconfig for `user` (its YAML lines) at the server, trusting the cluster CA.
  fs::path writeKubeconfig(const std::string& name, const std::string& user) {
    writeFile(dir / name,
              "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n"
              "    server: " +
                  server->url() + "\n    certificate-authority: " + (certs() / "ca.crt").string() +
                  "\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n- name: u\n"
                  "  user:\n" +
                  user);
    return dir / name;
  }
  // kubelet.conf with `pair` as its client certificate.
  void writeClientKubeconfig(const nodeagent::certificate::KeyPair& pair) {
    writeKubeconfig("kubelet.conf",
                    "    client-certificate-data: " + nodeagent::api::encodeBase64(pair.cert_pem) +
                        "\n    client-key-data: " + nodeagent::api::encodeBase64(pair.key_pem) +
                        "\n");
  }

  void startAgent(std::vector<std::string> extra) {
    std::vector<std::string> argv = {binaryPath("nodeagent").string(),
                                     "--kubeconfig=" + kubeletConf().string(),
                                     "--cert-dir=" + pki().string(),
                                     "--hostname-override=" + node,
                                     "--node-ip=127.0.0.1",
                                     "--root-dir=" + (dir / "root").string(),
                                     "--runtime=fake",
                                     "--read-only-port=0",
                                     "--port=0",
                                     "--healthz-port=0",
                                     "--node-status-update-frequency=1s",
                                     "--v=1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    agent = std::make_unique<ChildProcess>(argv, dir / "agent.out", dir / "agent.err");
    REQUIRE(agent->started());
  }
  void stopAgent() {
    agent->signal(SIGTERM);
    REQUIRE(agent->wait(20s).has_value());
  }

  std::optional<json> getJson(std::vector<std::string> args) {
    args.insert(args.end(), {"-o", "json"});
    auto r = kubectl->run(args);
    if (r.exit_code != 0) return std::nullopt;
    return json::parse(r.out, nullptr, false);
  }
  bool nodeReady() {
    auto node = getJson({"get", "node", "n1"});
    if (!node || node->is_discarded()) return false;
    for (const auto& c : (*node)["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
    }
    return false;
  }
  json csrs() {
    auto list = getJson({"get", "csr"});
    REQUIRE(list.has_value());
    return (*list)["items"];
  }
  std::string agentLog() const { return agent->err() + agent->out(); }

  // A bootstrap token and its kubeconfig; the agent started with it.
  void startBootstrapping(std::vector<std::string> extra = {}) {
    createBootstrapToken();
    bootstrap = writeKubeconfig("bootstrap.conf", std::string("    token: ") + kToken + "\n");
    extra.push_back("--bootstrap-kubeconfig=" + bootstrap.string());
    startAgent(std::move(extra));
  }
  // The name of the one request once it exists and `pred` holds.
  std::string csrName(const std::function<bool(const std::string&)>& pred) {
    std::string name;
    const bool found = eventually(
        [&] {
          json items = csrs();
          if (items.size() == 1) name = items[0]["metadata"]["name"].get<std::string>();
          return !name.empty() && pred(name);
        },
        30s);
    REQUIRE(found);
    return name;
  }

  // eventually(), failing with the agent's and the server's logs.
  void await(const std::function<bool()>& pred, std::chrono::milliseconds deadline,
             const std::string& what) {
    INFO(what);
    if (eventually(pred, deadline)) return;
    FAIL("timed out waiting for " << what << "\n--- agent:\n"
                                  << agentLog() << "\n--- apiserver:\n"
                                  << server->log());
  }

  // An API pod bound to the node, created with the admin kubectl; true once kubectl shows it
  // Running (the node read it and reported its status as itself).
  void runApiPod(const std::string& name) {
    writeFile(dir / (name + ".yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name +
                                          ", namespace: default}\n"
                                          "spec:\n  nodeName: " +
                                          node +
                                          "\n  containers:\n  - name: c\n    image: busybox\n"
                                          "    command: [sleep, \"3600\"]\n");
    auto applied = kubectl->run({"apply", "-f", (dir / (name + ".yaml")).string()});
    INFO(applied.err);
    REQUIRE(applied.exit_code == 0);
    await(
        [&] {
          return kubectl->run({"get", "pod", name, "-o", "jsonpath={.status.phase}"}).out ==
                 "Running";
        },
        60s, "the API pod " + name + " to be Running");
  }

  fs::path bootstrap;
  std::string node = "n1";  // the agent's --hostname-override
};

}  // namespace

TEST_CASE("node bootstrap: an agent with only a bootstrap kubeconfig joins as system:node:n1",
          "[integration][certificate]") {
  Cluster cluster;
  cluster.startBootstrapping({"--node-labels=node.kubernetes.io/pool=a",
                              "--register-with-taints=dedicated=infra:NoSchedule"});
  cluster.await([&] { return cluster.nodeReady(); }, 90s, "the node to be Ready");
  auto node = cluster.getJson({"get", "node", "n1"});
  REQUIRE(node.has_value());
  CHECK((*node)["metadata"]["labels"]["node.kubernetes.io/pool"] == "a");
  CHECK((*node)["spec"]["taints"] ==
        json::parse(R"([{"key":"dedicated","value":"infra","effect":"NoSchedule"}])"));

  // One request, made with the bootstrap token, approved by the server's approver.
  json csrs = cluster.csrs();
  REQUIRE(csrs.size() == 1);
  const json& csr = csrs[0];
  CHECK(csr["metadata"]["name"].get<std::string>().starts_with("node-csr-"));
  CHECK(csr["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet");
  CHECK(csr["spec"]["username"] == "system:bootstrap:abcdef");
  CHECK(csr["spec"]["usages"] == json{"digital signature", "client auth"});
  CHECK(csr["status"]["conditions"][0]["type"] == "Approved");

  // The files: the pem behind the symlink, no pending key, the kubeconfig pointing at the pem.
  const fs::path current = cluster.pki() / "kubelet-client-current.pem";
  REQUIRE(fs::is_symlink(current));
  const std::string target = fs::read_symlink(current).string();
  CHECK(target.starts_with("kubelet-client-"));
  CHECK(target.ends_with(".pem"));
  CHECK(fs::exists(cluster.pki() / target));
  CHECK(!fs::exists(cluster.pki() / "kubelet-client.key.tmp"));
  const std::string conf = readFile(cluster.kubeletConf());
  CHECK(conf.find("client-certificate: \"" + current.string() + "\"") != std::string::npos);
  CHECK(conf.find("client-key: \"" + current.string() + "\"") != std::string::npos);
  CHECK(conf.find(kToken) == std::string::npos);

  // The certificate authenticates the node as system:node:n1 in system:nodes.
  auto whoami = runCommand({"kubectl", "--kubeconfig=" + cluster.kubeletConf().string(),
                            "--cache-dir=" + (cluster.dir / "cache2").string(), "auth", "whoami"},
                           cluster.dir);
  INFO(whoami.err);
  CHECK(whoami.out.find("Username    system:node:n1\n") != std::string::npos);
  CHECK(whoami.out.find("system:nodes") != std::string::npos);
  cluster.runApiPod("web");

  // A restart with a valid certificate skips the bootstrap: no new request.
  cluster.stopAgent();
  cluster.startAgent({"--bootstrap-kubeconfig=" + cluster.bootstrap.string()});
  cluster.await(
      [&] {
        return cluster.agentLog().find("Kubeconfig exists and is valid, skipping bootstrap") !=
               std::string::npos;
      },
      20s, "the condition above");
  cluster.await([&] { return cluster.nodeReady(); }, 90s, "the node to be Ready");
  CHECK(cluster.csrs().size() == 1);
  CHECK(fs::read_symlink(current).string() == target);
}

TEST_CASE(
    "node bootstrap: with auto-approval off the agent waits and says why until an "
    "operator approves its request",
    "[integration][certificate]") {
  Cluster cluster({"--csr-auto-approve=false"});
  cluster.startBootstrapping();
  const std::string name = cluster.csrName([&](const std::string& csr) {
    return cluster.agentLog().find("Waiting for CSR " + csr + " to be approved") !=
           std::string::npos;
  });
  // Pending: no certificate, no kubeconfig, no Node; the key is kept for a restart.
  CHECK(fs::exists(cluster.pki() / "kubelet-client.key.tmp"));
  CHECK(!fs::exists(cluster.kubeletConf()));
  CHECK(cluster.agent->running());
  CHECK(!cluster.getJson({"get", "node", "n1"}).has_value());

  // A restart asks again with the same key: the same request is found and reused.
  cluster.stopAgent();
  cluster.startAgent({"--bootstrap-kubeconfig=" + cluster.bootstrap.string()});
  cluster.await(
      [&] {
        return cluster.agentLog().find("exists already, reusing it csr=" + name) !=
               std::string::npos;
      },
      20s, "the condition above");
  CHECK(cluster.csrs().size() == 1);

  auto approved = cluster.kubectl->run({"certificate", "approve", name});
  INFO(approved.err);
  REQUIRE(approved.exit_code == 0);
  cluster.await([&] { return cluster.nodeReady(); }, 90s, "the node to be Ready");
  CHECK(fs::is_symlink(cluster.pki() / "kubelet-client-current.pem"));
  CHECK(cluster.agentLog().find("Certificate signing request is issued csr=" + name) !=
        std::string::npos);
}

TEST_CASE("node bootstrap: a denied request stops the agent with the reason",
          "[integration][certificate]") {
  Cluster cluster({"--csr-auto-approve=false"});
  cluster.startBootstrapping();
  const std::string name = cluster.csrName([](const std::string&) { return true; });
  REQUIRE(cluster.kubectl->run({"certificate", "deny", name}).exit_code == 0);
  auto code = cluster.agent->wait(30s);
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(cluster.agentLog().find("certificate signing request " + name + " is denied") !=
        std::string::npos);
}

TEST_CASE(
    "node bootstrap: with --rotate-certificates a certificate near its end is replaced "
    "and the agent goes on with the new one",
    "[integration][certificate]") {
  Cluster cluster;
  // A node certificate from the cluster CA that ends in 45 s, issued 60 s ago for 105 s: its
  // rotation deadline (70-90 % of its lifetime) comes 13.5-34.5 s after the start, once the
  // agent's watch is open (a rotation at the very start would find no watch to close).
  nodeagent::certificate::CertificateRequest request;
  request.backdate = 60s;
  request.validity = 105s;
  auto old = issueNodeCertificate(cluster.certs(), "n1", request);
  REQUIRE(old.ok());
  const auto old_expiry = nodeagent::certificate::inspectCertificate(old->cert_pem)->not_after;
  cluster.writeClientKubeconfig(*old);
  const int metrics_port = unusedLoopbackPort();
  cluster.startAgent({"--rotate-certificates", "--read-only-port=" + std::to_string(metrics_port)});
  const fs::path current = cluster.pki() / "kubelet-client-current.pem";
  cluster.await(
      [&] { return cluster.agentLog().find("Certificate rotation detected") != std::string::npos; },
      60s, "the condition above");
  REQUIRE(fs::is_symlink(current));
  // The node asked for it with its own certificate.
  json csrs = cluster.csrs();
  REQUIRE(csrs.size() == 1);
  CHECK(csrs[0]["spec"]["username"] == "system:node:n1");
  CHECK(csrs[0]["metadata"]["name"].get<std::string>().starts_with("csr-"));
  auto rotated = nodeagent::certificate::inspectCertificate(readFile(current));
  REQUIRE(rotated.ok());
  CHECK(rotated->not_after > old_expiry + 24h);
  // The expiry metric follows the new certificate.
  const std::string expiry_line = "\nkubelet_certificate_manager_client_expiration_seconds " +
                                  std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                     rotated->not_after.time_since_epoch())
                                                     .count()) +
                                  "\n";
  cluster.await(
      [&] {
        auto res = httplib::Client("127.0.0.1", metrics_port).Get("/metrics");
        return res && res->body.find(expiry_line) != std::string::npos;
      },
      20s, "the expiration metric of the new certificate");
  // Open watches were closed and re-opened with the new certificate.
  cluster.await(
      [&] {
        return cluster.agentLog().find("the client certificate was rotated") != std::string::npos;
      },
      30s, "the condition above");

  // Once the old certificate has expired, the node still renews its lease and stays Ready: the
  // new connections use the new certificate.
  REQUIRE(
      eventually([&] { return nodeagent::base::realClock().wallNow() > old_expiry + 2s; }, 90s));
  auto renew = [&] {
    return cluster.kubectl
        ->run({"get", "lease", "n1", "-n", "kube-node-lease", "-o", "jsonpath={.spec.renewTime}"})
        .out;
  };
  const std::string after_expiry = renew();
  cluster.await([&] { return renew() != after_expiry; }, 30s, "the condition above");
  CHECK(cluster.nodeReady());
  // A pod created after the old certificate expired runs: the watch and the status writes use
  // the new one.
  cluster.runApiPod("after-rotation");
  CHECK(cluster.agentLog().find("Rotated the client certificate") != std::string::npos);
}

TEST_CASE(
    "node bootstrap: with --rotate-certificates an expired certificate the apiserver refuses "
    "stops the agent with exit code 1 so that a restart bootstraps again",
    "[integration][certificate]") {
  Cluster cluster;
  // A node certificate that expired an hour ago: its rotation request is refused (401).
  nodeagent::certificate::CertificateRequest request;
  request.backdate = 2h;
  request.validity = 1h;
  auto expired = issueNodeCertificate(cluster.certs(), "n1", request);
  REQUIRE(expired.ok());
  cluster.writeClientKubeconfig(*expired);
  cluster.startAgent({"--rotate-certificates"});
  auto code = cluster.agent->wait(60s);
  INFO(cluster.agentLog());
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(cluster.agentLog().find("The currently active client certificate has expired and the "
                                "server is responsive, exiting") != std::string::npos);
  CHECK(cluster.agentLog().find("Stopped; containers keep running exit_code=1") !=
        std::string::npos);
}

TEST_CASE("node bootstrap: --node-labels a node may not set refuse to start",
          "[integration][certificate]") {
  TempDir dir("node-labels");
  for (const char* label : {"node-role.kubernetes.io/worker=",
                            "x.node-restriction.kubernetes.io/a=b", "k8s.io/foo=bar"}) {
    auto run = runCommand(
        {binaryPath("nodeagent").string(), "--allow-no-sources", "--hostname-override=n1",
         "--root-dir=" + (dir / "root").string(), "--runtime=fake", "--read-only-port=0",
         "--port=0", "--healthz-port=0", std::string("--node-labels=e2e=yes,") + label},
        dir, 20s);
    INFO(label << "\n" << run.err);
    REQUIRE(run.exit_code.has_value());
    CHECK(*run.exit_code == 2);
    const std::string key = std::string(label).substr(0, std::string(label).find('='));
    CHECK(run.err.find("failed to validate kubelet flags: unknown 'kubernetes.io' or 'k8s.io' "
                       "labels specified with --node-labels: [" +
                       key + "]") != std::string::npos);
  }
}

namespace {

// How often `needle` occurs in `text`.
size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "node authorization: an agent named n2 holding n1's certificate is refused n2's Node and "
    "lease and says why while its static pod runs",
    "[integration][certificate]") {
  Cluster cluster({"--authorization-mode=Node"});
  // n2 and its lease as an administrator made them.
  writeFile(cluster.dir / "n2.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n2}\n---\n"
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\n"
            "metadata: {name: n2, namespace: kube-node-lease}\n"
            "spec: {holderIdentity: n2, leaseDurationSeconds: 40, "
            "renewTime: \"2020-01-01T00:00:00.000000Z\"}\n");
  auto made = cluster.kubectl->run({"create", "-f", (cluster.dir / "n2.yaml").string()});
  INFO(made.err);
  REQUIRE(made.exit_code == 0);
  const std::optional<json> node_before = cluster.getJson({"get", "node", "n2"});
  const std::optional<json> lease_before =
      cluster.getJson({"get", "lease", "n2", "-n", "kube-node-lease"});
  REQUIRE(node_before.has_value());
  REQUIRE(lease_before.has_value());

  // The wrong kubeconfig: n1's certificate for an agent named n2 with a static pod.
  auto n1 = issueNodeCertificate(cluster.certs(), "n1");
  REQUIRE(n1.ok());
  cluster.writeClientKubeconfig(*n1);
  fs::create_directories(cluster.dir / "manifests");
  writeFile(cluster.dir / "manifests" / "static.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: static, namespace: default}\n"
            "spec:\n  containers:\n  - {name: c, image: busybox}\n");
  const int port = unusedLoopbackPort();
  cluster.node = "n2";
  cluster.startAgent({"--pod-manifest-path=" + (cluster.dir / "manifests").string(),
                      "--read-only-port=" + std::to_string(port)});

  // Each refusal is logged naming the object, with the apiserver's reason.
  const std::string tail = R"( [apiserver code=403 reason=Forbidden]")";
  const std::string registration =
      R"(Unable to register node node=n2 err="PERMISSION_DENIED: POST /api/v1/nodes: nodes )"
      R"(\"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\")" +
      tail;
  const std::string lease =
      R"(Failed to ensure the node lease exists node=n2 err="PERMISSION_DENIED: GET )"
      R"(/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2: )"
      R"(leases.coordination.k8s.io \"n2\" is forbidden: User \"system:node:n1\" cannot get )"
      R"(resource \"leases\" in API group \"coordination.k8s.io\" in the namespace )"
      R"(\"kube-node-lease\": can only access node lease with the same name as the requesting )"
      R"(node)" +
      tail;
  const std::string pods =
      R"(cannot list resource \"pods\" in API group \"\" at the cluster scope: can only )"
      R"(list/watch pods with spec.nodeName field selector)";
  const std::string mirror =
      "Mirror pods wait for the node's registration: NodeRestriction refuses a mirror pod its "
      "Node does not own node=n2 pod=default/static-n2";
  // Five refused registrations (100 ms doubling: some 3 s), while the static pod was synced
  // again each second for its mirror pod.
  cluster.await(
      [&] {
        const std::string log = cluster.agentLog();
        return occurrences(log, registration) >= 5 && occurrences(log, lease) >= 2 &&
               occurrences(log, pods) >= 1 && occurrences(log, mirror) >= 1;
      },
      60s, "the refusals to be logged");
  CHECK(occurrences(cluster.agentLog(), mirror) == 1);
  // Retried with a growing backoff, not at once.
  CHECK(occurrences(cluster.agentLog(), registration + " retry_in_ms=1600") == 1);

  // The static pod runs all the same.
  cluster.await(
      [&] {
        auto res = httplib::Client("127.0.0.1", port).Get("/pods");
        if (!res || res->status != 200) return false;
        const json list = json::parse(res->body, nullptr, false);
        if (!list.is_object()) return false;
        for (const auto& pod : list.value("items", json::array())) {
          if (pod["metadata"].value("name", "") == "static-n2") {
            return pod.value("status", json::object()).value("phase", "") == "Running";
          }
        }
        return false;
      },
      30s, "the static pod to run");
  CHECK(cluster.agent->running());

  // Nothing of n2 changed: its Node, its lease; no mirror pod.
  auto node_after = cluster.getJson({"get", "node", "n2"});
  REQUIRE(node_after.has_value());
  CHECK((*node_after)["metadata"]["resourceVersion"] ==
        (*node_before)["metadata"]["resourceVersion"]);
  CHECK_FALSE((*node_after).value("status", json::object()).contains("conditions"));
  auto lease_after = cluster.getJson({"get", "lease", "n2", "-n", "kube-node-lease"});
  REQUIRE(lease_after.has_value());
  CHECK((*lease_after)["metadata"]["resourceVersion"] ==
        (*lease_before)["metadata"]["resourceVersion"]);
  CHECK((*lease_after)["spec"]["renewTime"] == "2020-01-01T00:00:00.000000Z");
  auto all_pods = cluster.getJson({"get", "pods", "-A"});
  REQUIRE(all_pods.has_value());
  CHECK((*all_pods)["items"].empty());

  // Refused is not broken: the agent stops as asked.
  cluster.agent->signal(SIGTERM);
  const std::optional<int> code = cluster.agent->wait(20s);
  INFO(cluster.agentLog());
  CHECK(code.value_or(-1) == 0);
}
