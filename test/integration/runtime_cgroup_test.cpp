// ProcessRuntime with real cgroups (the hierarchies this machine mounts, found by
// detectCgroupMounts) and the built nodeagent-shim: each container in its own cgroup
// `<cgroup_parent>/<container-id>` from before its exec, limits enforced by the kernel, kills
// through the cgroup, OOM kills reported as kubelet reports them.
//
// Every case runs below a cgroup root of its own ("/nodeagent-test-<pid>-<random>"), which a scope
// guard kills and removes even when the case fails, and is bounded: small limits (32 MiB of
// memory, 64 pids), timeouts on every wait. Cases that need cgroups skip when not root or when
// the cgroup filesystem is not writable.
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "agent/cm/cgroup_manager.h"
#include "agent/runtime/cri_log.h"
#include "agent/runtime/process_runtime.h"
#include "agent/runtime/state_file.h"
#include "test/support/integration_env.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A cgroup root of the test's own, made in every hierarchy; killed and removed on destruction.
class CgroupRoot {
 public:
  explicit CgroupRoot(std::shared_ptr<cm::CgroupManager> manager)
      : manager_(std::move(manager)), name_(cm::parseCgroupPath(uniqueRootPath())) {}
  ~CgroupRoot() {
    if (auto s = manager_->destroy(name_); !s.ok()) {
      std::fprintf(stderr, "cannot remove test cgroup %s: %s\n",
                   cm::cgroupNameToPath(name_).c_str(), s.message().c_str());
    }
  }
  CgroupRoot(const CgroupRoot&) = delete;
  CgroupRoot& operator=(const CgroupRoot&) = delete;

  base::Status create() { return manager_->create(name_, {}); }
  // "/nodeagent-test-.../<child>".
  cm::CgroupName child(const std::string& component) const {
    cm::CgroupName n = name_;
    n.push_back(component);
    return n;
  }
  cm::CgroupManager& manager() { return *manager_; }

 private:
  static std::string uniqueRootPath() {
    uint32_t r = 0;
    while (::getrandom(&r, sizeof r, 0) != sizeof r) {
    }
    return "/nodeagent-test-" + std::to_string(::getpid()) + "-" + std::to_string(r);
  }

  std::shared_ptr<cm::CgroupManager> manager_;
  cm::CgroupName name_;
};

// The machine's cgroup hierarchies, when this process may make cgroups in them; else the case is
// skipped (call it first in a case).
std::shared_ptr<cm::CgroupManager> requireCgroups() {
  if (::geteuid() != 0) testing::skipTest("needs root to make cgroups");
  auto mounts = cm::detectCgroupMounts();
  if (!mounts.ok()) testing::skipTest("no cgroup hierarchy: " + mounts.status().message());
  auto manager = std::make_shared<cm::CgroupManager>(*mounts);
  {
    CgroupRoot probe(manager);
    if (auto s = probe.create(); !s.ok()) {
      testing::skipTest("the cgroup filesystem is not writable: " + s.message());
    }
  }
  return manager;
}

api::Container shContainer(std::string name, std::string script) {
  api::Container c;
  c.name = std::move(name);
  c.image = "busybox:1.36";
  c.command = {"/bin/sh", "-c", std::move(script)};
  c.hash = api::Hash128{3, 4};
  return c;
}

api::PodPtr makePod(const std::string& uid, std::vector<api::Container> containers) {
  auto pod = std::make_shared<api::Pod>();
  pod->metadata.name = "pod-" + uid;
  pod->metadata.namespace_ = "default";
  pod->metadata.uid = uid;
  pod->spec->node_name = "node-a";
  pod->spec->containers = std::move(containers);
  pod->spec->termination_grace_period_seconds = 2;
  return pod;
}

// A `sleep` duration no other test (or test binary) uses.
std::string uniqueSleep() {
  static std::atomic<int> next{0};
  return "3600." + std::to_string(::getpid()) + "7" + std::to_string(next++);
}

// Live processes running exactly `sleep <seconds>`.
int countSleeps(const std::string& seconds) {
  const std::string want = std::string("sleep") + '\0' + seconds + '\0';
  int n = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto st = readProcStat(std::stoi(name));
    if (!st || st->state == 'Z') continue;
    std::string cmdline, error;
    if (readWholeFile((entry.path() / "cmdline").string(), cmdline, error) && cmdline == want) ++n;
  }
  return n;
}

