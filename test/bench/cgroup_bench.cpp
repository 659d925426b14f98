// Cgroup setup cost per container and per pod, on this machine's real cgroup hierarchies (v1 or
// v2, as cm::detectCgroupMounts() finds them). Run by hand, as root:
//   build/bench/cgroup_bench [containers=1000]
// Under a cgroup root of its own (/nodeagent-test-<pid>-0, made by ContainerManager::start with
// kubepods, burstable and besteffort; removed at the end, also on failure or SIGINT/SIGTERM), for
// N Burstable pods of one container each (requests cpu 100m / memory 64Mi, limits cpu 200m /
// memory 128Mi):
//  1. pod cgroup: ContainerManager::ensurePodCgroup (kubepods/burstable/pod<uid> with kubelet's
//     ResourceConfigForPod: shares, quota, memory limit), timed per pod;
//  2. per container, what the process runtime and the shim do:
//     - create: CgroupManager::create(<pod cgroup>/<id>, the container's ResourceConfig: shares,
//       quota + period, memory limit), as the runtime does before it spawns the shim;
//     - join: cm::joinCgroup in a forked child before it execs /bin/true (timed in the child, as
//       the shim's container child does), and the whole fork + join + exec + exit + wait against
//       the same without a join (interleaved, so noise hits both alike);
//     - remove: cm::removeCgroupWaiting after the process exited (the shim's removal);
//     and create + join again for up to 100 containers started one every 50 ms (a single start on
//     a quiet node: on cgroup v1 a migration may wait for an RCU grace period that migrations in
//     quick succession share);
//  3. pod cgroup removal: ContainerManager::destroyPodCgroup (kill + rmdir, the agent's path).
// Prints p50 / p99 / max of each, and of the setup per container (create + join) and per pod
// (pod cgroup + create + join): the figure the goal "cgroup setup adds < 1 ms per container at
// p99" is about. Sequential, one thread: it measures the cgroupfs work itself, not contention.
// Then lone starts on a cgroup2 hierarchy: the child joining its cgroup before exec versus being
// forked straight into it (clone3 with CLONE_INTO_CGROUP, as nodeagent-shim does on cgroup v2).
// Not root, or no cgroup hierarchy mounted: says so and exits 0 without measuring.
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/cm/cgroup_fs.h"
#include "agent/cm/cgroup_manager.h"
#include "agent/cm/container_manager.h"
#include "agent/cm/resources.h"
#include "api/pod_json.h"
#include "test/support/bench_signals.h"
#include "test/support/cgroup_root.h"

extern char** environ;

using namespace nodeagent;
using SteadyClock = std::chrono::steady_clock;

namespace {

double ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

int64_t monotonicNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

void printRow(const char* what, const std::vector<double>& v) {
  if (v.empty()) {
    std::printf("  %-52s (no samples)\n", what);
    return;
  }
  std::printf("  %-52s %8.3f %8.3f %8.3f   (%zu)\n", what, percentile(v, 0.5), percentile(v, 0.99),
              *std::max_element(v.begin(), v.end()), v.size());
}

// The memory controller's cgroup count from /proc/cgroups (v1: dying cgroups included), to show
// whether removed cgroups linger.
long memoryCgroupCount() {
  std::ifstream in("/proc/cgroups");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string name;
    long hierarchy = 0, count = 0;
    if (f >> name >> hierarchy >> count && name == "memory") return count;
  }
  return -1;
}

// ---- cleanup: the cgroup root goes whichever way the bench ends ---------------------------------

std::mutex g_mu;     // held by the main thread while it changes cgroups
std::string g_root;  // the cgroup root while it exists
pid_t g_child = 0;   // a forked child while it runs

void cleanUp() {
  if (g_child > 0) {
    ::kill(g_child, SIGKILL);
    ::waitpid(g_child, nullptr, 0);
    g_child = 0;
  }
  if (!g_root.empty()) testing::removeCgroupTree(g_root);
  g_root.clear();
}

