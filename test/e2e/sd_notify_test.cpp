// The daemon's systemd protocol: READY=1 once the local sources answered (never waiting for the
// apiserver), WATCHDOG=1 at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM (datagrams on
// $NOTIFY_SOCKET, no libsystemd).
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test/support/integration_env.h"
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

// The daemon with $NOTIFY_SOCKET (and $WATCHDOG_USEC) pointing at a datagram socket of the test.
class NotifiedDaemon {
 public:
  NotifiedDaemon(std::vector<std::string> extra_args, std::string watchdog_usec)
      : socket_path_((dir_ / "notify.sock").string()) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path_.c_str(), sizeof(addr.sun_path) - 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    std::filesystem::create_directories(dir_ / "manifests");

    std::vector<std::string> args{testing::binaryPath("nodeagent").string(),
                                  "--pod-manifest-path=" + (dir_ / "manifests").string(),
                                  "--root-dir=" + (dir_ / "root").string(),
                                  "--pod-log-dir=" + (dir_ / "logs").string(),
                                  "--runtime=fake",
                                  "--read-only-port=0", "--port=0",
                                  "--healthz-port=0",
                                  "--hostname-override=node1"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings{"NOTIFY_SOCKET=" + socket_path_};
    if (!watchdog_usec.empty()) env_strings.push_back("WATCHDOG_USEC=" + watchdog_usec);
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "NOTIFY_SOCKET=", 14) != 0 &&
          std::strncmp(*e, "WATCHDOG_USEC=", 14) != 0) {
        env_strings.emplace_back(*e);
      }
    }
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    REQUIRE(posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), envp.data()) == 0);
  }
  ~NotifiedDaemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(fd_);
  }

  bool receive(const std::string& want, std::chrono::milliseconds deadline) {
    return ::receive(fd_, want, deadline);
  }
  // SIGTERM, then the exit status (SIGKILL after 10 s).
  int terminate(bool* exited) {
    ::kill(pid_, SIGTERM);
    return waitExit(exited);
  }
  int waitExit(bool* exited) {
    int status = 0;
    *exited = testing::eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 10s);
    if (!*exited) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = 0;
    return status;
  }
  const testing::TempDir& dir() const { return dir_; }

 private:
  testing::TempDir dir_{"e2e-notify"};
  std::string socket_path_;
  int fd_ = -1;
  pid_t pid_ = 0;
};

}  // namespace

TEST_CASE("daemon: sd_notify READY=1 once sources are seen, WATCHDOG=1, STOPPING=1 on SIGTERM",
          "[e2e][agent]") {
  NotifiedDaemon d({}, "400000");
  CHECK(d.receive("READY=1", 10s));
  CHECK(d.receive("WATCHDOG=1", 10s));
  bool exited = false;
  int status = d.terminate(&exited);
  CHECK(exited);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("daemon: READY=1 does not wait for an unreachable apiserver (no systemd restart loop)",
          "[e2e][agent]") {
  // A kubeconfig naming a loopback port nothing listens on.
  const int port = testing::unusedLoopbackPort();
  testing::TempDir kube("e2e-notify-kube");
  testing::writeFile(kube / "kubeconfig",
                     "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: "
                     "http://127.0.0.1:" +
                         std::to_string(port) +
                         "\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
                         "current-context: c\nusers:\n- name: u\n  user: {}\n");
  NotifiedDaemon d({"--kubeconfig=" + (kube / "kubeconfig").string()}, "");
  CHECK(d.receive("READY=1", 10s));
  bool exited = false;
  d.terminate(&exited);
  CHECK(exited);
}
