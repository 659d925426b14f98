// ProcessRuntime's interactive streams against real processes and the built nodeagent-shim:
// exec sessions (pipes and a pseudo-terminal) and attaches to a container's own stdio.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

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

api::Container shContainer(std::string name, std::string script, bool stdin = false,
                           bool stdin_once = false) {
  api::Container c;
  c.name = std::move(name);
  c.image = "busybox:1.36";
  c.command = {"/bin/sh", "-c", std::move(script)};
  c.stdin = stdin;
  c.stdin_once = stdin_once;
  c.hash = api::Hash128{7, 9};
  return c;
}

api::PodPtr makePod(const std::string& uid, api::Container container) {
  auto pod = std::make_shared<api::Pod>();
  pod->metadata.name = "pod-" + uid;
  pod->metadata.namespace_ = "default";
  pod->metadata.uid = uid;
  pod->spec->node_name = "node-a";
  pod->spec->containers = {std::move(container)};
  return pod;
}

// Polls `done` every 10 ms until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

int openFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// The pid of the live process whose command line is exactly `argv`, or 0.
int findProcess(const std::vector<std::string>& argv) {
  std::string want;
  for (const auto& a : argv) want += a + '\0';
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline, error;
    auto st = readProcStat(std::stoi(name));
    if (st && st->state != 'Z' &&
        readWholeFile((entry.path() / "cmdline").string(), cmdline, error) && cmdline == want) {
      return std::stoi(name);
    }
  }
  return 0;
}

