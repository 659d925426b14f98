// ShimSpawner with the built nodeagent-shim as its spawn helper (real processes, pidfds and
// sockets): what a spawned child gets, who its parent is, and what happens when the helper is
// missing, speaks something else, or dies.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/runtime/shim_processes.h"
#include "agent/runtime/shim_spawner.h"
#include "agent/runtime/spawn.h"
#include "agent/runtime/state_file.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// A child `cat` that waits for its stdin to end (it opens no descriptor of its own). Closing
// `release` (the pipe's write end) ends it.
struct WaitingChild {
  ShimSpawner::Child child;
  int release = -1;
  ~WaitingChild() {
    if (release >= 0) ::close(release);
    if (child.pidfd >= 0) ::close(child.pidfd);
  }
};

int spawnWaiting(ShimSpawner& spawner, WaitingChild& w) {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  w.release = pipe_fds[1];
  const int fds[] = {pipe_fds[0], -1, -1};
  const int rc = spawner.spawn({"/bin/cat"}, fds, w.child);
  ::close(pipe_fds[0]);
  return rc;
}

// The descriptors `pid` has open (spawns return once the child has exec'd).
std::set<std::string> descriptorsOf(pid_t pid) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    names.insert(e.path().filename().string());
  }
  return names;
}

bool pidfdReadable(int pidfd, std::chrono::milliseconds timeout) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

void killChild(const ShimSpawner::Child& c) {
  if (c.pid > 0) ::kill(c.pid, SIGKILL);
}

}  // namespace

TEST_CASE("shim spawner: children come from the helper with only the descriptors they are given") {
  // A descriptor the test leaks on purpose (not close-on-exec): a direct posix_spawn would pass
  // it on; the helper closes everything of its parent's but its socket.
  const int leaked = ::open("/dev/null", O_RDONLY);
  REQUIRE(leaked >= 0);
  ShimSpawner spawner(testing::binaryPath("nodeagent-shim"));
  WaitingChild w;
  REQUIRE(spawnWaiting(spawner, w) == 0);
  CHECK(spawner.usingHelper());
  const pid_t helper = spawner.helperPid();
  REQUIRE(helper > 0);
  CHECK(helper != ::getpid());

  auto st = readProcStat(w.child.pid);
  REQUIRE(st);
  CHECK(st->ppid == helper);
  CHECK(st->session == w.child.pid);  // a session of its own
  // The vfork parent wakes once the new program is mapped, a moment before exec closes the
  // close-on-exec descriptors, and the dynamic loader then opens (and closes) the libraries it
  // maps: look once `cat` waits in its read of stdin; a descriptor really passed on stays.
  const std::set<std::string> standard{"0", "1", "2"};
  CHECK(testing::eventually([&] {
    auto now = readProcStat(w.child.pid);
    return now && now->state == 'S' && descriptorsOf(w.child.pid) == standard;
  }));
  CHECK(descriptorsOf(w.child.pid) == standard);
  ::close(leaked);

  // Its pidfd tells its end, and the helper reaps it (no zombie is left).
  CHECK_FALSE(pidfdReadable(w.child.pidfd, 0ms));
  ::close(w.release);
  w.release = -1;
  CHECK(pidfdReadable(w.child.pidfd, 10000ms));
  CHECK(testing::eventually([&] { return !readProcStat(w.child.pid).has_value(); }));
}

TEST_CASE("shim spawner: a start error comes back and the helper keeps serving") {
  testing::TempDir tmp;
  ShimSpawner spawner(testing::binaryPath("nodeagent-shim"));
  ShimSpawner::Child child;
  CHECK(spawner.spawn({(tmp / "no-such-program").string()}, {}, child) == ENOENT);
  CHECK(child.pid == 0);
  CHECK(spawner.usingHelper());
  WaitingChild w;
  REQUIRE(spawnWaiting(spawner, w) == 0);
  CHECK(readProcStat(w.child.pid)->ppid == spawner.helperPid());
  killChild(w.child);
}

TEST_CASE("shim spawner: a helper that died is replaced and its children keep running") {
  ShimSpawner spawner(testing::binaryPath("nodeagent-shim"));
  WaitingChild first;
  REQUIRE(spawnWaiting(spawner, first) == 0);
  const pid_t old_helper = spawner.helperPid();
  REQUIRE(::kill(old_helper, SIGKILL) == 0);
  // Dead (a zombie until the spawner reaps it), so its socket is closed.
  REQUIRE(testing::eventually([&] {
    auto st = readProcStat(old_helper);
    return st && st->state == 'Z';
  }));

  WaitingChild second;
  REQUIRE(spawnWaiting(spawner, second) == 0);
  const pid_t new_helper = spawner.helperPid();
  CHECK(new_helper > 0);
  CHECK(new_helper != old_helper);
  CHECK(readProcStat(second.child.pid)->ppid == new_helper);
  // The dead helper was reaped; its child lives on (reparented) and is still watched.
  CHECK_FALSE(readProcStat(old_helper).has_value());
  CHECK_FALSE(pidfdReadable(first.child.pidfd, 0ms));
  killChild(first.child);
  CHECK(pidfdReadable(first.child.pidfd, 10000ms));
  killChild(second.child);
}

