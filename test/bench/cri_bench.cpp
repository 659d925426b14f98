// CRI runtime benchmark (prints figures; run by hand, as root, where containerd can run:
//   build/bench/cri_bench [--starts=50] [--exits=30] [--pods=100] [--idle=30]
//                         [--fast-relist=100ms] [--no-process-runtime]
//                         [--agent-arg=FLAG]... [--logs=DIR]).
// Everything runs against a containerd of the bench's own (test/support/containerd.h) with the
// test images (nodeagent.test/busybox:1, host network, nothing pulled: no address but loopback is
// contacted). A container "runs" when its shell has created a marker file in a directory of the
// bench's, bind-mounted at /work (a hostPath volume for pods): closer to "its process exists"
// than anything containerd or /pods report, and free to poll.
//  1. start, p50/p99 over `starts` containers started one at a time (the earlier ones keep
//     running), from the request to the marker, for
//       - `ctr run -d` (one container, no sandbox; ctr's own start included; also until ctr
//         exits),
//       - RunPodSandbox + CreateContainer + StartContainer from the bench's own CRI client (what
//         containerd takes for a host-network pod, no agent involved; also until StartContainer
//         returns),
//       - nodeagent --runtime=cri: the manifest renamed into its directory -> the marker, and ->
//         GET /pods shows the container running;
//     and the agent's overhead over both;
//  2. `pods` pods (restart Always, `sleep`) written at once -> all markers, and all Running in
//     /pods;
//  3. with those pods running: nodeagent's VmRSS and RssAnon; the CPU (utime + stime) of
//     nodeagent, containerd and the shims over `idle` seconds (the agent's relists keep containerd
//     busy too); containerd's RSS; the containerd-shim-runc-v2 processes' RSS and PSS per pod;
//  4. exit -> status: a container blocked reading a FIFO in /work exits when the bench writes to
//     it; from the write to GET /pods (polled every 5 ms) showing it terminated, p50/p99 over
//     `exits` containers, with the CRI defaults (containerd's events and a relist every 1 s), after
//     a restart of the agent (which adopts the pods) with the relist alone (NODEAGENT_CRI_EVENTS=0,
//     the figure before the agent followed containerd's events), and after another with events
//     and --pleg-relist-period=<fast-relist> (and the idle CPU again).
//     Each release first waits a random part of the relist period, so that the samples spread over
//     it instead of following the previous relist;
//  5. after containerd is gone: nodeagent with its process runtime and `pods` `sleep` pods, the
//     RSS and PSS of its nodeagent-shim processes per container (the process runtime's
//     counterpart of containerd's shims).
// The CRI agent's /metrics (PLEG relist duration and interval, pod sync durations) are printed
// before each of its stops. The load average is printed at the start and the end: on a busy
// machine the latencies grow. --agent-arg passes one more flag to the CRI agent (--v=4), --logs
// copies its log and containerd's out of the temp dirs (to follow a slow sample).
//
// Everything the bench starts goes when it ends, also on failure or SIGINT/SIGTERM/SIGHUP: the
// agents, every container of the bench's containerd (ctr tasks delete -f, ctr containers
// delete), containerd and its shims, the cgroups of the containers (containerd's /k8s.io/<id> in
// every hierarchy, the bench's cgroup roots) and the temp dirs ($TMPDIR, default /dev/shm).
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/runtime/cri/cri_client.h"
#include "agent/runtime/state_file.h"
#include "test/support/bench_signals.h"
#include "test/support/cgroup_root.h"
#include "test/support/containerd.h"
#include "test/support/integration_env.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

extern char** environ;

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace cri = nodeagent::runtime::cri;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

// containerd.cpp's skipUnlessContainerdCanRun() (for Catch2 tests; the bench calls
// containerdUnavailableReason() instead) refers to skipTest, whose definition needs Catch2's
// runner, which the bench does not have: this one stands in for it.
[[noreturn]] void nodeagent::testing::skipTest(const std::string& why, std::source_location) {
  std::printf("cri_bench: %s\n", why.c_str());
  std::exit(1);
}

namespace {

constexpr const char* kImage = "nodeagent.test/busybox:1";
constexpr const char* kNode = "bench";

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Latency samples in milliseconds.
struct Latency {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  // Nearest rank: with 51 samples or fewer, p99 is the largest.
  double at(double p) const {
    if (v.empty()) return 0;
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1,
                      static_cast<size_t>(p * static_cast<double>(s.size() - 1) + 0.5))];
  }
  double p50() const { return at(0.5); }
  double p99() const { return at(0.99); }
};

struct Options {
  size_t starts = 50;
  size_t exits = 30;
  size_t pods = 100;
  std::chrono::seconds idle = 30s;
  std::chrono::milliseconds fast_relist = 100ms;
  bool process_runtime = true;
  std::vector<std::string> agent_args;  // more flags for the CRI agent (--v=4)
  fs::path logs;                        // where the agent's and containerd's logs are copied
};

// What a containerd-shim-runc-v2 or nodeagent-shim set costs, and the agent with it.
struct Resources {
  long agent_rss = 0, agent_anon = 0, containerd_rss = 0, containerd_anon = 0;
  size_t shims = 0;
  long shims_rss = 0, shims_pss = 0;
  double agent_cpu = -1, containerd_cpu = -1, shims_cpu = -1;  // % of a core over the window
};

struct Figures {
  Latency ctr_proc, ctr_exit, direct_proc, direct_return, agent_proc, agent_pods;
  Latency exit_default, exit_relist, exit_fast;
  std::optional<double> many_procs_ms, many_running_ms, adopt_ms;
  std::optional<Resources> cri_default, cri_fast, process;
  size_t many = 0;
};

// ---- /proc ----------------------------------------------------------------------------------

long procStatusKb(pid_t pid, const std::string& key) {
  std::istringstream in(testing::readFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) == 0) {
      return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

long pssKb(pid_t pid) {
  std::istringstream in(testing::readFile("/proc/" + std::to_string(pid) + "/smaps_rollup"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Pss:", 0) == 0) return std::strtol(line.c_str() + 4, nullptr, 10);
  }
  return 0;
}

// utime + stime of a process (fields 14 and 15 of /proc/<pid>/stat), in seconds.
double procCpuSeconds(pid_t pid) {
  const std::string all = testing::readFile("/proc/" + std::to_string(pid) + "/stat");
  const auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(all.substr(close + 2));
  std::string f;
  double ut = 0, st = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) ut = std::stod(f);
    if (i == 15) st = std::stod(f);
  }
  return (ut + st) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The arguments of a process (empty when it is gone).
std::vector<std::string> procArgs(pid_t pid) {
  const std::string all = testing::readFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end - at));
    at = end == std::string::npos ? all.size() : end + 1;
  }
  return args;
}

