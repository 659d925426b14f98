// ProcessRuntime against real processes (/bin/sh, sleep, true, false) and the
// built nodeagent-shim.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "agent/runtime/cri_log.h"
#include "agent/runtime/process_runtime.h"
#include "agent/runtime/security_context.h"
#include "agent/runtime/shim_processes.h"
#include "agent/runtime/state_file.h"
#include "test/support/integration_env.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

api::Container shContainer(std::string name, std::string script) {
  api::Container c;
  c.name = std::move(name);
  c.image = "busybox:1.36";
  c.command = {"/bin/sh", "-c", std::move(script)};
  c.hash = api::Hash128{7, 9};
  return c;
}

api::PodPtr makePod(const std::string& uid, std::vector<api::Container> containers,
                    std::optional<int64_t> grace = std::nullopt) {
  auto pod = std::make_shared<api::Pod>();
  pod->metadata.name = "pod-" + uid;
  pod->metadata.namespace_ = "default";
  pod->metadata.uid = uid;
  pod->spec->node_name = "node-a";
  pod->spec->containers = std::move(containers);
  pod->spec->termination_grace_period_seconds = grace;
  return pod;
}

std::vector<CriRecord> readCriLog(const fs::path& path) {
  std::vector<CriRecord> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto rec = parseCriRecord(line);
    if (!rec) FAIL("not a CRI record in " << path << ": " << line);
    out.push_back(*rec);
  }
  return out;
}

std::string logText(const fs::path& path) {
  std::string all;
  for (const auto& r : readCriLog(path)) all += r.text + (r.partial ? "" : "\n");
  return all;
}

// A ProcessRuntime on an io_context run by one background thread (like the
// agent's pool).
class Env {
 public:
  explicit Env(ProcessRuntimeOptions extra = {})
      : options_(testing::processRuntimeOptions(dir_.path(), std::move(extra))) {
    io_.start(1);
    makeRuntime();
  }
  ~Env() {
    // Leave no container behind.
    try {
      if (runtime_) {
        auto pods = sync(runtime_->getPods(false));
        if (pods.ok()) {
          for (auto& p : *pods) (void)sync(runtime_->killPod(nullptr, p, 0));
        }
      }
    } catch (...) {
    }
    runtime_.reset();
    io_.stop();
  }

  void makeRuntime() {
    runtime_ = testing::makeProcessRuntime(io_.executor(), options_);
    runtime_->setEventHandler([this](const ContainerEvent& e) {
      std::lock_guard lock(mu_);
      events_.push_back({e, std::chrono::steady_clock::now()});
    });
  }
  void dropRuntime() { runtime_.reset(); }

  template <typename T>
  T sync(asio::awaitable<T> aw) {
    std::promise<T> promise;
    auto future = promise.get_future();
    asio::co_spawn(
        io_.context(),
        [&]() -> asio::awaitable<void> { promise.set_value(co_await std::move(aw)); },
        asio::detached);
    REQUIRE(future.wait_for(60s) == std::future_status::ready);
    return future.get();
  }

  ContainerId start(const api::PodPtr& pod, size_t index = 0, int attempt = 0,
                    StartContainerOptions options = {}) {
    auto id = sync(runtime_->startContainer(pod, pod->spec->containers[index], attempt, options));
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

  std::optional<std::chrono::steady_clock::time_point> eventTime(const ContainerId& id,
                                                                 ContainerEvent::Type type) {
    std::lock_guard lock(mu_);
    for (const auto& [e, at] : events_) {
      if (e.container_id == id && e.type == type) return at;
    }
    return std::nullopt;
  }
  int eventCount(const ContainerId& id, ContainerEvent::Type type) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const auto& [e, at] : events_) n += e.container_id == id && e.type == type ? 1 : 0;
    return n;
  }

  ProcessRuntime& runtime() { return *runtime_; }
  const testing::TempDir& dir() const { return dir_; }
  const ProcessRuntimeOptions& options() const { return options_; }

 private:
  testing::TempDir dir_{"nodeagent-runtime"};
  ProcessRuntimeOptions options_;
  testing::IoThreads io_;
  std::unique_ptr<ProcessRuntime> runtime_;
  std::mutex mu_;
  std::vector<std::pair<ContainerEvent, std::chrono::steady_clock::time_point>> events_;
};

std::string procFile(int pid, const std::string& name) {
  return testing::readFile("/proc/" + std::to_string(pid) + "/" + name);
}

long pssKib(int pid) {
  std::istringstream in(procFile(pid, "smaps_rollup"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Pss:", 0) == 0) return std::stol(line.substr(4));
  }
  return -1;
}

// Processes running exactly `sleep <seconds>`: a container's unique marker.
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

// A `sleep` duration no other test (or test binary) uses.
std::string uniqueSleep() {
  static std::atomic<int> next{0};
  return "3600." + std::to_string(::getpid()) + std::to_string(next++);
}

}  // namespace

TEST_CASE(
    "process runtime: names that are not one path component are refused, nothing is "
    "created",
    "[integration][runtime][security]") {
  Env env;
  const fs::path dir = env.dir().path();
  struct Case {
    const char* what;
    std::string ns, uid, container;
  };
  const std::string abs = (dir / "escape-abs").string();
  for (const auto& c : {Case{"container", "default", "u-1", "../../escape-c"},
                        Case{"absolute container", "default", "u-2", abs},
                        Case{"dot-dot container", "default", "u-3", ".."},
                        Case{"uid", "default", "../../escape-u", "main"},
                        Case{"namespace", "a/../../escape-n", "u-4", "main"},
                        Case{"NUL", "default", std::string("u\0x", 3), "main"}}) {
    INFO(c.what);
    auto edited = std::make_shared<api::Pod>(
        *makePod(c.uid, {shContainer(c.container, "echo hi; sleep 100")}));
    edited->metadata.namespace_ = c.ns;
    api::PodPtr pod = edited;
    auto id = env.sync(env.runtime().startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE_FALSE(id.ok());
    CHECK(startErrorReason(id.status()) == kCreateContainerConfigError);
    CHECK(id.status().message().find("is not a valid path component") != std::string::npos);
  }
  auto pods = env.sync(env.runtime().getPods(true));
  REQUIRE(pods.ok());
  CHECK(pods->empty());
  // Every name above climbs back to the test's directory: nothing named escape* is there.
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    CHECK(e.path().filename().string().find("escape") == std::string::npos);
  }
  std::error_code ec;
  CHECK((fs::is_empty(env.options().pod_log_dir, ec) || !fs::exists(env.options().pod_log_dir)));
  CHECK((fs::is_empty(env.options().root_dir / "containers", ec) ||
         !fs::exists(env.options().root_dir / "containers")));
}

