// The nodeagent daemon end to end with the process runtime: the built binary on a manifest
// directory, real containers (sh, sleep) under nodeagent-shim, checked through /proc, the files
// the containers write and the read-only port. Containers deliberately outlive the agent, so each
// test kills the agent and then every container process group recorded under its root dir.
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
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "agent/runtime/state_file.h"
#include "test/support/test_util.h"

extern char** environ;

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kNode = "node1";

// A free loopback port: bind port 0, read it, close. The daemon's --read-only-port=0 disables.
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::vector<std::string> procCmdline(int pid) {
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
std::vector<int> pidsWithArg(const std::string& marker) {
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

bool alive(int pid) {
  auto st = runtime::readProcStat(pid);
  return st && st->state != 'Z';
}

std::string readOr(const fs::path& p, const std::string& fallback = "") {
  std::error_code ec;
  if (!fs::exists(p, ec)) return fallback;
  return testing::readFile(p);
}

size_t lineCount(const fs::path& p) {
  auto text = readOr(p);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::string quoteYaml(const std::string& s) { return json(s).dump(); }

// A one-container pod running `sh -c script marker` (the marker is $0, so it shows in
// /proc/<pid>/cmdline as its own argument).
std::string shPod(const std::string& name, const std::string& marker, const std::string& script,
                  const std::string& extra_spec = "", const std::string& restart = "Always") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  restartPolicy: " + restart + "\n" + extra_spec +
         "  containers:\n  - name: main\n    image: debian:12\n    command: [\"/bin/sh\", \"-c\", " +
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
        port_(freePort()) {
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
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  void start(std::vector<std::string> extra = {}) {
    REQUIRE(pid_ == 0);
    std::string bin = testing::binaryPath("nodeagent").string();
    std::vector<std::string> args{bin,
                                  "--pod-manifest-path=" + manifests_.string(),
                                  "--root-dir=" + root_.string(),
                                  "--pod-log-dir=" + logs_.string(),
                                  "--read-only-port=" + std::to_string(port_),
                                  "--healthz-port=0",
                                  "--hostname-override=" + std::string(kNode),
                                  "--crashloop-backoff-initial=1s",
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
    bool up = testing::eventually([&] { return get("/healthz").has_value(); }, 15s);
    if (!up) UNSCOPED_INFO("agent log:\n" << logTail());
    REQUIRE(up);
  }

  // Sends `sig` and waits for the exit; returns the exit code (128+signal for a signal death),
  // or -1 when it did not exit within the deadline.
  int stop(int sig) {
    REQUIRE(pid_ > 0);
    ::kill(pid_, sig);
    int status = 0;
    bool exited = testing::eventually(
        [&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 20s);
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
  pid_t pid() const { return pid_; }

 private:
  testing::TempDir dir_{"nodeagent-e2e"};
  fs::path manifests_;
  fs::path root_;
  fs::path logs_;
  fs::path work_;
  int port_;
  pid_t pid_ = 0;
};

// Waits for `pred`; on timeout, shows the agent's log tail with the failure.
#define REQUIRE_EVENTUALLY(daemon, pred, deadline)                          \
  do {                                                                      \
    bool ok_ = testing::eventually(pred, deadline);                         \
    if (!ok_) UNSCOPED_INFO("agent log tail:\n" << (daemon).logTail());     \
    REQUIRE(ok_);                                                           \
  } while (0)

// The one process with `marker`, 0 if there is none or several. Retries briefly: a forked child
// shows its parent's cmdline until it execs.
int onePid(const std::string& marker) {
  int pid = 0;
  testing::eventually([&] {
    auto pids = pidsWithArg(marker);
    pid = pids.size() == 1 ? pids[0] : 0;
    return pid != 0;
  }, 2s);
  return pid;
}

// A unique marker per test run, so leftovers of another run never match.
std::string marker(const std::string& what) {
  return "nodeagent-e2e-" + what + "-" + std::to_string(::getpid());
}

}  // namespace

TEST_CASE("daemon runs a new manifest's container and lists the pod Running", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("appear");
  d.writeManifest("web.yaml", shPod("web", m, "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(d, [&] { return onePid(m) != 0; }, 15s);
  REQUIRE_EVENTUALLY(d, [&] { return d.running("web"); }, 15s);
  auto p = d.pod("web");
  REQUIRE(p);
  CHECK((*p)["metadata"]["namespace"] == "default");
  CHECK((*p)["spec"]["nodeName"] == kNode);
  CHECK((*p)["status"]["containerStatuses"][0]["restartCount"] == 0);
}

TEST_CASE("daemon leaves a container alone on an identical rewrite and replaces it on an edit",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m1 = marker("edit-v1");
  const auto m2 = marker("edit-v2");
  const auto old_exited = d.work() / "old-exited";
  const auto order = d.work() / "order";
  // The old version takes a second to exit after TERM; the new one records whether the old one
  // had already exited when it started.
  const auto v1 = shPod("edit", m1,
                        "trap 'kill $! ; sleep 1; touch " + old_exited.string() +
                            "; exit 0' TERM; sleep 1000 & wait");
  const auto v2 = shPod("edit", m2,
                        "if [ -e " + old_exited.string() + " ]; then echo after > " +
                            order.string() + "; else echo before > " + order.string() +
                            "; fi; sleep 1000 & wait");
  d.writeManifest("edit.yaml", v1);
  REQUIRE_EVENTUALLY(d, [&] { return onePid(m1) != 0 && d.running("edit"); }, 15s);
  const int pid1 = onePid(m1);
  const auto uid1 = (*d.pod("edit"))["metadata"]["uid"].get<std::string>();

  // Identical content rewritten (new inode, new mtime): nothing changes.
  d.writeManifest("edit.yaml", v1);
  // A second manifest written after the rewrite: once it runs, the rewrite has been processed.
  const auto probe = marker("edit-probe");
  d.writeManifest("probe.yaml", shPod("probe", probe, "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(d, [&] { return d.running("probe"); }, 15s);
  CHECK(onePid(m1) == pid1);
  CHECK((*d.pod("edit"))["metadata"]["uid"] == uid1);
  CHECK((*d.containerStatus("edit"))["restartCount"] == 0);

  // Edit: the old container has exited before the new one starts.
  d.writeManifest("edit.yaml", v2);
  REQUIRE_EVENTUALLY(d, [&] { return onePid(m2) != 0; }, 20s);
  REQUIRE_EVENTUALLY(d, [&] { return !readOr(order).empty(); }, 10s);
  CHECK(readOr(order) == "after\n");
  CHECK(pidsWithArg(m1).empty());
  REQUIRE_EVENTUALLY(d, [&] {
    auto p = d.pod("edit");
    return p && (*p)["metadata"]["uid"] != uid1 && d.running("edit");
  }, 15s);
}

TEST_CASE("daemon sends TERM on manifest removal and KILL after the grace period",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto polite = marker("term-polite");
  const auto stubborn = marker("term-stubborn");
  const auto got_term = d.work() / "got-term";
  d.writeManifest("polite.yaml", shPod("polite", polite,
                                       "trap 'echo term > " + got_term.string() +
                                           "; kill $! ; exit 0' TERM; sleep 1000 & wait"));
  d.writeManifest("stubborn.yaml",
                  shPod("stubborn", stubborn, "trap '' TERM; while true; do sleep 0.2; done",
                        "  terminationGracePeriodSeconds: 2\n"));
  REQUIRE_EVENTUALLY(d, [&] { return d.running("polite") && d.running("stubborn"); }, 15s);
  const int polite_pid = onePid(polite);
  const int stubborn_pid = onePid(stubborn);
  REQUIRE(polite_pid != 0);
  REQUIRE(stubborn_pid != 0);

  d.removeManifest("polite.yaml");
  REQUIRE_EVENTUALLY(d, [&] { return !alive(polite_pid); }, 15s);
  CHECK(readOr(got_term) == "term\n");
  REQUIRE_EVENTUALLY(d, [&] { return !d.pod("polite"); }, 15s);

  const auto removed_at = std::chrono::steady_clock::now();
  d.removeManifest("stubborn.yaml");
  REQUIRE_EVENTUALLY(d, [&] { return !alive(stubborn_pid); }, 15s);
  const auto took = std::chrono::steady_clock::now() - removed_at;
  // It ignored TERM, so only the KILL after the 2 s grace period ended it.
  CHECK(took >= 1800ms);
  CHECK(took < 10s);
}

TEST_CASE("daemon restarts a crashing container with growing delays and counts restarts",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("crash");
  const auto runs = d.work() / "runs";
  d.writeManifest("crash.yaml",
                  shPod("crash", m, "date +%s.%N >> " + runs.string() + "; exit 3"));
  REQUIRE_EVENTUALLY(d, [&] { return lineCount(runs) >= 5; }, 40s);
  std::vector<double> times;
  {
    std::istringstream in(readOr(runs));
    double t;
    while (in >> t) times.push_back(t);
  }
  REQUIRE(times.size() >= 5);
  // kubelet's backoff with a 1 s base: restarts about 0, 1, 2, 4 s after each exit.
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  INFO("gaps: " << gaps[0] << " " << gaps[1] << " " << gaps[2] << " " << gaps[3]);
  CHECK(gaps[1] >= 0.8);
  CHECK(gaps[2] >= 1.7);
  CHECK(gaps[3] >= 3.5);
  CHECK(gaps[3] > gaps[1]);
  REQUIRE_EVENTUALLY(d, [&] {
    auto cs = d.containerStatus("crash");
    return cs && (*cs)["restartCount"].get<int>() >= 4 &&
           (*cs)["lastState"]["terminated"].value("exitCode", 0) == 3;
  }, 15s);
}

TEST_CASE("daemon follows restartPolicy Never and OnFailure", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto never_fail_runs = d.work() / "never-fail";
  const auto never_ok_runs = d.work() / "never-ok";
  const auto onfailure_runs = d.work() / "onfailure";
  const auto always_runs = d.work() / "always";
  d.writeManifest("never-fail.yaml",
                  shPod("never-fail", marker("never-fail"),
                        "echo run >> " + never_fail_runs.string() + "; exit 2", "", "Never"));
  d.writeManifest("never-ok.yaml",
                  shPod("never-ok", marker("never-ok"),
                        "echo run >> " + never_ok_runs.string() + "; exit 0", "", "Never"));
  // Fails twice, then succeeds. `$$(` is kubelet's escape for a literal `$(`.
  d.writeManifest("onfailure.yaml",
                  shPod("onfailure", marker("onfailure"),
                        "echo run >> " + onfailure_runs.string() + "; if [ $$(wc -l < " +
                            onfailure_runs.string() + ") -lt 3 ]; then exit 1; fi; exit 0",
                        "", "OnFailure"));
  // A clock for the negative checks: an Always pod that exits 0 keeps being restarted.
  d.writeManifest("always.yaml", shPod("always", marker("always"),
                                       "echo run >> " + always_runs.string() + "; exit 0"));

  REQUIRE_EVENTUALLY(d, [&] { return d.phase("never-fail") == "Failed"; }, 15s);
  REQUIRE_EVENTUALLY(d, [&] { return d.phase("never-ok") == "Succeeded"; }, 15s);
  REQUIRE_EVENTUALLY(d, [&] { return d.phase("onfailure") == "Succeeded"; }, 20s);
  CHECK((*d.containerStatus("never-fail"))["state"]["terminated"]["exitCode"] == 2);
  CHECK((*d.containerStatus("never-ok"))["state"]["terminated"]["reason"] == "Completed");
  CHECK((*d.containerStatus("onfailure"))["restartCount"] == 2);

  // Once the Always pod has been restarted three more times, the others would have been too.
  const size_t base = lineCount(always_runs);
  REQUIRE_EVENTUALLY(d, [&] { return lineCount(always_runs) >= base + 3; }, 30s);
  CHECK(lineCount(never_fail_runs) == 1);
  CHECK(lineCount(never_ok_runs) == 1);
  CHECK(lineCount(onfailure_runs) == 3);
  CHECK(d.phase("always") == "Running");
}

TEST_CASE("daemon runs init containers in order before the app container", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("init-main");
  const auto trace = d.work() / "trace";
  const std::string manifest =
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: init\nspec:\n"
      "  initContainers:\n"
      "  - name: first\n    image: debian:12\n    command: [\"/bin/sh\", \"-c\", \"sleep 0.3; echo first >> " +
      trace.string() +
      "\"]\n"
      "  - name: second\n    image: debian:12\n    command: [\"/bin/sh\", \"-c\", \"echo second >> " +
      trace.string() +
      "\"]\n"
      "  containers:\n"
      "  - name: main\n    image: debian:12\n    command: [\"/bin/sh\", \"-c\", \"echo main >> " +
      trace.string() + "; sleep 1000 & wait\", \"" + m + "\"]\n";
  d.writeManifest("init.yaml", manifest);
  REQUIRE_EVENTUALLY(d, [&] { return d.running("init"); }, 20s);
  REQUIRE_EVENTUALLY(d, [&] { return readOr(trace) == "first\nsecond\nmain\n"; }, 5s);
  for (const char* name : {"first", "second"}) {
    auto cs = d.containerStatus("init", name, "initContainerStatuses");
    REQUIRE(cs);
    CHECK((*cs)["state"]["terminated"]["reason"] == "Completed");
    CHECK((*cs)["ready"] == true);
  }
}

TEST_CASE("daemon writes container output as CRI logs under the pod log dir", "[e2e][daemon]") {
  Daemon d;
  d.start();
  d.writeManifest("logger.yaml",
                  shPod("logger", marker("logger"),
                        "echo hello-out; echo hello-err >&2; sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(d, [&] { return d.running("logger"); }, 15s);
  const auto uid = (*d.pod("logger"))["metadata"]["uid"].get<std::string>();
  const auto log = d.logs() / ("default_logger-node1_" + uid) / "main" / "0.log";
  REQUIRE_EVENTUALLY(d, [&] {
    auto text = readOr(log);
    return text.find("hello-out") != std::string::npos &&
           text.find("hello-err") != std::string::npos;
  }, 10s);
  std::istringstream in(testing::readFile(log));
  std::string line;
  bool saw_out = false, saw_err = false;
  while (std::getline(in, line)) {
    // <RFC3339Nano timestamp> <stream> <F|P> <text>
    std::istringstream fields(line);
    std::string ts, stream, tag, text;
    fields >> ts >> stream >> tag;
    std::getline(fields, text);
    CHECK(ts.find('T') != std::string::npos);
    CHECK(tag == "F");
    if (stream == "stdout" && text == " hello-out") saw_out = true;
    if (stream == "stderr" && text == " hello-err") saw_err = true;
  }
  CHECK(saw_out);
  CHECK(saw_err);
}

TEST_CASE("daemon killed with SIGKILL adopts its containers on restart and reports exits "
          "that happened meanwhile", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto keep = marker("adopt-keep");
  const auto quit = marker("adopt-quit");
  const auto go = d.work() / "go";
  d.writeManifest("keep.yaml", shPod("keep", keep, "sleep 1000 & wait"));
  d.writeManifest("quit.yaml",
                  shPod("quit", quit,
                        "while [ ! -e " + go.string() + " ]; do sleep 0.05; done; exit 7", "",
                        "Never"));
  REQUIRE_EVENTUALLY(d, [&] { return d.running("keep") && d.running("quit"); }, 15s);
  const int keep_pid = onePid(keep);
  const int quit_pid = onePid(quit);
  REQUIRE(keep_pid != 0);
  REQUIRE(quit_pid != 0);

  REQUIRE(d.stop(SIGKILL) == 128 + SIGKILL);
  testing::writeFile(go, "");
  REQUIRE_EVENTUALLY(d, [&] { return !alive(quit_pid); }, 10s);
  CHECK(alive(keep_pid));

  d.start();
  REQUIRE_EVENTUALLY(d, [&] { return d.phase("quit") == "Failed"; }, 15s);
  auto cs = d.containerStatus("quit");
  REQUIRE(cs);
  CHECK((*cs)["state"]["terminated"]["exitCode"] == 7);
  REQUIRE_EVENTUALLY(d, [&] { return d.running("keep"); }, 15s);
  CHECK((*d.containerStatus("keep"))["restartCount"] == 0);
  CHECK(onePid(keep) == keep_pid);
  CHECK(pidsWithArg(quit).empty());
}

TEST_CASE("daemon keeps good pods running next to a bad manifest and reports the error",
          "[e2e][daemon]") {
  Daemon d;
  d.writeManifest("good1.yaml", shPod("good1", marker("good1"), "sleep 1000 & wait"));
  d.writeManifest("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers: [\n");
  d.writeManifest("good2.yaml", shPod("good2", marker("good2"), "sleep 1000 & wait"));
  d.start();
  REQUIRE_EVENTUALLY(d, [&] { return d.running("good1") && d.running("good2"); }, 15s);
  REQUIRE_EVENTUALLY(d, [&] {
    auto body = d.get("/manifest-errors");
    return body && body->find("bad.yaml") != std::string::npos;
  }, 10s);
  auto errors = json::parse(*d.get("/manifest-errors"));
  REQUIRE(errors.is_array());
  REQUIRE(errors.size() == 1);
  CHECK(errors[0]["location"].get<std::string>().find("bad.yaml") != std::string::npos);
  CHECK_FALSE(errors[0]["message"].get<std::string>().empty());
  auto metrics = d.get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->find("nodeagent_manifest_errors{") != std::string::npos);
  CHECK(metrics->find("bad.yaml") != std::string::npos);
  CHECK_FALSE(d.pod("bad"));

  // A good manifest that goes bad keeps its last good version running.
  const int good1_pid = onePid(marker("good1"));
  REQUIRE(good1_pid != 0);
  d.writeManifest("good1.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [oops\n");
  REQUIRE_EVENTUALLY(d, [&] {
    auto body = d.get("/manifest-errors");
    return body && body->find("good1.yaml") != std::string::npos;
  }, 10s);
  CHECK(alive(good1_pid));
  CHECK(d.running("good1"));

  // Fixing the bad file clears its error and starts its pod.
  d.writeManifest("bad.yaml", shPod("bad", marker("bad-fixed"), "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(d, [&] { return d.running("bad"); }, 15s);
  REQUIRE_EVENTUALLY(d, [&] {
    auto body = d.get("/manifest-errors");
    return body && body->find("bad.yaml") == std::string::npos;
  }, 10s);
}

TEST_CASE("daemon exits 0 on SIGTERM and leaves its containers running", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("survive");
  d.writeManifest("survive.yaml", shPod("survive", m, "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(d, [&] { return d.running("survive"); }, 15s);
  const int pid = onePid(m);
  REQUIRE(pid != 0);
  CHECK(d.stop(SIGTERM) == 0);
  CHECK(alive(pid));
  CHECK(onePid(m) == pid);
}

TEST_CASE("daemon starts a pod again when its manifest is deleted and written back",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("readd");
  const auto manifest = shPod("readd", m, "sleep 1000 & wait");
  d.writeManifest("readd.yaml", manifest);
  REQUIRE_EVENTUALLY(d, [&] { return d.running("readd"); }, 15s);
  const int pid1 = onePid(m);
  REQUIRE(pid1 != 0);
  d.removeManifest("readd.yaml");
  REQUIRE_EVENTUALLY(d, [&] { return !alive(pid1); }, 15s);
  // Same content, same UID: the worker must not treat it as the pod it just killed.
  d.writeManifest("readd.yaml", manifest);
  REQUIRE_EVENTUALLY(d, [&] { return onePid(m) != 0 && d.running("readd"); }, 20s);
  CHECK(onePid(m) != pid1);
}