// The containerd-shim-runc-v2 processes of the containerd serving `socket` (-address <socket>).
std::vector<pid_t> containerdShims(const fs::path& socket) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const pid_t pid = static_cast<pid_t>(std::strtol(e.path().filename().c_str(), nullptr, 10));
    if (pid <= 0) continue;
    const auto args = procArgs(pid);
    if (args.empty() || !args[0].ends_with("containerd-shim-runc-v2")) continue;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "-address" && args[i + 1] == socket.string()) out.push_back(pid);
    }
  }
  return out;
}

std::string loadAverage() {
  std::string s = testing::readFile("/proc/loadavg");
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// ---- processes --------------------------------------------------------------------------------

// Starts a program with stdout and stderr appended to `log`, with no signal blocked (the bench
// blocks SIGINT/SIGTERM/SIGHUP in its own threads).
pid_t spawnLogged(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, a[0].c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot spawn " + a[0] + ": " + std::strerror(rc));
  return pid;
}

void killAndReap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  int st;
  ::waitpid(pid, &st, 0);
}

// Runs a shell command line and returns its stdout.
std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  ::pclose(p);
  return out;
}

// The last lines of a file, up to about `bytes`.
std::string tail(const fs::path& file, size_t bytes = 3000) {
  const std::string text = testing::readFile(file);
  if (text.size() <= bytes) return text;
  const size_t line = text.find('\n', text.size() - bytes);
  return line == std::string::npos ? text.substr(text.size() - bytes) : text.substr(line + 1);
}