TEST_CASE(
    "process runtime: a pod's sandbox is its log directory, ready until stopped, gone once "
    "removed, and adopted containers run in a ready one",
    "[integration][runtime]") {
  Env env;
  PodSandboxConfig config;
  config.uid = "u-sandbox";
  config.name = "pod-u-sandbox";
  config.namespace_ = "default";
  config.attempt = 2;
  config.log_directory = env.runtime().podLogsDirectory("default", "pod-u-sandbox", "u-sandbox");
  CHECK(config.log_directory == env.dir().path() / "logs" / "default_pod-u-sandbox_u-sandbox");
  auto id = env.sync(env.runtime().runPodSandbox(config));
  REQUIRE(id.ok());
  CHECK(*id == "u-sandbox");
  CHECK(fs::is_directory(config.log_directory));
  auto status = [&](const std::string& uid) {
    auto st = env.sync(env.runtime().getPodStatus(uid, "pod-" + uid, "default"));
    REQUIRE(st.ok());
    return *st;
  };
  auto ready = status("u-sandbox");
  REQUIRE(ready.sandbox_statuses.size() == 1);
  CHECK(ready.sandbox_statuses[0].id == "u-sandbox");
  CHECK(ready.sandbox_statuses[0].state == SandboxState::kReady);
  CHECK(ready.sandbox_statuses[0].attempt == 2);
  REQUIRE(env.sync(env.runtime().stopPodSandbox("u-sandbox")).ok());
  CHECK(status("u-sandbox").sandbox_statuses.at(0).state == SandboxState::kNotReady);
  REQUIRE(env.sync(env.runtime().removePodSandbox("u-sandbox")).ok());
  CHECK(status("u-sandbox").sandbox_statuses.empty());
  CHECK(env.sync(env.runtime().stopPodSandbox("unknown")).ok());
  CHECK(env.sync(env.runtime().removePodSandbox("unknown")).ok());

  // A container started without a sandbox (as one adopted from an agent before sandboxes).
  auto pod = makePod("u-adopted", {shContainer("c", "exec sleep " + uniqueSleep())});
  env.start(pod);
  auto adopted = status("u-adopted");
  REQUIRE(adopted.sandbox_statuses.size() == 1);
  CHECK(adopted.sandbox_statuses[0].state == SandboxState::kReady);
}

TEST_CASE("process runtime: a started container runs as its own session leader",
          "[integration][runtime]") {
  Env env;
  auto pod = makePod("u-run", {shContainer("main", "exec sleep 30")});
  auto id = env.start(pod);
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  CHECK(cs->state == ContainerState::kRunning);
  CHECK(cs->restart_count == 0);
  CHECK(cs->hash == api::Hash128{7, 9});
  CHECK(cs->image == "busybox:1.36");
  REQUIRE(cs->pid > 0);
  CHECK(cs->started_at >= cs->created_at);
  // /proc/<pid>/cmdline reads empty for a moment while the process is inside execve (sh
  // execs sleep here), so look until it settles.
  CHECK(testing::eventually(
      [&] { return procFile(cs->pid, "cmdline").find("sleep") != std::string::npos; }));
  // Fields after the command name: state ppid pgrp session.
  std::istringstream stat(
      procFile(cs->pid, "stat").substr(procFile(cs->pid, "stat").rfind(')') + 2));
  std::string state;
  int ppid = 0, pgrp = 0, session = 0;
  stat >> state >> ppid >> pgrp >> session;
  CHECK(pgrp == cs->pid);
  CHECK(session == cs->pid);
  CHECK(ppid == env.runtime().shimPidForTest(id));
  CHECK(testing::eventually(
      [&] { return env.eventTime(id, ContainerEvent::Type::kStarted).has_value(); }));

  auto pods = env.sync(env.runtime().getPods(false));
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].uid == "u-run");
  CHECK((*pods)[0].containers.size() == 1);
}

TEST_CASE("process runtime: exit codes, reasons and signal deaths are recorded",
          "[integration][runtime]") {
  Env env;
  auto pod = makePod("u-exit", {shContainer("ok", "true"), shContainer("bad", "exit 3"),
                                // "$$$$": kubelet's expansion turns "$$" into "$".
                                shContainer("sig", "kill -9 $$$$"), [] {
                                  api::Container c;
                                  c.name = "false";
                                  c.command = {"false"};
                                  return c;
                                }()});
  auto ok = env.start(pod, 0);
  auto bad = env.start(pod, 1);
  auto sig = env.start(pod, 2);
  auto f = env.start(pod, 3);
  for (const auto& id : {ok, bad, sig, f}) {
    REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
    CHECK(
        testing::eventually([&] { return env.eventCount(id, ContainerEvent::Type::kDied) == 1; }));
  }
  auto s_ok = *env.status(pod, ok);
  CHECK(s_ok.exit_code == 0);
  CHECK(s_ok.reason == "Completed");
  CHECK(s_ok.finished_at >= s_ok.started_at);
  auto s_bad = *env.status(pod, bad);
  CHECK(s_bad.exit_code == 3);
  CHECK(s_bad.reason == "Error");
  auto s_sig = *env.status(pod, sig);
  CHECK(s_sig.exit_code == 137);
  CHECK(s_sig.signal == SIGKILL);
  CHECK(s_sig.reason == "Error");
  auto s_f = *env.status(pod, f);
  CHECK(s_f.exit_code == 1);  // "false" found through the default PATH
}

