// Process runtime benchmark (prints figures; run by hand:
//   build/bench/process_runtime_bench [N=1000] [samples=200] [--no-supervisord]).
// The real daemon (build/nodeagent, process runtime, one nodeagent-shim per container):
//  - time from the daemon's start until N pods (`sleep`) are Running in GET /pods,
//  - agent RSS/PSS (anonymous and file-backed), agent CPU per second while idle with N pods
//    (20 s), mean shim PSS, agent CPU per GET /pods of the unchanged node,
//  - pick-up latency: a manifest renamed into the directory -> its process has started (it
//    creates a file), p50/p99 over `samples` pods with the N pods running,
//  - exit-to-status latency: a container exits (it was blocked reading a FIFO the bench writes) ->
//    GET /pods shows it terminated,
//  - first-restart latency: an Always container exits -> its next start (a line it appends),
// and the same N programs under supervisord (Debian package `supervisor`; skipped with a message
// when it is not installed): time until `supervisorctl status` shows all RUNNING (startsecs=0, so
// RUNNING means started, as in /pods), RSS/PSS, idle CPU, pick-up of one more program through
// `supervisorctl update`, and exit -> first restart (autorestart).
// Every process the bench starts (the agent, shims, containers, supervisord and its programs) is
// killed when it ends, also on failure or SIGINT/SIGTERM.
// State, manifests and logs go to $TMPDIR (default /dev/shm) so a busy disk does not dominate.
#include <arpa/inet.h>
#include <dirent.h>
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

#include "agent/runtime/state_file.h"
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

// ---- cleanup: every process the bench started goes, whichever way the bench ends ----------------

std::mutex g_cleanup_mu;
fs::path g_base;          // the bench's temp dir
pid_t g_agent = 0;        // the daemon while it runs
pid_t g_supervisord = 0;  // supervisord while it runs

void killAndReap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  int st;
  ::waitpid(pid, &st, 0);
}

