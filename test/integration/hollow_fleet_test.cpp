// `nodeagent hollow-fleet`, the real binary, against test-apiserver as a locked-down cluster
// (joinable_cluster.h: TLS, bootstrap tokens, Node,ABAC authorization, NodeRestriction): each
// hollow node joins with a CSR of its own, registers, renews its own lease and runs the API pods
// bound to it, which only works when every node acts as system:node:<its name>; a restart reuses
// the certificates; flags the fleet sets per node are refused.
#include <signal.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "test/integration/apiserver_test_util.h"
#include "test/integration/joinable_cluster.h"

using namespace nodeagent::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr int kNodes = 3;

json podJson(const std::string& name, const std::string& node) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", "default"}}},
      {"spec",
       {{"nodeName", node},
        {"containers", {{{"name", "c"}, {"image", "busybox"}, {"command", {"sleep", "3600"}}}}}}}};
}

std::unique_ptr<ChildProcess> startFleet(const TempDir& dir, JoinableCluster& cluster,
                                         const std::string& log_name) {
  auto fleet = std::make_unique<ChildProcess>(
      std::vector<std::string>{binaryPath("nodeagent").string(), "hollow-fleet",
                               "--nodes=" + std::to_string(kNodes),
                               "--fleet-dir=" + (dir / "fleet").string(), "--name-prefix=h-",
                               "--bootstrap-kubeconfig=" + cluster.bootstrapKubeconfig().string(),
                               "--node-ip=127.0.0.1", "--node-status-update-frequency=1s"},
      dir / (log_name + ".out"), dir / (log_name + ".err"));
  REQUIRE(fleet->started());
  return fleet;
}

size_t csrCount(JoinableCluster& cluster) {
  auto list = cluster.server().store().listJson("certificatesigningrequests", "", {});
  REQUIRE(list.ok());
  return (*list)["items"].size();
}

// The node's lease's renewTime; "" while it has none.
std::string renewTime(JoinableCluster& cluster, int node) {
  auto lease =
      cluster.server().store().get("leases", "kube-node-lease", "h-" + std::to_string(node));
  return lease.ok() ? (*lease)["spec"].value("renewTime", "") : std::string();
}

}  // namespace

TEST_CASE(
    "hollow fleet: each node joins with its own CSR and runs the pods bound to it under Node "
    "authorization and a restart reuses the certificates",
    "[integration][fleet]") {
  TempDir dir("hollow-fleet");
  auto started = JoinableCluster::start(dir.path());
  REQUIRE(started.ok());
  auto& cluster = **started;
  auto fleet = startFleet(dir, cluster, "fleet");
  {
    INFO(fleet->err());
    REQUIRE(eventually([&] { return cluster.readyNodes() == kNodes; }, 60s));
  }
  // One request per node, from the bootstrap token, each for its own node's identity.
  auto csrs = cluster.server().store().listJson("certificatesigningrequests", "", {});
  REQUIRE(csrs.ok());
  REQUIRE((*csrs)["items"].size() == kNodes);
  for (const auto& csr : (*csrs)["items"]) {
    CHECK(csr["spec"]["username"] == "system:bootstrap:abcdef");
    CHECK(csr["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet");
  }
  // Each node holds its own lease.
  for (int i = 0; i < kNodes; ++i) {
    const std::string name = "h-" + std::to_string(i);
    INFO(name);
    CHECK(eventually([&] { return !renewTime(cluster, i).empty(); }, 30s));
    auto lease = cluster.server().store().get("leases", "kube-node-lease", name);
    REQUIRE(lease.ok());
    CHECK((*lease)["spec"]["holderIdentity"] == name);
  }
  // Two API pods per node: the Node authorizer lets a node read and report only its own, so
  // all six Running means every node spoke as itself.
  for (int i = 0; i < kNodes; ++i) {
    for (const char* p : {"a", "b"}) {
      const std::string node = "h-" + std::to_string(i);
      REQUIRE(cluster.server().store().create("pods", "default", podJson(node + p, node)).ok());
    }
  }
  {
    INFO(fleet->err());
    REQUIRE(eventually([&] { return cluster.runningPods() == 2 * kNodes; }, 60s));
  }
  const std::string log = fleet->err() + fleet->out();
  CHECK(log.find("Hollow fleet running nodes=3 first=h-0 last=h-2") != std::string::npos);
  CHECK(log.find("Forbidden") == std::string::npos);

  fleet->signal(SIGTERM);
  REQUIRE(fleet->wait(30s) == 0);
  CHECK(fleet->err().find("Hollow fleet stopped") != std::string::npos);

  // A restart finds every node's certificate valid: no new request; every node renews its
  // lease again.
  std::vector<std::string> renewed_before;
  for (int i = 0; i < kNodes; ++i) renewed_before.push_back(renewTime(cluster, i));
  auto again = startFleet(dir, cluster, "fleet2");
  {
    INFO(again->err());
    REQUIRE(eventually(
        [&] {
          for (int i = 0; i < kNodes; ++i) {
            if (renewTime(cluster, i) == renewed_before[i]) return false;
          }
          return true;
        },
        60s));
  }
  const std::string log2 = again->err();
  size_t skipped = 0;
  for (size_t pos = 0; (pos = log2.find("Kubeconfig exists and is valid, skipping bootstrap",
                                        pos)) != std::string::npos;
       ++pos) {
    ++skipped;
  }
  CHECK(skipped == kNodes);
  CHECK(csrCount(cluster) == kNodes);
  CHECK(cluster.runningPods() == 2 * kNodes);
  again->signal(SIGTERM);
  CHECK(again->wait(30s) == 0);
}

TEST_CASE("hollow fleet: flags the fleet sets for each node and a missing --nodes are refused",
          "[integration][fleet]") {
  TempDir dir("hollow-fleet-flags");
  const std::string nodeagent = binaryPath("nodeagent").string();
  const std::string fleet_dir = "--fleet-dir=" + (dir / "fleet").string();

  auto root =
      runCommand({nodeagent, "hollow-fleet", "--nodes=2", fleet_dir, "--root-dir=/tmp/x"}, dir);
  CHECK(root.exit_code == 2);
  CHECK(root.err.find("--root-dir is set for each node by hollow-fleet") != std::string::npos);

  auto no_nodes = runCommand({nodeagent, "hollow-fleet", fleet_dir}, dir);
  CHECK(no_nodes.exit_code == 2);
  CHECK(no_nodes.err.find("--nodes must be at least 1") != std::string::npos);

  auto both = runCommand({nodeagent, "hollow-fleet", "--nodes=1", fleet_dir, "--kubeconfig=/tmp/a",
                          "--bootstrap-kubeconfig=/tmp/b"},
                         dir);
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("leave out --kubeconfig") != std::string::npos);

  // A daemon flag's own error names the flag (checked by each node's configuration).
  auto bad = runCommand({nodeagent, "hollow-fleet", "--nodes=1", fleet_dir, "--max-pods=x"}, dir);
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("max-pods") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "fleet" / "hollow-0" / "nodeagent.lock"));
}
