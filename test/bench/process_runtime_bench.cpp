// Process runtime benchmark (prints figures; run by hand:
//   build/bench/process_runtime_bench [N=1000] [samples=200] [--no-supervisord]
//                                     [--cgroups=on|off|on,off|off,on]).
// The real daemon (build/nodeagent, process runtime, one nodeagent-shim per container):
//  - time from the daemon's start until N pods (`sleep`) are Running in GET /pods (polled every
//    20 ms per 1,000 pods), and the agent's CPU until then, with a bound on the part of it that
//    served those polls,
//  - agent RSS/PSS (anonymous and file-backed), agent CPU per second while idle with N pods
//    (20 s), mean shim PSS, agent CPU per GET /pods of the unchanged node,
//  - pick-up latency: a manifest renamed into the directory -> its process has started (it
//    creates a file), p50/p99 over `samples` pods with the N pods running,
//  - exit-to-status latency: a container exits (it was blocked reading a FIFO the bench writes) ->
//    GET /pods shows it terminated,
//  - first-restart latency: an Always container exits -> its next start (a line it appends),
// Before the agent runs, the machine's process-creation floors: N x (exec of `sleep`), what the
// containers alone cost, and N x (exec of the static nodeagent-shim + exec of `sleep`), what they
// cost with their shims, with no agent, on every core, wall time and CPU, which bound how fast
// any N containers can start here;
// and the same N programs under supervisord (Debian package `supervisor`; skipped with a message
// when it is not installed): time until `supervisorctl status` shows all RUNNING (startsecs=0, so
// RUNNING means started, as in /pods), RSS/PSS, idle CPU, pick-up of one more program through
// `supervisorctl update`, and exit -> first restart (autorestart).
//
// Cgroups: each agent run gets a cgroup root of its own (--cgroup-root=/nodeagent-test-<pid>-<n>,
// removed with everything in it when the run ends), so as root pods get real cgroups ("on", the
// default). "off" runs the agent (and so its shims and containers) in a private mount namespace in
// which every cgroup file system, and /sys/fs/cgroup, is remounted read-only: the agent cannot
// make kubepods, says "Resource limits are not enforced" and runs pods without cgroups, as on a
// machine without cgroup access; no product flag is involved. `--cgroups=on,off` runs the agent
// once in each mode, one after the other (in that order), and prints them side by side with the
// difference. Each run checks the mode it got (GET /metrics nodeagent_cgroups_enforced, the
// agent's log, the pod and container cgroups under the root) and says which one ran; an "off" run
// that still enforces limits fails.
//
// Every process the bench starts (the agent, shims, containers, supervisord and its programs) is
// killed when it ends, and the cgroup roots are removed, also on failure or SIGINT/SIGTERM.
// State, manifests and logs go to $TMPDIR (default /dev/shm) so a busy disk does not dominate.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/cm/cgroup_manager.h"
#include "agent/runtime/state_file.h"
#include "test/support/bench_signals.h"
#include "test/support/cgroup_root.h"
#include "test/support/test_util.h"

extern char** environ;

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

double ms(SteadyClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

long procStatusKb(int pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0)
      return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
  }
  return 0;
}

long pssKb(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Pss:", 0) == 0) return std::strtol(line.c_str() + 4, nullptr, 10);
  }
  return 0;
}

// utime + stime of a process, in seconds.
double procCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(all.substr(close + 2));
  std::string f;
  double ut = 0, st = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) ut = std::stod(f);
    if (i == 15) st = std::stod(f);
  }
  return (ut + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// CPU time of every thread of a process, in nanoseconds (schedstat: finer than stat's ticks).
int64_t procCpuNanos(int pid) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    int64_t on_cpu = 0;
    if (in >> on_cpu) total += on_cpu;
  }
  return total;
}

// Starts a program with stdout and stderr appended to `log`, with no signal blocked (the bench
// blocks SIGINT/SIGTERM in its own threads).
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, a[0].c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot spawn " + a[0] + ": " + std::strerror(rc));
  return pid;
}

// A mount point read-only in a private mount namespace: its mountinfo path and per-mount flags.
struct ReadOnlyMount {
  std::string path;
  unsigned long flags = 0;  // MS_NOSUID, MS_NODEV, MS_NOEXEC and the atime flags it has now
};

// Every cgroup (v1) and cgroup2 mount, and /sys/fs/cgroup itself, from /proc/self/mountinfo.
std::vector<ReadOnlyMount> cgroupMounts() {
  std::vector<ReadOnlyMount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    std::istringstream fields(line);
    std::string id, parent, dev, root, point, options, f;
    fields >> id >> parent >> dev >> root >> point >> options;
    while (fields >> f && f != "-") {
    }
    std::string fstype;
    fields >> fstype;
    if (fstype != "cgroup" && fstype != "cgroup2" && point != "/sys/fs/cgroup") continue;
    ReadOnlyMount m;
    m.path = point;  // cgroup mount points have no characters mountinfo escapes here
    std::istringstream opts(options);
    for (std::string o; std::getline(opts, o, ',');) {
      if (o == "nosuid") m.flags |= MS_NOSUID;
      if (o == "nodev") m.flags |= MS_NODEV;
      if (o == "noexec") m.flags |= MS_NOEXEC;
      if (o == "relatime") m.flags |= MS_RELATIME;
      if (o == "noatime") m.flags |= MS_NOATIME;
      if (o == "nodiratime") m.flags |= MS_NODIRATIME;
    }
    out.push_back(std::move(m));
  }
  return out;
}

