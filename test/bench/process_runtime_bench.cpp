// Process runtime benchmark (prints figures; run by hand as root or a user who can apt-get:
//   build/bench/process_runtime_bench [N] [samples]).
// The real daemon (build/nodeagent, process runtime, one nodeagent-shim per container):
//  - time from the daemon's start until N pods (`sleep`) are Running in GET /pods,
//  - agent RSS, agent CPU per second while idle with N pods (10 s), mean shim PSS,
//  - pick-up latency: a manifest renamed into the directory -> its process has started (it
//    creates a file), p50/p99 over `samples` pods with the N pods running,
//  - exit-to-status latency: a container exits (it was blocked reading a FIFO the bench writes) ->
//    GET /pods shows it terminated,
//  - first-restart latency: an Always container exits -> its next start (a line it appends),
// and the same N programs under supervisord (Debian package `supervisor`, installed when
// missing): time until `supervisorctl status` shows all RUNNING (startsecs=0, so RUNNING means
// started, as in /pods), supervisord RSS.
// State, manifests and logs go to $TMPDIR (default /dev/shm) so a busy disk does not dominate.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
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
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "agent/runtime/state_file.h"
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
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
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
    if (line.rfind(key + ":", 0) == 0) return std::strtol(line.c_str() + key.size() + 1, nullptr, 10);
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

pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, a[0].c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    std::fprintf(stderr, "cannot spawn %s\n", a[0].c_str());
    std::exit(1);
  }
  return pid;
}