std::string logText(const fs::path& path) {
  std::string all;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (auto rec = parseCriRecord(line)) all += rec->text + (rec->partial ? "" : "\n");
  }
  return all;
}

// True when a /proc/<pid>/cgroup text puts the process in `path` in every hierarchy of `paths`
// (v2: the "0::" line; v1: the line of each controller the cgroup has).
bool inCgroup(const std::string& proc_cgroup, const cm::CgroupPaths& paths,
              const std::string& path) {
  std::istringstream in(proc_cgroup);
  std::string line;
  std::map<std::string, std::string> by_controller;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string where = line.substr(second + 1);
    if (controllers.empty()) {
      by_controller[""] = where;
      continue;
    }
    std::istringstream list(controllers);
    std::string c;
    while (std::getline(list, c, ',')) by_controller[c] = where;
  }
  if (paths.unified()) return by_controller[""] == path;
  for (const auto& [controller, dir] : paths.v1) {
    if (by_controller[controller] != path) return false;
  }
  return !paths.v1.empty();
}

// A ProcessRuntime with a cgroup manager on an io_context run by one background thread.
class Env {
 public:
  explicit Env(std::shared_ptr<cm::CgroupManager> cgroups) {
    ProcessRuntimeOptions extra;
    extra.cgroups = std::move(cgroups);
    options_ = testing::processRuntimeOptions(dir_.path(), std::move(extra));
    io_.start(1);
    runtime_ = testing::makeProcessRuntime(io_.executor(), options_);
  }
  // An agent restart: a new runtime recovers what the old one left running.
  void restart() {
    runtime_.reset();
    runtime_ = testing::makeProcessRuntime(io_.executor(), options_);
  }
  // The agent stops (its containers keep running); restart() starts the next one.
  void dropRuntime() { runtime_.reset(); }
  ~Env() {
    try {
      if (!runtime_) runtime_ = testing::makeProcessRuntime(io_.executor(), options_);
      auto pods = sync(runtime_->getPods(false));
      if (pods.ok()) {
        for (auto& p : *pods) (void)sync(runtime_->killPod(nullptr, p, 0));
      }
    } catch (...) {
    }
    runtime_.reset();
    io_.stop();
  }

  template <typename T>
  T sync(asio::awaitable<T> aw) {
    std::promise<T> promise;
    auto future = promise.get_future();
    asio::co_spawn(
        io_.context(),
        [&]() -> asio::awaitable<void> { promise.set_value(co_await std::move(aw)); },
        asio::detached);
    REQUIRE(future.wait_for(90s) == std::future_status::ready);
    return future.get();
  }

  base::StatusOr<ContainerId> tryStart(const api::PodPtr& pod, StartContainerOptions options,
                                       size_t index = 0) {
    return sync(runtime_->startContainer(pod, pod->spec->containers[index], 0, std::move(options)));
  }
  ContainerId start(const api::PodPtr& pod, StartContainerOptions options, size_t index = 0) {
    auto id = tryStart(pod, std::move(options), index);
    INFO(id.status().toString());
    REQUIRE(id.ok());
    return *id;
  }

  std::optional<ContainerStatus> status(const api::PodPtr& pod, const ContainerId& id) {
    auto st = sync(
        runtime_->getPodStatus(pod->metadata.uid, pod->metadata.name, pod->metadata.namespace_));
    REQUIRE(st.ok());
    for (const auto& cs : st->container_statuses) {
      if (cs.id == id) return cs;
    }
    return std::nullopt;
  }
  bool exited(const api::PodPtr& pod, const ContainerId& id) {
    auto cs = status(pod, id);
    return cs && cs->state == ContainerState::kExited;
  }
  void kill(const api::PodPtr& pod, const ContainerId& id, int64_t grace) {
    auto s = sync(runtime_->killContainer(pod, id, KillOptions::graceOverride(grace), "test"));
    INFO(s.toString());
    REQUIRE(s.ok());
  }

  ProcessRuntime& runtime() { return *runtime_; }
  const ProcessRuntimeOptions& options() const { return options_; }
  const testing::TempDir& dir() const { return dir_; }

 private:
  testing::TempDir dir_{"nodeagent-runtime-cgroup"};
  ProcessRuntimeOptions options_;
  testing::IoThreads io_;
  std::unique_ptr<ProcessRuntime> runtime_;
};