// spawn(), but the program runs in a mount namespace of its own (private propagation) in which
// `read_only` are remounted read-only (MS_REMOUNT | MS_BIND: the mount's flag in that namespace
// only, never the file system's, so the rest of the machine is not affected). Everything the
// program starts inherits the namespace. Only async-signal-safe calls after fork: the bench has
// other threads.
pid_t spawnWithReadOnlyMounts(const std::vector<std::string>& args, const fs::path& log,
                              const std::vector<ReadOnlyMount>& read_only) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + log.string() + ": " + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    auto fail = [](const char* what) {
      char num[16];
      int n = sizeof num, err = errno;
      do {
        num[--n] = static_cast<char>('0' + err % 10);
        err /= 10;
      } while (err > 0 && n > 0);
      (void)!::write(2, "process_runtime_bench: ", 23);
      (void)!::write(2, what, std::strlen(what));
      (void)!::write(2, " failed, errno ", 15);
      (void)!::write(2, num + n, sizeof num - static_cast<size_t>(n));
      (void)!::write(2, "\n", 1);
      ::_exit(127);
    };
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (::unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)");
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail("mount --make-rprivate /");
    }
    for (const auto& m : read_only) {
      if (::mount(nullptr, m.path.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | m.flags,
                  nullptr) != 0) {
        fail(m.path.c_str());
      }
    }
    ::execve(argv[0], argv.data(), environ);
    fail(argv[0]);
  }
  ::close(fd);
  return pid;
}

// ---- cleanup: every process the bench started goes, whichever way the bench ends ----------------

std::mutex g_cleanup_mu;
fs::path g_base;                          // the bench's temp dir
std::vector<fs::path> g_root_dirs;        // each agent run's --root-dir
std::vector<std::string> g_cgroup_roots;  // each agent run's --cgroup-root, until removed
pid_t g_agent = 0;                        // the daemon while it runs
pid_t g_supervisord = 0;                  // supervisord while it runs

void killAndReap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  int st;
  ::waitpid(pid, &st, 0);
}

// The parent of `pid` (field 4 of /proc/<pid>/stat), 0 when it is gone.
pid_t parentOf(pid_t pid) {
  // Not an ifstream: a process that ends during the read makes it throw (ESRCH).
  std::string all, error;
  if (!runtime::readWholeFile("/proc/" + std::to_string(pid) + "/stat", all, error)) return 0;
  auto close = all.rfind(')');
  if (close == std::string::npos || close + 4 >= all.size()) return 0;
  return static_cast<pid_t>(std::strtol(all.c_str() + close + 4, nullptr, 10));
}

// Children of `parent`.
std::vector<pid_t> childrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
    if (pid <= 0) continue;
    if (parentOf(pid) == parent) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// Processes whose command line or working directory names `base` (shims name their container
// directory, containers run in their pod directory or name bench files).
std::vector<pid_t> processesUnder(const fs::path& base) {
  std::vector<pid_t> out;
  const std::string b = base.string();
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string proc = std::string("/proc/") + e->d_name;
    std::error_code ec;
    auto cwd = fs::read_symlink(proc + "/cwd", ec);
    bool ours = !ec && cwd.string().rfind(b, 0) == 0;
    if (!ours) {
      std::string cmd, error;
      ours =
          runtime::readWholeFile(proc + "/cmdline", cmd, error) && cmd.find(b) != std::string::npos;
    }
    if (ours) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

void killContainersUnder(const fs::path& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / "containers", ec)) {
    std::string text, err;
    runtime::ShimState st;
    if (!runtime::readWholeFile((e.path() / "state").string(), text, err)) continue;
    if (!runtime::decodeShimState(text, st, err)) continue;
    if (st.pid > 0 && runtime::processAlive(st.pid, st.pid_start_ticks)) ::kill(-st.pid, SIGKILL);
    if (st.shim_pid > 0 && runtime::processAlive(st.shim_pid, st.shim_start_ticks)) {
      ::kill(st.shim_pid, SIGKILL);
    }
  }
}

// Kills the daemon, supervisord and everything they started; idempotent.
void killEverything() {
  std::lock_guard lock(g_cleanup_mu);
  killAndReap(std::exchange(g_agent, 0));
  if (pid_t sup = std::exchange(g_supervisord, 0); sup > 0) {
    for (pid_t c : childrenOf(sup)) ::kill(-c, SIGKILL), ::kill(c, SIGKILL);
    killAndReap(sup);
  }
  if (!g_base.empty()) {
    for (const auto& root : g_root_dirs) killContainersUnder(root);
    for (int round = 0; round < 3; ++round) {
      auto left = processesUnder(g_base);
      if (left.empty()) break;
      for (pid_t pid : left) ::kill(pid, SIGKILL);
      std::this_thread::sleep_for(100ms);
    }
  }
  // The agents' cgroup roots, with whatever still runs in them (a signal ends the bench with
  // _Exit: the test support's atexit removal would not run).
  for (const auto& root : std::exchange(g_cgroup_roots, {})) testing::removeCgroupTree(root);
  // Our own unreaped children (shims the daemon left are init's).
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

std::string shPod(const std::string& name, const std::string& script,
                  const std::string& restart = "Always") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  restartPolicy: " + restart +
         "\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
         "    image: debian:12\n    command: [\"/bin/sh\", \"-c\", " +
         json(script).dump() + "]\n";
}

std::string sleepPod(const std::string& name) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
         "    image: debian:12\n    command: [\"sleep\", \"100000\"]\n";
}

void renameIn(const fs::path& dir, const std::string& file, const std::string& content) {
  auto tmp = dir / ("." + file + ".tmp");
  testing::writeFile(tmp, content);
  fs::rename(tmp, dir / file);
}

