// CgroupManager, killCgroup and ContainerManager against the machine's real cgroup hierarchy,
// below a cgroup root of the test's own ("/nodeagent-test-<pid>-<random>"), removed by a scope
// guard whatever happens. Needs root and a writable cgroupfs; skipped otherwise.
//
// On a v1 machine (controllers on their own hierarchies, as on the test machines) this covers v1
// only: the cgroup v2 paths (subtree_control, memory.max, cpu.weight, cpu.max, cgroup.kill,
// memory.events) are covered by the unit tests against a fake cgroupfs. On a v2 machine the same
// tests run the v2 driver.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/cm/cgroup_fs.h"
#include "agent/cm/cgroup_manager.h"
#include "agent/cm/container_manager.h"
#include "test/support/pod_builder.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

extern char** environ;

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// Mounts when this machine lets the test make cgroups; otherwise skips the test case. Call it
// first thing.
cm::CgroupMounts requireWritableCgroups() {
  if (::geteuid() != 0) testing::skipTest("needs root to make cgroups");
  auto mounts = cm::detectCgroupMounts();
  if (!mounts.ok()) testing::skipTest("no cgroup hierarchy: " + mounts.status().toString());
  if (mounts->version == cm::CgroupVersion::kV1 && !mounts->v1_roots.contains("memory")) {
    testing::skipTest("no cgroup v1 memory hierarchy");
  }
  const std::string probe_root = mounts->version == cm::CgroupVersion::kV2
                                     ? mounts->unified_root
                                     : mounts->v1_roots.at("memory");
  const std::string probe = probe_root + "/nodeagent-probe-" + std::to_string(::getpid());
  std::error_code ec;
  if (!fs::create_directory(probe, ec) || ec) {
    testing::skipTest("the cgroupfs is not writable: " + probe + ": " + ec.message());
  }
  fs::remove(probe, ec);
  return *mounts;
}

std::string uniqueRoot() {
  std::random_device rd;
  return "nodeagent-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000);
}

// Destroys the test's cgroup root (and everything in it) on every way out of the test case.
struct RootGuard {
  cm::CgroupManager& cgroups;
  cm::CgroupName root;
  ~RootGuard() {
    auto s = cgroups.destroy(root);
    if (!s.ok()) WARN("cleanup of " << cm::cgroupNameToPath(root) << ": " << s.toString());
  }
};

// Writes "echo $$ > <dir>/cgroup.procs" for each of the cgroup's directories: the script joins
// the cgroup before it runs anything else.
std::string joinScript(const cm::CgroupPaths& paths) {
  std::string s;
  for (const auto& dir : paths.dirs()) s += "echo $$ > '" + dir + "/cgroup.procs' || exit 99; ";
  return s;
}

pid_t spawnSh(const std::string& script) {
  pid_t pid = -1;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  int rc =
      ::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ);
  REQUIRE(rc == 0);
  return pid;
}

// Waits for `pid` (our child) with a deadline; its wait status, or -1 on timeout.
int waitChild(pid_t pid, std::chrono::milliseconds deadline) {
  int status = -1;
  bool done = testing::eventually(
      [&] {
        int st = 0;
        pid_t r = ::waitpid(pid, &st, WNOHANG);
        if (r == pid) status = st;
        return r == pid || (r < 0 && errno == ECHILD);
      },
      deadline);
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return status;
}

// Gone, or a zombie waiting for its parent (init) to reap it.
bool deadProcess(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z' ||
         line[close + 2] == 'X';
}

}  // namespace

