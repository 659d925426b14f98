// The ports the daemon serves, with the built binary (fake runtime): a port another agent holds
// is fatal to the second agent (read-only and healthz alike) and leaves the first serving, and
// thousands of idle or slow connections do not take /healthz and /pods down.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>
#include <catch2/catch.hpp>

#include "test/support/integration_env.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

extern char** environ;

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// GET on 127.0.0.1:port; the status and body, or nullopt when it failed within `timeout`.
std::optional<std::pair<int, std::string>> get(int port, const std::string& path,
                                               std::chrono::seconds timeout = 5s) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(timeout);
  cli.set_read_timeout(timeout);
  auto res = cli.Get(path.c_str());
  if (!res) return std::nullopt;
  return std::make_pair(res->status, res->body);
}

// One agent with the fake runtime, an empty manifest directory and its own root dir; output in
// agent.log of its directory.
class Agent {
 public:
  Agent(int read_only_port, int healthz_port) {
    fs::create_directories(dir_ / "manifests");
    std::string bin = testing::binaryPath("nodeagent").string();
    std::vector<std::string> args{bin,
                                  "--runtime=fake",
                                  "--pod-manifest-path=" + (dir_ / "manifests").string(),
                                  "--root-dir=" + (dir_ / "root").string(),
                                  "--pod-log-dir=" + (dir_ / "logs").string(),
                                  "--read-only-port=" + std::to_string(read_only_port), "--port=0",
                                  "--healthz-port=" + std::to_string(healthz_port),
                                  "--hostname-override=node1"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = (dir_ / "agent.log").string();
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int rc = posix_spawn(&pid_, bin.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
  }
  ~Agent() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
  }
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // The exit code once it exited within `deadline` (128+signal for a signal), else nullopt.
  std::optional<int> exitCode(std::chrono::milliseconds deadline) {
    int status = 0;
    if (pid_ <= 0) return std::nullopt;
    if (!testing::eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, deadline)) {
      return std::nullopt;
    }
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string log() const { return testing::readFile(dir_ / "agent.log"); }

 private:
  testing::TempDir dir_{"nodeagent-e2e-ports"};
  pid_t pid_ = 0;
};

bool answers(int port, const std::string& path = "/healthz") {
  auto res = get(port, path, 2s);
  return res && res->first == 200;
}

}  // namespace

TEST_CASE(
    "daemon: a second agent on a port the first serves exits non-zero naming the port, and the "
    "first keeps answering",
    "[e2e][served_ports]") {
  const int read_only = testing::unusedLoopbackPort();
  int healthz = testing::unusedLoopbackPort();
  while (healthz == read_only) healthz = testing::unusedLoopbackPort();
  Agent first(read_only, healthz);
  REQUIRE(testing::eventually([&] { return answers(read_only) && answers(healthz); }, 15s));

  // The second agent exits non-zero with the port's name and address in its log.
  auto refused = [](Agent& second, const std::string& name, int port) {
    auto code = second.exitCode(15s);
    INFO(second.log());
    REQUIRE(code);
    CHECK(*code != 0);
    CHECK_THAT(second.log(), Catch::Contains(name + " port 127.0.0.1:" + std::to_string(port)));
    CHECK_THAT(second.log(), Catch::Contains("port " + std::to_string(port) + " is in use"));
  };
  SECTION("the read-only port") {
    Agent second(read_only, 0);
    refused(second, "read-only", read_only);
  }
  SECTION("the healthz port") {
    Agent second(testing::unusedLoopbackPort(), healthz);
    refused(second, "healthz", healthz);
  }
  auto pods = get(read_only, "/pods");
  REQUIRE(pods);
  CHECK(pods->first == 200);
  CHECK_THAT(pods->second, Catch::Contains("\"PodList\""));
  CHECK(answers(healthz));
  // The healthz port serves /healthz alone, as kubelet's.
  for (const char* path : {"/pods", "/metrics", "/manifest-errors"}) {
    auto other = get(healthz, path);
    REQUIRE(other);
    CHECK(other->first == 404);
  }
  CHECK_FALSE(first.exitCode(0ms));
}

TEST_CASE("daemon: /healthz and /pods answer while 2,000 idle and slowloris connections are open",
          "[e2e][served_ports]") {
  constexpr int kIdle = 2000;
  constexpr int kSlow = 8;
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  const rlim_t need = kIdle + kSlow + 256;
  if (lim.rlim_cur < need) {
    lim.rlim_cur = std::min<rlim_t>(need, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < need) {
    testing::skipTest("this test needs " + std::to_string(need) +
                      " descriptors; RLIMIT_NOFILE allows " + std::to_string(lim.rlim_cur));
  }
  const int port = testing::unusedLoopbackPort();
  Agent agent(port, 0);
  REQUIRE(testing::eventually([&] { return answers(port); }, 15s));

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::vector<int> fds;
  auto open = [&] {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    fds.push_back(fd);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    return fd;
  };
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(open());
    REQUIRE(::send(slow.back(), "GET /pods HTTP/1.1\r\n", 20, MSG_NOSIGNAL) == 20);
  }
  for (int i = 0; i < kIdle; ++i) open();

  // A header line every second from each slow one; every poll must answer promptly meanwhile.
  const auto start = std::chrono::steady_clock::now();
  int polls = 0;
  while (std::chrono::steady_clock::now() - start < 4s) {
    for (int fd : slow) (void)::send(fd, "X-Slow: v\r\n", 11, MSG_NOSIGNAL);
    for (int i = 0; i < 3; ++i) {
      const auto before = std::chrono::steady_clock::now();
      CHECK(answers(port, "/healthz"));
      CHECK(answers(port, "/pods"));
      CHECK(answers(port, "/metrics"));
      CHECK(std::chrono::steady_clock::now() - before < 2s);
      ++polls;
    }
    pollfd p{slow[0], POLLIN, 0};
    ::poll(&p, 1, 300);
  }
  CHECK(polls >= 6);
  // The header deadline (5 s from the accept) closes the slow ones.
  pollfd p{slow[0], POLLIN, 0};
  CHECK(::poll(&p, 1, 5000) == 1);
  char c;
  CHECK(::recv(slow[0], &c, 1, 0) <= 0);
  for (int fd : fds) ::close(fd);
  CHECK_FALSE(agent.exitCode(0ms));
}