class Daemon {
 public:
  // `cgroups_off`: the agent runs with every cgroup file system read-only (see the top).
  Daemon(const fs::path& base, int port, bool cgroups_off)
      : base_(base), port_(port), cgroups_off_(cgroups_off) {
    cgroup_root_ = testing::isolatedCgroupRoot();
    std::lock_guard lock(g_cleanup_mu);
    g_root_dirs.push_back(base_ / "root");
    g_cgroup_roots.push_back(cgroup_root_);
  }
  const std::string& cgroupRoot() const { return cgroup_root_; }
  void start() {
    const std::vector<std::string> args = {testing::binaryPath("nodeagent").string(),
                                           "--pod-manifest-path=" + (base_ / "manifests").string(),
                                           "--root-dir=" + (base_ / "root").string(),
                                           "--pod-log-dir=" + (base_ / "logs").string(),
                                           "--read-only-port=" + std::to_string(port_),
                                           "--port=0",
                                           "--healthz-port=0",
                                           "--hostname-override=bench",
                                           "--max-pods=100000",
                                           "--cgroup-root=" + cgroup_root_};
    std::lock_guard lock(g_cleanup_mu);
    pid_ = cgroups_off_ ? spawnWithReadOnlyMounts(args, base_ / "agent.log", read_only_)
                        : spawn(args, base_ / "agent.log");
    g_agent = pid_;
  }
  // Read before start (so the fork does not parse mountinfo).
  void prepare() {
    if (cgroups_off_) read_only_ = cgroupMounts();
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int st;
    ::waitpid(pid_, &st, 0);
    std::lock_guard lock(g_cleanup_mu);
    g_agent = 0;
    pid_ = 0;
  }
  // The body of GET `path` (200 only), read as curl or a log shipper would (large reads).
  // httplib's client reads 4 KiB per poll(2)+recv(2) pair: about 2 ms for the 1.5 MB list of
  // /pods, which would make this client's reading, not the agent, the resolution of the exit ->
  // status figure.
  std::optional<std::string> getBody(std::string_view path) const {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return std::nullopt;
    timeval tv{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string response;
    const std::string request =
        "GET " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      response.resize(4 << 20);
      size_t n = 0;
      ssize_t r;
      while ((r = ::read(fd, response.data() + n, response.size() - n)) > 0) {
        n += static_cast<size_t>(r);
        if (n == response.size()) response.resize(n * 2);
      }
      response.resize(n);
    }
    ::close(fd);
    const size_t header_end = response.find("\r\n\r\n");
    if (response.rfind("HTTP/1.1 200 ", 0) != 0 || header_end == std::string::npos) {
      return std::nullopt;
    }
    response.erase(0, header_end + 4);
    return response;
  }
  std::optional<std::string> podsBody() const { return getBody("/pods"); }
  // nodeagent_cgroups_enforced from GET /metrics; nullopt when it is not there.
  std::optional<int> cgroupsEnforced() const {
    auto body = getBody("/metrics");
    if (!body) return std::nullopt;
    constexpr std::string_view kName = "\nnodeagent_cgroups_enforced ";
    const size_t at = body->find(kName);
    if (at == std::string::npos) return std::nullopt;
    return std::atoi(body->c_str() + at + kName.size());
  }
  // Pods by name from GET /pods.
  std::optional<json> pods() const {
    auto body = podsBody();
    if (!body) return std::nullopt;
    return json::parse(*body, nullptr, false);
  }
  size_t runningCount() const {
    auto list = pods();
    if (!list || !list->contains("items")) return 0;
    size_t n = 0;
    for (const auto& p : (*list)["items"]) {
      if (p["status"].value("phase", "") == "Running") ++n;
    }
    return n;
  }
  // Container state of every pod's first container, by pod name (without the node suffix).
  std::map<std::string, json> containerStates() const {
    std::map<std::string, json> out;
    auto list = pods();
    if (!list || !list->contains("items")) return out;
    for (const auto& p : (*list)["items"]) {
      std::string name = p["metadata"].value("name", "");
      if (name.size() > 6) name.resize(name.size() - 6);  // "-bench"
      if (p["status"].contains("containerStatuses")) {
        out[name] = p["status"]["containerStatuses"][0]["state"];
      } else {
        out[name] = json{{"waiting", json::object()}};
      }
    }
    return out;
  }
  // Only the one pod's object is parsed out of the 1.5 MB list: parsing all of it would make
  // this client's polling, not the agent, the resolution of the exit -> status figure.
  std::optional<json> containerState(const std::string& pod,
                                     SteadyClock::time_point* received = nullptr) const {
    const auto response = podsBody();
    if (received != nullptr) *received = SteadyClock::now();
    if (!response) return std::nullopt;
    const std::string& body = *response;
    const size_t at = body.find("\"name\":\"" + pod + "-bench\"");
    if (at == std::string::npos) return std::nullopt;
    // The item's object: back to its "{"apiVersion" (static pods have no owner references
    // before their name), forward to the matching brace.
    size_t start = body.rfind("{\"apiVersion\"", at);
    if (start == std::string::npos) return std::nullopt;
    size_t end = start;
    for (int depth = 0; end < body.size(); ++end) {
      const char c = body[end];
      if (c == '"') {
        for (++end; end < body.size() && body[end] != '"'; ++end) {
          if (body[end] == '\\') ++end;
        }
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        ++end;
        break;
      }
    }
    json p = json::parse(body.substr(start, end - start), nullptr, false);
    if (p.is_discarded() || p["metadata"].value("name", "") != pod + "-bench") return std::nullopt;
    if (!p["status"].contains("containerStatuses")) return std::nullopt;
    return p["status"]["containerStatuses"][0]["state"];
  }
  pid_t pid() const { return pid_; }

  // Kills every container process group and shim recorded under the root dir.
  void killContainers() { killContainersUnder(base_ / "root"); }
  std::vector<int> shimPids() {
    std::vector<int> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(base_ / "root" / "containers", ec)) {
      std::string text, err;
      runtime::ShimState st;
      if (!runtime::readWholeFile((e.path() / "state").string(), text, err)) continue;
      if (!runtime::decodeShimState(text, st, err)) continue;
      if (st.shim_pid > 0 && runtime::processAlive(st.shim_pid, st.shim_start_ticks)) {
        out.push_back(st.shim_pid);
      }
    }
    return out;
  }

 private:
  fs::path base_;
  int port_;
  bool cgroups_off_;
  std::string cgroup_root_;
  std::vector<ReadOnlyMount> read_only_;
  pid_t pid_ = 0;
};

void waitFileLines(const fs::path& p, size_t lines, SteadyClock::time_point deadline) {
  while (SteadyClock::now() < deadline) {
    std::ifstream in(p);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) >= lines) return;
    std::this_thread::sleep_for(200us);
  }
}