// The pod cgroup `pod<uid>` under the test's root, made with `config`; its cgroupfs path.
std::string makePodCgroup(CgroupRoot& root, const std::string& uid,
                          const cm::ResourceConfig& config = {}) {
  const cm::CgroupName name = root.child("pod" + uid);
  auto s = root.manager().create(name, config);
  INFO(s.toString());
  REQUIRE(s.ok());
  return cm::cgroupNameToPath(name);
}

StartContainerOptions inCgroup(const std::string& parent, cm::LinuxContainerResources resources) {
  StartContainerOptions o;
  o.cgroup_parent = parent;
  o.resources = resources;
  return o;
}

cm::CgroupName containerCgroup(const std::string& parent, const ContainerId& id) {
  cm::CgroupName n = cm::parseCgroupPath(parent);
  n.push_back(id.id);
  return n;
}

bool cgroupGone(cm::CgroupManager& manager, const cm::CgroupName& name) {
  for (const auto& dir : manager.paths(name).dirs()) {
    if (fs::exists(dir)) return false;
  }
  return true;
}

// A running container whose shell leaves a sleep in a session of its own (`escaped`) and execs
// its main sleep, in a pod cgroup of its own (`uid`).
struct EscapingContainer {
  api::PodPtr pod;
  ContainerId id;
  cm::CgroupName cgroup;  // the container's
  std::string escaped;
  std::string main_sleep;
};

EscapingContainer startEscaping(Env& env, CgroupRoot& root, const std::string& uid) {
  EscapingContainer c;
  const std::string parent = makePodCgroup(root, uid);
  c.escaped = uniqueSleep();
  c.main_sleep = uniqueSleep();
  c.pod = makePod(uid, {shContainer("main", "(setsid sleep " + c.escaped + " &) ; exec sleep " +
                                                c.main_sleep)});
  c.id = env.start(c.pod, inCgroup(parent, {}));
  REQUIRE(testing::eventually([&] { return countSleeps(c.escaped) == 1; }));
  REQUIRE(testing::eventually([&] { return countSleeps(c.main_sleep) == 1; }));
  c.cgroup = containerCgroup(parent, c.id);
  return c;
}

// The container's shim dies while no agent runs (this process started it: it is reaped here).
void killShimWithoutAgent(Env& env, const ContainerId& id) {
  const int shim = env.runtime().shimPidForTest(id);
  REQUIRE(shim > 0);
  env.dropRuntime();
  ::kill(shim, SIGKILL);
  ::waitpid(shim, nullptr, 0);
}

// Nothing of the container runs any more, and its removal removes its cgroup.
void checkKilledWhole(Env& env, cm::CgroupManager& manager, const EscapingContainer& c) {
  CHECK(testing::eventually([&] { return countSleeps(c.escaped) == 0; }));
  CHECK(testing::eventually([&] { return countSleeps(c.main_sleep) == 0; }));
  CHECK(testing::eventually([&] { return manager.pids(c.cgroup).empty(); }));
  REQUIRE(env.sync(env.runtime().removeContainer(c.id)).ok());
  CHECK(cgroupGone(manager, c.cgroup));
}

}  // namespace

