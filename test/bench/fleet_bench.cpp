// Hollow fleet figures: `nodeagent hollow-fleet` (N hollow nodes in one process, fake runtime)
// joined to the in-process test apiserver as a locked-down cluster: TLS, bootstrap tokens, the
// CSR signer and approver, --authorization-mode=Node,ABAC (bootstrappers may only request CSRs)
// and NodeRestriction. Every node joins with a CSR of its own and runs as system:node:<name>.
//  - time until every node is Ready (from the fleet's start: bootstrap, registration, status);
//  - time until all N x P API pods (P per node, created at once) are Running in the apiserver;
//  - at steady state over FLEET_STEADY_SECONDS (default 60): apiserver writes per node per
//    minute by kind (goal: kubelet's lease every 10 s plus node status on change, about 6-7),
//    other requests, open watches per node (goal: 1);
//  - the fleet's RSS per node and its CPU per node while idle.
// Run: build/bench/fleet_bench [nodes=100] [pods-per-node=30] [kube-api-qps=50]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test/bench/request_kinds.h"
#include "test/integration/apiserver_test_util.h"
#include "test/integration/joinable_cluster.h"
#include "test/support/test_util.h"

using nlohmann::json;
using namespace nodeagent;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kPrefix[] = "hollow-";
// Listing thousands of pods is work for the in-process apiserver, which the fleet's requests
// compete with: the bench looks every 250 ms.
constexpr std::chrono::milliseconds kPollInterval{250};

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

json podJson(int node, int i) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "p" + std::to_string(node) + "-" + std::to_string(i)}, {"namespace", "default"}}},
      {"spec",
       {{"nodeName", kPrefix + std::to_string(node)},
        {"containers", {{{"name", "c"}, {"image", "busybox"}, {"command", {"sleep", "3600"}}}}}}}};
}

long rssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

// utime + stime of `pid`, in seconds.
double cpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::strtod(field.c_str(), nullptr);
    if (i == 15) break;
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

void waitFor(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures as they come
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 100;
  const int per_node = argc > 2 ? std::atoi(argv[2]) : 30;
  const std::string qps = argc > 3 ? argv[3] : "50";
  const char* steady_env = std::getenv("FLEET_STEADY_SECONDS");
  const double steady = steady_env != nullptr ? std::atof(steady_env) : 60;
  testing::TempDir dir("nodeagent-fleet-bench");
  auto started = testing::JoinableCluster::start(dir.path(), 64 + 16 * nodes);
  if (!started.ok()) {
    std::fprintf(stderr, "cluster: %s\n", started.status().toString().c_str());
    return 1;
  }
  auto& cluster = **started;
  auto& server = cluster.server();
  const auto t0 = Clock::now();
  testing::ChildProcess fleet(
      {testing::binaryPath("nodeagent").string(), "hollow-fleet",
       "--nodes=" + std::to_string(nodes), "--fleet-dir=" + (dir / "fleet").string(),
       "--name-prefix=" + std::string(kPrefix),
       "--bootstrap-kubeconfig=" + cluster.bootstrapKubeconfig().string(), "--node-ip=127.0.0.1",
       "--max-pods=" + std::to_string(per_node + 10), "--kube-api-qps=" + qps},
      dir / "fleet.out", dir / "fleet.err");
  const bool ready = testing::eventually([&] { return cluster.readyNodes() == nodes; },
                                         std::chrono::seconds(600), kPollInterval);
  std::printf("nodes=%d pods_per_node=%d kube_api_qps=%s (per node)\n", nodes, per_node,
              qps.c_str());
  std::printf("all_nodes_ready=%s time_to_all_ready_s=%.2f\n", ready ? "yes" : "no",
              secondsSince(t0));
  if (!ready) {
    std::fprintf(stderr, "%s", fleet.err().c_str());
    return 1;
  }
  const auto t1 = Clock::now();
  for (int n = 0; n < nodes; ++n) {
    for (int i = 0; i < per_node; ++i)
      (void)server.store().create("pods", "default", podJson(n, i));
  }
  const int pods = nodes * per_node;
  const bool all = testing::eventually([&] { return cluster.runningPods() == pods; },
                                       std::chrono::seconds(900), kPollInterval);
  std::printf("pods=%d all_running=%s time_to_all_running_s=%.2f\n", pods, all ? "yes" : "no",
              secondsSince(t1));

  waitFor(15);  // trailing statuses (Ready) and events settle
  server.clearRequests();
  const double cpu0 = cpuSeconds(fleet.pid());
  const auto s0 = Clock::now();
  waitFor(steady);
  const double window = secondsSince(s0);
  const double cpu = cpuSeconds(fleet.pid()) - cpu0;
  const auto reqs = server.requests();
  std::map<std::string, int> writes;
  std::map<std::string, int> reads;
  for (const auto& r : reqs) {
    (r.method == "GET" ? reads : writes)[bench::requestKind(r)]++;
  }
  int total_writes = 0;
  for (const auto& [k, n] : writes) total_writes += n;
  const double per_node_minute = 60.0 / window / nodes;
  std::printf("steady_window_s=%.1f writes_per_node_per_min=%.2f\n", window,
              total_writes * per_node_minute);
  for (const auto& [k, n] : writes)
    std::printf("  write %s: %.2f/node/min\n", k.c_str(), n * per_node_minute);
  for (const auto& [k, n] : reads)
    std::printf("  read %s: %.2f/node/min\n", k.c_str(), n * per_node_minute);
  std::printf("open_watches=%zu watches_per_node=%.2f\n", server.openWatches(),
              static_cast<double>(server.openWatches()) / nodes);
  const long rss = rssKb(fleet.pid());
  std::printf("fleet_rss_mib=%.1f rss_per_node_kib=%.0f\n", rss / 1024.0,
              static_cast<double>(rss) / nodes);
  std::printf("fleet_idle_cpu_pct_of_core=%.2f per_node_pct=%.4f\n", 100 * cpu / window,
              100 * cpu / window / nodes);
  fleet.signal(SIGTERM);
  const bool exited = fleet.wait(std::chrono::seconds(60)).has_value();
  std::printf("fleet_stopped=%s\n", exited ? "yes" : "no");
  server.stop();
  return all && exited ? 0 : 1;
}