// Writes a line to the FIFO once the container has it open for reading (ENXIO until then),
// which ends the container's `read`. False if no reader came within 10 s.
bool release(const fs::path& fifo) {
  auto deadline = SteadyClock::now() + 10s;
  while (SteadyClock::now() < deadline) {
    int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      (void)!::write(fd, "go\n", 3);
      ::close(fd);
      return true;
    }
    std::this_thread::sleep_for(200us);
  }
  return false;
}

// One figure of each side, for the summary.
struct Figures {
  std::optional<double> all_running_ms, start_cpu_ms, rss_kib, pss_kib, anon_kib, idle_cpu_pct,
      pickup_p50, pickup_p99, exit_status_p50, exit_status_p99, restart_p50, restart_p99,
      per_container_kib;
  std::optional<bool> cgroups_enforced;  // what the agent's /metrics said
};

long smapsRollupKb(int pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

void printMemory(const char* who, int pid, Figures& f) {
  const long rss = procStatusKb(pid, "VmRSS");
  const long anon = procStatusKb(pid, "RssAnon");
  const long file = procStatusKb(pid, "RssFile");
  const long pss = pssKb(pid);
  std::printf(
      "%s: RSS %ld KiB (anonymous %ld, file-backed %ld), PSS %ld KiB (anonymous %ld, file %ld)\n",
      who, rss, anon, file, pss, smapsRollupKb(pid, "Pss_Anon"), smapsRollupKb(pid, "Pss_File"));
  f.rss_kib = static_cast<double>(rss);
  f.pss_kib = static_cast<double>(pss);
  f.anon_kib = static_cast<double>(anon);
}

// CPU of `pid` over `window`, in percent of one core.
double idleCpuPercent(int pid, std::chrono::seconds window) {
  const double c0 = procCpuSeconds(pid);
  std::this_thread::sleep_for(window);
  return (procCpuSeconds(pid) - c0) * 100 / static_cast<double>(window.count());
}

std::string supervisorProgram(const std::string& name, const std::string& command,
                              const fs::path& dir, bool autorestart) {
  return "[program:" + name + "]\ncommand=" + command +
         "\nstartsecs=0\nautorestart=" + (autorestart ? "true" : "false") +
         "\nstdout_logfile=" + (dir / "logs" / (name + ".log")).string() +
         "\nredirect_stderr=true\n";
}

// Runs `cmd` through the shell and returns its stdout.
std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  pclose(p);
  return out;
}

void benchSupervisord(size_t n, size_t samples, const fs::path& base, Figures& f) {
  if (std::system(
          "command -v supervisord >/dev/null 2>&1 && command -v supervisorctl >/dev/null 2>&1") !=
      0) {
    std::printf(
        "supervisord: not installed, skipped (Debian package supervisor; "
        "NODEAGENT_WITH_BENCH_PEERS=1 deploy/install-deps.sh installs it)\n");
    return;
  }
  const fs::path dir = base / "supervisor";
  fs::create_directories(dir / "logs");
  fs::create_directories(dir / "work");
  const auto conf = dir / "supervisord.conf";
  std::string c =
      "[unix_http_server]\nfile=" + (dir / "supervisor.sock").string() +
      "\n[supervisord]\nlogfile=" + (dir / "supervisord.log").string() +
      "\npidfile=" + (dir / "supervisord.pid").string() +
      "\nchildlogdir=" + (dir / "logs").string() +
      "\nminfds=8192\n[rpcinterface:supervisor]\n"
      "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
      "[supervisorctl]\nserverurl=unix://" +
      (dir / "supervisor.sock").string() + "\n";
  for (size_t i = 0; i < n; ++i) {
    c += supervisorProgram("p" + std::to_string(i), "sleep 100000", dir, true);
  }
  // Crash-restart programs: each appends a line per start and exits 1 once its FIFO is written.
  const size_t k = std::min<size_t>(20, samples);
  for (size_t i = 0; i < k; ++i) {
    const auto fifo = dir / "work" / ("restart-" + std::to_string(i));
    ::mkfifo(fifo.c_str(), 0600);
    const auto starts = dir / "work" / ("starts-" + std::to_string(i));
    c += supervisorProgram("r" + std::to_string(i),
                           "/bin/sh -c \"echo start >> " + starts.string() + "; read x < " +
                               fifo.string() + "; exit 1\"",
                           dir, true);
  }
  testing::writeFile(conf, c);
  auto t0 = SteadyClock::now();
  pid_t sup = spawn({"supervisord", "-n", "-c", conf.string()}, dir / "stdout.log");
  {
    std::lock_guard lock(g_cleanup_mu);
    g_supervisord = sup;
  }
  const std::string ctl = "supervisorctl -c " + conf.string();
  const std::string status_cmd = ctl + " status 2>/dev/null | grep -c RUNNING";
  size_t running = 0;
  while (SteadyClock::now() - t0 < 300s) {
    running = std::strtoul(capture(status_cmd).c_str(), nullptr, 10);
    if (running >= n + k) break;
    int st;
    if (::waitpid(sup, &st, WNOHANG) == sup) {
      std::lock_guard lock(g_cleanup_mu);
      g_supervisord = 0;
      std::printf("supervisord: exited early; see %s\n", (dir / "stdout.log").c_str());
      return;
    }
    std::this_thread::sleep_for(50ms);
  }
  auto took = SteadyClock::now() - t0;
  std::printf("supervisord: %zu/%zu programs RUNNING after %.0f ms (supervisorctl status polled)\n",
              running, n + k, ms(took));
  if (running >= n + k) f.all_running_ms = ms(took);
  std::this_thread::sleep_for(3s);
  printMemory("supervisord", sup, f);
  f.per_container_kib = 0;  // programs are children of supervisord itself: no per-program helper
  f.idle_cpu_pct = idleCpuPercent(sup, 20s);
  std::printf("supervisord: idle CPU %.3f%% of a core with %zu programs (20 s)\n", *f.idle_cpu_pct,
              n + k);

  // Pick-up: a program added to the config runs after `supervisorctl update` (supervisord does
  // not watch its config).
  const size_t m = std::min<size_t>(5, samples);
  std::vector<double> pickup;
  for (size_t i = 0; i < m; ++i) {
    const auto started = dir / "work" / ("started-" + std::to_string(i));
    auto t = SteadyClock::now();
    {
      std::ofstream out(conf, std::ios::app);
      out << supervisorProgram("new" + std::to_string(i),
                               "/bin/sh -c \"touch " + started.string() + "; exec sleep 100000\"",
                               dir, true);
    }
    (void)!std::system((ctl + " update >/dev/null 2>&1").c_str());
    while (!fs::exists(started) && SteadyClock::now() - t < 60s) std::this_thread::sleep_for(200us);
    pickup.push_back(ms(SteadyClock::now() - t));
  }
  f.pickup_p50 = percentile(pickup, 0.5);
  f.pickup_p99 = percentile(pickup, 0.99);
  std::printf(
      "supervisord: pick-up (config appended + supervisorctl update -> process started) with "
      "%zu programs: p50 %.1f ms, p99 %.1f ms (%zu samples)\n",
      n + k, *f.pickup_p50, *f.pickup_p99, m);

  std::vector<double> restart_lat;
  for (size_t i = 0; i < k; ++i) {
    const auto starts = dir / "work" / ("starts-" + std::to_string(i));
    waitFileLines(starts, 1, SteadyClock::now() + 30s);
    auto t = SteadyClock::now();
    if (!release(dir / "work" / ("restart-" + std::to_string(i)))) continue;
    waitFileLines(starts, 2, t + 30s);
    restart_lat.push_back(ms(SteadyClock::now() - t));
  }
  f.restart_p50 = percentile(restart_lat, 0.5);
  f.restart_p99 = percentile(restart_lat, 0.99);
  std::printf(
      "supervisord: exit -> first restart started: p50 %.1f ms, p99 %.1f ms (%zu samples)\n",
      *f.restart_p50, *f.restart_p99, restart_lat.size());

  ::kill(sup, SIGTERM);
  int st;
  ::waitpid(sup, &st, 0);
  std::lock_guard lock(g_cleanup_mu);
  g_supervisord = 0;
}