std::string podJson(size_t i) {
  const std::string n = std::to_string(i);
  return R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"bench-)" + n +
         R"(","namespace":"default","uid":"cgroup-bench-)" + n +
         R"("},"spec":{"containers":[{"name":"main","image":"busybox","command":["/bin/true"],)"
         R"("resources":{"requests":{"cpu":"100m","memory":"64Mi"},)"
         R"("limits":{"cpu":"200m","memory":"128Mi"}}}]}})";
}

// fork + (join `paths`) + exec /bin/true + wait. Returns the wall time of it all; `join_ms` gets
// the child's own measurement of joinCgroup (0 without a cgroup). Throws when the child fails.
double runTrue(const cm::CgroupPaths* paths, double& join_ms) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
  const auto t0 = SteadyClock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int64_t took = 0;
    if (paths != nullptr) {
      std::string error;
      const int64_t j0 = monotonicNanos();
      if (!cm::joinCgroup(*paths, error)) {
        (void)!::write(2, error.data(), error.size());
        (void)!::write(2, "\n", 1);
        ::_exit(121);
      }
      took = monotonicNanos() - j0;
    }
    (void)!::write(report[1], &took, sizeof took);
    ::execve(argv[0], argv, environ);
    ::_exit(127);
  }
  g_child = pid;
  ::close(report[1]);
  int64_t took = 0;
  const bool reported = ::read(report[0], &took, sizeof took) == sizeof took;
  ::close(report[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  g_child = 0;
  const double total = ms(SteadyClock::now() - t0);
  if (!reported || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("the child failed (status " + std::to_string(status) + ")");
  }
  join_ms = static_cast<double>(took) / 1e6;
  return total;
}

int run(size_t n) {
  auto mounts = cm::detectCgroupMounts();
  if (!mounts.ok()) {
    std::printf("cgroup_bench: skipped: no cgroup hierarchy: %s\n",
                std::string(mounts.status().message()).c_str());
    return 0;
  }
  const cm::CgroupVersion version = mounts->version;
  const long memcg_before = memoryCgroupCount();

  std::unique_ptr<cm::ContainerManager> manager;
  const auto t_start = SteadyClock::now();
  {
    std::lock_guard lock(g_mu);
    g_root = testing::isolatedCgroupRoot();
    cm::ContainerManagerOptions options;
    options.cgroup_root = g_root;
    auto started = cm::ContainerManager::start(cm::CgroupManager(std::move(*mounts)), options);
    if (!started.ok()) {
      std::printf("cgroup_bench: ContainerManager::start under %s failed: %s\n", g_root.c_str(),
                  std::string(started.status().message()).c_str());
      return 1;
    }
    manager = std::move(*started);
  }
  std::printf("cgroup_bench: cgroup %s, root %s, %zu pods of one container each\n",
              std::string(cm::cgroupVersionName(version)).c_str(), g_root.c_str(), n);
  std::printf("cgroup_bench: ContainerManager::start (kubepods, burstable, besteffort): %.3f ms\n",
              ms(SteadyClock::now() - t_start));
  cm::CgroupManager& cgroups = manager->cgroups();

  std::vector<api::Pod> pods;
  pods.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto pod = api::decodePodJson(podJson(i));
    if (!pod.ok()) throw std::runtime_error("pod: " + std::string(pod.status().message()));
    pods.push_back(std::move(*pod));
  }
  constexpr int64_t kMemoryCapacity = int64_t{16} << 30;
  const cm::ResourceConfig container_config = cm::toResourceConfig(
      cm::containerResources(pods[0], std::as_const(pods[0]).spec->containers[0], kMemoryCapacity));

  // 1. Pod cgroups.
  std::vector<double> pod_create;
  for (const auto& pod : pods) {
    std::lock_guard lock(g_mu);
    const auto t = SteadyClock::now();
    auto s = manager->ensurePodCgroup(pod);
    pod_create.push_back(ms(SteadyClock::now() - t));
    if (!s.ok()) throw std::runtime_error("ensurePodCgroup: " + std::string(s.message()));
  }

  // 2. Containers: create, join (fork + join + exec /bin/true), remove; and the same fork + exec
  // without a cgroup, alternately first so that neither always follows the other.
  std::vector<double> create, join, spawn_join, spawn_plain, remove, setup, pod_setup;
  for (size_t i = 0; i < n; ++i) {
    std::lock_guard lock(g_mu);
    double unused = 0;
    if (i % 2 == 1) spawn_plain.push_back(runTrue(nullptr, unused));
    cm::CgroupName name = manager->podCgroupName(pods[i]);
    name.push_back("c" + std::to_string(i) + "0123456789abcdef");
    auto t = SteadyClock::now();
    auto s = cgroups.create(name, container_config);
    create.push_back(ms(SteadyClock::now() - t));
    if (!s.ok()) throw std::runtime_error("create: " + std::string(s.message()));
    const cm::CgroupPaths paths = cgroups.paths(name);
    double join_ms = 0;
    spawn_join.push_back(runTrue(&paths, join_ms));
    join.push_back(join_ms);
    t = SteadyClock::now();
    std::string error;
    const bool removed = cm::removeCgroupWaiting(paths, 30, error);
    remove.push_back(ms(SteadyClock::now() - t));
    if (!removed) throw std::runtime_error("removeCgroupWaiting: " + error);
    if (i % 2 == 0) spawn_plain.push_back(runTrue(nullptr, unused));
    setup.push_back(create.back() + join.back());
    pod_setup.push_back(pod_create[i] + create.back() + join.back());
  }

  // 2b. Isolated starts: one container every 50 ms, as a single pod's start or a restart is on a
  // quiet node (cgroup v1: a migration into a cgroup may wait for an RCU grace period, which
  // migrations in quick succession share).
  const size_t isolated = std::min<size_t>(100, n);
  std::vector<double> iso_create, iso_join;
  for (size_t i = 0; i < isolated; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard lock(g_mu);
    cm::CgroupName name = manager->podCgroupName(pods[i]);
    name.push_back("i" + std::to_string(i) + "0123456789abcdef");
    auto t = SteadyClock::now();
    auto s = cgroups.create(name, container_config);
    iso_create.push_back(ms(SteadyClock::now() - t));
    if (!s.ok()) throw std::runtime_error("create: " + std::string(s.message()));
    const cm::CgroupPaths paths = cgroups.paths(name);
    double join_ms = 0;
    runTrue(&paths, join_ms);
    iso_join.push_back(join_ms);
    std::string error;
    if (!cm::removeCgroupWaiting(paths, 30, error)) {
      throw std::runtime_error("removeCgroupWaiting: " + error);
    }
  }

  // 3. Pod cgroups go.
  std::vector<double> pod_destroy;
  for (const auto& pod : pods) {
    std::lock_guard lock(g_mu);
    const auto t = SteadyClock::now();
    auto s = manager->destroyPodCgroup(manager->podCgroupName(pod));
    pod_destroy.push_back(ms(SteadyClock::now() - t));
    if (!s.ok()) throw std::runtime_error("destroyPodCgroup: " + std::string(s.message()));
  }

  std::printf(
      "\nper container / pod (ms)                                    p50      p99      max"
      "   (samples)\n");
  printRow("pod cgroup: ensurePodCgroup", pod_create);
  printRow("container cgroup: CgroupManager::create", create);
  printRow("join: joinCgroup in the child before exec", join);
  printRow("fork + join + exec /bin/true + wait", spawn_join);
  printRow("fork + exec /bin/true + wait (no cgroup)", spawn_plain);
  printRow("container cgroup removal: removeCgroupWaiting", remove);
  printRow("pod cgroup removal: destroyPodCgroup", pod_destroy);
  printRow("SETUP per container: create + join", setup);
  printRow("SETUP per pod: pod cgroup + create + join", pod_setup);
  printRow("isolated (one per 50 ms): create", iso_create);
  printRow("isolated (one per 50 ms): join", iso_join);
  const double extra = percentile(spawn_join, 0.5) - percentile(spawn_plain, 0.5);
  std::printf("  fork+exec with a join minus without, p50: %+.3f ms\n", extra);
  std::printf(
      "goal: cgroup setup < 1 ms per container at p99: %s (container %.3f ms, pod + "
      "container %.3f ms)\n",
      percentile(setup, 0.99) < 1.0 ? "met" : "NOT met", percentile(setup, 0.99),
      percentile(pod_setup, 0.99));

  {
    std::lock_guard lock(g_mu);
    cleanUp();
  }
  const long memcg_after = memoryCgroupCount();
  if (memcg_before >= 0) {
    std::printf("memory cgroups in /proc/cgroups: %ld before, %ld after the root was removed\n",
                memcg_before, memcg_after);
  }
  return 0;
}