// Polls for a file every millisecond; `check` (throwing when waiting is pointless) on each poll.
bool waitFile(const fs::path& p, Clock::time_point deadline,
              const std::function<void()>& check = {}) {
  std::error_code ec;
  while (!fs::exists(p, ec)) {
    if (Clock::now() >= deadline) return false;
    if (check) check();
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// ---- cleanup: whichever way the bench ends --------------------------------------------------

struct CleanupState {
  std::mutex mu;
  testing::TestContainerd* containerd = nullptr;
  pid_t agent = 0;
  std::vector<fs::path> process_roots;  // --root-dir of process runtime agents
  std::vector<std::string> cgroup_roots;
  std::set<std::string> containerd_ids;  // containers of the bench's containerd
  fs::path base;
};
CleanupState g;

std::string ctr(const testing::TestContainerd& c) { return c.ctrCommand(); }

// Every container of the bench's containerd (CRI sandboxes and containers, ctr's) killed and
// deleted, so that runc removes its cgroups; the ids are kept for removeContainerdCgroups.
void deleteContainerdContainers(const testing::TestContainerd& c, std::set<std::string>& ids) {
  std::istringstream list(capture(ctr(c) + " containers list -q 2>/dev/null"));
  std::string all;
  for (std::string id; std::getline(list, id);) {
    if (id.empty() || id.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz-") != id.npos) {
      continue;
    }
    ids.insert(id);
    all += " " + id;
  }
  if (all.empty()) return;
  (void)!std::system((ctr(c) + " tasks delete -f" + all + " >/dev/null 2>&1").c_str());
  (void)!std::system((ctr(c) + " containers delete" + all + " >/dev/null 2>&1").c_str());
}

// The ids of every sandbox and container containerd's CRI made (from its log: "returns sandbox
// id" and "returns container id"), also of those already removed, whose cgroup runc may have
// failed to delete.
void criIdsInLog(const testing::TestContainerd& c, std::set<std::string>& ids) {
  const std::string log = c.logTail(std::string::npos);
  for (const std::string key : {"sandbox id \\\"", "container id \\\""}) {
    for (size_t at = log.find(key); at != std::string::npos; at = log.find(key, at + 1)) {
      const std::string id = log.substr(at + key.size(), 64);
      if (id.size() == 64 && id.find_first_not_of("0123456789abcdef") == std::string::npos) {
        ids.insert(id);
      }
    }
  }
}

// containerd gives a container without a cgroup parent the cgroup /k8s.io/<id> (its namespace)
// in every hierarchy; those of the bench's containers that runc did not remove (a killed shim, a
// failed delete)
// are removed here (empty cgroups: rmdir). /k8s.io itself may be shared and stays.
void removeContainerdCgroups(const std::set<std::string>& ids) {
  std::error_code ec;
  for (const auto& h : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    if (h.is_symlink(ec)) continue;
    for (const auto& id : ids) ::rmdir((h.path() / "k8s.io" / id).c_str());
  }
}

// containerd, its containers and their cgroups gone; idempotent. Caller holds g.mu.
void stopContainerdLocked() {
  if (g.containerd != nullptr) {
    criIdsInLog(*g.containerd, g.containerd_ids);
    deleteContainerdContainers(*g.containerd, g.containerd_ids);
    g.containerd->stop();
  }
  removeContainerdCgroups(g.containerd_ids);
}

void killProcessRuntimeContainers(const fs::path& root) {
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

void cleanUpEverything() {
  std::lock_guard lock(g.mu);
  killAndReap(std::exchange(g.agent, 0));
  for (const auto& root : g.process_roots) killProcessRuntimeContainers(root);
  stopContainerdLocked();
  for (const auto& root : std::exchange(g.cgroup_roots, {})) testing::removeCgroupTree(root);
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

std::string newCgroupRoot() {
  std::string root = testing::isolatedCgroupRoot();
  std::lock_guard lock(g.mu);
  g.cgroup_roots.push_back(root);
  return root;
}

// containerd started with SIGINT/SIGTERM unblocked (it inherits the starting thread's mask, and
// TestContainerd::stop ends it with SIGTERM).
std::unique_ptr<testing::TestContainerd> startContainerd() {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_UNBLOCK, &set, &old);
  std::unique_ptr<testing::TestContainerd> c;
  try {
    c = std::make_unique<testing::TestContainerd>();
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  std::lock_guard lock(g.mu);
  g.containerd = c.get();
  return c;
}

// ---- GET /pods --------------------------------------------------------------------------------

// The body of GET `path` on the loopback port (200 only): plain reads, no HTTP library, so the
// client's reading is not what the figures measure.
std::optional<std::string> httpGet(int port, std::string_view path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  const std::string request =
      "GET " + std::string(path) + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[65536];
    ssize_t r;
    while ((r = ::read(fd, buf, sizeof buf)) > 0) response.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  const size_t header_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200 ", 0) != 0 || header_end == std::string::npos) {
    return std::nullopt;
  }
  return response.substr(header_end + 4);
}

// The state ("running", "terminated", "waiting") of the first container of pod `name` in a
// /pods body, "" when it has none yet. Only that pod's object is parsed.
std::string containerState(const std::string& body, const std::string& name) {
  const size_t at = body.find("\"name\":\"" + name + "-" + kNode + "\"");
  if (at == std::string::npos) return "";
  const size_t start = body.rfind("{\"apiVersion\"", at);
  if (start == std::string::npos) return "";
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
  const json pod = json::parse(body.substr(start, end - start), nullptr, false);
  if (pod.is_discarded() || !pod.contains("status")) return "";
  const auto& status = pod["status"];
  if (!status.contains("containerStatuses") || status["containerStatuses"].empty()) return "";
  const auto& state = status["containerStatuses"][0]["state"];
  for (const char* s : {"running", "terminated", "waiting"}) {
    if (state.contains(s)) return s;
  }
  return "";
}

// Pods in a /pods body that are Running with their container running, and all pods listed.
std::pair<size_t, size_t> runningPods(const std::string& body) {
  const json list = json::parse(body, nullptr, false);
  if (list.is_discarded() || !list.contains("items")) return {0, 0};
  size_t running = 0;
  for (const auto& p : list["items"]) {
    if (p["status"].value("phase", "") != "Running") continue;
    if (!p["status"].contains("containerStatuses")) continue;
    if (p["status"]["containerStatuses"][0]["state"].contains("running")) ++running;
  }
  return {running, list["items"].size()};
}

// A host-network pod of the busybox image (no pull) running `script` with the bench's work dir
// at /work (a hostPath). `exec sleep` as the container's PID 1 ignores SIGTERM: a grace period
// of 1 s keeps the removal of many pods short.
std::string criPod(const std::string& name, const fs::path& work, const std::string& script,
                   const std::string& restart = "Always") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  restartPolicy: " + restart +
         "\n  terminationGracePeriodSeconds: 1\n  volumes:\n  - name: work\n    hostPath:\n"
         "      path: " +
         work.string() +
         "\n      type: Directory\n  containers:\n  - name: main\n    image: " + kImage +
         "\n    imagePullPolicy: Never\n    command: [\"/bin/sh\", \"-c\", " + json(script).dump() +
         "]\n    volumeMounts:\n    - name: work\n      mountPath: /work\n";
}

// The process runtime's pod: a host `sleep`.
std::string sleepPod(const std::string& name) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
         "    image: debian:12\n    command: [\"sleep\", \"100000\"]\n";
}

std::string startScript(const std::string& mark) {
  return "touch /work/" + mark + "; exec sleep 100000";
}

// The daemon as a child process: manifests, root and log dirs of its own under `dir`, its
// read-only port on loopback (no kubelet API port, no apiserver).
class Agent {
 public:
  Agent(const fs::path& dir, std::vector<std::string> runtime_args)
      : dir_(dir),
        runtime_args_(std::move(runtime_args)),
        port_(testing::unusedLoopbackPort()),
        cgroup_root_(newCgroupRoot()) {
    fs::create_directories(dir_ / "manifests");
  }
  ~Agent() { stop(SIGKILL); }
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Starts the daemon and waits until it serves /healthz.
  void start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {testing::binaryPath("nodeagent").string(),
                                     "--pod-manifest-path=" + (dir_ / "manifests").string(),
                                     "--root-dir=" + (dir_ / "root").string(),
                                     "--pod-log-dir=" + (dir_ / "logs").string(),
                                     "--read-only-port=" + std::to_string(port_),
                                     "--port=0",
                                     "--healthz-port=0",
                                     "--hostname-override=" + std::string(kNode),
                                     "--max-pods=10000",
                                     "--cgroup-root=" + cgroup_root_};
    args.insert(args.end(), runtime_args_.begin(), runtime_args_.end());
    args.insert(args.end(), extra.begin(), extra.end());
    {
      std::lock_guard lock(g.mu);
      pid_ = spawnLogged(args, dir_ / "agent.log");
      g.agent = pid_;
    }
    const auto deadline = Clock::now() + 30s;
    while (!httpGet(port_, "/healthz")) {
      checkAlive();
      if (Clock::now() > deadline) {
        stop(SIGKILL);
        throw std::runtime_error("nodeagent did not serve /healthz within 30 s; its log:\n" +
                                 logTail());
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  // SIGTERM: the agent exits, its containers keep running. SIGKILL: likewise, at once.
  void stop(int sig = SIGTERM) {
    std::lock_guard lock(g.mu);
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int st;
    ::waitpid(pid_, &st, 0);
    pid_ = 0;
    g.agent = 0;
  }
  void writeManifest(const std::string& name, const std::string& content) const {
    const auto tmp = dir_ / "manifests" / ("." + name + ".yaml.tmp");
    testing::writeFile(tmp, content);
    fs::rename(tmp, dir_ / "manifests" / (name + ".yaml"));
  }
  void removeManifest(const std::string& name) const {
    std::error_code ec;
    fs::remove(dir_ / "manifests" / (name + ".yaml"), ec);
  }
  void removeAllManifests() const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ / "manifests", ec)) fs::remove(e.path(), ec);
  }
  std::optional<std::string> pods() const { return httpGet(port_, "/pods"); }
  std::optional<std::string> metrics() const { return httpGet(port_, "/metrics"); }
  std::string logTail() const { return tail(dir_ / "agent.log"); }
  pid_t pid() const { return pid_; }
  // Throws when the daemon has exited (with how, and the end of its log).
  void checkAlive() const {
    int st = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &st, WNOHANG) != pid_) return;
    {
      std::lock_guard lock(g.mu);
      pid_ = 0;
      g.agent = 0;
    }
    const std::string how = WIFSIGNALED(st) ? "signal " + std::to_string(WTERMSIG(st)) + " (" +
                                                  ::strsignal(WTERMSIG(st)) + ")"
                                            : "exit " + std::to_string(WEXITSTATUS(st));
    throw std::runtime_error("nodeagent exited (" + how + "); its log:\n" + logTail());
  }
  std::function<void()> aliveCheck() const {
    return [this] { checkAlive(); };
  }
  fs::path root() const { return dir_ / "root"; }

 private:
  fs::path dir_;
  std::vector<std::string> runtime_args_;
  int port_;
  std::string cgroup_root_;
  mutable pid_t pid_ = 0;  // 0 once the daemon is reaped
};

// Polls /pods every `every` until pod `name`'s container is in `state`; the time the answer
// that shows it arrived, or nullopt at the deadline.
std::optional<Clock::time_point> waitPodState(const Agent& a, const std::string& name,
                                              const std::string& state,
                                              std::chrono::milliseconds every,
                                              Clock::time_point deadline) {
  for (;;) {
    const auto body = a.pods();
    const auto seen = Clock::now();
    if (body && containerState(*body, name) == state) return seen;
    if (seen >= deadline) return std::nullopt;
    a.checkAlive();
    std::this_thread::sleep_for(every);
  }
}