// The last `lines` lines of a file (the temp dir goes when the bench ends).
std::string logTail(const fs::path& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "  " + all[i] + "\n";
  }
  return out;
}

std::string describeWaitStatus(int st) {
  if (WIFEXITED(st)) return "exit " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("signal ") + strsignal(WTERMSIG(st));
  return "status " + std::to_string(st);
}

// Which mode the agent runs in, from GET /metrics (nodeagent_cgroups_enforced), its log ("Resource
// limits are not enforced: <why>") and, when enforced, the pod and container cgroups under its
// cgroup root (the sleep pods are BestEffort). An "off" run that enforces limits fails: its figures
// would be labelled wrongly. An "on" run that does not (not root) is said loudly.
void checkCgroupMode(const Daemon& d, const fs::path& base, size_t n, bool cgroups_off,
                     const char* who, Figures& f) {
  const auto enforced = d.cgroupsEnforced();
  if (!enforced) {
    throw std::runtime_error(std::string(who) +
                             ": GET /metrics has no nodeagent_cgroups_enforced gauge");
  }
  f.cgroups_enforced = *enforced == 1;
  std::string said;
  {
    std::ifstream in(base / "agent.log");
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find("Resource limits are not enforced");
      if (at != std::string::npos) {
        said = line.substr(at);
        break;
      }
    }
  }
  std::error_code ec;
  const bool own_mount_ns = fs::read_symlink("/proc/self/ns/mnt", ec) !=
                            fs::read_symlink("/proc/" + std::to_string(d.pid()) + "/ns/mnt", ec);
  if (*enforced == 1) {
    if (cgroups_off) {
      throw std::runtime_error(std::string(who) +
                               ": nodeagent_cgroups_enforced is 1 with cgroups off requested");
    }
    size_t pods = 0, containers = 0;
    std::string version = "?";
    if (auto mounts = cm::detectCgroupMounts(); mounts.ok()) {
      cm::CgroupManager cgroups(std::move(*mounts));
      version = cm::cgroupVersionName(cgroups.version());
      cm::CgroupName besteffort = cm::parseCgroupPath(d.cgroupRoot());
      besteffort.push_back("kubepods");
      besteffort.push_back("besteffort");
      for (const auto& pod : cgroups.children(besteffort)) {
        cm::CgroupName name = besteffort;
        name.push_back(pod);
        containers += cgroups.children(name).size();
        ++pods;
      }
    }
    std::printf(
        "%s: cgroups ENFORCED (GET /metrics nodeagent_cgroups_enforced 1, cgroup %s): %zu pod "
        "cgroups with %zu container cgroups under %s/kubepods/besteffort for %zu pods\n",
        who, version.c_str(), pods, containers, d.cgroupRoot().c_str(), n);
    if (pods < n || containers < n) {
      std::printf("%s: WARNING: fewer pod or container cgroups than pods\n", who);
    }
    return;
  }
  std::printf(
      "%s: cgroups NOT enforced (GET /metrics nodeagent_cgroups_enforced 0; agent in %s mount "
      "namespace); the agent logged: %s\n",
      who, own_mount_ns ? "its own" : "the bench's", said.empty() ? "(nothing)" : said.c_str());
  if (cgroups_off && said.empty()) {
    throw std::runtime_error(std::string(who) +
                             ": the agent did not log \"Resource limits are not enforced\"");
  }
  if (!cgroups_off) {
    std::printf(
        "%s: WARNING: cgroups on was asked for but the agent does not enforce them (not root?): "
        "this run is without cgroups too\n",
        who);
  }
}