TEST_CASE("cgroups (real): create with limits and read them back, stats, destroy",
          "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  cm::CgroupManager cgroups(mounts);
  RootGuard guard{cgroups, {uniqueRoot()}};
  const cm::CgroupName name{guard.root[0], "limits"};

  cm::ResourceConfig config;
  config.memory_limit = 64 * 1024 * 1024;
  config.cpu_shares = 512;
  config.cpu_quota = 50000;
  config.cpu_period = 100000;
  config.pids_limit = 100;
  REQUIRE(cgroups.create(name, config).ok());
  CHECK(cgroups.exists(name));
  for (const auto& dir : cgroups.paths(name).dirs()) {
    CHECK(cm::onCgroupFs(dir));
    CHECK(fs::is_directory(dir));
  }
  auto back = cgroups.readConfig(name);
  REQUIRE(back.ok());
  CHECK(back->memory_limit == config.memory_limit);
  if (cgroups.version() == cm::CgroupVersion::kV1) {
    CHECK(back->cpu_shares == config.cpu_shares);
  } else {
    CHECK(cm::cpuSharesToWeight(*back->cpu_shares) == cm::cpuSharesToWeight(512));
  }
  CHECK(back->cpu_quota == config.cpu_quota);
  CHECK(back->cpu_period == config.cpu_period);
  if (mounts.version == cm::CgroupVersion::kV2 || mounts.v1_roots.contains("pids")) {
    CHECK(back->pids_limit == config.pids_limit);
  }

  cm::ResourceConfig unlimit;
  unlimit.memory_limit = -1;
  unlimit.cpu_quota = -1;
  unlimit.pids_limit = -1;
  REQUIRE(cgroups.update(name, unlimit).ok());
  back = cgroups.readConfig(name);
  REQUIRE(back.ok());
  CHECK(back->memory_limit == std::optional<int64_t>(-1));
  CHECK(back->cpu_quota == std::optional<int64_t>(-1));

  // A process that did some work: usage and pids are counted.
  const auto paths = cgroups.paths(name);
  pid_t pid = spawnSh(joinScript(paths) +
                      "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec sleep 30");
  REQUIRE(testing::eventually([&] { return cgroups.pids(name).size() == 1; }, 5s));
  // The shell joins one controller's directory after another (cgroup v1): on a busy machine it
  // can be counted by one controller and not yet by the next. Wait until every controller
  // counts it.
  REQUIRE(testing::eventually(
      [&] {
        auto st = cgroups.stats(name);
        return st.ok() && st->cpu_usage_nanos.value_or(0) > 0 &&
               st->memory_usage_bytes.value_or(0) > 0 && st->pids_current.value_or(1) == 1;
      },
      5s));
  auto st = cgroups.stats(name);
  REQUIRE(st.ok());
  CHECK(st->memory_usage_bytes.value_or(0) > 0);
  CHECK(st->memory_usage_bytes.value_or(0) < (uint64_t{1} << 30));
  CHECK(st->memory_working_set_bytes.value_or(UINT64_MAX) <= *st->memory_usage_bytes);
  CHECK(st->memory_rss_bytes.has_value());
  if (st->pids_current) CHECK(*st->pids_current == 1);
  CHECK(st->oom_kills.value_or(0) == 0);

  REQUIRE(cgroups.destroy(name).ok());
  CHECK(waitChild(pid, 5s) != -1);
  CHECK_FALSE(cgroups.exists(name));
  for (const auto& dir : paths.dirs()) CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("cgroups (real): destroy kills double-forked, setsid and forking processes",
          "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  cm::CgroupManager cgroups(mounts);
  RootGuard guard{cgroups, {uniqueRoot()}};
  const cm::CgroupName pod{guard.root[0], "podkill"};
  const cm::CgroupName ctr{guard.root[0], "podkill", "ctr"};
  cm::ResourceConfig bounded;
  bounded.pids_limit = 64;  // the forking loop below stays small
  REQUIRE(cgroups.create(pod, bounded).ok());
  REQUIRE(cgroups.create(ctr, {}).ok());

  // In the container cgroup: a daemon that double-forks into a new session, and a loop that keeps
  // forking; the script itself waits.
  pid_t pid = spawnSh(joinScript(cgroups.paths(ctr)) +
                      "( setsid sh -c 'sleep 300 & exec sleep 300' & ) ; "
                      "( while :; do sleep 300 & sleep 0.01; done ) & "
                      "exec sleep 300");
  REQUIRE(testing::eventually([&] { return cgroups.pids(pod).size() >= 6; }, 5s));
  const auto seen = cgroups.pids(pod);

  REQUIRE(cgroups.destroy(pod).ok());
  CHECK_FALSE(cgroups.exists(pod));
  CHECK(waitChild(pid, 5s) != -1);
  CHECK(testing::eventually(
      [&] {
        for (int p : seen) {
          if (!deadProcess(p)) return false;
        }
        return true;
      },
      5s));
  // destroy twice: nothing to do.
  CHECK(cgroups.destroy(pod).ok());
}

TEST_CASE("cgroups (real): killCgroup empties a cgroup that stays", "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  cm::CgroupManager cgroups(mounts);
  RootGuard guard{cgroups, {uniqueRoot()}};
  const cm::CgroupName name{guard.root[0], "k"};
  REQUIRE(cgroups.create(name, {}).ok());
  const auto paths = cgroups.paths(name);
  pid_t pid = spawnSh(joinScript(paths) + "( setsid sleep 300 & ) ; sleep 300 & exec sleep 300");
  // The three sleeps, once the subshell that started one of them is gone.
  REQUIRE(testing::eventually(
      [&] {
        const auto pids = cgroups.pids(name);
        return pids.size() == 3 && std::all_of(pids.begin(), pids.end(), [](int p) {
                 return testing::readFile("/proc/" + std::to_string(p) + "/comm") == "sleep\n";
               });
      },
      5s));
  std::string error;
  CHECK(cm::killCgroup(paths, error) >= 3);
  CHECK(error.empty());
  CHECK(waitChild(pid, 5s) != -1);
  CHECK(testing::eventually([&] { return cgroups.pids(name).empty(); }, 5s));
  CHECK(cgroups.exists(name));
  if (!mounts.v1_roots.empty() && mounts.v1_roots.contains("freezer")) {
    // The freezer was thawed again.
    CHECK(testing::readFile(paths.dirFor("freezer") + "/freezer.state").rfind("THAWED", 0) == 0);
  }
}

TEST_CASE(
    "cgroups (real): destroy kills processes of a child cgroup left frozen (a shim killed in the "
    "middle of its own kill)",
    "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  if (!mounts.v1_roots.contains("freezer")) testing::skipTest("no v1 freezer hierarchy");
  cm::CgroupManager cgroups(mounts);
  RootGuard guard{cgroups, {uniqueRoot()}};
  const cm::CgroupName pod{guard.root[0], "podfrozen"};
  const cm::CgroupName ctr{guard.root[0], "podfrozen", "ctr"};
  REQUIRE(cgroups.create(pod, {}).ok());
  REQUIRE(cgroups.create(ctr, {}).ok());
  pid_t pid = spawnSh(joinScript(cgroups.paths(ctr)) + "exec sleep 300");
  REQUIRE(testing::eventually([&] { return cgroups.pids(ctr).size() == 1; }, 5s));
  const std::string state = cgroups.paths(ctr).dirFor("freezer") + "/freezer.state";
  testing::writeFile(state, "FROZEN");
  REQUIRE(
      testing::eventually([&] { return testing::readFile(state).rfind("FROZEN", 0) == 0; }, 5s));

  REQUIRE(cgroups.destroy(pod).ok());
  CHECK_FALSE(cgroups.exists(pod));
  CHECK(waitChild(pid, 5s) != -1);
}

TEST_CASE(
    "cgroups (real): killCgroup of an empty cgroup freezes nothing and thaws a tree left frozen",
    "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  if (!mounts.v1_roots.contains("freezer")) testing::skipTest("no v1 freezer hierarchy");
  cm::CgroupManager cgroups(mounts);
  RootGuard guard{cgroups, {uniqueRoot()}};
  const cm::CgroupName ctr{guard.root[0], "empty"};
  const cm::CgroupName child{guard.root[0], "empty", "child"};
  REQUIRE(cgroups.create(ctr, {}).ok());
  REQUIRE(cgroups.create(child, {}).ok());
  const std::string state = cgroups.paths(ctr).dirFor("freezer") + "/freezer.state";
  const std::string child_state = cgroups.paths(child).dirFor("freezer") + "/freezer.state";
  std::string error;
  CHECK(cm::killCgroup(cgroups.paths(ctr), error) == 0);
  CHECK(error.empty());
  CHECK(testing::readFile(state).rfind("THAWED", 0) == 0);

  // Left frozen with nothing in it (a shim killed in the middle of its own kill, after its
  // processes died): the kill thaws it and its child, so that nothing started there later hangs.
  testing::writeFile(child_state, "FROZEN");
  testing::writeFile(state, "FROZEN");
  REQUIRE(
      testing::eventually([&] { return testing::readFile(state).rfind("FROZEN", 0) == 0; }, 5s));
  CHECK(cm::killCgroup(cgroups.paths(ctr), error) == 0);
  // (REQUIRE: a process started in a frozen cgroup would hang the test.)
  REQUIRE(testing::readFile(state).rfind("THAWED", 0) == 0);
  REQUIRE(testing::readFile(child_state).rfind("THAWED", 0) == 0);
  pid_t pid = spawnSh(joinScript(cgroups.paths(child)) + "exit 7");
  const int status = waitChild(pid, 5s);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
}

TEST_CASE("cgroups (real): oomKillCount rises after an OOM kill", "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  cm::CgroupManager cgroups(mounts);
  RootGuard guard{cgroups, {uniqueRoot()}};
  const cm::CgroupName name{guard.root[0], "oom"};
  cm::ResourceConfig config;
  config.memory_limit = 16 * 1024 * 1024;
  REQUIRE(cgroups.create(name, config).ok());
  const auto paths = cgroups.paths(name);
  auto before = cm::oomKillCount(paths);
  if (!before) {
    WARN("this kernel has no oom_kill counter; nothing to check");
    return;
  }
  CHECK(*before == 0);
  // tail -c keeps the last 64 MiB it read in memory: it outgrows the 16 MiB limit quickly.
  pid_t pid =
      spawnSh(joinScript(paths) +
              "exec 2>/dev/null; head -c 67108864 /dev/zero | tail -c 67108864 > /dev/null");
  int status = waitChild(pid, 20s);
  REQUIRE(status != -1);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(cm::oomKillCount(paths).value_or(0) >= 1);
  auto st = cgroups.stats(name);
  REQUIRE(st.ok());
  CHECK(st->oom_kills.value_or(0) >= 1);
}

TEST_CASE("cgroups (real): ContainerManager makes kubepods, QoS and pod cgroups",
          "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  cm::CgroupManager root_cgroups(mounts);
  RootGuard guard{root_cgroups, {uniqueRoot()}};
  cm::ContainerManagerOptions options;
  options.cgroup_root = "/" + guard.root[0];
  options.pod_pids_limit = 128;
  options.node_allocatable.memory_limit = int64_t{1} << 30;
  options.node_allocatable.cpu_shares = 2048;
  auto started = cm::ContainerManager::start(cm::CgroupManager(mounts), options);
  REQUIRE(started.ok());
  auto& mgr = **started;
  auto pod = testing::PodBuilder()
                 .name("web")
                 .uid("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")
                 .container("c", {"sleep", "1"})
                 .edit([](nlohmann::json& j) {
                   j["spec"]["containers"][0]["resources"] = {
                       {"requests", {{"cpu", "100m"}, {"memory", "32Mi"}}},
                       {"limits", {{"cpu", "200m"}, {"memory", "64Mi"}}}};
                 })
                 .build();
  REQUIRE(mgr.ensurePodCgroup(*pod).ok());
  REQUIRE(mgr.updateQosCgroups({pod}).ok());
  const auto name = mgr.podCgroupName(*pod);
  CHECK(name == cm::CgroupName{guard.root[0], "kubepods", "burstable",
                               "pod0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"});
  auto config = mgr.cgroups().readConfig(name);
  REQUIRE(config.ok());
  CHECK(config->memory_limit == std::optional<int64_t>(64 * 1024 * 1024));
  CHECK(config->cpu_quota == std::optional<int64_t>(20000));
  auto kubepods = mgr.cgroups().readConfig(mgr.kubepods());
  REQUIRE(kubepods.ok());
  CHECK(kubepods->memory_limit == std::optional<int64_t>(int64_t{1} << 30));
  CHECK(mgr.podCgroups() ==
        std::map<std::string, cm::CgroupName>{{"0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", name}});
  REQUIRE(mgr.destroyPodCgroup(name).ok());
  CHECK(mgr.podCgroups().empty());
}

TEST_CASE(
    "cgroups (real): a memory limit forbids swap (v1 memsw = limit, v2 swap.max 0), raised and "
    "lowered in an order the kernel accepts",
    "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  cm::CgroupManager cgroups(mounts);
  RootGuard guard{cgroups, {uniqueRoot()}};
  const cm::CgroupName name{guard.root[0], "swap"};
  const std::string dir = cgroups.paths(name).dirFor("memory");
  const bool v2 = mounts.version == cm::CgroupVersion::kV2;
  const std::string swap_file = v2 ? "memory.swap.max" : "memory.memsw.limit_in_bytes";
  cm::ResourceConfig config;
  config.memory_limit = 64 << 20;
  REQUIRE(cgroups.create(name, config).ok());
  if (!fs::exists(dir + "/" + swap_file)) {
    WARN("swap is not accounted on this machine (no " << swap_file << "); nothing to check");
    return;
  }
  auto swapLimit = [&] {
    std::string text = testing::readFile(dir + "/" + swap_file);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  };
  const std::string limited = v2 ? "0" : std::to_string(64 << 20);
  CHECK(swapLimit() == limited);
  // Up (memsw must be raised first), down (the limit must go first), unlimited.
  for (int64_t limit : {int64_t{256} << 20, int64_t{32} << 20, int64_t{128} << 20}) {
    config.memory_limit = limit;
    auto s = cgroups.update(name, config);
    INFO(limit << ": " << s.toString());
    REQUIRE(s.ok());
    CHECK(cgroups.readConfig(name)->memory_limit == std::optional<int64_t>(limit));
    CHECK(swapLimit() == (v2 ? "0" : std::to_string(limit)));
  }
  config.memory_limit = -1;
  REQUIRE(cgroups.update(name, config).ok());
  CHECK(cgroups.readConfig(name)->memory_limit == std::optional<int64_t>(-1));
  if (v2) {
    CHECK(swapLimit() == "max");
  } else {
    CHECK(std::stoull(swapLimit()) >= (uint64_t{1} << 62));
  }
}

TEST_CASE(
    "cgroups (real): ContainerManager::start lowering kubepods' memory below its use fails "
    "Unavailable (EBUSY), not PermissionDenied",
    "[integration][cm]") {
  auto mounts = requireWritableCgroups();
  // v2's memory.max takes a limit below the usage (the kernel reclaims, then OOM-kills).
  if (mounts.version == cm::CgroupVersion::kV2) testing::skipTest("v1 only: EBUSY from v1");
  cm::CgroupManager root_cgroups(mounts);
  RootGuard guard{root_cgroups, {uniqueRoot()}};
  cm::ContainerManagerOptions options;
  options.cgroup_root = "/" + guard.root[0];
  auto first = cm::ContainerManager::start(cm::CgroupManager(mounts), options);
  REQUIRE(first.ok());
  const cm::CgroupName kubepods = (*first)->kubepods();
  // 32 MiB of tmpfs charged to kubepods: no process needed to keep it, and without swap (or with
  // memsw = limit) the kernel cannot reclaim it.
  const std::string shm = "/dev/shm/nodeagent-test-charge-" + guard.root[0];
  struct RemoveFile {
    std::string path;
    ~RemoveFile() { ::unlink(path.c_str()); }
  } remove_shm{shm};
  pid_t pid = spawnSh(joinScript(root_cgroups.paths(kubepods)) + "head -c 33554432 /dev/zero > '" +
                      shm + "'");
  int status = waitChild(pid, 20s);
  REQUIRE(status != -1);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  auto stats = root_cgroups.stats(kubepods);
  REQUIRE(stats.ok());
  REQUIRE(stats->memory_usage_bytes.value_or(0) >= (uint64_t{30} << 20));

  options.node_allocatable.memory_limit = 4 << 20;
  auto second = cm::ContainerManager::start(cm::CgroupManager(mounts), options);
  REQUIRE_FALSE(second.ok());
  INFO(second.status().toString());
  CHECK(second.status().code() == base::StatusCode::kUnavailable);
  CHECK(second.status().code() != base::StatusCode::kPermissionDenied);
  CHECK(second.status().message().find("kubepods") != std::string::npos);
}