// The parent of `pid` (field 4 of /proc/<pid>/stat), 0 when it is gone.
pid_t parentOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
      std::ifstream in(proc + "/cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      ours = cmd.find(b) != std::string::npos;
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
  if (g_base.empty()) return;
  killContainersUnder(g_base / "root");
  for (int round = 0; round < 3; ++round) {
    auto left = processesUnder(g_base);
    if (left.empty()) break;
    for (pid_t pid : left) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(100ms);
  }
  // Our own unreaped children (shims the daemon left are init's).
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// SIGINT/SIGTERM/SIGHUP are blocked in every bench thread and taken here: clean up, then exit.
void startSignalThread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "process_runtime_bench: signal %d, killing what it started\n", sig);
    killEverything();
    std::error_code ec;
    if (!g_base.empty()) fs::remove_all(g_base, ec);
    std::_Exit(128 + sig);
  }).detach();
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
  Daemon(const fs::path& base, int port) : base_(base), port_(port) {}
  void start() {
    pid_ = spawn(
        {testing::binaryPath("nodeagent").string(),
         "--pod-manifest-path=" + (base_ / "manifests").string(),
         "--root-dir=" + (base_ / "root").string(), "--pod-log-dir=" + (base_ / "logs").string(),
         "--read-only-port=" + std::to_string(port_), "--healthz-port=0",
         "--hostname-override=bench", "--max-pods=100000", testing::cgroupRootFlag()},
        base_ / "agent.log");
    std::lock_guard lock(g_cleanup_mu);
    g_agent = pid_;
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
  // The body of GET /pods, read as curl or a log shipper would (large reads). httplib's client
  // reads 4 KiB per poll(2)+recv(2) pair: about 2 ms for the 1.5 MB list, which would make this
  // client's reading, not the agent, the resolution of the exit -> status figure.
  std::optional<std::string> podsBody() const {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return std::nullopt;
    timeval tv{30, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string response;
    constexpr std::string_view kRequest =
        "GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::write(fd, kRequest.data(), kRequest.size()) == static_cast<ssize_t>(kRequest.size())) {
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
  std::optional<double> all_running_ms, rss_kib, pss_kib, anon_kib, idle_cpu_pct, pickup_p50,
      pickup_p99, exit_status_p50, exit_status_p99, restart_p50, restart_p99, per_container_kib;
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

void runNodeagent(size_t n, size_t samples, const fs::path& base, Figures& f) {
  fs::create_directories(base / "manifests");
  fs::create_directories(base / "work");
  const int port = freePort();

  for (size_t i = 0; i < n; ++i) {
    testing::writeFile(base / "manifests" / ("pod-" + std::to_string(i) + ".yaml"),
                       sleepPod("pod-" + std::to_string(i)));
  }
  Daemon d(base, port);
  auto t0 = SteadyClock::now();
  d.start();
  size_t running = 0;
  while (SteadyClock::now() - t0 < 600s) {
    running = d.runningCount();
    if (running >= n) break;
    int st;
    if (::waitpid(d.pid(), &st, WNOHANG) == d.pid()) {
      throw std::runtime_error("nodeagent exited early; see " + (base / "agent.log").string());
    }
    std::this_thread::sleep_for(20ms);
  }
  auto took = SteadyClock::now() - t0;
  std::printf("nodeagent: %zu/%zu pods Running in /pods after %.0f ms\n", running, n, ms(took));
  if (running >= n) f.all_running_ms = ms(took);
  std::this_thread::sleep_for(3s);
  printMemory("nodeagent", d.pid(), f);
  {
    auto shims = d.shimPids();
    long pss = 0, rss = 0;
    for (int s : shims) {
      pss += pssKb(s);
      rss += procStatusKb(s, "VmRSS");
    }
    if (!shims.empty()) {
      f.per_container_kib = static_cast<double>(pss) / static_cast<double>(shims.size());
      std::printf("nodeagent: %zu shims, mean PSS %.0f KiB, mean RSS %.0f KiB\n", shims.size(),
                  *f.per_container_kib,
                  static_cast<double>(rss) / static_cast<double>(shims.size()));
    }
  }
  f.idle_cpu_pct = idleCpuPercent(d.pid(), 20s);
  std::printf("nodeagent: agent idle CPU %.3f%% of a core with %zu pods (20 s)\n", *f.idle_cpu_pct,
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
    std::printf("nodeagent: /pods with %zu pods (%zu KiB): agent CPU %.3f ms per poll (%d polls)\n",
                n, bytes / 1024, per_poll_ms, kPolls);
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
      "nodeagent: pick-up (rename -> process started) with %zu+ pods: p50 %.1f ms, p99 %.1f ms "
      "(%zu samples)\n",
      n, *f.pickup_p50, *f.pickup_p99, samples);

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
      std::printf("nodeagent: exit-%zu is not running (killed from outside?); skipped\n", i);
      continue;
    }
    auto t = SteadyClock::now();
    if (!release(base / "work" / ("exit-" + std::to_string(i)))) {
      std::printf("nodeagent: exit-%zu never opened its FIFO; skipped\n", i);
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
      std::printf("nodeagent: restart-%zu never opened its FIFO; skipped\n", i);
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
      "nodeagent: exit -> terminated in /pods: p50 %.1f ms, p99 %.1f ms (%zu samples, /pods "
      "polled every 1 ms)\n",
      *f.exit_status_p50, *f.exit_status_p99, exit_lat.size());
  std::printf("nodeagent: exit -> first restart started: p50 %.1f ms, p99 %.1f ms (%zu samples)\n",
              *f.restart_p50, *f.restart_p99, restart_lat.size());
  std::printf("nodeagent: agent RSS at the end %ld KiB (%zu pods)\n",
              procStatusKb(d.pid(), "VmRSS"), n + samples + 2 * k);

  d.stop();
  d.killContainers();
}

std::string cell(const std::optional<double>& v, const char* fmt) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

void printSummary(size_t n, const Figures& na, const Figures& sv) {
  struct Row {
    const char* what;
    const char* goal;
    std::optional<double> Figures::*field;
    const char* fmt;
  };
  const Row rows[] = {
      {"all Running (ms)", "< 2000", &Figures::all_running_ms, "%.0f"},
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
  std::printf("\nsummary with %zu pods/programs            goal       nodeagent  supervisord\n", n);
  for (const auto& r : rows) {
    std::printf("  %-36s %-10s %-10s %s\n", r.what, r.goal, cell(na.*r.field, r.fmt).c_str(),
                cell(sv.*r.field, r.fmt).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  const size_t samples = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 200;
  const bool supervisord = !(argc > 3 && std::string_view(argv[3]) == "--no-supervisord");
  if (n == 0 || samples == 0) {
    std::fprintf(stderr,
                 "usage: process_runtime_bench [pods=1000] [samples=200] [--no-supervisord]\n");
    return 2;
  }
  setenv("TMPDIR", "/dev/shm", 0);
  startSignalThread();
  int rc = 0;
  Figures na, sv;
  try {
    testing::TempDir base("nodeagent-procbench");
    {
      std::lock_guard lock(g_cleanup_mu);
      g_base = base.path();
    }
    try {
      runNodeagent(n, samples, base.path(), na);
    } catch (const std::exception& e) {
      std::printf("nodeagent: failed: %s\n", e.what());
      rc = 1;
    }
    killEverything();
    try {
      if (supervisord) benchSupervisord(n, samples, base.path(), sv);
    } catch (const std::exception& e) {
      std::printf("supervisord: failed: %s\n", e.what());
      rc = 1;
    }
    killEverything();
    std::lock_guard lock(g_cleanup_mu);
    g_base.clear();
  } catch (const std::exception& e) {
    std::printf("process_runtime_bench: %s\n", e.what());
    killEverything();
    rc = 1;
  }
  printSummary(n, na, sv);
  return rc;
}