// On a cgroup2 hierarchy (the v2 mount, or a v1 machine's controller-less "unified" one: a move
// takes the same kernel lock either way), 100 lone starts one every 50 ms, alternating: fork, the
// child writes cgroup.procs and execs /bin/true, versus clone3 with CLONE_INTO_CGROUP (what
// nodeagent-shim does on cgroup v2), each timed from fork to the exit being reaped.
void compareForkIntoCgroup() {
#ifdef CLONE_INTO_CGROUP
  auto mounts = cm::detectCgroupMounts();
  std::string unified;
  if (mounts.ok() && mounts->version == cm::CgroupVersion::kV2) {
    unified = mounts->unified_root;
  } else if (::access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) == 0) {
    unified = "/sys/fs/cgroup/unified";
  }
  if (unified.empty()) {
    std::printf("cgroup_bench: no cgroup2 hierarchy: clone3 into a cgroup not measured\n");
    return;
  }
  const std::string dir = unified + "/nodeagent-bench-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0755) != 0) {
    std::printf("cgroup_bench: mkdir %s: %s\n", dir.c_str(), std::strerror(errno));
    return;
  }
  std::vector<double> join, into;
  for (int i = 0; i < 100; ++i) {
    for (int mode = 0; mode < 2; ++mode) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto t0 = SteadyClock::now();
      pid_t pid = -1;
      if (mode == 0) {
        pid = ::fork();
        if (pid == 0) {
          const int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
          if (fd < 0 || ::write(fd, "0", 1) != 1) _exit(3);
          ::execl("/bin/true", "true", nullptr);
          _exit(2);
        }
      } else {
        const int cg = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct clone_args args {};
        args.flags = CLONE_INTO_CGROUP;
        args.exit_signal = SIGCHLD;
        args.cgroup = static_cast<uint64_t>(cg);
        pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
        if (pid == 0) {
          ::execl("/bin/true", "true", nullptr);
          _exit(2);
        }
        ::close(cg);
      }
      if (pid < 0) break;
      int status = 0;
      ::waitpid(pid, &status, 0);
      (mode == 0 ? join : into).push_back(ms(SteadyClock::now() - t0));
    }
  }
  ::rmdir(dir.c_str());
  std::printf("\nlone starts on the cgroup2 hierarchy %s (one per 50 ms)\n", unified.c_str());
  printRow("fork + join (cgroup.procs) + exec + wait", join);
  printRow("clone3 CLONE_INTO_CGROUP + exec + wait", into);
#else
  std::printf("cgroup_bench: built without CLONE_INTO_CGROUP: not measured\n");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  if (n == 0 || argc > 2) {
    std::fprintf(stderr, "usage: cgroup_bench [containers=1000]   (as root)\n");
    return 2;
  }
  if (::geteuid() != 0) {
    std::printf("cgroup_bench: skipped: not root (making cgroups needs root)\n");
    return 0;
  }
  testing::cleanUpOnSignal("cgroup_bench", "removing its cgroups", [] {
    std::lock_guard lock(g_mu);
    cleanUp();
  });
  int rc = 0;
  try {
    rc = run(n);
    compareForkIntoCgroup();
  } catch (const std::exception& e) {
    std::printf("cgroup_bench: failed: %s\n", e.what());
    rc = 1;
  }
  std::lock_guard lock(g_mu);
  cleanUp();
  return rc;
}