TEST_CASE("process runtime: start errors carry kubelet's reasons", "[integration][runtime]") {
  Env env;
  SECTION("an empty command is CreateContainerConfigError and starts nothing") {
    api::Container c;
    c.name = "noop";
    c.image = "nginx";
    auto pod = makePod("u-empty", {c});
    auto id = env.sync(env.runtime().startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE_FALSE(id.ok());
    CHECK(startErrorReason(id.status()) == kCreateContainerConfigError);
    CHECK(id.status().message().find("command") != std::string::npos);
    CHECK(id.status().message().find("noop") != std::string::npos);
    auto pods = env.sync(env.runtime().getPods(true));
    REQUIRE(pods.ok());
    CHECK(pods->empty());
  }
  SECTION(
      "a missing executable is RunContainerError and leaves an exited "
      "container") {
    api::Container c;
    c.name = "missing";
    c.command = {"no-such-program-xyz"};
    auto pod = makePod("u-missing", {c});
    auto id = env.sync(env.runtime().startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE_FALSE(id.ok());
    CHECK(startErrorReason(id.status()) == kRunContainerError);
    CHECK(id.status().message().find("no-such-program-xyz") != std::string::npos);
    auto st = env.sync(env.runtime().getPodStatus("u-missing", "pod-u-missing", "default"));
    REQUIRE(st.ok());
    REQUIRE(st->container_statuses.size() == 1);
    CHECK(st->container_statuses[0].state == ContainerState::kExited);
    CHECK(st->container_statuses[0].exit_code == 127);
    CHECK(st->container_statuses[0].reason == "ContainerCannotRun");
  }
}

TEST_CASE(
    "process runtime: kill sends SIGTERM to the process group, then "
    "SIGKILL after grace",
    "[integration][runtime]") {
  Env env;
  SECTION("a process that handles SIGTERM exits by itself") {
    auto pod = makePod("u-term", {shContainer("main",
                                              "trap 'echo got-term; exit 0' TERM; echo ready; "
                                              "while true; do sleep 0.05; done")});
    auto id = env.start(pod);
    auto log = env.status(pod, id)->log_path;
    REQUIRE(testing::eventually([&] { return logText(log).find("ready") != std::string::npos; }));
    auto t0 = std::chrono::steady_clock::now();
    CHECK(env.sync(env.runtime().killContainer(pod, id, KillOptions::graceOverride(10), "test"))
              .ok());
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    auto cs = env.status(pod, id);
    REQUIRE(cs);
    CHECK(cs->state == ContainerState::kExited);
    CHECK(cs->exit_code == 0);
    CHECK(testing::eventually([&] { return logText(log).find("got-term") != std::string::npos; }));
  }
  SECTION("a process that ignores SIGTERM is killed when the grace period ends") {
    auto pod = makePod("u-kill", {shContainer("main",
                                              "trap '' TERM; echo ready; "
                                              "while true; do sleep 0.05; done")});
    auto id = env.start(pod);
    auto log = env.status(pod, id)->log_path;
    REQUIRE(testing::eventually([&] { return logText(log).find("ready") != std::string::npos; }));
    auto t0 = std::chrono::steady_clock::now();
    CHECK(
        env.sync(env.runtime().killContainer(pod, id, KillOptions::graceOverride(1), "test")).ok());
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took >= 1s);
    CHECK(took < 10s);
    auto cs = env.status(pod, id);
    REQUIRE(cs);
    CHECK(cs->exit_code == 137);
    CHECK(cs->signal == SIGKILL);
    CHECK(env.eventCount(id, ContainerEvent::Type::kDied) <= 1);
  }
  SECTION("killPod stops every container in parallel") {
    auto pod =
        makePod("u-pod", {shContainer("a", "trap '' TERM; while true; do sleep 0.05; done"),
                          shContainer("b", "trap '' TERM; while true; do sleep 0.05; done")});
    auto a = env.start(pod, 0);
    auto b = env.start(pod, 1);
    auto pods = env.sync(env.runtime().getPods(false));
    REQUIRE(pods.ok());
    REQUIRE(pods->size() == 1);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(env.sync(env.runtime().killPod(pod, (*pods)[0], 1)).ok());
    auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took < 1900ms);  // two 1s grace periods overlapped
    CHECK(env.exited(pod, a));
    CHECK(env.exited(pod, b));
  }
  SECTION("killing an exited container is OK, an unknown one NotFound") {
    auto pod = makePod("u-done", {shContainer("main", "true")});
    auto id = env.start(pod);
    REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
    CHECK(env.sync(env.runtime().killContainer(pod, id, KillOptions{}, "test")).ok());
    CHECK(env.sync(env.runtime().killContainer(pod, ContainerId{"process", "nope"},
                                               KillOptions::graceOverride(0), "test"))
              .code() == base::StatusCode::kNotFound);
  }
}

TEST_CASE(
    "process runtime: the preStop hook runs before SIGTERM with the "
    "container's env",
    "[integration][runtime]") {
  Env env;
  auto c = shContainer("main",
                       "trap 'if [ -f prestop.txt ]; then echo saw-prestop; fi; exit 0' TERM; "
                       "echo ready; while true; do sleep 0.05; done");
  api::Handler hook;
  hook.exec = api::ExecAction{{"/bin/sh", "-c", "echo \"$HOOK_VAR\" > prestop.txt"}};
  c.lifecycle = api::Lifecycle{std::nullopt, hook};
  api::EnvVar var;
  var.name = "HOOK_VAR";
  var.value = "from-env";
  c.env = {var};
  auto pod = makePod("u-hook", {c}, 5);
  StartContainerOptions options;
  options.pod_dir = env.dir() / "poddir";
  auto id = env.start(pod, 0, 0, options);
  auto log = env.status(pod, id)->log_path;
  REQUIRE(testing::eventually([&] { return logText(log).find("ready") != std::string::npos; }));
  CHECK(env.sync(env.runtime().killContainer(pod, id, KillOptions{}, "test")).ok());
  CHECK(testing::readFile(env.dir() / "poddir" / "prestop.txt") == "from-env\n");
  CHECK(testing::eventually([&] { return logText(log).find("saw-prestop") != std::string::npos; }));
  CHECK(env.status(pod, id)->exit_code == 0);
}

TEST_CASE(
    "process runtime: logs are CRI records, split when long and rotated "
    "by size",
    "[integration][runtime]") {
  SECTION("streams, partial lines and an unterminated tail") {
    Env env;
    auto pod = makePod("u-log", {shContainer("main",
                                             "echo out1; echo err1 >&2; "
                                             "head -c 40000 /dev/zero | tr '\\0' x; echo; "
                                             "printf tail")});
    auto id = env.start(pod);
    REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
    auto path = env.runtime().containerLogsPath("default", "pod-u-log", "u-log", "main", 0);
    CHECK(path == env.options().pod_log_dir / "default_pod-u-log_u-log" / "main" / "0.log");
    CHECK(env.status(pod, id)->log_path == path);
    auto records = readCriLog(path);
    std::vector<std::string> stdout_full;
    std::string long_line;
    int partials = 0;
    bool saw_err = false;
    for (const auto& r : records) {
      CHECK(r.timestamp.back() == 'Z');
      if (r.stream == LogStream::kStderr) {
        saw_err = r.text == "err1";
        continue;
      }
      if (r.text.find('x') != std::string::npos) {
        long_line += r.text;
        partials += r.partial ? 1 : 0;
        continue;
      }
      if (!r.partial) stdout_full.push_back(r.text);
    }
    CHECK(saw_err);
    CHECK(long_line == std::string(40000, 'x'));
    CHECK(partials == 2);  // 16 KiB + 16 KiB partial, then the rest ends the line
    CHECK(stdout_full == std::vector<std::string>{"out1", "tail"});
  }
  SECTION("rotation keeps at most max files of at most max size") {
    ProcessRuntimeOptions options;
    options.log_max_size = 2048;
    options.log_max_files = 3;
    Env env(options);
    auto pod = makePod("u-rot", {shContainer("main",
                                             "i=0; while [ $i -lt 300 ]; do "
                                             "echo line-$i-abcdefghijklmnopqrstuvwxyz; "
                                             "i=$((i+1)); done")});
    auto id = env.start(pod);
    REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
    auto path = env.runtime().containerLogsPath("default", "pod-u-rot", "u-rot", "main", 0);
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path.parent_path())) files.push_back(e.path());
    CHECK(files.size() == 3);
    std::string newest_text;
    for (const auto& f : files) {
      CHECK(fs::file_size(f) <= 2048);
      CHECK_FALSE(readCriLog(f).empty());
    }
    // The live file holds the end of the output.
    auto records = readCriLog(path);
    REQUIRE_FALSE(records.empty());
    CHECK(records.back().text == "line-299-abcdefghijklmnopqrstuvwxyz");

    CHECK(env.sync(env.runtime().removeContainer(id)).ok());
    CHECK_FALSE(fs::exists(path.parent_path()));
    CHECK_FALSE(fs::exists(env.options().root_dir / "containers" / id.id));
    CHECK_FALSE(env.status(pod, id));
  }
}