TEST_CASE(
    "process runtime cgroups: a container is in its own cgroup from its first instruction, and "
    "so are commands exec'd in it",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  const std::string parent = makePodCgroup(root, "u-join");
  const std::string sleep = uniqueSleep();
  // The shell itself (a builtin read loop: no child process) prints its cgroups, then becomes the
  // sleep.
  auto pod = makePod("u-join", {shContainer("main",
                                            "while read -r l; do echo \"cg $l\"; done "
                                            "< /proc/self/cgroup; echo cg-end; exec sleep " +
                                                sleep)});
  cm::LinuxContainerResources resources;
  resources.memory_limit_in_bytes = 256 << 20;
  resources.oom_score_adj = 500;
  auto id = env.start(pod, inCgroup(parent, resources));
  const cm::CgroupName name = containerCgroup(parent, id);
  const std::string path = cm::cgroupNameToPath(name);
  const cm::CgroupPaths paths = manager->paths(name);
  CHECK(path == parent + "/" + id.id);

  auto cs = env.status(pod, id);
  REQUIRE(cs);
  REQUIRE(cs->pid > 0);
  INFO("cgroup " << path);
  const std::string proc_cgroup = testing::readFile("/proc/" + std::to_string(cs->pid) + "/cgroup");
  INFO(proc_cgroup);
  CHECK(inCgroup(proc_cgroup, paths, path));
  CHECK(testing::readFile("/proc/" + std::to_string(cs->pid) + "/oom_score_adj") == "500\n");
  auto pids = manager->pids(name);
  CHECK(std::find(pids.begin(), pids.end(), cs->pid) != pids.end());
  // The limit is the container's.
  auto config = manager->readConfig(name);
  REQUIRE(config.ok());
  CHECK(config->memory_limit == std::optional<int64_t>(256 << 20));

  // What the shell saw of itself before exec.
  REQUIRE(testing::eventually(
      [&] { return logText(cs->log_path).find("cg-end\n") != std::string::npos; }));
  std::string seen;
  {
    std::istringstream in(logText(cs->log_path));
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("cg ", 0) == 0) seen += line.substr(3) + "\n";
    }
  }
  INFO(seen);
  CHECK(inCgroup(seen, paths, path));

  // An exec'd command (probes, hooks) runs in the container's cgroup too.
  auto exec = env.sync(env.runtime().execInContainer(id, {"/bin/cat", "/proc/self/cgroup"}, 10s));
  REQUIRE(exec.ok());
  CHECK(exec->exit_code == 0);
  INFO(exec->output);
  CHECK(inCgroup(exec->output, paths, path));

  // The container ends: its cgroup goes with it.
  env.kill(pod, id, 2);
  CHECK(env.exited(pod, id));
  CHECK(testing::eventually([&] { return cgroupGone(*manager, name); }));
  CHECK(countSleeps(sleep) == 0);
}

TEST_CASE(
    "process runtime cgroups: a container over its memory limit is OOMKilled with exit code 137 "
    "while a sibling pod keeps running",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  const std::string sibling_parent = makePodCgroup(root, "u-sibling");
  const std::string sibling_sleep = uniqueSleep();
  auto sibling = makePod("u-sibling", {shContainer("idle", "exec sleep " + sibling_sleep)});
  auto sibling_id = env.start(sibling, inCgroup(sibling_parent, {}));

  const std::string parent = makePodCgroup(root, "u-oom");
  // The shell keeps 200 MB of output in memory (a command substitution): far over 32 MiB.
  auto pod = makePod("u-oom", {shContainer("hog",
                                           "x=$(head -c 200000000 /dev/zero | tr '\\0' a); "
                                           "echo survived")});
  cm::LinuxContainerResources resources;
  resources.memory_limit_in_bytes = 32 << 20;
  auto id = env.start(pod, inCgroup(parent, resources));
  REQUIRE(testing::eventually([&] { return env.exited(pod, id); }, 60s));
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  INFO(cs->reason << " " << cs->message << " exit " << cs->exit_code);
  CHECK(cs->reason == "OOMKilled");
  CHECK(cs->exit_code == 137);
  CHECK(cs->signal == SIGKILL);
  CHECK(logText(cs->log_path).find("survived") == std::string::npos);
  // The shim removed the container's cgroup; the pod's stays (the agent's).
  const cm::CgroupName name = containerCgroup(parent, id);
  CHECK(testing::eventually([&] { return cgroupGone(*manager, name); }));
  CHECK(manager->exists(cm::parseCgroupPath(parent)));

  // The sibling never noticed.
  auto sibling_cs = env.status(sibling, sibling_id);
  REQUIRE(sibling_cs);
  CHECK(sibling_cs->state == ContainerState::kRunning);
  CHECK(countSleeps(sibling_sleep) == 1);

  // A container killed by the agent with SIGKILL is not OOMKilled.
  env.kill(sibling, sibling_id, 0);
  auto killed = env.status(sibling, sibling_id);
  REQUIRE(killed);
  CHECK(killed->exit_code == 137);
  CHECK(killed->reason == "Error");
}