// A ProcessRuntime on one io_context thread (so every session call runs on one strand).
class Env {
 public:
  Env() : options_(testing::processRuntimeOptions(dir_.path())) {
    io_.start(1);
    makeRuntime();
  }
  ~Env() {
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
  void makeRuntime() { runtime_ = testing::makeProcessRuntime(io_.executor(), options_); }
  void dropRuntime() { runtime_.reset(); }

  template <typename T>
  T sync(asio::awaitable<T> aw, std::chrono::seconds timeout = 30s) {
    auto promise = std::make_shared<std::promise<T>>();
    auto future = promise->get_future();
    auto run = [promise, aw = std::move(aw)]() mutable -> asio::awaitable<void> {
      promise->set_value(co_await std::move(aw));
    };
    asio::co_spawn(io_.context(), std::move(run), asio::detached);
    REQUIRE(future.wait_for(timeout) == std::future_status::ready);
    return future.get();
  }
  // Runs `fn` on the io_context thread (session calls that are not coroutines).
  void onIo(std::function<void()> fn) {
    std::promise<void> done;
    asio::post(io_.context(), [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }

  ContainerId start(const api::PodPtr& pod) {
    auto id = sync(runtime_->startContainer(pod, pod->spec->containers[0], 0, {}));
    INFO(id.status().toString());
    REQUIRE(id.ok());
    return *id;
  }
  bool exited(const api::PodPtr& pod, const ContainerId& id) {
    auto st = sync(
        runtime_->getPodStatus(pod->metadata.uid, pod->metadata.name, pod->metadata.namespace_));
    REQUIRE(st.ok());
    for (const auto& cs : st->container_statuses) {
      if (cs.id == id) return cs.state == ContainerState::kExited;
    }
    return false;
  }

  StreamSessionPtr exec(const ContainerId& id, std::vector<std::string> command,
                        StreamOptions options) {
    auto session = sync(runtime_->execStream(id, std::move(command), options));
    INFO(session.status().toString());
    REQUIRE(session.ok());
    return std::move(*session);
  }
  StreamSessionPtr attach(const ContainerId& id, StreamOptions options) {
    auto session = sync(runtime_->attach(id, options));
    INFO(session.status().toString());
    REQUIRE(session.ok());
    return std::move(*session);
  }

  // Reads until the output ended (stdout and stderr apart).
  std::pair<std::string, std::string> readAll(StreamSession& s) {
    auto all = [&s]() -> asio::awaitable<std::pair<std::string, std::string>> {
      std::pair<std::string, std::string> out;
      while (true) {
        auto piece = co_await s.read();
        if (!piece) co_return out;
        (piece->stream == LogStream::kStderr ? out.second : out.first) += piece->data;
      }
    };
    return sync(all());
  }
  // Reads until stdout contains `text` (true) or the output ended (false); what was read is
  // appended to `seen`.
  bool readUntil(StreamSession& s, const std::string& text, std::string* seen = nullptr) {
    auto until = [&s, text, seen]() -> asio::awaitable<bool> {
      std::string out;
      while (out.find(text) == std::string::npos) {
        auto piece = co_await s.read();
        if (!piece) break;
        out += piece->data;
      }
      if (seen) *seen += out;
      co_return out.find(text) != std::string::npos;
    };
    return sync(until());
  }
  void write(StreamSession& s, std::string data) {
    auto st = sync(s.writeStdin(std::move(data)));
    INFO(st.toString());
    REQUIRE(st.ok());
  }
  int wait(StreamSession& s) {
    auto code = sync(s.wait());
    INFO(code.status().toString());
    REQUIRE(code.ok());
    return *code;
  }

  ProcessRuntime& runtime() { return *runtime_; }
  const ProcessRuntimeOptions& options() const { return options_; }

 private:
  testing::TempDir dir_{"nodeagent-stream"};
  ProcessRuntimeOptions options_;
  testing::IoThreads io_;
  std::unique_ptr<ProcessRuntime> runtime_;
};

StreamOptions streams(bool in, bool out, bool err, bool tty = false) {
  return StreamOptions{in, out, err, tty};
}

}  // namespace

TEST_CASE("exec stream: stdout and stderr apart, the exit code, and argument errors",
          "[integration][runtime][stream]") {
  Env env;
  auto pod = makePod("s-exec", shContainer("main", "sleep 1000"));
  auto id = env.start(pod);
  auto session =
      env.exec(id, {"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, streams(false, true, true));
  auto [out, err] = env.readAll(*session);
  CHECK(out == "out\n");
  CHECK(err == "err\n");
  CHECK(env.wait(*session) == 3);
  auto no_stdin = env.sync(session->writeStdin("x"));
  CHECK_FALSE(no_stdin.ok());

  auto tty_err = env.sync(env.runtime().execStream(id, {"true"}, streams(false, true, true, true)));
  CHECK(tty_err.status().code() == base::StatusCode::kInvalidArgument);
  auto empty = env.sync(env.runtime().execStream(id, {}, streams(false, true, true)));
  CHECK(empty.status().code() == base::StatusCode::kInvalidArgument);
  auto unknown = env.sync(env.runtime().execStream(ContainerId{"process", "nope"}, {"true"},
                                                   streams(false, true, true)));
  CHECK(unknown.status().code() == base::StatusCode::kNotFound);
}

TEST_CASE("exec stream: stdin piped to cat comes back, closing it ends the command",
          "[integration][runtime][stream]") {
  Env env;
  auto pod = makePod("s-cat", shContainer("main", "sleep 1000"));
  auto id = env.start(pod);
  auto session = env.exec(id, {"cat"}, streams(true, true, true));
  env.write(*session, "hello\n");
  CHECK(env.readUntil(*session, "hello\n"));
  env.write(*session, "again\n");
  session->closeStdin();
  auto [out, err] = env.readAll(*session);
  CHECK(out == "again\n");
  CHECK(err.empty());
  CHECK(env.wait(*session) == 0);
}

TEST_CASE("exec stream: a TTY is the command's terminal and follows resizes",
          "[integration][runtime][stream]") {
  if (::access("/dev/ptmx", R_OK | W_OK) != 0) nodeagent::testing::skipTest("no /dev/ptmx");
  Env env;
  auto pod = makePod("s-tty", shContainer("main", "sleep 1000"));
  auto id = env.start(pod);
  auto session = env.exec(id, {"/bin/sh", "-c", "tty; read line; stty size; exit 4"},
                          streams(true, true, false, true));
  std::string seen;
  CHECK(env.readUntil(*session, "/dev/pts/", &seen));
  env.onIo([&] { session->resize({100, 40}); });
  env.write(*session, "go\n");
  CHECK(env.readUntil(*session, "40 100", &seen));
  INFO(seen);
  CHECK(env.wait(*session) == 4);
}

TEST_CASE("exec stream: destroying a session kills and reaps its command, and no fd leaks",
          "[integration][runtime][stream]") {
  Env env;
  auto pod = makePod("s-kill", shContainer("main", "sleep 1000"));
  auto id = env.start(pod);
  // Warm up what the runtime opens once (the reactor, the file pool).
  {
    auto warm = env.exec(id, {"true"}, streams(true, true, true));
    CHECK(env.wait(*warm) == 0);
  }
  const int fds_before = openFds();
  const std::string marker = "1000." + std::to_string(::getpid());
  auto session = env.exec(id, {"sleep", marker}, streams(true, true, true));
  int pid = 0;
  REQUIRE(eventually([&] { return (pid = findProcess({"sleep", marker})) != 0; }));
  env.onIo([&] { session.reset(); });
  // Gone, and reaped: not even a zombie is left in /proc.
  CHECK(eventually([&] { return !fs::exists("/proc/" + std::to_string(pid)); }));

  auto tty = env.exec(id, {"/bin/sh", "-c", "echo hi"}, streams(true, true, false, true));
  CHECK(env.readUntil(*tty, "hi"));
  CHECK(env.wait(*tty) == 0);
  env.onIo([&] { tty.reset(); });
  CHECK(eventually([&] { return openFds() == fds_before; }));
  CHECK(openFds() == fds_before);
}

TEST_CASE("attach: a container's output arrives, stdin reaches it, and attach ends with it",
          "[integration][runtime][stream]") {
  Env env;
  auto printer = makePod("a-print", shContainer("main",
                                                "i=0; while true; do echo line $i; "
                                                "i=$((i+1)); sleep 0.05; done"));
  auto printer_id = env.start(printer);
  {
    auto session = env.attach(printer_id, streams(false, true, true));
    CHECK(env.readUntil(*session, "line "));
  }
  auto tty = env.sync(env.runtime().attach(printer_id, streams(false, true, false, true)));
  CHECK(tty.status().code() == base::StatusCode::kInvalidArgument);
  auto no_stdin = env.sync(env.runtime().attach(printer_id, streams(true, true, true)));
  CHECK(no_stdin.status().code() == base::StatusCode::kInvalidArgument);

  auto cat = makePod("a-cat", shContainer("main", "cat", /*stdin=*/true));
  auto cat_id = env.start(cat);
  {
    auto first = env.attach(cat_id, streams(true, true, true));
    env.write(*first, "ping\n");
    CHECK(env.readUntil(*first, "ping\n"));
    first->closeStdin();
  }
  // Without stdinOnce the container's stdin stays open for the next client.
  auto second = env.attach(cat_id, streams(true, true, true));
  env.write(*second, "pong\n");
  CHECK(env.readUntil(*second, "pong\n"));
  // The container exits (killed): the attach's output ends and wait() gives its exit code.
  auto killed =
      env.sync(env.runtime().killContainer(cat, cat_id, KillOptions::graceOverride(0), "test"));
  CHECK(killed.ok());
  auto [out, err] = env.readAll(*second);
  CHECK(env.wait(*second) == 137);

  auto after = env.sync(env.runtime().attach(cat_id, streams(false, true, true)));
  CHECK(after.status().code() == base::StatusCode::kFailedPrecondition);
}

TEST_CASE("attach: with stdinOnce the container's stdin closes when the first client's ends",
          "[integration][runtime][stream]") {
  Env env;
  auto pod = makePod("a-once", shContainer("main", "cat; echo stdin-closed; exit 5", true, true));
  auto id = env.start(pod);
  auto session = env.attach(id, streams(true, true, true));
  env.write(*session, "one\n");
  CHECK(env.readUntil(*session, "one\n"));
  session->closeStdin();
  CHECK(env.readUntil(*session, "stdin-closed"));
  CHECK(env.wait(*session) == 5);
  CHECK(eventually([&] { return env.exited(pod, id); }));
}

TEST_CASE("attach: a container adopted by a restarted agent is attachable",
          "[integration][runtime][stream]") {
  Env env;
  auto pod = makePod("a-restart", shContainer("main", "cat", true));
  auto id = env.start(pod);
  env.dropRuntime();
  env.makeRuntime();
  auto session = env.attach(id, streams(true, true, false));
  env.write(*session, "adopted\n");
  CHECK(env.readUntil(*session, "adopted\n"));
  // The socket sits in the container's directory, 0600.
  const fs::path sock =
      env.options().root_dir / "containers" / id.id / std::string(kAttachSocketName);
  CHECK((fs::status(sock).permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write));
}