// One agent run with cgroups on or off, in its own directory below `base`.
void runNodeagent(size_t n, size_t samples, const fs::path& base, bool cgroups_off, Figures& f) {
  const std::string label = std::string("nodeagent [cgroups ") + (cgroups_off ? "off" : "on") + "]";
  const char* who = label.c_str();
  fs::create_directories(base / "manifests");
  fs::create_directories(base / "work");
  const int port = freePort();

  for (size_t i = 0; i < n; ++i) {
    testing::writeFile(base / "manifests" / ("pod-" + std::to_string(i) + ".yaml"),
                       sleepPod("pod-" + std::to_string(i)));
  }
  Daemon d(base, port, cgroups_off);
  d.prepare();
  auto t0 = SteadyClock::now();
  d.start();
  size_t running = 0;
  // /pods costs the agent CPU in proportion to the pods it lists (about 1.2 us per pod here), so
  // the poll interval grows with N to keep the bench's own load on the agent small: 20 ms per
  // 1,000 pods (at most 1/20 of the start time's resolution is lost).
  const auto poll_interval = 20ms * std::max<size_t>(1, n / 1000);
  size_t start_polls = 0;
  while (SteadyClock::now() - t0 < 600s) {
    running = d.runningCount();
    ++start_polls;
    if (running >= n) break;
    int st;
    if (::waitpid(d.pid(), &st, WNOHANG) == d.pid()) {
      {
        std::lock_guard lock(g_cleanup_mu);
        g_agent = 0;
      }
      throw std::runtime_error("nodeagent exited early (" + describeWaitStatus(st) +
                               "); the end of its log:\n" + logTail(base / "agent.log", 10));
    }
    std::this_thread::sleep_for(poll_interval);
  }
  auto took = SteadyClock::now() - t0;
  const double start_cpu_ms = procCpuSeconds(d.pid()) * 1000;
  std::printf(
      "%s: %zu/%zu pods Running in /pods after %.0f ms (agent CPU %.0f ms, %.2f ms per pod)\n", who,
      running, n, ms(took), start_cpu_ms, start_cpu_ms / static_cast<double>(n));
  if (running >= n) {
    f.all_running_ms = ms(took);
    f.start_cpu_ms = start_cpu_ms;
  }
  checkCgroupMode(d, base, n, cgroups_off, who, f);
  std::this_thread::sleep_for(3s);
  printMemory(who, d.pid(), f);
  {
    auto shims = d.shimPids();
    long pss = 0, rss = 0;
    for (int s : shims) {
      pss += pssKb(s);
      rss += procStatusKb(s, "VmRSS");
    }
    if (!shims.empty()) {
      f.per_container_kib = static_cast<double>(pss) / static_cast<double>(shims.size());
      std::printf("%s: %zu shims, mean PSS %.0f KiB, mean RSS %.0f KiB\n", who, shims.size(),
                  *f.per_container_kib,
                  static_cast<double>(rss) / static_cast<double>(shims.size()));
    }
  }
  f.idle_cpu_pct = idleCpuPercent(d.pid(), 20s);
  std::printf("%s: agent idle CPU %.3f%% of a core with %zu pods (20 s)\n", who, *f.idle_cpu_pct,
              n);
  {
    // What a /pods poll costs the agent on an unchanged node (a monitoring system's poll).
    constexpr int kPolls = 200;
    size_t bytes = 0;
    const int64_t c0 = procCpuNanos(d.pid());
    for (int i = 0; i < kPolls; ++i) {
      if (auto body = d.podsBody()) bytes = body->size();
    }
    const double per_poll_ms = static_cast<double>(procCpuNanos(d.pid()) - c0) / kPolls / 1e6;
    std::printf("%s: /pods with %zu pods (%zu KiB): agent CPU %.3f ms per poll (%d polls)\n", who,
                n, bytes / 1024, per_poll_ms, kPolls);
    // Each poll while the pods started listed at most these pods: a bound on what the bench's
    // own polling added to the agent CPU until all were Running.
    std::printf(
        "%s: the start was polled %zu times (every %lld ms), at most %.0f ms of the agent CPU "
        "until "
        "all Running\n",
        who, start_polls, static_cast<long long>(poll_interval.count()),
        per_poll_ms * static_cast<double>(start_polls));
  }

  // Pick-up latency: rename in -> the process has run its first command.
  std::vector<double> pickup;
  for (size_t i = 0; i < samples; ++i) {
    const auto started = base / "work" / ("started-" + std::to_string(i));
    const std::string name = "new-" + std::to_string(i);
    auto t = SteadyClock::now();
    renameIn(base / "manifests", name + ".yaml",
             shPod(name, "touch " + started.string() + "; exec sleep 100000"));
    while (!fs::exists(started) && SteadyClock::now() - t < 60s) std::this_thread::sleep_for(200us);
    pickup.push_back(ms(SteadyClock::now() - t));
  }
  f.pickup_p50 = percentile(pickup, 0.5);
  f.pickup_p99 = percentile(pickup, 0.99);
  std::printf(
      "%s: pick-up (rename -> process started) with %zu+ pods: p50 %.1f ms, p99 %.1f ms "
      "(%zu samples)\n",
      who, n, *f.pickup_p50, *f.pickup_p99, samples);

  // Exit -> status in /pods, and exit -> first restart: 100 samples each, so that p99 is not
  // simply the largest of a handful.
  const size_t k = std::min<size_t>(100, samples);
  for (size_t i = 0; i < k; ++i) {
    const auto fifo = base / "work" / ("exit-" + std::to_string(i));
    ::mkfifo(fifo.c_str(), 0600);
    renameIn(base / "manifests", "exit-" + std::to_string(i) + ".yaml",
             shPod("exit-" + std::to_string(i), "read x < " + fifo.string() + "; exit 0", "Never"));
    const auto rfifo = base / "work" / ("restart-" + std::to_string(i));
    ::mkfifo(rfifo.c_str(), 0600);
    const auto starts = base / "work" / ("starts-" + std::to_string(i));
    renameIn(
        base / "manifests", "restart-" + std::to_string(i) + ".yaml",
        shPod("restart-" + std::to_string(i),
              "echo start >> " + starts.string() + "; read x < " + rfifo.string() + "; exit 1"));
  }
  // Containers another process killed meanwhile (the machine is shared) are left out.
  std::vector<bool> usable(k, false);
  auto deadline = SteadyClock::now() + 120s;
  while (SteadyClock::now() < deadline) {
    bool pending = false;
    auto states = d.containerStates();
    for (size_t i = 0; i < k; ++i) {
      auto it = states.find("exit-" + std::to_string(i));
      usable[i] = it != states.end() && it->second.contains("running");
      if (it == states.end() || it->second.contains("waiting")) pending = true;
    }
    if (!pending) break;
    std::this_thread::sleep_for(50ms);
  }
  std::vector<double> exit_lat, restart_lat;
  for (size_t i = 0; i < k; ++i) {
    if (!usable[i]) {
      std::printf("%s: exit-%zu is not running (killed from outside?); skipped\n", who, i);
      continue;
    }
    auto t = SteadyClock::now();
    if (!release(base / "work" / ("exit-" + std::to_string(i)))) {
      std::printf("%s: exit-%zu never opened its FIFO; skipped\n", who, i);
      continue;
    }
    // Until the answer that shows it arrived (this client's JSON parsing is not the agent's time).
    auto seen = SteadyClock::now();
    while (SteadyClock::now() - t < 30s) {
      auto st = d.containerState("exit-" + std::to_string(i), &seen);
      if (st && st->contains("terminated")) break;
      std::this_thread::sleep_for(1ms);
      seen = SteadyClock::now();
    }
    exit_lat.push_back(ms(seen - t));

    const auto starts = base / "work" / ("starts-" + std::to_string(i));
    waitFileLines(starts, 1, SteadyClock::now() + 30s);
    t = SteadyClock::now();
    if (!release(base / "work" / ("restart-" + std::to_string(i)))) {
      std::printf("%s: restart-%zu never opened its FIFO; skipped\n", who, i);
      continue;
    }
    waitFileLines(starts, 2, t + 30s);
    restart_lat.push_back(ms(SteadyClock::now() - t));
  }
  f.exit_status_p50 = percentile(exit_lat, 0.5);
  f.exit_status_p99 = percentile(exit_lat, 0.99);
  f.restart_p50 = percentile(restart_lat, 0.5);
  f.restart_p99 = percentile(restart_lat, 0.99);
  std::printf(
      "%s: exit -> terminated in /pods: p50 %.1f ms, p99 %.1f ms (%zu samples, /pods "
      "polled every 1 ms)\n",
      who, *f.exit_status_p50, *f.exit_status_p99, exit_lat.size());
  std::printf("%s: exit -> first restart started: p50 %.1f ms, p99 %.1f ms (%zu samples)\n", who,
              *f.restart_p50, *f.restart_p99, restart_lat.size());
  std::printf("%s: agent RSS at the end %ld KiB (%zu pods)\n", who, procStatusKb(d.pid(), "VmRSS"),
              n + samples + 2 * k);

  d.stop();
  d.killContainers();
}