// Waits until the agent lists no more than `pods` pods and containerd runs no more than
// `processes` container processes; how long that took, or nullopt at the deadline.
std::optional<double> waitDrained(const Agent& a, const testing::TestContainerd& c, size_t pods,
                                  size_t processes, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    const auto body = a.pods();
    if (body && runningPods(*body).second <= pods && c.containerProcesses().size() <= processes) {
      return ms(Clock::now() - t0);
    }
    a.checkAlive();
    std::this_thread::sleep_for(100ms);
  }
  return std::nullopt;
}

// ---- 1. start: ctr run, the CRI calls, the agent ----------------------------------------------

// One `ctr run -d` of the image and command: to the marker, and until ctr exits.
void ctrStart(const testing::TestContainerd& c, const fs::path& base, const std::string& cgroup,
              const std::string& id, Figures& f) {
  const std::vector<std::string> args = {
      "ctr",
      "--address",
      c.socketPath().string(),
      "--namespace",
      "k8s.io",
      "run",
      "-d",
      "--null-io",
      "--fifo-dir",
      (c.dir() / "fifo").string(),
      "--net-host",
      "--cgroup",
      cgroup + "/" + id,
      "--mount",
      "type=bind,src=" + (base / "work").string() + ",dst=/work,options=rbind:rw",
      kImage,
      id,
      "/bin/sh",
      "-c",
      startScript(id)};
  const fs::path mark = base / "work" / id;
  const auto t0 = Clock::now();
  const pid_t pid = spawnLogged(args, base / "ctr.log");
  std::optional<Clock::time_point> started, exited;
  std::error_code ec;
  while (!started || !exited) {
    const auto now = Clock::now();
    if (!started && fs::exists(mark, ec)) started = now;
    int st = 0;
    if (!exited && ::waitpid(pid, &st, WNOHANG) == pid) {
      exited = now;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        throw std::runtime_error("ctr run " + id + " failed:\n" + tail(base / "ctr.log"));
      }
    }
    if (now - t0 > 60s) {
      killAndReap(pid);
      throw std::runtime_error("ctr run " + id + ": no start within 60 s");
    }
    std::this_thread::sleep_for(1ms);
  }
  f.ctr_proc.add(ms(*started - t0));
  f.ctr_exit.add(ms(*exited - t0));
}

void benchCtrRun(const testing::TestContainerd& c, const fs::path& base, size_t n, Figures& f) {
  const std::string cgroup = newCgroupRoot();
  std::string ids;
  try {
    for (size_t i = 0; i < n; ++i) {
      const std::string id = "bench-ctr-" + std::to_string(i);
      ids += " " + id;
      ctrStart(c, base, cgroup, id, f);
    }
  } catch (...) {
    (void)!std::system((ctr(c) + " tasks delete -f" + ids + " >/dev/null 2>&1").c_str());
    throw;
  }
  (void)!std::system((ctr(c) + " tasks delete -f" + ids + " >/dev/null 2>&1").c_str());
  (void)!std::system((ctr(c) + " containers delete" + ids + " >/dev/null 2>&1").c_str());
}

// One host-network pod through the CRI as the agent makes it (the node's network namespace, a
// log directory, the hostPath mount): to the marker, and until StartContainer returns.
void criStart(cri::CriClient& client, const fs::path& base, const std::string& name,
              std::vector<std::string>& sandboxes, Figures& f) {
  cri::PodSandboxConfig sandbox;
  sandbox.metadata = {name, "bench-uid-" + name, "bench", 0};
  sandbox.log_directory = (base / "direct-logs" / name).string();
  sandbox.namespace_options.network = cri::NamespaceMode::kNode;
  fs::create_directories(base / "direct-logs" / name / "main");
  cri::ContainerConfig container;
  container.metadata = {"main", 0};
  container.image = kImage;
  container.command = {"/bin/sh", "-c", startScript(name)};
  container.mounts = {{"/work", (base / "work").string(), false}};
  container.log_path = "main/0.log";
  container.security_context.namespace_options = sandbox.namespace_options;

  const auto t0 = Clock::now();
  auto sandbox_id = client.runPodSandbox(sandbox);
  if (!sandbox_id.ok()) throw std::runtime_error(sandbox_id.status().toString());
  sandboxes.push_back(*sandbox_id);
  auto id = client.createContainer(*sandbox_id, container, sandbox);
  if (!id.ok()) throw std::runtime_error(id.status().toString());
  if (auto started = client.startContainer(*id); !started.ok()) {
    throw std::runtime_error(started.toString());
  }
  const auto returned = Clock::now();
  if (!waitFile(base / "work" / name, t0 + 60s)) {
    throw std::runtime_error(name + ": StartContainer returned but no marker within 60 s");
  }
  f.direct_proc.add(ms(Clock::now() - t0));
  f.direct_return.add(ms(returned - t0));
}

void benchCriCalls(const testing::TestContainerd& c, const fs::path& base, size_t n, Figures& f) {
  auto client = cri::CriClient::create({c.endpoint()});
  if (!client.ok()) throw std::runtime_error(client.status().toString());
  std::vector<std::string> sandboxes;
  auto remove = [&] {
    for (const auto& id : sandboxes) {
      (void)(*client)->stopPodSandbox(id);
      (void)(*client)->removePodSandbox(id);
    }
  };
  try {
    for (size_t i = 0; i < n; ++i) {
      criStart(**client, base, "cri-" + std::to_string(i), sandboxes, f);
    }
  } catch (...) {
    remove();
    throw;
  }
  remove();
}

// Pods written one at a time, each once the previous one runs: to the marker, and to /pods.
void benchAgentStarts(const Agent& a, const fs::path& base, size_t n, Figures& f) {
  for (size_t i = 0; i < n; ++i) {
    const std::string name = "start-" + std::to_string(i);
    const auto t0 = Clock::now();
    a.writeManifest(name, criPod(name, base / "work", startScript(name)));
    if (!waitFile(base / "work" / name, t0 + 60s, a.aliveCheck())) {
      throw std::runtime_error(name + ": no start within 60 s; the agent's log:\n" + a.logTail());
    }
    f.agent_proc.add(ms(Clock::now() - t0));
    const auto seen = waitPodState(a, name, "running", 2ms, t0 + 60s);
    if (!seen) throw std::runtime_error(name + ": runs, but not in /pods within 60 s");
    f.agent_pods.add(ms(*seen - t0));
  }
}

