// Resource management end to end: the daemon (process runtime) puts pods into kubelet's QoS
// cgroups on this machine's real cgroupfs, with their limits, reports an OOM kill as kubelet
// does, keeps limits across an agent restart and removes pod cgroups when pods go. Each daemon
// has a cgroup root of its own (test/support/cgroup_root.h), removed when the test ends.
#include <unistd.h>

#include <fstream>
#include <string>

#include "agent/cm/cgroup_manager.h"
#include "test/e2e/daemon_fixture.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/skip.h"

using namespace nodeagent;
using namespace nodeagent::e2e;
using namespace std::chrono_literals;

namespace {

// The cgroup managers of this machine, or a skip when cgroups cannot be written here.
cm::CgroupManager realCgroups() {
  if (::geteuid() != 0) testing::skipTest("needs root to write cgroups");
  auto mounts = cm::detectCgroupMounts();
  if (!mounts.ok()) testing::skipTest("no cgroup hierarchy: " + mounts.status().message());
  return cm::CgroupManager(std::move(*mounts));
}

// A pod running `sh -c script marker` with the given resources block (YAML, indented for a
// container) and restart policy.
std::string resourcePod(const std::string& name, const std::string& marker,
                        const std::string& script, const std::string& resources,
                        const std::string& restart = "Always") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  restartPolicy: " + restart +
         "\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: "
         "debian:12\n    command: [\"/bin/sh\", \"-c\", " +
         quoteYaml(script) + ", " + quoteYaml(marker) + "]\n" + resources;
}

const std::string kGuaranteed =
    "    resources:\n      requests: {cpu: 100m, memory: 64Mi}\n      limits: {cpu: 100m, "
    "memory: 64Mi}\n";
const std::string kBurstable = "    resources:\n      requests: {cpu: 50m}\n";

// The cgroup (as a path below the hierarchy's root) `pid` is in for `controller`, from
// /proc/<pid>/cgroup; "" when not found.
std::string cgroupOf(int pid, const std::string& controller) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "4:memory:/path" (v1) or "0::/path" (v2)
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    if (controllers.empty() ||
        ("," + controllers + ",").find("," + controller + ",") != std::string::npos) {
      return line.substr(second + 1);
    }
  }
  return "";
}

std::string podUid(const Daemon& d, const std::string& name) {
  auto p = d.pod(name);
  return p ? (*p)["metadata"].value("uid", "") : "";
}

std::string readTrimmed(const std::filesystem::path& p) {
  auto text = readOr(p);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// The directory of cgroup `path` holding `file` (v1: the controller's hierarchy; v2: the one).
std::filesystem::path cgroupDir(const cm::CgroupManager& cgroups, const std::string& path,
                                const std::string& controller) {
  return cgroups.paths(cm::parseCgroupPath(path)).dirFor(controller);
}

}  // namespace