std::string cell(const std::optional<double>& v, const char* fmt) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

void printSummary(size_t n, const std::vector<std::pair<std::string, Figures>>& columns) {
  struct Row {
    const char* what;
    const char* goal;
    std::optional<double> Figures::*field;
    const char* fmt;
  };
  const Row rows[] = {
      {"all Running (ms)", "< 2000", &Figures::all_running_ms, "%.0f"},
      {"agent CPU until all Running (ms)", "", &Figures::start_cpu_ms, "%.0f"},
      {"agent RSS (KiB)", "< 32768", &Figures::rss_kib, "%.0f"},
      {"agent PSS (KiB)", "", &Figures::pss_kib, "%.0f"},
      {"agent anonymous RSS (KiB)", "", &Figures::anon_kib, "%.0f"},
      {"idle CPU (% of a core)", "< 0.1", &Figures::idle_cpu_pct, "%.3f"},
      {"per-container helper PSS (KiB)", "< 512", &Figures::per_container_kib, "%.0f"},
      {"pick-up p50 (ms)", "", &Figures::pickup_p50, "%.1f"},
      {"pick-up p99 (ms)", "< 10", &Figures::pickup_p99, "%.1f"},
      {"exit -> status p50 (ms)", "", &Figures::exit_status_p50, "%.1f"},
      {"exit -> status p99 (ms)", "< 10", &Figures::exit_status_p99, "%.1f"},
      {"first restart p50 (ms)", "", &Figures::restart_p50, "%.1f"},
      {"first restart p99 (ms)", "< 10", &Figures::restart_p99, "%.1f"},
  };
  std::printf("\nsummary with %zu pods/programs            goal      ", n);
  for (const auto& [name, f] : columns) std::printf(" %-18s", name.c_str());
  std::printf("\n  %-36s %-10s", "cgroups enforced (/metrics)", "");
  for (const auto& [name, f] : columns) {
    std::printf(" %-18s", !f.cgroups_enforced ? "-" : *f.cgroups_enforced ? "yes" : "no");
  }
  std::printf("\n");
  for (const auto& r : rows) {
    std::printf("  %-36s %-10s", r.what, r.goal);
    for (const auto& [name, f] : columns) std::printf(" %-18s", cell(f.*r.field, r.fmt).c_str());
    std::printf("\n");
  }
  // What cgroups cost: the "on" run minus the "off" run.
  const Figures* on = nullptr;
  const Figures* off = nullptr;
  for (const auto& [name, f] : columns) {
    if (name == "cgroups on") on = &f;
    if (name == "cgroups off") off = &f;
  }
  if (on == nullptr || off == nullptr) return;
  auto delta = [](const std::optional<double>& a, const std::optional<double>& b, double per) {
    if (!a || !b) return std::string("-");
    char buf[96];
    std::snprintf(buf, sizeof buf, "%+.1f ms", *a - *b);
    std::string out = buf;
    if (per > 1) {
      std::snprintf(buf, sizeof buf, " (%+.3f ms per pod)", (*a - *b) / per);
      out += buf;
    }
    return out;
  };
  std::printf("cgroups on - off (goal: < 1 ms per container at p99, 1,000 pods Running < 2 s):\n");
  std::printf("  all %zu Running: %s\n", n,
              delta(on->all_running_ms, off->all_running_ms, static_cast<double>(n)).c_str());
  std::printf("  pick-up p50: %s, p99: %s\n", delta(on->pickup_p50, off->pickup_p50, 1).c_str(),
              delta(on->pickup_p99, off->pickup_p99, 1).c_str());
  std::printf("  first restart p50: %s, p99: %s\n",
              delta(on->restart_p50, off->restart_p50, 1).c_str(),
              delta(on->restart_p99, off->restart_p99, 1).c_str());
}