// ---- 2. many pods at once ---------------------------------------------------------------------

void benchMany(const Agent& a, const fs::path& base, size_t m, Figures& f) {
  std::set<size_t> pending;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < m; ++i) {
    const std::string name = "many-" + std::to_string(i);
    a.writeManifest(name, criPod(name, base / "work", startScript(name)));
    pending.insert(i);
  }
  auto last_poll = Clock::now();
  while (!f.many_procs_ms || !f.many_running_ms) {
    const auto now = Clock::now();
    if (now - t0 > 600s) {
      throw std::runtime_error(std::to_string(pending.size()) + " of " + std::to_string(m) +
                               " pods not started within 600 s; the agent's log:\n" + a.logTail());
    }
    a.checkAlive();
    std::error_code ec;
    std::erase_if(pending, [&](size_t i) {
      return fs::exists(base / "work" / ("many-" + std::to_string(i)), ec);
    });
    if (pending.empty() && !f.many_procs_ms) f.many_procs_ms = ms(now - t0);
    if (!f.many_running_ms && now - last_poll >= 20ms) {
      last_poll = now;
      const auto body = a.pods();
      if (body && runningPods(*body).first >= m) f.many_running_ms = ms(Clock::now() - t0);
    }
    std::this_thread::sleep_for(1ms);
  }
  f.many = m;
}

// Where containerd put a pod's container (its memory cgroup).
std::string containerCgroup(const testing::TestContainerd& c) {
  for (const auto& [pid, cmd] : c.containerProcesses()) {
    if (cmd.rfind("sleep 100000", 0) != 0) continue;
    std::istringstream in(testing::readFile("/proc/" + std::to_string(pid) + "/cgroup"));
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find(":memory:");
      if (at != std::string::npos) return line.substr(at + 8);
    }
  }
  return "?";
}

// ---- 3. resources -----------------------------------------------------------------------------

// CPU of the agent, containerd and the shims over `window`, in % of a core.
void measureCpu(pid_t agent, pid_t containerd, const std::vector<pid_t>& shims,
                std::chrono::seconds window, Resources& r) {
  auto shimsCpu = [&] {
    double sum = 0;
    for (pid_t s : shims) sum += procCpuSeconds(s);
    return sum;
  };
  const double a0 = procCpuSeconds(agent), c0 = procCpuSeconds(containerd), s0 = shimsCpu();
  std::this_thread::sleep_for(window);
  const double per = 100.0 / static_cast<double>(window.count());
  r.agent_cpu = (procCpuSeconds(agent) - a0) * per;
  r.containerd_cpu = (procCpuSeconds(containerd) - c0) * per;
  r.shims_cpu = (shimsCpu() - s0) * per;
}

Resources measureCri(const Agent& a, const testing::TestContainerd& c,
                     std::chrono::seconds window) {
  Resources r;
  const auto shims = containerdShims(c.socketPath());
  measureCpu(a.pid(), c.pid(), shims, window, r);
  a.checkAlive();
  r.agent_rss = procStatusKb(a.pid(), "VmRSS");
  r.agent_anon = procStatusKb(a.pid(), "RssAnon");
  r.containerd_rss = procStatusKb(c.pid(), "VmRSS");
  r.containerd_anon = procStatusKb(c.pid(), "RssAnon");
  r.shims = shims.size();
  for (pid_t s : shims) {
    r.shims_rss += procStatusKb(s, "VmRSS");
    r.shims_pss += pssKb(s);
  }
  return r;
}

void printResources(const char* who, const Resources& r, size_t pods, std::chrono::seconds w) {
  const double n = static_cast<double>(std::max<size_t>(pods, 1));
  std::printf("%s: nodeagent VmRSS %ld KiB, RssAnon %ld KiB, CPU %.3f%% of a core (%lld s)\n", who,
              r.agent_rss, r.agent_anon, r.agent_cpu, static_cast<long long>(w.count()));
  std::printf("%s: containerd VmRSS %ld KiB, RssAnon %ld KiB, CPU %.3f%%\n", who, r.containerd_rss,
              r.containerd_anon, r.containerd_cpu);
  std::printf(
      "%s: %zu containerd-shim-runc-v2 for %zu pods: RSS %ld KiB (%.0f per pod), PSS %ld KiB "
      "(%.0f per pod), CPU %.3f%%\n",
      who, r.shims, pods, r.shims_rss, static_cast<double>(r.shims_rss) / n, r.shims_pss,
      static_cast<double>(r.shims_pss) / n, r.shims_cpu);
}

// ---- 4. exit -> status ------------------------------------------------------------------------

std::string exitPodName(const std::string& tag, size_t i) { return tag + "-" + std::to_string(i); }

// `k` pods (restart Never) whose container creates its marker, then blocks reading its FIFO and
// exits 0 once the bench writes a line to it; all running before this returns.
void startExitPods(const Agent& a, const fs::path& work, const std::string& tag, size_t k) {
  for (size_t i = 0; i < k; ++i) {
    const std::string name = exitPodName(tag, i);
    if (::mkfifo((work / (name + ".fifo")).c_str(), 0600) != 0) {
      throw std::runtime_error("mkfifo " + name + ": " + std::strerror(errno));
    }
    a.writeManifest(
        name,
        criPod(name, work, "touch /work/" + name + "; read x < /work/" + name + ".fifo; exit 0",
               "Never"));
  }
  const auto deadline = Clock::now() + 300s;
  for (size_t i = 0; i < k; ++i) {
    const std::string name = exitPodName(tag, i);
    if (!waitFile(work / name, deadline, a.aliveCheck()) ||
        !waitPodState(a, name, "running", 20ms, deadline)) {
      throw std::runtime_error(name + " did not run within 300 s; the agent's log:\n" +
                               a.logTail());
    }
  }
}

// Writes a line to the FIFO once the container has it open for reading (ENXIO until then).
bool release(const fs::path& fifo) {
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      const bool ok = ::write(fd, "go\n", 3) == 3;
      ::close(fd);
      return ok;
    }
    std::this_thread::sleep_for(200us);
  }
  return false;
}

Latency benchExits(const Agent& a, const fs::path& work, const std::string& tag, size_t k,
                   std::chrono::milliseconds period) {
  startExitPods(a, work, tag, k);
  std::mt19937 rng(static_cast<unsigned>(k));
  std::uniform_int_distribution<long> delay(0, std::max<long>(period.count() - 1, 0));
  Latency lat;
  for (size_t i = 0; i < k; ++i) {
    const std::string name = exitPodName(tag, i);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay(rng)));
    if (!release(work / (name + ".fifo"))) {
      std::printf("%s never opened its FIFO; left out\n", name.c_str());
      continue;
    }
    const auto t0 = Clock::now();
    const auto seen = waitPodState(a, name, "terminated", 5ms, t0 + 30s);
    if (!seen) throw std::runtime_error(name + " exited, but /pods did not say so within 30 s");
    lat.add(ms(*seen - t0));
  }
  for (size_t i = 0; i < k; ++i) a.removeManifest(exitPodName(tag, i));
  return lat;
}