TEST_CASE("pods run in kubelet's QoS cgroups with their limits, and their cgroups go with them",
          "[e2e][cgroups]") {
  auto cgroups = realCgroups();
  Daemon d;
  d.start();
  const auto mg = marker("qos-guaranteed");
  const auto mb = marker("qos-burstable");
  const auto me = marker("qos-besteffort");
  d.writeManifest("g.yaml", resourcePod("g", mg, "sleep 1000", kGuaranteed));
  d.writeManifest("b.yaml", resourcePod("b", mb, "sleep 1000", kBurstable));
  d.writeManifest("e.yaml", resourcePod("e", me, "sleep 1000", ""));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("g") && d.running("b") && d.running("e"); }, 20s);
  const std::string root = d.cgroupRoot();
  const struct {
    std::string name, marker, parent;
  } pods[] = {{"g", mg, root + "/kubepods/pod" + podUid(d, "g")},
              {"b", mb, root + "/kubepods/burstable/pod" + podUid(d, "b")},
              {"e", me, root + "/kubepods/besteffort/pod" + podUid(d, "e")}};
  for (const auto& p : pods) {
    INFO(p.name);
    const int pid = onePid(p.marker);
    REQUIRE(pid != 0);
    // The container's own cgroup, under its pod's, in every controller.
    for (const char* controller : {"memory", "cpu", "pids"}) {
      const auto in = cgroupOf(pid, controller);
      CHECK(in.rfind(p.parent + "/", 0) == 0);
    }
  }
  // Guaranteed: memory and CPU limited at the pod and the container.
  const auto g_pod = pods[0].parent;
  CHECK(readTrimmed(cgroupDir(cgroups, g_pod, "memory") / "memory.limit_in_bytes") == "67108864");
  CHECK(readTrimmed(cgroupDir(cgroups, g_pod, "cpu") / "cpu.cfs_quota_us") == "10000");
  CHECK(readTrimmed(cgroupDir(cgroups, g_pod, "cpu") / "cpu.shares") == "102");
  const auto g_container = cgroupOf(onePid(mg), "memory");
  CHECK(readTrimmed(cgroupDir(cgroups, g_container, "memory") / "memory.limit_in_bytes") ==
        "67108864");
  // Burstable: 50m of CPU as shares, no memory limit; the QoS cgroup follows its pods.
  CHECK(readTrimmed(cgroupDir(cgroups, pods[1].parent, "cpu") / "cpu.shares") == "51");
  CHECK(readTrimmed(cgroupDir(cgroups, root + "/kubepods/burstable", "cpu") / "cpu.shares") ==
        "51");
  CHECK(readTrimmed(cgroupDir(cgroups, root + "/kubepods/besteffort", "cpu") / "cpu.shares") ==
        "2");

  // kubepods holds the node allocatable (nothing reserved here: the node's memory).
  const std::string meminfo = testing::readFile("/proc/meminfo");
  const int64_t total = std::stoll(meminfo.substr(meminfo.find("MemTotal:") + 9)) * 1024;
  CHECK(readTrimmed(cgroupDir(cgroups, root + "/kubepods", "memory") / "memory.limit_in_bytes") ==
        std::to_string(total / 4096 * 4096));
  CHECK_THAT(d.get("/metrics").value_or(""), Catch::Contains("\nnodeagent_cgroups_enforced 1\n"));
  CHECK_THAT(d.get("/healthz?verbose").value_or(""), Catch::Contains("[+]cgroups ok"));
  // /stats/summary: the node and each pod with its cgroup's memory.
  json summary;
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto body = d.get("/stats/summary");
        if (!body) return false;
        summary = json::parse(*body, nullptr, false);
        if (!summary.is_object() || !summary.contains("pods")) return false;
        for (const auto& p : summary["pods"]) {
          if (p["podRef"].value("name", "") == "g-" + std::string(kNode) && p.contains("memory") &&
              p["memory"].contains("workingSetBytes")) {
            return true;
          }
        }
        return false;
      },
      30s);
  CHECK(summary["node"].value("nodeName", "") == kNode);
  CHECK(summary["node"]["memory"].value("availableBytes", int64_t{0}) > 0);
  CHECK(summary["node"]["fs"].value("capacityBytes", int64_t{0}) > 0);

  for (const char* file : {"g.yaml", "b.yaml", "e.yaml"}) d.removeManifest(file);
  for (const auto& p : pods) {
    INFO(p.name);
    REQUIRE_EVENTUALLY(
        d,
        [&] {
          return onePid(p.marker) == 0 &&
                 !std::filesystem::exists(cgroupDir(cgroups, p.parent, "memory"));
        },
        20s);
  }
}

TEST_CASE(
    "a container killed by the kernel's OOM killer is OOMKilled with exit code 137 and restarts, "
    "and its sibling keeps running",
    "[e2e][cgroups]") {
  realCgroups();
  Daemon d;
  d.start();
  const auto sibling = marker("oom-sibling");
  d.writeManifest("sibling.yaml", resourcePod("sibling", sibling, "sleep 1000", kGuaranteed));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("sibling"); }, 20s);
  const int sibling_pid = onePid(sibling);
  // `tail -n 1` keeps the whole (newline-free) input in memory: 200 MB against a 32 MiB limit.
  d.writeManifest("hog.yaml",
                  resourcePod("hog", marker("oom-hog"), "head -c 200000000 /dev/zero | tail -n 1",
                              "    resources:\n      limits: {memory: 32Mi}\n"));
  json last;
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("hog");
        if (!cs || cs->value("restartCount", 0) < 1) return false;
        last = (*cs)["lastState"];
        return last.contains("terminated");
      },
      40s);
  INFO(last.dump());
  CHECK(last["terminated"].value("reason", "") == "OOMKilled");
  CHECK(last["terminated"].value("exitCode", 0) == 137);
  CHECK(onePid(sibling) == sibling_pid);
  CHECK(d.running("sibling"));
}