TEST_CASE(
    "process runtime: env, fieldRefs, workingDir and a clean process "
    "environment",
    "[integration][runtime]") {
  Env env;
  auto c = shContainer("main",
                       "echo \"name=$POD_NAME ns=$POD_NS ip=$POD_IP x=$X\"; echo "
                       "\"pwd=$(pwd)\"; "
                       "echo \"path=$PATH\"; echo \"fds=$(ls /proc/self/fd | tr '\\n' ' ')\"; "
                       "grep NoNewPrivs /proc/$$$$/status");
  api::EnvVar name;
  name.name = "POD_NAME";
  name.value_from_kind = "fieldRef";
  name.field_ref = api::ObjectFieldSelector{"v1", "metadata.name"};
  api::EnvVar ns = name;
  ns.name = "POD_NS";
  ns.field_ref->field_path = "metadata.namespace";
  api::EnvVar ip = name;
  ip.name = "POD_IP";
  ip.field_ref->field_path = "status.podIP";
  api::EnvVar x;
  x.name = "X";
  x.value = "$(POD_NAME)-suffix";
  c.env = {name, ns, ip, x};
  fs::create_directories(env.dir() / "work");
  c.working_dir = (env.dir() / "work").string();
  c.security_context = api::SecurityContext{};
  c.security_context->allow_privilege_escalation = false;
  auto pod = makePod("u-env", {c, shContainer("default-dir", "pwd")});
  StartContainerOptions options;
  options.pod_ip = "10.1.2.3";
  options.pod_dir = env.dir() / "pods" / "u-env";
  auto id = env.start(pod, 0, 0, options);
  auto id2 = env.start(pod, 1, 0, options);
  REQUIRE(testing::eventually([&] { return env.exited(pod, id) && env.exited(pod, id2); }));
  auto text = logText(env.status(pod, id)->log_path);
  CHECK(text.find("name=pod-u-env ns=default ip=10.1.2.3 x=pod-u-env-suffix") != std::string::npos);
  CHECK(text.find("pwd=" + (env.dir() / "work").string()) != std::string::npos);
  CHECK(text.find("path=" + std::string(kDefaultPath)) != std::string::npos);
  CHECK(text.find("NoNewPrivs:\t1") != std::string::npos);
  // Only stdin/stdout/stderr, plus the directory ls itself opens.
  auto fds = text.substr(text.find("fds=") + 4);
  fds = fds.substr(0, fds.find('\n'));
  INFO("open fds: " << fds);
  CHECK(fds == "0 1 2 3 ");
  CHECK(logText(env.status(pod, id2)->log_path) == options.pod_dir.string() + "\n");
}

TEST_CASE("process runtime: a container gets the open-file limit the agent was started with",
          "[integration][runtime]") {
  rlimit own{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &own) == 0);
  if (own.rlim_max != RLIM_INFINITY && own.rlim_max < 300) {
    testing::skipTest("the hard open-file limit is below 300");
  }
  ProcessRuntimeOptions extra;
  extra.container_open_files = 257;  // as if the agent had been started with 257
  Env env(extra);
  auto pod =
      makePod("u-nofile", {shContainer("main", "echo soft=$(ulimit -Sn) hard=$(ulimit -Hn)")});
  StartContainerOptions options;
  options.pod_dir = env.dir() / "pods" / "u-nofile";
  auto id = env.start(pod, 0, 0, options);
  REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
  const std::string hard =
      own.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(own.rlim_max);
  CHECK(logText(env.status(pod, id)->log_path) == "soft=257 hard=" + hard + "\n");
}

TEST_CASE("process runtime: runAsUser and runAsGroup apply when the agent is root",
          "[integration][runtime]") {
  if (::geteuid() != 0) testing::skipTest("needs root (runAsUser/runAsGroup need setuid/setgid)");
  Env env;
  auto c = shContainer("main", "echo \"$(id -u):$(id -g)\"");
  c.working_dir = "/";
  c.security_context = api::SecurityContext{};
  c.security_context->run_as_user = 65534;
  c.security_context->run_as_group = 65534;
  auto pod = makePod("u-user", {c});
  auto id = env.start(pod);
  REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
  CHECK(logText(env.status(pod, id)->log_path) == "65534:65534\n");
}

TEST_CASE(
    "process runtime: a restarted agent adopts running containers and "
    "sees exits that "
    "happened while it was down",
    "[integration][runtime]") {
  Env env;
  auto pod =
      makePod("u-adopt", {shContainer("long", "exec sleep 30"),
                          shContainer("waiter", "while [ ! -f go ]; do sleep 0.02; done; exit 7")});
  StartContainerOptions options;
  options.pod_dir = env.dir() / "adopt";
  auto long_id = env.start(pod, 0, 0, options);
  auto waiter_id = env.start(pod, 1, 0, options);
  const int long_pid = env.status(pod, long_id)->pid;
  REQUIRE(long_pid > 0);

  env.dropRuntime();  // the agent stops; the shims and containers keep running
  CHECK(processAlive(long_pid, readProcStat(long_pid)->start_ticks));
  testing::writeFile(options.pod_dir / "go", "");
  auto state_path = env.options().root_dir / "containers" / waiter_id.id / "state";
  REQUIRE(testing::eventually([&] {
    ShimState st;
    std::string error;
    return decodeShimState(testing::readFile(state_path), st, error) &&
           st.status == ShimStatus::kExited;
  }));

  env.makeRuntime();  // recover() runs here
  auto status = env.sync(env.runtime().getPodStatus("u-adopt", "pod-u-adopt", "default"));
  REQUIRE(status.ok());
  CHECK(status->container_statuses.size() == 2);  // no duplicates, nothing lost
  auto long_cs = env.status(pod, long_id);
  REQUIRE(long_cs);
  CHECK(long_cs->state == ContainerState::kRunning);
  CHECK(long_cs->pid == long_pid);
  auto waiter_cs = env.status(pod, waiter_id);
  REQUIRE(waiter_cs);
  CHECK(waiter_cs->state == ContainerState::kExited);
  CHECK(waiter_cs->exit_code == 7);
  CHECK(waiter_cs->reason == "Error");

  // The adopted container is still controlled: kill it through the new
  // instance.
  CHECK(env.sync(env.runtime().killContainer(pod, long_id, KillOptions::graceOverride(0), "test"))
            .ok());
  CHECK(env.exited(pod, long_id));
  CHECK(env.status(pod, long_id)->exit_code == 137);
  CHECK(testing::eventually(
      [&] { return env.eventCount(long_id, ContainerEvent::Type::kDied) == 1; }));
  CHECK(testing::eventually([&] {
    auto st = readProcStat(long_pid);
    return !st || st->state == 'Z' ||
           procFile(long_pid, "cmdline").find("sleep") == std::string::npos;
  }));
}