TEST_CASE("shim spawner: without a helper it starts children itself") {
  testing::TempDir tmp;
  std::string which;
  SECTION("the shim binary is missing") { which = (tmp / "missing-shim").string(); }
  SECTION("the shim binary does not speak the spawn protocol") {
    fs::copy_file("/bin/true", tmp / "old-shim");
    which = (tmp / "old-shim").string();
  }
  ShimSpawner spawner(which);
  WaitingChild w;
  REQUIRE(spawnWaiting(spawner, w) == 0);
  CHECK_FALSE(spawner.usingHelper());
  CHECK(spawner.helperPid() == 0);
  auto st = readProcStat(w.child.pid);
  REQUIRE(st);
  CHECK(st->ppid == ::getpid());
  CHECK(st->session == w.child.pid);
  ::close(w.release);
  w.release = -1;
  CHECK(pidfdReadable(w.child.pidfd, 10000ms));
  ::waitpid(w.child.pid, nullptr, 0);
}

TEST_CASE("shim spawner: the helper ends with the spawner and leaves its children running") {
  WaitingChild w;
  pid_t helper = 0;
  {
    ShimSpawner spawner(testing::binaryPath("nodeagent-shim"));
    REQUIRE(spawnWaiting(spawner, w) == 0);
    helper = spawner.helperPid();
    REQUIRE(helper > 0);
  }
  CHECK_FALSE(readProcStat(helper).has_value());
  CHECK_FALSE(pidfdReadable(w.child.pidfd, 0ms));
  killChild(w.child);
  CHECK(pidfdReadable(w.child.pidfd, 10000ms));
}

TEST_CASE("shim spawner: a helper that does not answer in time is replaced") {
  ShimSpawner spawner(testing::binaryPath("nodeagent-shim"), std::chrono::milliseconds(300));
  WaitingChild first;
  REQUIRE(spawnWaiting(spawner, first) == 0);
  const pid_t stuck = spawner.helperPid();
  REQUIRE(::kill(stuck, SIGSTOP) == 0);
  ShimSpawner::Child lost;
  CHECK(spawner.spawn({"/bin/sleep", "30"}, {}, lost) == ShimSpawner::kAnswerLost);
  CHECK(lost.pid == 0);
  // The stuck helper was killed and reaped; the next spawn has a new one.
  CHECK_FALSE(readProcStat(stuck).has_value());
  WaitingChild next;
  REQUIRE(spawnWaiting(spawner, next) == 0);
  CHECK(spawner.helperPid() != stuck);
  CHECK(readProcStat(next.child.pid)->ppid == spawner.helperPid());
  killChild(first.child);
  killChild(next.child);
}

TEST_CASE("shim spawner: the helper ends when its agent is killed and its children stay") {
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  const pid_t agent = ::fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {
    // The "agent": starts a helper and a child through it, reports both, and waits to be killed.
    ShimSpawner spawner(testing::binaryPath("nodeagent-shim"));
    ShimSpawner::Child child;
    pid_t pids[2] = {0, 0};
    if (spawner.spawn({"/bin/sleep", "30"}, {}, child) == 0) {
      pids[0] = spawner.helperPid();
      pids[1] = child.pid;
    }
    (void)!::write(report[1], pids, sizeof pids);
    for (;;) ::pause();
  }
  ::close(report[1]);
  pid_t pids[2] = {0, 0};
  const bool reported = ::read(report[0], pids, sizeof pids) == static_cast<ssize_t>(sizeof pids);
  ::close(report[0]);
  ::kill(agent, SIGKILL);
  ::waitpid(agent, nullptr, 0);
  REQUIRE(reported);
  const pid_t helper = pids[0];
  const pid_t child = pids[1];
  REQUIRE(helper > 0);
  REQUIRE(child > 0);
  // The helper saw its socket close and exited (reaped by whoever adopted it).
  CHECK(testing::eventually([&] {
    auto st = readProcStat(helper);
    return !st || st->state == 'Z';
  }));
  auto st = readProcStat(child);
  CHECK((st && st->state != 'Z'));
  ::kill(child, SIGKILL);
}