TEST_CASE(
    "after kill -9 of the agent and a restart, limits still hold and nothing is started twice",
    "[e2e][cgroups]") {
  auto cgroups = realCgroups();
  Daemon d;
  d.start();
  const auto m = marker("restart-limits");
  d.writeManifest("g.yaml", resourcePod("g", m, "sleep 1000", kGuaranteed));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("g"); }, 20s);
  const int pid = onePid(m);
  const std::string container_cgroup = cgroupOf(pid, "memory");
  const std::string pod_cgroup = d.cgroupRoot() + "/kubepods/pod" + podUid(d, "g");
  REQUIRE(container_cgroup.rfind(pod_cgroup + "/", 0) == 0);

  CHECK(d.stop(SIGKILL) == 128 + SIGKILL);
  d.start();
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("g"); }, 20s);
  // The container is adopted, not started again: watched through a few syncs and a housekeeping
  // pass.
  REQUIRE_FALSE(testing::eventually([&] { return onePid(m) != pid; }, 5s));
  CHECK(cgroupOf(pid, "memory") == container_cgroup);
  CHECK(readTrimmed(cgroupDir(cgroups, pod_cgroup, "memory") / "memory.limit_in_bytes") ==
        "67108864");
  CHECK(readTrimmed(cgroupDir(cgroups, container_cgroup, "memory") / "memory.limit_in_bytes") ==
        "67108864");
  // One container cgroup under the pod's, holding the one process.
  CHECK(cgroups.children(cm::parseCgroupPath(pod_cgroup)).size() == 1);
  // The container's processes (the shell and its sleep) and nothing else.
  const auto in_cgroup = cgroups.pids(cm::parseCgroupPath(container_cgroup));
  CHECK(std::find(in_cgroup.begin(), in_cgroup.end(), pid) != in_cgroup.end());
  for (int p : in_cgroup) {
    auto st = runtime::readProcStat(p);
    CHECK((p == pid || (st && st->ppid == pid)));
  }
  CHECK(pidsWithArg(m).size() == 1);
}

TEST_CASE("a second agent on the same cgroup root refuses to start and harms nothing",
          "[e2e][cgroups][safety]") {
  realCgroups();
  Daemon first;
  first.start();
  const auto m = marker("cgroup-root-lock");
  first.writeManifest("web.yaml", resourcePod("web", m, "sleep 1000", ""));
  REQUIRE_EVENTUALLY(
      first, [&] { return first.running("web"); }, 20s);
  const int pid = onePid(m);

  testing::TempDir other("e2e-cgroup-lock");
  std::filesystem::create_directories(other / "manifests");
  auto second = testing::runCommand(
      {testing::binaryPath("nodeagent").string(),
       "--pod-manifest-path=" + (other / "manifests").string(),
       "--root-dir=" + (other / "root").string(), "--pod-log-dir=" + (other / "logs").string(),
       "--read-only-port=0", "--port=0", "--healthz-port=0", "--cgroup-root=" + first.cgroupRoot()},
      other, 15s);
  INFO("second agent stderr:\n" << second.err);
  REQUIRE(second.exit_code.has_value());
  CHECK(*second.exit_code != 0);
  CHECK_THAT(second.err, Catch::Contains("--cgroup-root " + first.cgroupRoot()));
  CHECK_THAT(second.err, Catch::Contains("pid " + std::to_string(first.pid())));
  CHECK(alive(pid));
  CHECK(first.running("web"));
}

