// Status sync figures: the nodeagent binary (--runtime=fake, or process) joined to the in-process
// test apiserver, with 1,000 API pods created for its node at once:
//  - time until every pod is Running in the apiserver, beside the goal (pods x writes per pod /
//    QPS + 1 s);
//  - pod status PATCH requests per pod start (goal: at most 1.2);
//  - apiserver requests per second from the idle node afterwards (goal: lease and node status
//    only), by kind.
// Run: build/bench/status_bench [pods] [kube-api-qps] [fake|process]   (one figure per line)
// NODEAGENT_BENCH_BINARY names another nodeagent binary to run (e.g. an older build to compare).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/test_api_server.h"
#include "test/bench/request_kinds.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/test_util.h"

using nlohmann::json;
using namespace nodeagent;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kNode[] = "bench-node";

json podJson(int i) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", "p" + std::to_string(i)}, {"namespace", "default"}}},
          {"spec",
           {{"nodeName", kNode},
            // Not root: the process runtime refuses API pods that would run as root. The working
            // directory is one user 65534 may enter (the pod's directory under the bench's root is
            // not).
            {"securityContext", {{"runAsUser", 65534}}},
            {"containers",
             {{{"name", "c"},
               {"image", "busybox"},
               {"command", {"sleep", "3600"}},
               {"workingDir", "/"}}}}}}};
}

int countRunning(testapiserver::TestApiServer& server) {
  auto list = server.store().listJson("pods", "default", {});
  if (!list.ok()) return 0;
  int n = 0;
  for (const auto& p : (*list)["items"]) {
    if (p["status"].value("phase", "") == "Running") ++n;
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int pods = argc > 1 ? std::atoi(argv[1]) : 1000;
  const std::string qps = argc > 2 ? argv[2] : "50";
  const std::string runtime = argc > 3 ? argv[3] : "fake";
  const char* binary_env = std::getenv("NODEAGENT_BENCH_BINARY");
  const std::string binary = binary_env != nullptr && *binary_env != '\0'
                                 ? std::string(binary_env)
                                 : testing::binaryPath("nodeagent").string();
  testing::TempDir dir("nodeagent-status-bench");
  testapiserver::ServerOptions opts;
  auto started = testapiserver::TestApiServer::start(opts);
  if (!started.ok()) {
    std::fprintf(stderr, "start failed: %s\n", started.status().toString().c_str());
    return 1;
  }
  auto server = std::move(*started);
  (void)server->writeKubeconfig(dir / "kubeconfig");
  testing::ChildProcess agent(
      {binary, "--kubeconfig=" + (dir / "kubeconfig").string(),
       "--hostname-override=" + std::string(kNode), "--node-ip=127.0.0.1", "--runtime=" + runtime,
       "--root-dir=" + (dir / "root").string(), "--pod-log-dir=" + (dir / "logs").string(),
       "--read-only-port=0", "--port=0", "--healthz-port=0",
       "--max-pods=" + std::to_string(pods + 10), "--kube-api-qps=" + qps, "--kube-api-burst=100"},
      dir / "agent.out", dir / "agent.err");
  if (!testing::eventually([&] { return server->store().get("nodes", "", kNode).ok(); },
                           std::chrono::seconds(30))) {
    std::fprintf(stderr, "node did not register\n%s", agent.err().c_str());
    return 1;
  }
  server->clearRequests();
  const auto t0 = Clock::now();
  for (int i = 0; i < pods; ++i) (void)server->store().create("pods", "default", podJson(i));
  const bool all =
      testing::eventually([&] { return countRunning(*server) == pods; }, std::chrono::seconds(600));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("pods=%d kube_api_qps=%s runtime=%s\n", pods, qps.c_str(), runtime.c_str());
  std::printf("all_running=%s time_to_all_running_s=%.2f\n", all ? "yes" : "no", secs);
  // Let the trailing statuses (Ready etc.) settle before counting.
  const auto settle_end = Clock::now() + std::chrono::seconds(12);
  testing::eventually([&] { return Clock::now() >= settle_end; }, std::chrono::seconds(13));
  size_t patches = 0;
  for (const auto& r : server->requests()) {
    if (r.method == "PATCH" && r.path.ends_with("/status") &&
        r.path.find("/pods/") != std::string::npos) {
      ++patches;
    }
  }
  const double per_pod = static_cast<double>(patches) / pods;
  std::printf("pod_status_patches=%zu patches_per_pod_start=%.2f\n", patches, per_pod);
  // The goal for the time to all Running: the writes at the QPS limit, and one second.
  std::printf("goal_time_to_all_running_s=%.2f (pods x writes per pod / qps + 1)\n",
              pods * per_pod / std::atof(qps.c_str()) + 1.0);

  server->clearRequests();
  const int idle_secs = 30;
  const auto idle_end = Clock::now() + std::chrono::seconds(idle_secs);
  testing::eventually([&] { return Clock::now() >= idle_end; },
                      std::chrono::seconds(idle_secs + 1));
  auto reqs = server->requests();
  std::map<std::string, int> by_kind;
  for (const auto& r : reqs) ++by_kind[bench::requestKind(r)];
  std::printf("idle_requests_per_s=%.2f over %ds\n", static_cast<double>(reqs.size()) / idle_secs,
              idle_secs);
  for (const auto& [k, n] : by_kind) std::printf("  idle %s: %d\n", k.c_str(), n);
  agent.signal(SIGTERM);
  agent.wait(std::chrono::seconds(10));
  if (runtime == "process") {
    // The agent leaves its containers running when it stops: stop them with the root dir.
    auto stopped = testing::runCommand(
        {binary, "stop-all", "--root-dir=" + (dir / "root").string(), "--grace=5s"}, dir,
        std::chrono::seconds(120));
    if (stopped.exit_code != 0) std::fprintf(stderr, "stop-all failed: %s", stopped.err.c_str());
  }
  server->stop();
  return all ? 0 : 1;
}