std::string shPod(const std::string& name, const std::string& script,
                  const std::string& restart = "Always") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n  restartPolicy: " +
         restart + "\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
         "    image: debian:12\n    command: [\"/bin/sh\", \"-c\", " + json(script).dump() + "]\n";
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
    pid_ = spawn({testing::binaryPath("nodeagent").string(),
                  "--pod-manifest-path=" + (base_ / "manifests").string(),
                  "--root-dir=" + (base_ / "root").string(),
                  "--pod-log-dir=" + (base_ / "logs").string(),
                  "--read-only-port=" + std::to_string(port_), "--healthz-port=0",
                  "--hostname-override=bench", "--max-pods=100000"},
                 base_ / "agent.log");
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int st;
    ::waitpid(pid_, &st, 0);
    pid_ = 0;
  }
  // Pods by name from GET /pods.
  std::optional<json> pods() const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(30, 0);
    auto res = cli.Get("/pods");
    if (!res || res->status != 200) return std::nullopt;
    return json::parse(res->body, nullptr, false);
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
  std::optional<json> containerState(const std::string& pod) const {
    auto list = pods();
    if (!list || !list->contains("items")) return std::nullopt;
    for (const auto& p : (*list)["items"]) {
      if (p["metadata"].value("name", "") != pod + "-bench") continue;
      if (!p["status"].contains("containerStatuses")) return std::nullopt;
      return p["status"]["containerStatuses"][0]["state"];
    }
    return std::nullopt;
  }
  pid_t pid() const { return pid_; }

  // Kills every container process group and shim recorded under the root dir.
  void killContainers() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(base_ / "root" / "containers", ec)) {
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
// which ends the container's `read`. False if no reader came within 30 s.
bool release(const fs::path& fifo) {
  auto deadline = SteadyClock::now() + 30s;
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

void benchSupervisord(size_t n, const fs::path& base) {
  if (std::system("command -v supervisord >/dev/null 2>&1") != 0) {
    std::printf("supervisord: not installed; installing the Debian package supervisor\n");
    if (std::system("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq supervisor >/dev/null 2>&1") != 0) {
      std::printf("supervisord: cannot install supervisor; skipped\n");
      return;
    }
  }
  const fs::path dir = base / "supervisor";
  fs::create_directories(dir / "logs");
  const auto conf = dir / "supervisord.conf";
  std::string c = "[unix_http_server]\nfile=" + (dir / "supervisor.sock").string() +
                  "\n[supervisord]\nlogfile=" + (dir / "supervisord.log").string() +
                  "\npidfile=" + (dir / "supervisord.pid").string() +
                  "\nchildlogdir=" + (dir / "logs").string() +
                  "\nminfds=4096\n[rpcinterface:supervisor]\n"
                  "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n"
                  "[supervisorctl]\nserverurl=unix://" + (dir / "supervisor.sock").string() + "\n";
  for (size_t i = 0; i < n; ++i) {
    c += "[program:p" + std::to_string(i) + "]\ncommand=sleep 100000\nstartsecs=0\nautorestart=true\n"
         "stdout_logfile=" + (dir / "logs" / ("p" + std::to_string(i) + ".log")).string() +
         "\nredirect_stderr=true\n";
  }
  testing::writeFile(conf, c);
  auto t0 = SteadyClock::now();
  pid_t sup = spawn({"supervisord", "-n", "-c", conf.string()}, dir / "stdout.log");
  int sup_status = 0;
  const std::string status_cmd = "supervisorctl -c " + conf.string() + " status 2>/dev/null | grep -c RUNNING";
  size_t running = 0;
  while (SteadyClock::now() - t0 < 300s) {
    FILE* p = popen(status_cmd.c_str(), "r");
    char buf[64] = {};
    if (p && fgets(buf, sizeof(buf), p)) running = std::strtoul(buf, nullptr, 10);
    if (p) pclose(p);
    if (running >= n) break;
    if (::waitpid(sup, &sup_status, WNOHANG) == sup) {
      std::printf("supervisord: exited early; see %s\n", (dir / "stdout.log").c_str());
      return;
    }
    std::this_thread::sleep_for(50ms);
  }
  auto took = SteadyClock::now() - t0;
  std::printf("supervisord: %zu/%zu programs RUNNING after %.0f ms (supervisorctl status polled)\n",
              running, n, ms(took));
  std::this_thread::sleep_for(2s);
  std::printf("supervisord: RSS %ld KiB, PSS %ld KiB\n", procStatusKb(sup, "VmRSS"), pssKb(sup));
  double c0 = procCpuSeconds(sup);
  std::this_thread::sleep_for(10s);
  std::printf("supervisord: idle CPU %.1f ms/s with %zu programs\n",
              (procCpuSeconds(sup) - c0) * 1000 / 10, n);
  ::kill(sup, SIGTERM);
  int st;
  ::waitpid(sup, &st, 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 200;
  const size_t samples = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 200;
  setenv("TMPDIR", "/dev/shm", 0);
  testing::TempDir base("nodeagent-procbench");
  fs::create_directories(base / "manifests");
  fs::create_directories(base / "work");
  const int port = freePort();

  for (size_t i = 0; i < n; ++i) {
    testing::writeFile(base / "manifests" / ("pod-" + std::to_string(i) + ".yaml"),
                       sleepPod("pod-" + std::to_string(i)));
  }
  Daemon d(base.path(), port);
  auto t0 = SteadyClock::now();
  d.start();
  size_t running = 0;
  while (SteadyClock::now() - t0 < 600s) {
    running = d.runningCount();
    if (running >= n) break;
    std::this_thread::sleep_for(20ms);
  }
  std::printf("nodeagent: %zu/%zu pods Running in /pods after %.0f ms\n", running, n,
              ms(SteadyClock::now() - t0));
  std::this_thread::sleep_for(3s);
  std::printf("nodeagent: agent RSS %ld KiB (PSS %ld KiB) with %zu pods\n",
              procStatusKb(d.pid(), "VmRSS"), pssKb(d.pid()), n);
  {
    auto shims = d.shimPids();
    long pss = 0, rss = 0;
    for (int s : shims) {
      pss += pssKb(s);
      rss += procStatusKb(s, "VmRSS");
    }
    if (!shims.empty()) {
      std::printf("nodeagent: %zu shims, mean PSS %.0f KiB, mean RSS %.0f KiB\n", shims.size(),
                  static_cast<double>(pss) / static_cast<double>(shims.size()),
                  static_cast<double>(rss) / static_cast<double>(shims.size()));
    }
  }
  double c0 = procCpuSeconds(d.pid());
  std::this_thread::sleep_for(10s);
  std::printf("nodeagent: agent idle CPU %.1f ms/s with %zu pods\n",
              (procCpuSeconds(d.pid()) - c0) * 1000 / 10, n);

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
  std::printf("nodeagent: pick-up (rename -> process started) with %zu+ pods: p50 %.1f ms, p99 %.1f ms "
              "(%zu samples)\n",
              n, percentile(pickup, 0.5), percentile(pickup, 0.99), samples);

  // Exit -> status in /pods, and exit -> first restart.
  const size_t k = std::min<size_t>(20, samples);
  for (size_t i = 0; i < k; ++i) {
    const auto fifo = base / "work" / ("exit-" + std::to_string(i));
    ::mkfifo(fifo.c_str(), 0600);
    renameIn(base / "manifests", "exit-" + std::to_string(i) + ".yaml",
             shPod("exit-" + std::to_string(i), "read x < " + fifo.string() + "; exit 0", "Never"));
    const auto rfifo = base / "work" / ("restart-" + std::to_string(i));
    ::mkfifo(rfifo.c_str(), 0600);
    const auto starts = base / "work" / ("starts-" + std::to_string(i));
    renameIn(base / "manifests", "restart-" + std::to_string(i) + ".yaml",
             shPod("restart-" + std::to_string(i),
                   "echo start >> " + starts.string() + "; read x < " + rfifo.string() + "; exit 1"));
  }
  auto deadline = SteadyClock::now() + 120s;
  while (SteadyClock::now() < deadline) {
    bool all = true;
    for (size_t i = 0; i < k && all; ++i) {
      auto st = d.containerState("exit-" + std::to_string(i));
      all = st && st->contains("running");
    }
    if (all) break;
    std::this_thread::sleep_for(50ms);
  }
  std::vector<double> exit_lat, restart_lat;
  for (size_t i = 0; i < k; ++i) {
    auto t = SteadyClock::now();
    if (!release(base / "work" / ("exit-" + std::to_string(i)))) {
      std::printf("nodeagent: exit-%zu never opened its FIFO; skipped\n", i);
      continue;
    }
    while (SteadyClock::now() - t < 30s) {
      auto st = d.containerState("exit-" + std::to_string(i));
      if (st && st->contains("terminated")) break;
      std::this_thread::sleep_for(1ms);
    }
    exit_lat.push_back(ms(SteadyClock::now() - t));

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
  std::printf("nodeagent: exit -> terminated in /pods: p50 %.1f ms, p99 %.1f ms (%zu samples, /pods "
              "polled every 1 ms)\n",
              percentile(exit_lat, 0.5), percentile(exit_lat, 0.99), k);
  std::printf("nodeagent: exit -> first restart started: p50 %.1f ms, p99 %.1f ms (%zu samples)\n",
              percentile(restart_lat, 0.5), percentile(restart_lat, 0.99), k);
  std::printf("nodeagent: agent RSS at the end %ld KiB\n", procStatusKb(d.pid(), "VmRSS"));

  d.stop();
  d.killContainers();

  benchSupervisord(n, base.path());
  return 0;
}
