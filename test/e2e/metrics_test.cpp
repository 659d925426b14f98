// /metrics of a running agent: kubelet's metric names where kubelet has the measure, the
// process_* metrics, and a format `promtool check metrics` accepts (Skipped without promtool;
// deploy/install-deps.sh installs it).
#include <unistd.h>

#include "test/e2e/daemon_fixture.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/skip.h"

using namespace nodeagent;
using namespace nodeagent::e2e;
using namespace std::chrono_literals;

namespace {

// The value of the sample line starting with `series` ("name" or "name{labels}"), if any.
std::optional<double> sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0)
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
  }
  return std::nullopt;
}

// Starts `d` with a running pod and a broken manifest; its /metrics once the pod counts.
std::string metricsWithRunningPod(Daemon& d) {
  d.writeManifest("web.yaml", shPod("web", marker("metrics-web"), "sleep 1000 & wait"));
  d.writeManifest("broken.yaml", "kind: Pod\nmetadata: [\n");
  d.start();
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 20s);
  std::string text;
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto got = d.get("/metrics");
        if (!got) return false;
        text = *got;
        return sample(text, "kubelet_running_pods").value_or(0) >= 1;
      },
      30s);
  return text;
}

}  // namespace

TEST_CASE("daemon /metrics has kubelet's names and the process_* metrics",
          "[e2e][daemon][metrics]") {
  Daemon d;
  const std::string text = metricsWithRunningPod(d);
  INFO(text);
  CHECK(sample(text, "kubelet_node_name{node=\"" + std::string(kNode) + "\"}") == 1);
  CHECK(sample(text, "kubelet_running_containers{container_state=\"running\"}").value_or(0) >= 1);
  CHECK(sample(text, "kubelet_pod_start_duration_seconds_count").value_or(0) >= 1);
  CHECK(sample(text, "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"}")
            .value_or(0) >= 1);
  CHECK(sample(text, "kubelet_pleg_relist_duration_seconds_count").value_or(0) >= 1);
  CHECK(sample(text, "kubelet_runtime_operations_total{operation_type=\"start_container\"}")
            .value_or(0) >= 1);
  CHECK(sample(text, "kubelet_runtime_operations_total{operation_type=\"container_status\"}")
            .value_or(0) >= 1);
  CHECK(sample(text,
               "kubelet_runtime_operations_errors_total{operation_type=\"start_container\"}") == 0);
  CHECK(sample(text, "process_resident_memory_bytes").value_or(0) > 1e6);
  CHECK(sample(text, "process_open_fds").value_or(0) > 3);
  CHECK(sample(text, "process_start_time_seconds").value_or(0) > 1.5e9);
  CHECK(text.find("nodeagent_manifest_errors{") != std::string::npos);
  CHECK(text.find("_duration_seconds_sum counter") == std::string::npos);
}

TEST_CASE("daemon /metrics passes promtool check metrics", "[e2e][daemon][metrics]") {
  bool have_promtool = false;
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
    have_promtool = have_promtool || ::access((fs::path(dir) / "promtool").c_str(), X_OK) == 0;
  }
  if (!have_promtool)
    testing::skipTest("promtool is not installed (deploy/install-deps.sh installs it)");
  Daemon d;
  const std::string text = metricsWithRunningPod(d);
  INFO(text);
  testing::TempDir dir("nodeagent-e2e-metrics");
  testing::writeFile(dir / "metrics.txt", text);
  auto r = testing::runCommand(
      {"sh", "-c", "promtool check metrics < '" + (dir / "metrics.txt").string() + "'"}, dir, 60s);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code);
  CHECK(*r.exit_code == 0);
}