TEST_CASE("process runtime: a container whose shim dies is killed and reported",
          "[integration][runtime]") {
  Env env;
  auto pod = makePod("u-shim", {shContainer("main", "exec sleep 30")});
  auto id = env.start(pod);
  int pid = env.status(pod, id)->pid;
  int shim = env.runtime().shimPidForTest(id);
  REQUIRE(shim > 0);
  ::kill(shim, SIGKILL);
  REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
  auto cs = env.status(pod, id);
  CHECK(cs->exit_code == 137);
  CHECK(cs->message.find("shim") != std::string::npos);
  CHECK(testing::eventually([&] {
    auto st = readProcStat(pid);
    return !st || st->state == 'Z' || procFile(pid, "cmdline").find("sleep") == std::string::npos;
  }));
}

TEST_CASE("process runtime: exit events arrive within milliseconds", "[integration][runtime]") {
  Env env;
  auto pod = makePod("u-fast", {shContainer("main", "exec sleep 30")});
  auto id = env.start(pod);
  int pid = env.status(pod, id)->pid;
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGKILL);
  REQUIRE(testing::eventually(
      [&] { return env.eventTime(id, ContainerEvent::Type::kDied).has_value(); }));
  auto latency = *env.eventTime(id, ContainerEvent::Type::kDied) - t0;
  auto ms = std::chrono::duration_cast<std::chrono::microseconds>(latency).count() / 1000.0;
  WARN("exit event latency: " << ms << " ms");
  CHECK(latency < 500ms);  // a 1s relist would be the fallback; pidfd is far faster
  CHECK(env.status(pod, id)->exit_code == 137);
}

TEST_CASE("process runtime: a running container costs the agent one descriptor",
          "[integration][runtime]") {
  Env env;
  constexpr int kContainers = 20;
  const int before = testing::countEntries("/proc/self/fd");
  std::vector<std::pair<api::PodPtr, ContainerId>> started;
  for (int i = 0; i < kContainers; ++i) {
    auto pod = makePod("u-fd-" + std::to_string(i), {shContainer("main", "exec sleep 30")});
    started.emplace_back(pod, env.start(pod));
  }
  // The shims' pidfds, each watched on the reactor without a copy, and the spawn helper's socket
  // (one for the runtime); a little slack for the test's own threads.
  const int running = testing::countEntries("/proc/self/fd");
  INFO("descriptors before " << before << ", with " << kContainers << " containers " << running);
  CHECK(running - before >= kContainers + 1);
  CHECK(running - before <= kContainers + 1 + 3);
  for (auto& [pod, id] : started) ::kill(env.status(pod, id)->pid, SIGKILL);
  for (auto& [pod, id] : started) REQUIRE(testing::eventually([&] { return env.exited(pod, id); }));
  // An exited container holds none.
  CHECK(testing::eventually(
      [&] { return testing::countEntries("/proc/self/fd") <= before + 1 + 3; }));
}

TEST_CASE(
    "process runtime: when descriptors run out a start fails with a clear error and the "
    "running containers are unharmed",
    "[integration][runtime]") {
  Env env;
  auto first = makePod("u-nofile-a", {shContainer("main", "exec sleep 30")});
  auto first_id = env.start(first);
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  struct Restore {
    rlimit limit;
    ~Restore() { ::setrlimit(RLIMIT_NOFILE, &limit); }
  } restore{saved};
  // No descriptor left to open: the limit is the lowest free descriptor number.
  const int lowest_free = ::dup(0);
  REQUIRE(lowest_free >= 0);
  ::close(lowest_free);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  auto second = makePod("u-nofile-b", {shContainer("main", "exec sleep 30")});
  auto failed = env.sync(env.runtime().startContainer(second, second->spec->containers[0], 0, {}));
  ::setrlimit(RLIMIT_NOFILE, &saved);
  REQUIRE_FALSE(failed.ok());
  INFO(failed.status().toString());
  CHECK(failed.status().message().find("Too many open files") != std::string::npos);
  CHECK(failed.status().message().find("RLIMIT_NOFILE is reached") != std::string::npos);
  CHECK_FALSE(startErrorReason(failed.status()).empty());
  // The running container is untouched and the runtime starts containers again.
  auto cs = env.status(first, first_id);
  REQUIRE(cs);
  CHECK(cs->state == ContainerState::kRunning);
  auto third = makePod("u-nofile-c", {shContainer("main", "exec sleep 30")});
  auto third_id = env.start(third);
  CHECK(env.status(third, third_id)->state == ContainerState::kRunning);
}

TEST_CASE("process runtime: podsVersion moves with every start, exit and removal only",
          "[integration][runtime]") {
  Env env;
  auto& rt = env.runtime();
  const auto v0 = rt.podsVersion();
  REQUIRE(v0);
  CHECK(rt.podsVersion() == v0);  // nothing happened
  auto pod = makePod("u-version", {shContainer("main", "exec sleep 30")});
  auto id = env.start(pod);
  const auto v1 = rt.podsVersion();
  REQUIRE(v1);
  CHECK(*v1 != *v0);
  REQUIRE(env.sync(rt.getPods(true)).ok());
  CHECK(rt.podsVersion() == v1);  // listing changes nothing
  ::kill(env.status(pod, id)->pid, SIGKILL);
  REQUIRE(testing::eventually([&] { return rt.podsVersion() != v1; }));
  const auto v2 = rt.podsVersion();
  CHECK(env.status(pod, id)->state == ContainerState::kExited);
  CHECK(rt.podsVersion() == v2);
  REQUIRE(env.sync(rt.removeContainer(id)).ok());
  CHECK(rt.podsVersion() != v2);
}