TEST_CASE("a pod under --pod-max-pids is held at its processes limit and the node keeps working",
          "[e2e][cgroups]") {
  auto cgroups = realCgroups();
  Daemon d;
  d.start({"--pod-max-pids=64"});
  const auto m = marker("pids-limit");
  // 200 processes asked for (bounded even if the limit failed) by a subshell, which dies when a
  // fork fails past 64; the container's main process (the marked shell) waits on.
  d.writeManifest("forks.yaml",
                  resourcePod("forks", m,
                              "sleep 1000 & (i=0; while [ $i -lt 200 ]; do sleep 1000 & "
                              "i=$((i+1)); done) & wait",
                              ""));
  REQUIRE_EVENTUALLY(
      d, [&] { return onePid(m) != 0; }, 20s);
  const std::string pod_cgroup = d.cgroupRoot() + "/kubepods/besteffort/pod" + podUid(d, "forks");
  const auto pids_dir = cgroupDir(cgroups, pod_cgroup, "pids");
  CHECK(readTrimmed(pids_dir / "pids.max") == "64");
  // The loop reaches the limit (pids.peak where the kernel has it), never more than 64.
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        const auto peak = readTrimmed(pids_dir / "pids.peak");
        return peak == "64" || (peak.empty() && readTrimmed(pids_dir / "pids.current") == "63");
      },
      20s);
  CHECK(std::stoi(readTrimmed(pids_dir / "pids.current")) <= 64);
  CHECK(std::stoi(readTrimmed(pids_dir / "pids.current")) >= 60);
  CHECK(cgroups.pids(cm::parseCgroupPath(pod_cgroup)).size() <= 64);
  CHECK(onePid(m) != 0);  // the container itself still runs
  // The node still forks, and another pod still starts.
  const auto other = marker("pids-other");
  d.writeManifest("other.yaml", resourcePod("other", other, "sleep 1000", ""));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("other"); }, 20s);
  d.removeManifest("forks.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return !std::filesystem::exists(pids_dir); }, 20s);
}

TEST_CASE("an agent whose runtime runs no processes says limits are not enforced",
          "[e2e][cgroups]") {
  Daemon d;
  d.start({"--runtime=fake"});
  CHECK_THAT(d.get("/metrics").value_or(""), Catch::Contains("\nnodeagent_cgroups_enforced 0\n"));
  const auto verbose = d.get("/healthz?verbose").value_or("");
  CHECK_THAT(verbose, Catch::Contains("[-]cgroups resource limits are not enforced: the fake "
                                      "runtime runs no processes (informational"));
  CHECK_THAT(verbose, Catch::Contains("healthz check passed"));
  CHECK_THAT(d.logTail(), Catch::Contains("Resource limits are not enforced"));
}

TEST_CASE(
    "resource settings in the configuration file: a kubeadm cgroupDriver is a warning, an "
    "unsupported enforceNodeAllocatable or a bad --cgroup-root is an error naming it",
    "[e2e][cgroups][config]") {
  Daemon d;
  const std::string head =
      "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
  testing::writeFile(d.dir() / "config.yaml",
                     head +
                         "cgroupDriver: systemd\nenforceNodeAllocatable: [pods]\n"
                         "podPidsLimit: 0\nevictionHard:\n  memory.available: 50Mi\n"
                         "kubeReserved:\n  memory: 64Mi\n");
  d.start({"--config=" + (d.dir() / "config.yaml").string(), "--runtime=fake"});
  CHECK_THAT(d.logTail(), Catch::Contains("cgroupDriver: systemd"));

  testing::TempDir dir("e2e-resource-config");
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(),
                {testing::binaryPath("nodeagent").string(), "--root-dir=" + (dir / "root").string(),
                 "--runtime=fake", "--read-only-port=0", "--port=0", "--healthz-port=0", "--allow-no-sources"});
    return testing::runCommand(args, dir, 15s);
  };
  testing::writeFile(dir / "config.yaml", head + "enforceNodeAllocatable: [pods, kube-reserved]\n");
  auto reserved = run({"--config=" + (dir / "config.yaml").string()});
  REQUIRE(reserved.exit_code.has_value());
  CHECK(*reserved.exit_code == 2);
  CHECK_THAT(reserved.err, Catch::Contains("config.yaml:3: enforceNodeAllocatable") &&
                               Catch::Contains("kube-reserved"));
  auto bad_root = run({"--cgroup-root=/a/../b"});
  REQUIRE(bad_root.exit_code.has_value());
  CHECK(*bad_root.exit_code == 2);
  CHECK_THAT(bad_root.err, Catch::Contains("--cgroup-root"));
  auto bad_eviction = run({"--eviction-hard=memory.available<lots"});
  REQUIRE(bad_eviction.exit_code.has_value());
  CHECK(*bad_eviction.exit_code == 2);
  CHECK_THAT(bad_eviction.err, Catch::Contains("--eviction-hard"));
}