TEST_CASE("process runtime cgroups: a busy loop limited to 200m uses at most ~25% of a core",
          "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  const std::string parent = makePodCgroup(root, "u-cpu");
  auto pod = makePod("u-cpu", {shContainer("spin", "while :; do :; done")});
  cm::LinuxContainerResources resources;  // limits.cpu: 200m, as containerResources makes it
  resources.cpu_shares = 204;
  resources.cpu_period = 100000;
  resources.cpu_quota = 20000;
  auto id = env.start(pod, inCgroup(parent, resources));
  const cm::CgroupName name = containerCgroup(parent, id);
  auto config = manager->readConfig(name);
  REQUIRE(config.ok());
  CHECK(config->cpu_quota == std::optional<int64_t>(20000));
  CHECK(config->cpu_period == std::optional<uint64_t>(100000));

  auto usage = [&] {
    auto stats = manager->stats(name);
    REQUIRE(stats.ok());
    REQUIRE(stats->cpu_usage_nanos);
    return *stats->cpu_usage_nanos;
  };
  std::this_thread::sleep_for(500ms);  // past the first period
  const uint64_t before = usage();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(5s);
  const uint64_t after = usage();
  const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0);
  const double share = static_cast<double>(after - before) / 1e9 / elapsed.count();
  INFO("cpu share of one core: " << share);
  CHECK(share < 0.27);
  CHECK(share > 0.05);  // it did spin, in this cgroup
  env.kill(pod, id, 0);
  CHECK(testing::eventually([&] { return cgroupGone(*manager, name); }));
}

TEST_CASE(
    "process runtime cgroups: a fork bomb in a pod limited to 64 pids is held there and killed "
    "whole",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  cm::ResourceConfig pod_limits;
  pod_limits.pids_limit = 64;
  const std::string parent = makePodCgroup(root, "u-bomb", pod_limits);
  const std::string sleep = uniqueSleep();
  // The bomb in the background; the main process is a sleep (it needs no fork to stay).
  auto pod = makePod("u-bomb", {shContainer("bomb",
                                            "(f() { f | f & }; f) 2>/dev/null & "
                                            "exec sleep " +
                                                sleep)});
  auto id = env.start(pod, inCgroup(parent, {}));
  const cm::CgroupName pod_name = cm::parseCgroupPath(parent);
  uint64_t most = 0;
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    auto stats = manager->stats(pod_name);
    REQUIRE(stats.ok());
    REQUIRE(stats->pids_current);
    most = std::max(most, *stats->pids_current);
    std::this_thread::sleep_for(20ms);
  }
  INFO("most pids seen: " << most);
  CHECK(most <= 64);
  CHECK(most >= 32);  // the bomb did run into the limit
  // The node is fine: this process can still start one.
  const pid_t probe = ::fork();
  if (probe == 0) _exit(0);
  REQUIRE(probe > 0);
  int wstatus = 0;
  REQUIRE(::waitpid(probe, &wstatus, 0) == probe);
  CHECK(WIFEXITED(wstatus));
  CHECK(env.status(pod, id)->state == ContainerState::kRunning);

  env.kill(pod, id, 0);
  CHECK(env.exited(pod, id));
  const cm::CgroupName name = containerCgroup(parent, id);
  CHECK(testing::eventually([&] { return manager->pids(pod_name).empty(); }));
  CHECK(testing::eventually([&] { return cgroupGone(*manager, name); }));
  CHECK(countSleeps(sleep) == 0);
}

TEST_CASE(
    "process runtime cgroups: nothing of a container survives its kill, not even a setsid "
    "double-forked child",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  const std::string parent = makePodCgroup(root, "u-escape");
  // grace 0: SIGKILL through the cgroup at once; grace 2: SIGTERM ends the main process (the
  // escaped sleep is in another session and process group, and ignores nothing), then the shim
  // kills what is left in the cgroup.
  for (int64_t grace : {int64_t{0}, int64_t{2}}) {
    INFO("grace " << grace);
    const std::string escaped = uniqueSleep();
    const std::string main_sleep = uniqueSleep();
    auto pod =
        makePod("u-escape",
                {shContainer("main", "(setsid sleep " + escaped + " &) ; sleep " + main_sleep)});
    auto id = env.start(pod, inCgroup(parent, {}));
    REQUIRE(testing::eventually([&] { return countSleeps(escaped) == 1; }));
    REQUIRE(testing::eventually([&] { return countSleeps(main_sleep) == 1; }));
    const cm::CgroupName name = containerCgroup(parent, id);
    CHECK(manager->pids(name).size() >= 3);  // sh, sleep, the escaped sleep

    env.kill(pod, id, grace);
    CHECK(env.exited(pod, id));
    CHECK(testing::eventually([&] { return countSleeps(escaped) == 0; }));
    CHECK(countSleeps(main_sleep) == 0);
    CHECK(testing::eventually([&] { return cgroupGone(*manager, name); }));
    REQUIRE(env.sync(env.runtime().removeContainer(id)).ok());
  }
}