TEST_CASE("shim spawner: a source descriptor in another slot reaches its own slot") {
  // The test's stdin is, for the spawn, a pipe's write end that is to become the child's fd 3;
  // fd 0 of the child is /dev/null, opened before fd 3 is set up.
  int a[2];
  int b[2];
  REQUIRE(::pipe2(a, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(b, O_CLOEXEC) == 0);
  const int saved_stdin = ::fcntl(0, F_DUPFD_CLOEXEC, 10);
  REQUIRE(saved_stdin >= 0);
  REQUIRE(::dup2(a[1], 0) == 0);
  pid_t pid = 0;
  const int fds[] = {-1, b[1], -1, 0};
  const int rc =
      spawnDetached({"/bin/sh", "-c", "echo one; echo three >&3"}, std::span<const int>(fds), pid);
  REQUIRE(::dup2(saved_stdin, 0) == 0);
  ::close(saved_stdin);
  ::close(a[1]);
  ::close(b[1]);
  REQUIRE(rc == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  auto readAll = [](int fd) {
    std::string out;
    char buf[64];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    ::close(fd);
    return out;
  };
  CHECK(readAll(b[0]) == "one\n");
  CHECK(readAll(a[0]) == "three\n");
}

TEST_CASE("shim spawner: concurrent spawns from several threads all start") {
  ShimSpawner spawner(testing::binaryPath("nodeagent-shim"));
  constexpr int kThreads = 4;
  constexpr int kEach = 10;
  std::mutex mu;
  std::vector<ShimSpawner::Child> children;
  std::vector<int> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        ShimSpawner::Child c;
        const int rc = spawner.spawn({"/bin/sleep", "30"}, {}, c);
        std::lock_guard lock(mu);
        if (rc == 0) {
          children.push_back(c);
        } else {
          errors.push_back(rc);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(errors.empty());
  std::set<pid_t> pids;
  for (const auto& c : children) {
    pids.insert(c.pid);
    CHECK(readProcStat(c.pid)->ppid == spawner.helperPid());
  }
  CHECK(pids.size() == static_cast<size_t>(kThreads * kEach));
  for (const auto& c : children) {
    killChild(c);
    CHECK(pidfdReadable(c.pidfd, 10000ms));
    ::close(c.pidfd);
  }
}

TEST_CASE(
    "shim spawner: a run shim starts in a session of its own with no signal ignored or blocked "
    "and only the descriptors it is given") {
  const std::string shim = testing::binaryPath("nodeagent-shim").string();
  ShimSpawner spawner(shim);
  testing::TempDir dir("nodeagent-run-shim");
  // No config there: the shim reports an error on fd 3 and ends. The report pipe is full first,
  // so the shim blocks in its report until the test reads, and can be looked at meanwhile.
  const std::string state = (dir.path() / "containers" / "c1").string();
  int report[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  struct Closer {
    int& fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } close_read{report[0]}, close_write{report[1]};
  REQUIRE(::fcntl(report[1], F_SETFL, O_NONBLOCK) == 0);
  const std::string filler(4096, 'x');
  while (::write(report[1], filler.data(), filler.size()) > 0) {
  }
  REQUIRE(::fcntl(report[1], F_SETFL, 0) == 0);
  const int fds[] = {-1, -1, -1, report[1]};
  ShimSpawner::Child child;
  REQUIRE(spawner.spawn({shim, "run", state}, fds, child) == 0);
  ::close(report[1]);
  report[1] = -1;
  CHECK(spawner.usingHelper());

  auto st = readProcStat(child.pid);
  REQUIRE(st);
  CHECK(st->ppid == spawner.helperPid());
  CHECK(st->session == child.pid);
  const std::string proc = "/proc/" + std::to_string(child.pid);
  // (The vfork parent wakes when the new program's memory is in place, a moment before its
  // arguments are.)
  CHECK(testing::eventually(
      [&] { return shimDirFromCmdline(testing::readFile(proc + "/cmdline")) == state; }));
  // No signal ignored, also none of the C library's own two (32, 33), which glibc's posix_spawn
  // leaves ignored in the helper, a child of a threaded process; nothing blocked.
  // (Once it is blocked in its report: the spawn returns when the exec is done, before main.)
  std::string status;
  CHECK(testing::eventually([&] {
    status = testing::readFile(proc + "/status");
    return status.find("State:\tS") != std::string::npos;
  }));
  CHECK(descriptorsOf(child.pid) == std::set<std::string>{"0", "1", "2", "3"});
  CHECK_THAT(status, Catch::Contains("SigIgn:\t0000000000000000"));
  CHECK_THAT(status, Catch::Contains("SigBlk:\t0000000000000000"));
  CHECK_THAT(testing::readFile("/proc/" + std::to_string(spawner.helperPid()) + "/status"),
             Catch::Contains("SigIgn:\t0000000000000000"));

  // Its report, after the filler: the config it could not read.
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::read(report[0], buf, sizeof buf)) > 0;) all.append(buf, n);
  CHECK_THAT(all, Catch::Contains("error " + state + "/config"));
  CHECK(pidfdReadable(child.pidfd, 10000ms));
  ::close(child.pidfd);
}