// ---- 5. the process runtime's shims -----------------------------------------------------------

std::vector<pid_t> processRuntimeShims(const fs::path& root) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root / "containers", ec)) {
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

// nodeagent with its process runtime and `m` sleep pods: its nodeagent-shim processes.
void benchProcessRuntime(const fs::path& base, size_t m, Figures& f) {
  Agent a(base / "agent-process", {});
  {
    std::lock_guard lock(g.mu);
    g.process_roots.push_back(a.root());
  }
  for (size_t i = 0; i < m; ++i) {
    a.writeManifest("sleep-" + std::to_string(i), sleepPod("sleep-" + std::to_string(i)));
  }
  a.start();
  const auto deadline = Clock::now() + 300s;
  for (;;) {
    const auto body = a.pods();
    if (body && runningPods(*body).first >= m) break;
    a.checkAlive();
    if (Clock::now() > deadline) {
      throw std::runtime_error("process runtime: pods not Running within 300 s; its log:\n" +
                               a.logTail());
    }
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(3s);
  Resources r;
  r.agent_rss = procStatusKb(a.pid(), "VmRSS");
  r.agent_anon = procStatusKb(a.pid(), "RssAnon");
  const auto shims = processRuntimeShims(a.root());
  r.shims = shims.size();
  for (pid_t s : shims) {
    r.shims_rss += procStatusKb(s, "VmRSS");
    r.shims_pss += pssKb(s);
  }
  f.process = r;
  a.removeAllManifests();
  testing::eventually([&] { return processRuntimeShims(a.root()).empty(); }, 60s);
  a.stop();
  killProcessRuntimeContainers(a.root());
}

// ---- the agent's run ------------------------------------------------------------------------

void printLatency(const char* what, const Latency& l) {
  std::printf("%s: min %.1f ms, p50 %.1f ms, p99 %.1f ms, max %.1f ms (%zu samples)\n", what,
              l.at(0), l.p50(), l.p99(), l.at(1), l.v.size());
}

// Until `m` pods are Running in /pods; how long that took.
double waitRunning(const Agent& a, size_t m, std::chrono::seconds limit) {
  const auto t0 = Clock::now();
  for (;;) {
    const auto body = a.pods();
    if (body && runningPods(*body).first >= m) return ms(Clock::now() - t0);
    a.checkAlive();
    if (Clock::now() - t0 > limit) {
      throw std::runtime_error(std::to_string(m) + " pods not Running within " +
                               std::to_string(limit.count()) + " s; the agent's log:\n" +
                               a.logTail());
    }
    std::this_thread::sleep_for(20ms);
  }
}

void drain(const Agent& a, const testing::TestContainerd& c, size_t pods, const char* what) {
  // Each pod is its sandbox's pause process and its container's.
  const auto took = waitDrained(a, c, pods, 2 * pods, 180s);
  if (!took) throw std::runtime_error(std::string(what) + ": not removed within 180 s");
  std::printf("nodeagent: %s removed in %.0f ms\n", what, *took);
}

// The agent's own view from GET /metrics, cumulative over its life: the PLEG relist's mean
// duration and interval, and the pod workers' mean sync duration by operation type (count in
// parentheses).
void printAgentMetrics(const Agent& a, const std::string& who) {
  const auto body = a.metrics();
  if (!body) return;
  std::map<std::string, double> values;  // "name{labels}" -> value
  std::istringstream in(*body);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.rfind(' ');
    if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
    values[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  auto mean = [&](const std::string& name, const std::string& labels) {
    const double n = values[name + "_count" + labels];
    if (n == 0) return std::string("-");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f ms (%.0f)", values[name + "_sum" + labels] / n * 1000, n);
    return std::string(buf);
  };
  const std::string worker = "kubelet_pod_worker_duration_seconds";
  auto op = [](const char* type) { return std::string("{operation_type=\"") + type + "\"}"; };
  std::printf(
      "%s: /metrics: PLEG relist mean %s, interval mean %s; pod sync mean: create %s, update %s, "
      "sync %s, kill %s\n",
      who.c_str(), mean("kubelet_pleg_relist_duration_seconds", "").c_str(),
      mean("kubelet_pleg_relist_interval_seconds", "").c_str(), mean(worker, op("create")).c_str(),
      mean(worker, op("update")).c_str(), mean(worker, op("sync")).c_str(),
      mean(worker, op("kill")).c_str());
}

// The agent with the CRI defaults (containerd's events, relist 1 s): starts, many pods,
// resources, exits; restarted with the relist alone: exits; then with the fast relist: adoption,
// resources, exits.
void benchAgent(const Options& o, const fs::path& base, const testing::TestContainerd& c,
                Figures& f) {
  std::vector<std::string> args = {"--runtime=cri", "--container-runtime-endpoint=" + c.endpoint()};
  args.insert(args.end(), o.agent_args.begin(), o.agent_args.end());
  Agent a(base / "agent-cri", std::move(args));
  a.start();
  benchAgentStarts(a, base, o.starts, f);
  printLatency("nodeagent: manifest -> container's marker", f.agent_proc);
  printLatency("nodeagent: manifest -> running in /pods", f.agent_pods);
  a.removeAllManifests();
  drain(a, c, 0, "the start pods");

  benchMany(a, base, o.pods, f);
  std::printf("nodeagent: a pod's container is in the memory cgroup %s\n",
              containerCgroup(c).c_str());
  std::printf(
      "nodeagent: %zu pods at once: all markers after %.0f ms, all Running in /pods after "
      "%.0f ms\n",
      o.pods, *f.many_procs_ms, *f.many_running_ms);
  std::this_thread::sleep_for(5s);
  f.cri_default = measureCri(a, c, o.idle);
  printResources("relist 1 s", *f.cri_default, o.pods, o.idle);
  f.exit_default = benchExits(a, base / "work", "exit-a", o.exits, 1000ms);
  printLatency("nodeagent, events + relist 1 s: exit -> terminated in /pods", f.exit_default);
  drain(a, c, o.pods, "the exit pods");
  printAgentMetrics(a, "nodeagent, events + relist 1 s");
  a.stop();
  // The relist alone: the agent's own switch for containerd's event stream, in its environment.
  ::setenv("NODEAGENT_CRI_EVENTS", "0", 1);
  a.start();
  ::unsetenv("NODEAGENT_CRI_EVENTS");
  waitRunning(a, o.pods, 300s);
  f.exit_relist = benchExits(a, base / "work", "exit-r", o.exits, 1000ms);
  printLatency("nodeagent, relist 1 s alone: exit -> terminated in /pods", f.exit_relist);
  drain(a, c, o.pods, "the exit pods");
  a.stop();
  const std::string fast = std::to_string(o.fast_relist.count()) + "ms";
  const auto t0 = Clock::now();
  a.start({"--pleg-relist-period=" + fast});
  waitRunning(a, o.pods, 300s);
  f.adopt_ms = ms(Clock::now() - t0);
  std::printf(
      "nodeagent restarted with --pleg-relist-period=%s: %zu pods Running in /pods after "
      "%.0f ms\n",
      fast.c_str(), o.pods, *f.adopt_ms);
  std::this_thread::sleep_for(5s);
  f.cri_fast = measureCri(a, c, o.idle);
  printResources(("relist " + fast).c_str(), *f.cri_fast, o.pods, o.idle);
  f.exit_fast = benchExits(a, base / "work", "exit-b", o.exits, o.fast_relist);
  printLatency(("nodeagent, relist " + fast + ": exit -> terminated in /pods").c_str(),
               f.exit_fast);
  printAgentMetrics(a, "nodeagent, relist " + fast);
  a.removeAllManifests();
  drain(a, c, 0, "all pods");
  a.stop();
}

// --logs: the CRI agent's log and containerd's, copied out of the temp dirs.
void keepLogs(const Options& o, const fs::path& base, const testing::TestContainerd& c) {
  if (o.logs.empty()) return;
  std::error_code ec;
  fs::create_directories(o.logs, ec);
  fs::copy_file(base / "agent-cri" / "agent.log", o.logs / "agent.log",
                fs::copy_options::overwrite_existing, ec);
  testing::writeFile(o.logs / "containerd.log", c.logTail(size_t{1} << 30));
  std::printf("logs copied to %s\n", o.logs.c_str());
}

// containerd, its containers and their cgroups gone when this leaves scope (declared after the
// TestContainerd it stops, so it runs first).
struct ContainerdGuard {
  ~ContainerdGuard() {
    std::lock_guard lock(g.mu);
    stopContainerdLocked();
    g.containerd = nullptr;
  }
};

void run(const Options& o, Figures& f) {
  testing::TempDir base("nodeagent-cribench");
  {
    std::lock_guard lock(g.mu);
    g.base = base.path();
  }
  fs::create_directories(base.path() / "work");
  {
    auto containerd = startContainerd();
    ContainerdGuard guard;
    containerd->importTestImages();
    const auto args = procArgs(containerd->pid());
    std::printf("containerd up (pid %d: %s) with the test images\n", containerd->pid(),
                args.empty() ? "?" : args[0].c_str());
    benchCtrRun(*containerd, base.path(), o.starts, f);
    printLatency("ctr run -d: -> container's marker", f.ctr_proc);
    printLatency("ctr run -d: -> ctr exits", f.ctr_exit);
    benchCriCalls(*containerd, base.path(), o.starts, f);
    printLatency("CRI calls (sandbox + container): -> container's marker", f.direct_proc);
    printLatency("CRI calls: -> StartContainer returns", f.direct_return);
    try {
      benchAgent(o, base.path(), *containerd, f);
    } catch (...) {
      std::printf("the end of containerd's log:\n%s\n", containerd->logTail().c_str());
      keepLogs(o, base.path(), *containerd);
      throw;
    }
    keepLogs(o, base.path(), *containerd);
  }
  if (o.process_runtime) {
    benchProcessRuntime(base.path(), o.pods, f);
    const auto& r = *f.process;
    std::printf(
        "process runtime, %zu pods: nodeagent VmRSS %ld KiB, RssAnon %ld KiB; %zu nodeagent-shim: "
        "RSS %ld KiB (%.0f per container), PSS %ld KiB (%.0f per container)\n",
        o.pods, r.agent_rss, r.agent_anon, r.shims, r.shims_rss,
        static_cast<double>(r.shims_rss) / static_cast<double>(std::max<size_t>(r.shims, 1)),
        r.shims_pss,
        static_cast<double>(r.shims_pss) / static_cast<double>(std::max<size_t>(r.shims, 1)));
  }
  std::lock_guard lock(g.mu);
  g.base.clear();
}

// ---- summary ----------------------------------------------------------------------------------

void summaryRow(const char* what, const Latency& l) {
  if (l.v.empty()) return;
  std::printf("  %-52s %9.1f %9.1f\n", what, l.p50(), l.p99());
}

void overheadRow(const char* what, const Latency& agent, const Latency& base, const char* goal) {
  if (agent.v.empty() || base.v.empty()) return;
  std::printf("  %-52s %+9.1f %+9.1f  %s\n", what, agent.p50() - base.p50(),
              agent.p99() - base.p99(), goal);
}

// The resources with the default relist and with the fast one, side by side ("-": that run did
// not get there).
void resourceRows(const Figures& f, const std::string& fast) {
  if (!f.cri_default) return;
  const double pods = static_cast<double>(std::max<size_t>(f.many, 1));
  struct Row {
    const char* what;
    std::function<double(const Resources&)> value;
    const char* fmt;
  };
  const Row rows[] = {
      {"nodeagent VmRSS (KiB)", [](const Resources& r) { return r.agent_rss * 1.0; }, "%.0f"},
      {"nodeagent RssAnon (KiB)", [](const Resources& r) { return r.agent_anon * 1.0; }, "%.0f"},
      {"nodeagent CPU (% of a core)", [](const Resources& r) { return r.agent_cpu; }, "%.3f"},
      {"containerd VmRSS (KiB)", [](const Resources& r) { return r.containerd_rss * 1.0; }, "%.0f"},
      {"containerd CPU (% of a core)", [](const Resources& r) { return r.containerd_cpu; }, "%.3f"},
      {"containerd-shim-runc-v2 processes", [](const Resources& r) { return r.shims * 1.0; },
       "%.0f"},
      {"containerd-shim-runc-v2 RSS per pod (KiB)",
       [pods](const Resources& r) { return static_cast<double>(r.shims_rss) / pods; }, "%.0f"},
      {"containerd-shim-runc-v2 PSS per pod (KiB)",
       [pods](const Resources& r) { return static_cast<double>(r.shims_pss) / pods; }, "%.0f"},
      {"shims' CPU, all (% of a core)", [](const Resources& r) { return r.shims_cpu; }, "%.3f"},
  };
  std::printf("\nwith %zu pods running (CPU: utime+stime)        %-14s %-14s\n", f.many,
              "relist 1 s", ("relist " + fast).c_str());
  for (const auto& row : rows) {
    std::printf("  %-44s", row.what);
    for (const auto* r : {&f.cri_default, &f.cri_fast}) {
      char cell[32] = "-";
      if (r->has_value()) std::snprintf(cell, sizeof cell, row.fmt, row.value(**r));
      std::printf(" %-14s", cell);
    }
    std::printf("\n");
  }
}

void printSummary(const Options& o, const Figures& f) {
  const std::string fast = std::to_string(o.fast_relist.count()) + " ms";
  std::printf("\nsummary (ms)                                                 p50       p99\n");
  std::printf("start, %zu containers one at a time:\n", o.starts);
  summaryRow("ctr run -d -> container's marker", f.ctr_proc);
  summaryRow("ctr run -d -> ctr exits", f.ctr_exit);
  summaryRow("CRI sandbox + container -> container's marker", f.direct_proc);
  summaryRow("CRI sandbox + container -> StartContainer returned", f.direct_return);
  summaryRow("nodeagent: manifest -> container's marker", f.agent_proc);
  summaryRow("nodeagent: manifest -> running in /pods", f.agent_pods);
  overheadRow("nodeagent over ctr run -d (markers)", f.agent_proc, f.ctr_proc, "goal: p99 <= +50");
  overheadRow("nodeagent over the CRI calls (markers)", f.agent_proc, f.direct_proc, "");
  std::printf("exit -> terminated in /pods (polled every 5 ms), %zu containers:\n", o.exits);
  summaryRow("containerd events + relist 1 s (the CRI default)", f.exit_default);
  summaryRow("relist 1 s alone (NODEAGENT_CRI_EVENTS=0)", f.exit_relist);
  summaryRow(
      ("events + --pleg-relist-period=" + std::to_string(o.fast_relist.count()) + "ms").c_str(),
      f.exit_fast);
  if (f.many_procs_ms && f.many_running_ms) {
    std::printf("%zu pods written at once: all markers %.0f ms, all Running in /pods %.0f ms\n",
                f.many, *f.many_procs_ms, *f.many_running_ms);
  }
  if (f.adopt_ms) {
    std::printf("agent restart -> %zu adopted pods Running in /pods: %.0f ms\n", f.many,
                *f.adopt_ms);
  }
  resourceRows(f, fast);
  if (f.process) {
    const double n = static_cast<double>(std::max<size_t>(f.process->shims, 1));
    std::printf(
        "process runtime, %zu pods: %zu nodeagent-shim, RSS %.0f KiB and PSS %.0f KiB per "
        "container; nodeagent VmRSS %ld KiB, RssAnon %ld KiB\n",
        o.pods, f.process->shims, static_cast<double>(f.process->shims_rss) / n,
        static_cast<double>(f.process->shims_pss) / n, f.process->agent_rss, f.process->agent_anon);
  }
}

// ---- options ----------------------------------------------------------------------------------

void usage() {
  std::fprintf(stderr,
               "usage: cri_bench [--starts=50] [--exits=30] [--pods=100] [--idle=30] "
               "[--fast-relist=100ms] [--no-process-runtime] [--agent-arg=FLAG]... [--logs=DIR]\n"
               "  --starts: containers started one at a time per column; --exits: exit samples "
               "per relist period; --pods: pods at once (and for the resources); --idle: seconds "
               "of CPU measurement; --fast-relist: the second --pleg-relist-period (ms or s); "
               "--agent-arg: one more flag for the CRI agent (--v=4); --logs: a directory the "
               "CRI agent's and containerd's logs are copied to at the end\n");
}

std::optional<size_t> count(std::string_view arg, std::string_view flag) {
  if (!arg.starts_with(flag)) return std::nullopt;
  const std::string value(arg.substr(flag.size()));
  char* end = nullptr;
  const unsigned long n = std::strtoul(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || n == 0) throw std::invalid_argument(std::string(arg));
  return n;
}

std::chrono::milliseconds duration(std::string_view value) {
  const std::string v(value);
  char* end = nullptr;
  const unsigned long n = std::strtoul(v.c_str(), &end, 10);
  const std::string unit = end;
  if (n == 0 || (unit != "ms" && unit != "s" && !unit.empty())) {
    throw std::invalid_argument(v);
  }
  return unit == "s" ? std::chrono::milliseconds(n * 1000) : std::chrono::milliseconds(n);
}

bool parseOptions(int argc, char** argv, Options& o) {
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (auto n = count(arg, "--starts=")) {
        o.starts = *n;
      } else if (auto e = count(arg, "--exits=")) {
        o.exits = *e;
      } else if (auto p = count(arg, "--pods=")) {
        o.pods = *p;
      } else if (auto s = count(arg, "--idle=")) {
        o.idle = std::chrono::seconds(*s);
      } else if (arg.starts_with("--fast-relist=")) {
        o.fast_relist = duration(arg.substr(14));
      } else if (arg == "--no-process-runtime") {
        o.process_runtime = false;
      } else if (arg.starts_with("--agent-arg=")) {
        o.agent_args.emplace_back(arg.substr(12));
      } else if (arg.starts_with("--logs=") && arg.size() > 7) {
        o.logs = arg.substr(7);
      } else {
        return false;
      }
    }
  } catch (const std::invalid_argument&) {
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Options o;
  if (!parseOptions(argc, argv, o)) {
    usage();
    return 2;
  }
  if (const auto why = testing::containerdUnavailableReason(); !why.empty()) {
    std::printf("cri_bench: containerd cannot run here: %s\n", why.c_str());
    return 1;
  }
  ::setenv("TMPDIR", "/dev/shm", 0);
  testing::cleanUpOnSignal("cri_bench", "removing its containers, containerd and cgroups", [] {
    cleanUpEverything();
    std::error_code ec;
    if (!g.base.empty()) fs::remove_all(g.base, ec);
  });
  const std::string load_before = loadAverage();
  std::printf("cri_bench: %zu starts, %zu exits, %zu pods, %lld s idle; load average %s\n",
              o.starts, o.exits, o.pods, static_cast<long long>(o.idle.count()),
              load_before.c_str());
  Figures f;
  int rc = 0;
  try {
    run(o, f);
  } catch (const std::exception& e) {
    std::printf("cri_bench: failed: %s\n", e.what());
    rc = 1;
  }
  cleanUpEverything();
  printSummary(o, f);
  std::printf("load average at the start %s, at the end %s\n", load_before.c_str(),
              loadAverage().c_str());
  return rc;
}
