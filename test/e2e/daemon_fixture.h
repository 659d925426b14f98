// The nodeagent daemon as a child process for e2e tests: its own manifest, root and log
// directories and read-only port, /pods helpers, and the cleanup of the containers it leaves
// behind (containers deliberately outlive the agent).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/runtime/state_file.h"
#include "test/support/cgroup_root.h"
#include "test/support/integration_env.h"
#include "test/support/test_util.h"

extern char** environ;

namespace nodeagent::e2e {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

inline constexpr const char* kNode = "node1";

inline std::vector<std::string> procCmdline(int pid) {
  // Not an ifstream: reading the cmdline of a process that just exited fails with ESRCH, which
  // std::filebuf throws.
  const std::string all = testing::readFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  std::string cur;
  for (char c : all) {
    if (c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) args.push_back(cur);
  return args;
}

// Live (non-zombie) processes with `marker` as one of their arguments.
inline std::vector<int> pidsWithArg(const std::string& marker) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const auto name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    int pid = std::stoi(name);
    auto args = procCmdline(pid);
    if (std::find(args.begin(), args.end(), marker) == args.end()) continue;
    auto st = runtime::readProcStat(pid);
    if (!st || st->state == 'Z') continue;
    out.push_back(pid);
  }
  return out;
}

inline bool alive(int pid) {
  auto st = runtime::readProcStat(pid);
  return st && st->state != 'Z';
}

inline std::string readOr(const fs::path& p, const std::string& fallback = "") {
  std::error_code ec;
  if (!fs::exists(p, ec)) return fallback;
  return testing::readFile(p);
}

inline size_t lineCount(const fs::path& p) {
  auto text = readOr(p);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

inline std::string quoteYaml(const std::string& s) { return json(s).dump(); }

// A one-container pod running `sh -c script marker` (the marker is $0, so it shows in
// /proc/<pid>/cmdline as its own argument).
inline std::string shPod(const std::string& name, const std::string& marker,
                         const std::string& script, const std::string& extra_spec = "",
                         const std::string& restart = "Always") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  restartPolicy: " + restart + "\n" + extra_spec +
         "  containers:\n  - name: main\n    image: debian:12\n    command: [\"/bin/sh\", "
         "\"-c\", " +
         quoteYaml(script) + ", " + quoteYaml(marker) + "]\n";
}

// The daemon as a child process with its own state, manifest and log directories.
class Daemon {
 public:
  Daemon()
      : manifests_(dir_ / "manifests"),
        root_(dir_ / "root"),
        logs_(dir_ / "logs"),
        work_(dir_ / "work"),
        cgroup_root_(testing::isolatedCgroupRoot()),
        port_(testing::unusedLoopbackPort()) {
    fs::create_directories(manifests_);
    fs::create_directories(work_);
  }
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
    killContainers();
    testing::removeCgroupTree(cgroup_root_);
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  void start(std::vector<std::string> extra = {}) {
    spawn(std::move(extra));
    bool up = testing::eventually([&] { return get("/healthz").has_value(); }, 15s);
    if (!up) UNSCOPED_INFO("agent log:\n" << logTail());
    REQUIRE(up);
  }

  // Starts the agent without waiting for it to serve (for agents expected to exit).
  void spawn(std::vector<std::string> extra = {}) {
    REQUIRE(pid_ == 0);
    std::string bin = testing::binaryPath("nodeagent").string();
    std::vector<std::string> args{bin,
                                  "--pod-manifest-path=" + manifests_.string(),
                                  "--root-dir=" + root_.string(),
                                  "--pod-log-dir=" + logs_.string(),
                                  "--read-only-port=" + std::to_string(port_),
                                  "--port=0",
                                  "--healthz-port=0",
                                  "--hostname-override=" + std::string(kNode),
                                  "--crashloop-backoff-initial=1s",
                                  "--cgroup-root=" + cgroup_root_,
                                  "--v=1"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    std::string log = (dir_ / "agent.log").string();
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
  }

  // Sends `sig` and waits for the exit; returns the exit code (128+signal for a signal death),
  // or -1 when it did not exit within the deadline.
  int stop(int sig) {
    REQUIRE(pid_ > 0);
    ::kill(pid_, sig);
    return waitExit(20s);
  }

  // Waits for an agent that exits by itself; returns its exit code (128+signal for a signal
  // death), or -1 when it did not exit within the deadline.
  int waitExit(std::chrono::milliseconds deadline) {
    REQUIRE(pid_ > 0);
    int status = 0;
    bool exited =
        testing::eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, deadline);
    if (!exited) return -1;
    pid_ = 0;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }

  std::optional<std::string> get(const std::string& path) const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_connection_timeout(1, 0);
    cli.set_read_timeout(5, 0);
    auto res = cli.Get(path.c_str());
    if (!res || res->status != 200) return std::nullopt;
    return res->body;
  }

  // The pod `name-node1` from GET /pods, if listed.
  std::optional<json> pod(const std::string& name) const {
    auto body = get("/pods");
    if (!body) return std::nullopt;
    auto list = json::parse(*body, nullptr, false);
    if (!list.is_object() || !list.contains("items")) return std::nullopt;
    for (const auto& item : list["items"]) {
      if (item["metadata"].value("name", "") == name + "-" + kNode) return item;
    }
    return std::nullopt;
  }
  std::string phase(const std::string& name) const {
    auto p = pod(name);
    if (!p || !p->contains("status")) return "";
    return (*p)["status"].value("phase", "");
  }
  // status.containerStatuses[name] of the pod, if present.
  std::optional<json> containerStatus(const std::string& pod_name,
                                      const std::string& container = "main",
                                      const char* field = "containerStatuses") const {
    auto p = pod(pod_name);
    if (!p || !p->contains("status") || !(*p)["status"].contains(field)) return std::nullopt;
    for (const auto& cs : (*p)["status"][field]) {
      if (cs.value("name", "") == container) return cs;
    }
    return std::nullopt;
  }
  // status.containerStatuses[container].state.<state> ("waiting", "running", "terminated"), if
  // the container is in that state.
  std::optional<json> containerState(const std::string& pod_name, const std::string& container,
                                     const char* state) const {
    auto cs = containerStatus(pod_name, container);
    if (!cs || !cs->contains("state") || !(*cs)["state"].contains(state)) return std::nullopt;
    return (*cs)["state"][state];
  }
  bool running(const std::string& pod_name, const std::string& container = "main") const {
    auto cs = containerStatus(pod_name, container);
    return phase(pod_name) == "Running" && cs && cs->contains("state") &&
           (*cs)["state"].contains("running");
  }

  void writeManifest(const std::string& file, const std::string& content) {
    auto tmp = manifests_ / ("." + file + ".tmp");
    testing::writeFile(tmp, content);
    fs::rename(tmp, manifests_ / file);
  }
  void removeManifest(const std::string& file) { fs::remove(manifests_ / file); }

  std::string logTail() const {
    auto text = readOr(dir_ / "agent.log");
    return text.size() > 6000 ? text.substr(text.size() - 6000) : text;
  }

  // Every container process group and shim recorded under the root dir, killed (checked against
  // their recorded start time so a reused pid is never hit).
  void killContainers() {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root_ / "containers", ec)) {
      std::string text, error;
      if (!runtime::readWholeFile((entry.path() / "state").string(), text, error)) continue;
      runtime::ShimState st;
      if (!runtime::decodeShimState(text, st, error)) continue;
      if (st.pid > 0 && runtime::processAlive(st.pid, st.pid_start_ticks)) ::kill(-st.pid, SIGKILL);
      if (st.shim_pid > 0 && runtime::processAlive(st.shim_pid, st.shim_start_ticks)) {
        ::kill(st.shim_pid, SIGKILL);
      }
    }
  }

  const fs::path& work() const { return work_; }
  const fs::path& logs() const { return logs_; }
  const fs::path& manifests() const { return manifests_; }
  const fs::path& root() const { return root_; }
  const std::string& cgroupRoot() const { return cgroup_root_; }
  const fs::path& dir() const { return dir_.path(); }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }

 private:
  testing::TempDir dir_{"nodeagent-e2e"};
  fs::path manifests_;
  fs::path root_;
  fs::path logs_;
  fs::path work_;
  std::string cgroup_root_;  // --cgroup-root
  int port_;
  pid_t pid_ = 0;
};

// Waits for `pred`; on timeout, shows the agent's log tail with the failure.
#define REQUIRE_EVENTUALLY(daemon, pred, deadline)                      \
  do {                                                                  \
    bool ok_ = testing::eventually(pred, deadline);                     \
    if (!ok_) UNSCOPED_INFO("agent log tail:\n" << (daemon).logTail()); \
    REQUIRE(ok_);                                                       \
  } while (0)

// The one process with `marker`, 0 if there is none or several. Retries briefly: a forked child
// shows its parent's cmdline until it execs.
inline int onePid(const std::string& marker) {
  int pid = 0;
  testing::eventually(
      [&] {
        auto pids = pidsWithArg(marker);
        pid = pids.size() == 1 ? pids[0] : 0;
        return pid != 0;
      },
      2s);
  return pid;
}

// A unique marker per test run, so leftovers of another run never match.
inline std::string marker(const std::string& what) {
  return "nodeagent-e2e-" + what + "-" + std::to_string(::getpid());
}

}  // namespace nodeagent::e2e