TEST_CASE("process runtime: shim memory per container stays well under 0.5 MiB PSS",
          "[integration][runtime]") {
  Env env;
  std::vector<api::Container> containers;
  for (int i = 0; i < 5; ++i)
    containers.push_back(shContainer("c" + std::to_string(i), "exec sleep 30"));
  auto pod = makePod("u-pss", containers);
  std::vector<int> shims;
  for (size_t i = 0; i < containers.size(); ++i) {
    auto id = env.start(pod, i);
    shims.push_back(env.runtime().shimPidForTest(id));
  }
  long total = 0;
  long worst = 0;
  for (int shim : shims) {
    long pss = pssKib(shim);
    REQUIRE(pss > 0);
    total += pss;
    worst = std::max(worst, pss);
  }
  WARN("shim PSS with " << shims.size() << " containers: mean "
                        << total / static_cast<long>(shims.size()) << " KiB, max " << worst
                        << " KiB");
#if defined(__SANITIZE_ADDRESS__)
  WARN("sanitizer build: the shim carries ASan's shadow memory, the limit is not checked");
#else
  CHECK(worst < 512);
#endif
}

TEST_CASE("process runtime: a running container whose state file is unusable is adopted once",
          "[integration][runtime]") {
  Env env;
  const std::string marker = uniqueSleep();
  auto pod = makePod("u-badstate", {shContainer("main", "exec sleep " + marker)});
  auto id = env.start(pod);
  const int pid = env.status(pod, id)->pid;
  REQUIRE(pid > 0);
  // The shell execs sleep right after it started.
  REQUIRE(testing::eventually([&] { return countSleeps(marker) == 1; }));
  const int shim = env.runtime().shimPidForTest(id);
  const fs::path state_path = env.options().root_dir / "containers" / id.id / "state";
  const std::string good = testing::readFile(state_path);
  REQUIRE(!good.empty());

  env.dropRuntime();  // the agent stops; the shim and its container keep running
  SECTION("truncated to nothing") { testing::writeFile(state_path, ""); }
  SECTION("truncated in the middle") {
    testing::writeFile(state_path, good.substr(0, good.size() / 2));
  }
  SECTION("garbled") {
    testing::writeFile(state_path, std::string("\x7f\x01\xff=\n\0garbage", 14));
  }
  SECTION("deleted") { fs::remove(state_path); }
  SECTION("describing another shim") {
    ShimState other;
    std::string error;
    REQUIRE(decodeShimState(good, other, error));
    other.shim_pid = 1;
    other.pid = 1;
    testing::writeFile(state_path, encodeShimState(other));
  }
  env.makeRuntime();  // recover() runs here

  // Adopted: one copy, running, with its pid and shim; nothing was started or killed.
  CHECK(countSleeps(marker) == 1);
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  CHECK(cs->state == ContainerState::kRunning);
  CHECK(cs->pid == pid);
  CHECK(cs->started_at != base::SystemTime{});
  CHECK(env.runtime().shimPidForTest(id) == shim);
  auto pods = env.sync(env.runtime().getPods(false));
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK(pods->front().containers.size() == 1);

  // Deleting the pod stops it, and its exit is seen through the adopted shim.
  REQUIRE(env.sync(env.runtime().killPod(pod, pods->front(), 1)).ok());
  CHECK(countSleeps(marker) == 0);
  CHECK(env.exited(pod, id));
  CHECK(testing::eventually([&] { return env.eventCount(id, ContainerEvent::Type::kDied) == 1; }));
}

TEST_CASE("process runtime: a running container that cannot be identified is killed, not kept",
          "[integration][runtime]") {
  ProcessRuntimeOptions fast;
  fast.minimum_grace_seconds = 1;
  Env env(fast);
  const std::string marker = uniqueSleep();
  std::string script = "exec sleep " + marker;
  std::function<void(const fs::path&)> damage;
  SECTION("its config file is garbled") {
    damage = [](const fs::path& dir) { testing::writeFile(dir / "config", "version=1\n\x01\x02"); };
  }
  SECTION("its config file is truncated before the command") {
    damage = [](const fs::path& dir) {
      testing::writeFile(dir / "config", testing::readFile(dir / "config").substr(0, 40));
    };
  }
  SECTION("its config file is deleted") {
    damage = [](const fs::path& dir) { fs::remove(dir / "config"); };
  }
  SECTION("its container directory is deleted") {
    damage = [](const fs::path& dir) { fs::remove_all(dir); };
  }
  SECTION("its config file is garbled and it ignores SIGTERM") {
    script = "trap '' TERM; exec sleep " + marker;
    damage = [](const fs::path& dir) { testing::writeFile(dir / "config", "garbage"); };
  }
  auto pod = makePod("u-badconfig", {shContainer("main", script)});
  auto id = env.start(pod);
  const int shim = env.runtime().shimPidForTest(id);
  REQUIRE(shim > 0);
  // The shell execs sleep right after it started.
  REQUIRE(testing::eventually([&] { return countSleeps(marker) == 1; }));

  env.dropRuntime();
  damage(env.options().root_dir / "containers" / id.id);
  env.makeRuntime();  // recover() kills it before it returns

  // Deliberately killed: nothing of it runs (the pod's next sync starts one new copy), and it is
  // not reported as a container of the pod.
  CHECK(countSleeps(marker) == 0);
  auto shim_stat = readProcStat(shim);
  CHECK((!shim_stat || shim_stat->state == 'Z'));
  auto pods = env.sync(env.runtime().getPods(true));
  REQUIRE(pods.ok());
  CHECK(pods->empty());
  CHECK_FALSE(env.status(pod, id));
}

TEST_CASE("process runtime: recovery never touches the shims of another root dir",
          "[integration][runtime]") {
  Env mine;
  const std::string marker = uniqueSleep();
  auto pod = makePod("u-other", {shContainer("main", "exec sleep " + marker)});
  auto id = mine.start(pod);
  // The shell execs sleep right after it started.
  REQUIRE(testing::eventually([&] { return countSleeps(marker) == 1; }));

  // A second runtime on another root dir (whose containers directory knows nothing of this
  // shim), and one whose root dir merely starts with the same characters.
  Env other;
  ProcessRuntimeOptions prefixed = mine.options();
  prefixed.root_dir += "2";
  asio::io_context ioc;
  auto prefixed_runtime = testing::makeProcessRuntime(ioc.get_executor(), prefixed);
  CHECK(countSleeps(marker) == 1);
  CHECK(mine.status(pod, id)->state == ContainerState::kRunning);
  auto pods = other.sync(other.runtime().getPods(true));
  REQUIRE(pods.ok());
  CHECK(pods->empty());
}