TEST_CASE(
    "process runtime cgroups: removing an exited container removes a cgroup its shim left, "
    "killing what still runs there",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  const std::string parent = makePodCgroup(root, "u-left");
  auto pod = makePod("u-left", {shContainer("main", "exec sleep " + uniqueSleep())});
  auto id = env.start(pod, inCgroup(parent, {}));
  const cm::CgroupName name = containerCgroup(parent, id);
  // The shim dies without a word (as on a crash): the agent records the loss and kills the
  // container through its cgroup; a stray process moved into the cgroup meanwhile goes too.
  const std::string stray_sleep = uniqueSleep();
  const pid_t stray = ::fork();
  if (stray == 0) {
    ::execl("/bin/sleep", "sleep", stray_sleep.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(stray > 0);
  REQUIRE(testing::eventually([&] { return countSleeps(stray_sleep) == 1; }));
  for (const auto& dir : manager->paths(name).dirs()) {
    testing::writeFile(fs::path(dir) / "cgroup.procs", std::to_string(stray));
  }
  const int shim = env.runtime().shimPidForTest(id);
  REQUIRE(shim > 0);
  ::kill(shim, SIGKILL);
  REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  CHECK(cs->exit_code == 137);
  int wstatus = 0;
  CHECK(::waitpid(stray, &wstatus, 0) == stray);  // killed by the agent, through the cgroup
  CHECK(WIFSIGNALED(wstatus));
  REQUIRE(env.sync(env.runtime().removeContainer(id)).ok());
  CHECK(cgroupGone(*manager, name));
}

TEST_CASE(
    "process runtime cgroups: a container cgroup that cannot be made fails the start, naming the "
    "cgroup, and leaves nothing behind",
    "[integration][runtime][cgroups]") {
  // A "cgroup v2 mount" that is a regular file: no cgroup can be made below it (no root needed).
  testing::TempDir fake("nodeagent-fake-cgroupfs");
  testing::writeFile(fake / "not-a-dir", "");
  cm::CgroupMounts mounts;
  mounts.version = cm::CgroupVersion::kV2;
  mounts.unified_root = (fake / "not-a-dir").string();
  Env env(std::make_shared<cm::CgroupManager>(mounts));
  auto pod = makePod("u-nocg", {shContainer("main", "exec sleep " + uniqueSleep())});
  auto id = env.tryStart(pod, inCgroup("/kubepods/podu-nocg", {}));
  REQUIRE_FALSE(id.ok());
  INFO(id.status().toString());
  CHECK(startErrorReason(id.status()) == kRunContainerError);
  CHECK(id.status().message().find("container \"main\" of pod default/pod-u-nocg") !=
        std::string::npos);
  CHECK(id.status().message().find("cgroup /kubepods/podu-nocg/") != std::string::npos);
  auto pods = env.sync(env.runtime().getPods(true));
  REQUIRE(pods.ok());
  CHECK(pods->empty());
  std::error_code ec;
  CHECK((fs::is_empty(env.options().root_dir / "containers", ec) ||
         !fs::exists(env.options().root_dir / "containers")));

  // A cgroup parent that would climb out of the hierarchy is a bad spec.
  auto bad = env.tryStart(pod, inCgroup("/kubepods/../../etc", {}));
  REQUIRE_FALSE(bad.ok());
  CHECK(startErrorReason(bad.status()) == kCreateContainerConfigError);

  // Without a cgroup parent the container starts as before, in no cgroup of its own.
  auto plain = env.tryStart(pod, {});
  INFO(plain.status().toString());
  CHECK(plain.ok());
}

TEST_CASE(
    "process runtime cgroups: containers adopted after a restart keep their cgroups and are "
    "still killed whole",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  const std::string parent = makePodCgroup(root, "u-adopt");
  const std::string escaped = uniqueSleep();
  auto pod = makePod("u-adopt", {shContainer("main", "(setsid sleep " + escaped +
                                                         " &) ; exec sleep " + uniqueSleep())});
  cm::LinuxContainerResources resources;
  resources.memory_limit_in_bytes = 64 << 20;
  auto id = env.start(pod, inCgroup(parent, resources));
  REQUIRE(testing::eventually([&] { return countSleeps(escaped) == 1; }));
  const cm::CgroupName name = containerCgroup(parent, id);
  const auto pids_before = manager->pids(name);

  env.restart();
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  CHECK(cs->state == ContainerState::kRunning);
  // Where it was, with its limit, nothing moved.
  CHECK(manager->pids(name) == pids_before);
  auto config = manager->readConfig(name);
  REQUIRE(config.ok());
  CHECK(config->memory_limit == std::optional<int64_t>(64 << 20));

  env.kill(pod, id, 0);
  CHECK(env.exited(pod, id));
  CHECK(testing::eventually([&] { return countSleeps(escaped) == 0; }));
  CHECK(testing::eventually([&] { return cgroupGone(*manager, name); }));
}

TEST_CASE(
    "process runtime cgroups: a container that cannot join its cgroup does not run: "
    "ContainerCannotRun, and exec'd commands fail the same way",
    "[integration][runtime][cgroups]") {
  // The shim alone, with a config whose cgroup does not exist (no root needed).
  testing::TempDir dir("nodeagent-shim-cgroup");
  const std::string marker = (dir / "ran").string();
  ShimConfig config;
  config.container_id = "c-nojoin";
  config.container_name = "main";
  config.argv = {"/bin/sh", "-c", "touch " + marker};
  config.log_path = (dir / "0.log").string();
  config.cgroup_name = "/missing/c-nojoin";
  config.cgroup.unified_dir = (dir / "no-such-cgroup" / "c-nojoin").string();
  std::string error;
  REQUIRE(writeFileAtomic((dir / "config").string(), encodeShimConfig(config), error));

  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const std::string shim = testing::binaryPath("nodeagent-shim").string();
  const std::string state_dir = dir.path().string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(ready[1], 3);
    ::execl(shim.c_str(), "nodeagent-shim", "run", state_dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(pid > 0);
  ::close(ready[1]);
  std::string line;
  char buf[512];
  ssize_t n;
  while ((n = ::read(ready[0], buf, sizeof buf)) > 0) line.append(buf, static_cast<size_t>(n));
  ::close(ready[0]);
  int wstatus = 0;
  REQUIRE(::waitpid(pid, &wstatus, 0) == pid);
  INFO(line);
  CHECK(line.rfind("error cannot put the container into its cgroup: ", 0) == 0);
  CHECK(line.find((dir / "no-such-cgroup" / "c-nojoin" / "cgroup.procs").string()) !=
        std::string::npos);
  ShimState st;
  std::string text;
  REQUIRE(readWholeFile((dir / "state").string(), text, error));
  REQUIRE(decodeShimState(text, st, error));
  CHECK(st.status == ShimStatus::kExited);
  CHECK(st.reason == "ContainerCannotRun");
  CHECK(st.exit_code == 128);
  CHECK(st.message.find("cgroup") != std::string::npos);
  CHECK_FALSE(fs::exists(marker));  // the command never ran

  // exec mode (probes, hooks): the command does not run outside the container's cgroup either.
  const std::string out = (dir / "exec.out").string();
  const pid_t exec = ::fork();
  if (exec == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    ::execl(shim.c_str(), "nodeagent-shim", "exec", state_dir.c_str(), "/bin/sh", "-c",
            ("touch " + marker).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(exec > 0);
  REQUIRE(::waitpid(exec, &wstatus, 0) == exec);
  CHECK(WIFEXITED(wstatus));
  CHECK(WEXITSTATUS(wstatus) == 126);
  CHECK(testing::readFile(out).find("cgroup.procs") != std::string::npos);
  CHECK_FALSE(fs::exists(marker));
}

TEST_CASE(
    "process runtime cgroups: on a cgroup v2 hierarchy a container joins its cgroup and is "
    "killed whole through cgroup.kill",
    "[integration][runtime][cgroups]") {
  if (::geteuid() != 0) testing::skipTest("needs root to make cgroups");
  // The machine's cgroup2 mount, controllers or not (a v1 machine's "unified" one has none: the
  // join and the kill need none).
  auto mounts = cm::detectCgroupMounts();
  std::string unified;
  if (mounts.ok() && mounts->version == cm::CgroupVersion::kV2) {
    unified = mounts->unified_root;
  } else if (fs::exists("/sys/fs/cgroup/unified/cgroup.procs")) {
    unified = "/sys/fs/cgroup/unified";
  }
  if (unified.empty()) testing::skipTest("no cgroup v2 hierarchy");
  cm::CgroupMounts v2;
  v2.version = cm::CgroupVersion::kV2;
  v2.unified_root = unified;
  auto manager = std::make_shared<cm::CgroupManager>(v2);
  CgroupRoot root(manager);
  if (auto s = root.create(); !s.ok()) {
    testing::skipTest("the cgroup v2 hierarchy is not writable: " + s.message());
  }
  Env env(manager);
  const std::string parent = makePodCgroup(root, "u-v2");
  const std::string escaped = uniqueSleep();
  auto pod = makePod("u-v2", {shContainer("main", "(setsid sleep " + escaped + " &) ; exec sleep " +
                                                      uniqueSleep())});
  auto id = env.start(pod, inCgroup(parent, {}));
  const cm::CgroupName name = containerCgroup(parent, id);
  const std::string path = cm::cgroupNameToPath(name);
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  const std::string proc_cgroup = testing::readFile("/proc/" + std::to_string(cs->pid) + "/cgroup");
  INFO(proc_cgroup);
  CHECK(inCgroup(proc_cgroup, manager->paths(name), path));
  REQUIRE(testing::eventually([&] { return countSleeps(escaped) == 1; }));
  env.kill(pod, id, 0);
  CHECK(env.exited(pod, id));
  CHECK(testing::eventually([&] { return countSleeps(escaped) == 0; }));
  CHECK(testing::eventually([&] { return cgroupGone(*manager, name); }));
}

TEST_CASE(
    "process runtime cgroups: a container whose shim died while no agent ran is killed whole "
    "through its cgroup at recovery",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  auto c = startEscaping(env, root, "u-orphan");
  killShimWithoutAgent(env, c.id);
  env.restart();

  auto cs = env.status(c.pod, c.id);
  REQUIRE(cs);
  CHECK(cs->state == ContainerState::kExited);
  CHECK(cs->exit_code == 137);
  checkKilledWhole(env, *manager, c);
}

TEST_CASE(
    "process runtime cgroups: a container whose state file is unusable and whose shim died is "
    "killed whole through its config's cgroup at recovery (ContainerStatusUnknown)",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  auto c = startEscaping(env, root, "u-unknown");
  killShimWithoutAgent(env, c.id);
  testing::writeFile(env.options().root_dir / "containers" / c.id.id / "state",
                     "not a state file\n");
  env.restart();

  auto cs = env.status(c.pod, c.id);
  REQUIRE(cs);
  CHECK(cs->state == ContainerState::kExited);
  CHECK(cs->reason == "ContainerStatusUnknown");
  checkKilledWhole(env, *manager, c);
}

TEST_CASE(
    "process runtime cgroups: a live shim whose config is unusable is killed at recovery with "
    "everything in its container's cgroup, a child in a session of its own too",
    "[integration][runtime][cgroups]") {
  auto manager = requireCgroups();
  CgroupRoot root(manager);
  REQUIRE(root.create().ok());
  Env env(manager);
  const std::string parent = makePodCgroup(root, "u-unadoptable");
  const std::string escaped = uniqueSleep();
  // The main process ignores SIGTERM (so do its children): the shim is SIGKILLed after the grace
  // period, before it could kill its cgroup itself.
  auto pod =
      makePod("u-unadoptable", {shContainer("main", "trap '' TERM; (setsid sleep " + escaped +
                                                        " &) ; while :; do sleep 1; done")});
  auto id = env.start(pod, inCgroup(parent, {}));
  REQUIRE(testing::eventually([&] { return countSleeps(escaped) == 1; }));
  const cm::CgroupName name = containerCgroup(parent, id);
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  const int main_pid = cs->pid;
  REQUIRE(main_pid > 0);

  env.dropRuntime();
  testing::writeFile(env.options().root_dir / "containers" / id.id / "config", "not a config\n");
  env.restart();

  CHECK(testing::eventually([&] { return countSleeps(escaped) == 0; }));
  CHECK(testing::eventually([&] {
    auto st = readProcStat(main_pid);
    return !st || st->state == 'Z';
  }));
  CHECK(testing::eventually([&] { return manager->pids(name).empty(); }));
}