// The machine's floor for starting `n` containers: what the kernel alone charges for the execs
// each container needs, spawned and reaped on every core at once with no agent involved: the
// container's dynamically linked `sleep`, and with `with_shim` also the static nodeagent-shim's.
// Wall milliseconds; `cpu_ms` gets the CPU all of it took (children's rusage).
double processFloorMs(size_t n, bool with_shim, double& cpu_ms) {
  const std::string shim = testing::binaryPath("nodeagent-shim").string();
  const unsigned threads = std::max(1U, std::thread::hardware_concurrency());
  auto runOne = [](std::vector<std::string> args) {
    const pid_t pid = spawn(args, "/dev/null");
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  };
  rusage before{};
  ::getrusage(RUSAGE_CHILDREN, &before);
  const auto t0 = SteadyClock::now();
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (size_t i = t; i < n; i += threads) {
        if (with_shim) runOne({shim});  // usage: exits 2 right after the static start-up
        runOne({"/bin/sleep", "0"});
      }
    });
  }
  for (auto& w : workers) w.join();
  const double wall = ms(SteadyClock::now() - t0);
  rusage after{};
  ::getrusage(RUSAGE_CHILDREN, &after);
  auto usec = [](const timeval& tv) { return tv.tv_sec * 1e6 + static_cast<double>(tv.tv_usec); };
  cpu_ms = (usec(after.ru_utime) + usec(after.ru_stime) - usec(before.ru_utime) -
            usec(before.ru_stime)) /
           1000;
  return wall;
}

void usage() {
  std::fprintf(stderr,
               "usage: process_runtime_bench [pods=1000] [samples=200] [--no-supervisord] "
               "[--cgroups=on|off|on,off|off,on]\n"
               "  --cgroups: on (default) gives pods real cgroups (as root); off runs the agent "
               "with the cgroup file systems read-only in a mount namespace of its own; a list "
               "runs the agent once per mode, in that order\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  size_t n = 1000, samples = 200;
  bool supervisord = true;
  std::vector<std::string> modes = {"on"};
  int positional = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--no-supervisord") {
      supervisord = false;
    } else if (arg.starts_with("--cgroups=")) {
      modes.clear();
      std::istringstream list(std::string(arg.substr(10)));
      for (std::string m; std::getline(list, m, ',');) modes.push_back(m);
      for (const auto& m : modes) {
        if (m != "on" && m != "off") {
          usage();
          return 2;
        }
      }
      if (modes.empty()) {
        usage();
        return 2;
      }
    } else if (!arg.empty() && arg[0] != '-' && positional < 2) {
      (positional++ == 0 ? n : samples) = std::strtoul(argv[i], nullptr, 10);
    } else {
      usage();
      return 2;
    }
  }
  if (n == 0 || samples == 0) {
    usage();
    return 2;
  }
  if (::geteuid() != 0) {
    std::printf(
        "process_runtime_bench: not root: the agent cannot make cgroups, so \"cgroups on\" runs "
        "without them too (each run says which mode it got)\n");
  }
  setenv("TMPDIR", "/dev/shm", 0);
  testing::cleanUpOnSignal("process_runtime_bench", "killing what it started", [] {
    killEverything();
    std::error_code ec;
    if (!g_base.empty()) fs::remove_all(g_base, ec);
  });
  int rc = 0;
  std::vector<std::pair<std::string, Figures>> columns;
  try {
    testing::TempDir base("nodeagent-procbench");
    {
      std::lock_guard lock(g_cleanup_mu);
      g_base = base.path();
    }
    for (const bool with_shim : {false, true}) {
      double cpu_ms = 0;
      const double wall = processFloorMs(n, with_shim, cpu_ms);
      std::printf(
          "%sprocess-creation floor (no agent): %zu x (%s) on %u threads: %.0f ms wall, %.0f ms "
          "CPU (%.2f ms per container)\n",
          with_shim ? "" : "\n", n, with_shim ? "exec nodeagent-shim + exec sleep" : "exec sleep",
          std::max(1U, std::thread::hardware_concurrency()), wall, cpu_ms,
          cpu_ms / static_cast<double>(n));
    }
    for (const auto& mode : modes) {
      columns.emplace_back("cgroups " + mode, Figures{});
      const fs::path dir =
          base.path() / ("nodeagent-cgroups-" + mode + "-" + std::to_string(columns.size()));
      std::printf("\n=== nodeagent, cgroups %s: %zu pods, %zu samples ===\n", mode.c_str(), n,
                  samples);
      try {
        runNodeagent(n, samples, dir, mode == "off", columns.back().second);
      } catch (const std::exception& e) {
        std::printf("nodeagent [cgroups %s]: failed: %s\n", mode.c_str(), e.what());
        rc = 1;
      }
      // Before the next run: no process, and no cgroup, of this one is left.
      killEverything();
    }
    if (supervisord) {
      columns.emplace_back("supervisord", Figures{});
      std::printf("\n=== supervisord: %zu programs ===\n", n);
      try {
        benchSupervisord(n, samples, base.path(), columns.back().second);
      } catch (const std::exception& e) {
        std::printf("supervisord: failed: %s\n", e.what());
        rc = 1;
      }
      killEverything();
    }
    std::lock_guard lock(g_cleanup_mu);
    g_base.clear();
    g_root_dirs.clear();
  } catch (const std::exception& e) {
    std::printf("process_runtime_bench: %s\n", e.what());
    killEverything();
    rc = 1;
  }
  printSummary(n, columns);
  return rc;
}