namespace {

// A line of /proc/<pid>/status without its key ("Uid", "CapBnd", ...); tabs become spaces.
std::string statusField(const std::string& status, const std::string& key) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::string value = line.substr(key.size() + 1);
    std::replace(value.begin(), value.end(), '\t', ' ');
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    while (!value.empty() && value.back() == ' ') value.pop_back();
    return value;
  }
  return "<no " + key + ">";
}

// The credentials of a process as /proc/<pid>/status shows them.
struct Creds {
  std::string uid, gid, groups, cap_bnd, cap_eff, cap_prm, cap_inh, cap_amb, no_new_privs;
  static Creds of(const std::string& status) {
    return {statusField(status, "Uid"),       statusField(status, "Gid"),
            statusField(status, "Groups"),    statusField(status, "CapBnd"),
            statusField(status, "CapEff"),    statusField(status, "CapPrm"),
            statusField(status, "CapInh"),    statusField(status, "CapAmb"),
            statusField(status, "NoNewPrivs")};
  }
};

// Exec probes and hooks run as the container does.
void checkSameIdentity(const Creds& exec, const Creds& container) {
  CHECK(exec.uid == container.uid);
  CHECK(exec.gid == container.gid);
  CHECK(exec.groups == container.groups);
}

std::string hexCaps(uint64_t set) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(set));
  return buf;
}

// A container that sleeps (so its /proc status can be read) and runs where any user may.
api::Container sleeper(std::optional<api::SecurityContext> sc = std::nullopt) {
  auto c = shContainer("main", "exec sleep 30");
  c.working_dir = "/";
  c.security_context = std::move(sc);
  return c;
}

api::PodPtr podWith(const std::string& uid, api::Container c,
                    std::optional<api::PodSecurityContext> psc = std::nullopt) {
  auto pod = makePod(uid, {std::move(c)});
  std::const_pointer_cast<api::Pod>(pod)->spec->security_context = std::move(psc);
  return pod;
}

// Starts the container, waits for its command to be `sleep`, and returns the credentials of the
// container process and of an exec (what probes and hooks run as) in it.
std::pair<Creds, Creds> runAndInspect(Env& env, const api::PodPtr& pod,
                                      StartContainerOptions options = {}) {
  auto id = env.start(pod, 0, 0, std::move(options));
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  REQUIRE(cs->pid > 0);
  REQUIRE(testing::eventually(
      [&] { return procFile(cs->pid, "cmdline").find("sleep") != std::string::npos; }));
  Creds container = Creds::of(procFile(cs->pid, "status"));
  auto exec = env.sync(env.runtime().execInContainer(id, {"cat", "/proc/self/status"}, 10s));
  REQUIRE(exec.ok());
  REQUIRE(exec->exit_code == 0);
  return {container, Creds::of(exec->output)};
}

// Skips the test case (before it creates anything) unless the agent runs as root.
void skipUnlessRoot() {
  if (::geteuid() != 0)
    testing::skipTest("the security context tests need root (setuid, setgroups, capabilities)");
}

}  // namespace

TEST_CASE("process runtime: a pod-level runAsUser applies, with a safe group and no root groups",
          "[integration][runtime][security]") {
  skipUnlessRoot();
  Env env;
  api::PodSecurityContext psc;
  psc.run_as_user = 65534;
  auto [container, exec] = runAndInspect(env, podWith("u-sc-pod", sleeper(), psc));
  CHECK(container.uid == "65534 65534 65534 65534");
  // No runAsGroup: the user's passwd group, or 65534 when it has none (never group 0).
  const std::string gid = std::to_string(passwdPrimaryGroup(65534).value_or(kNoGroupGid));
  CHECK(container.gid == gid + " " + gid + " " + gid + " " + gid);
  CHECK(container.groups == "");
  CHECK(container.cap_eff == hexCaps(0));
  CHECK(container.cap_prm == hexCaps(0));
  CHECK(container.no_new_privs == "0");
  checkSameIdentity(exec, container);
}

TEST_CASE("process runtime: a container does not inherit the agent's OOM protection",
          "[integration][runtime][security]") {
  skipUnlessRoot();
  // As under the unit's OOMScoreAdjust=-999: the agent (this process) is protected.
  const std::string before = testing::readFile("/proc/self/oom_score_adj");
  testing::writeFile("/proc/self/oom_score_adj", "-999");
  struct Restore {
    std::string value;
    ~Restore() { testing::writeFile("/proc/self/oom_score_adj", value); }
  } restore{before};
  Env env;
  auto pod = podWith("u-oom", sleeper(), api::PodSecurityContext{});
  auto id = env.start(pod, 0, 0, {});
  auto cs = env.status(pod, id);
  REQUIRE(cs);
  REQUIRE(cs->pid > 0);
  REQUIRE(testing::eventually(
      [&] { return procFile(cs->pid, "cmdline").find("sleep") != std::string::npos; }));
  CHECK(procFile(cs->pid, "oom_score_adj") == "0\n");
}

TEST_CASE("process runtime: container fields override the pod's, supplementalGroups and fsGroup",
          "[integration][runtime][security]") {
  skipUnlessRoot();
  Env env;
  api::PodSecurityContext psc;
  psc.run_as_user = 1000;
  psc.run_as_group = 1001;
  psc.supplemental_groups = {3000, 3001};
  psc.fs_group = 4000;
  api::SecurityContext sc;
  sc.run_as_user = 2000;
  auto [container, exec] = runAndInspect(env, podWith("u-sc-override", sleeper(sc), psc));
  CHECK(container.uid == "2000 2000 2000 2000");
  CHECK(container.gid == "1001 1001 1001 1001");
  CHECK(container.groups == "3000 3001 4000");
  checkSameIdentity(exec, container);
}

