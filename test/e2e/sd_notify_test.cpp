// The daemon's systemd protocol: READY=1 once every source is seen, WATCHDOG=1 at half of
// WATCHDOG_USEC, STOPPING=1 on SIGTERM (datagrams on $NOTIFY_SOCKET, no libsystemd).
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test/support/test_util.h"

extern char** environ;

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

// Receives datagrams until one equals `want` or the deadline passes.
bool receive(int fd, const std::string& want, std::chrono::milliseconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    char buf[256];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0 && std::string(buf, static_cast<size_t>(n)) == want) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("daemon: sd_notify READY=1 once sources are seen, WATCHDOG=1, STOPPING=1 on SIGTERM",
          "[e2e][agent]") {
  testing::TempDir dir("e2e-notify");
  auto socket_path = (dir / "notify.sock").string();
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  std::filesystem::create_directories(dir / "manifests");

  std::vector<std::string> args{testing::binaryPath("nodeagent").string(),
                                "--pod-manifest-path=" + (dir / "manifests").string(),
                                "--root-dir=" + (dir / "root").string(),
                                "--pod-log-dir=" + (dir / "logs").string(),
                                "--runtime=fake",
                                "--read-only-port=0",
                                "--healthz-port=0",
                                "--hostname-override=node1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings{"NOTIFY_SOCKET=" + socket_path, "WATCHDOG_USEC=400000"};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "NOTIFY_SOCKET=", 14) != 0 && std::strncmp(*e, "WATCHDOG_USEC=", 14) != 0) {
      env_strings.emplace_back(*e);
    }
  }
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) == 0);
  CHECK(receive(fd, "READY=1", 10s));
  CHECK(receive(fd, "WATCHDOG=1", 10s));
  ::kill(pid, SIGTERM);
  CHECK(receive(fd, "STOPPING=1", 10s));
  int status = 0;
  bool exited = testing::eventually([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 10s);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  CHECK(exited);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::close(fd);
}