TEST_CASE("process runtime: runAsNonRoot refuses root with kubelet's reason and message",
          "[integration][runtime][security]") {
  skipUnlessRoot();
  Env env;
  auto refused = [&](const api::PodPtr& pod) {
    auto id = env.sync(env.runtime().startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE_FALSE(id.ok());
    CHECK(startErrorReason(id.status()) == kCreateContainerConfigError);
    auto st =
        env.sync(env.runtime().getPodStatus(pod->metadata.uid, pod->metadata.name, "default"));
    REQUIRE(st.ok());
    CHECK(st->container_statuses.empty());  // nothing was started
    return id.status().message();
  };
  api::PodSecurityContext psc;
  psc.run_as_non_root = true;
  SECTION("no runAsUser: a process container runs as the agent, root") {
    CHECK(refused(podWith("u-nonroot-none", sleeper(), psc)) ==
          "container has runAsNonRoot and image will run as root (pod: "
          "\"pod-u-nonroot-none_default(u-nonroot-none)\", container: main)");
  }
  SECTION("runAsUser 0") {
    api::SecurityContext sc;
    sc.run_as_user = 0;
    CHECK(refused(podWith("u-nonroot-zero", sleeper(sc), psc)) ==
          "container's runAsUser breaks non-root policy (pod: "
          "\"pod-u-nonroot-zero_default(u-nonroot-zero)\", container: main)");
  }
  SECTION("a non-zero runAsUser runs") {
    psc.run_as_user = 65534;
    auto [container, exec] = runAndInspect(env, podWith("u-nonroot-ok", sleeper(), psc));
    CHECK(container.uid == "65534 65534 65534 65534");
  }
  SECTION("readOnlyRootFilesystem cannot be honoured and is refused") {
    api::SecurityContext sc;
    sc.read_only_root_filesystem = true;
    CHECK_THAT(refused(podWith("u-rofs", sleeper(sc))),
               Catch::Contains("readOnlyRootFilesystem: true cannot be honoured"));
  }
}

TEST_CASE("process runtime: allowPrivilegeEscalation false and capabilities drop ALL",
          "[integration][runtime][security]") {
  skipUnlessRoot();
  Env env;
  api::SecurityContext sc;
  sc.allow_privilege_escalation = false;
  sc.capabilities = api::Capabilities{{}, {"ALL"}};
  SECTION("as root") {
    auto [container, exec] = runAndInspect(env, podWith("u-caps-root", sleeper(sc)));
    CHECK(container.uid == "0 0 0 0");
    CHECK(container.cap_bnd == hexCaps(0));
    CHECK(container.cap_eff == hexCaps(0));
    CHECK(container.cap_prm == hexCaps(0));
    CHECK(container.cap_inh == hexCaps(0));
    CHECK(container.cap_amb == hexCaps(0));
    CHECK(container.no_new_privs == "1");
    CHECK(exec.cap_bnd == hexCaps(0));
    CHECK(exec.cap_eff == hexCaps(0));
    CHECK(exec.no_new_privs == "1");
  }
  SECTION("as a user, with one capability added back (ambient)") {
    sc.run_as_user = 65534;
    sc.capabilities->add = {"NET_BIND_SERVICE"};
    auto [container, exec] = runAndInspect(env, podWith("u-caps-user", sleeper(sc)));
    const std::string bind = hexCaps(uint64_t{1} << 10);
    CHECK(container.uid == "65534 65534 65534 65534");
    CHECK(container.cap_bnd == bind);
    CHECK(container.cap_eff == bind);
    CHECK(container.cap_prm == bind);
    CHECK(container.cap_amb == bind);
    CHECK(container.no_new_privs == "1");
    CHECK(exec.uid == container.uid);
    CHECK(exec.cap_eff == bind);
    CHECK(exec.cap_amb == bind);
  }
}

TEST_CASE("process runtime: refuse_root (apiserver pods) refuses root and runs a non-root uid",
          "[integration][runtime][security]") {
  skipUnlessRoot();
  Env env;
  StartContainerOptions options;
  options.refuse_root = true;
  auto pod = podWith("u-api-root", sleeper());
  auto id = env.sync(env.runtime().startContainer(pod, pod->spec->containers[0], 0, options));
  REQUIRE_FALSE(id.ok());
  CHECK(startErrorReason(id.status()) == kCreateContainerConfigError);
  CHECK_THAT(
      id.status().message(),
      Catch::Contains("container \"main\" of pod default/pod-u-api-root would run as root") &&
          Catch::Contains("--allow-root-api-pods"));
  api::SecurityContext sc;
  sc.run_as_user = 65534;
  auto [container, exec] = runAndInspect(env, podWith("u-api-user", sleeper(sc)), options);
  CHECK(container.uid == "65534 65534 65534 65534");
  // Without the policy the same root container runs.
  auto [root, root_exec] = runAndInspect(env, podWith("u-api-allowed", sleeper()));
  CHECK(root.uid == "0 0 0 0");
}

TEST_CASE(
    "process runtime: a process of another user with a shim's command line is not taken for "
    "a shim",
    "[integration][runtime][security]") {
  skipUnlessRoot();
  testing::TempDir tmp;
  const fs::path containers = tmp / "containers";
  fs::create_directories(containers / "mine");
  fs::create_directories(containers / "theirs");
  // `sh run <dir>` runs the script ./run and keeps exactly that command line: a shim's shape;
  // a copy of sh named nodeagent-shim makes it the shim's executable too.
  testing::writeFile(tmp / "run", "sleep 30\n");
  fs::copy_file("/bin/sh", tmp / "nodeagent-shim");
  fs::permissions(tmp / "nodeagent-shim", fs::perms::owner_all | fs::perms::group_exec |
                                              fs::perms::others_exec | fs::perms::group_read |
                                              fs::perms::others_read);
  fs::permissions(tmp.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(tmp / "run", fs::perms::owner_read | fs::perms::owner_write |
                                   fs::perms::group_read | fs::perms::others_read);
  auto spawn = [&](const std::string& id, std::optional<uid_t> uid) {
    const std::string dir = (containers / id).string();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Its own process group (killed whole below), and not holding the test's output open.
      ::setpgid(0, 0);
      const int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0) {
        ::dup2(null_fd, 1);
        ::dup2(null_fd, 2);
      }
      if (::chdir(tmp.path().c_str()) != 0) ::_exit(126);
      if (uid && (::setgid(*uid) != 0 || ::setuid(*uid) != 0)) ::_exit(126);
      ::execl((tmp / "nodeagent-shim").c_str(), "nodeagent-shim", "run", dir.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    if (pid > 0) ::setpgid(pid, pid);  // also here: the group exists before anyone signals it
    return pid;
  };
  const pid_t mine = spawn("mine", std::nullopt);
  const pid_t theirs = spawn("theirs", 65534);
  REQUIRE(mine > 0);
  REQUIRE(theirs > 0);
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(-pid, SIGKILL);  // the script's sleep too
      ::waitpid(pid, nullptr, 0);
    }
  } reap_mine{mine}, reap_theirs{theirs};
  std::map<std::string, runtime::LiveShim> shims;
  // Both have exec'd once the one run as root is listed; the other user's never is.
  REQUIRE(testing::eventually([&] {
    shims = runtime::findLiveShims(containers);
    return shims.count("mine") == 1;
  }));
  CHECK(shims.at("mine").pid == mine);
  CHECK(shims.count("theirs") == 0);
  std::string cmdline;
  REQUIRE(testing::eventually([&] {
    cmdline = testing::readFile("/proc/" + std::to_string(theirs) + "/cmdline");
    return cmdline.rfind("nodeagent-shim", 0) == 0;
  }));
  CHECK(runtime::findLiveShims(containers).count("theirs") == 0);
}
