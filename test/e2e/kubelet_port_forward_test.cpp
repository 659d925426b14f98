// kubectl port-forward end to end: the real kubectl through the in-process test apiserver to the
// nodeagent binary's /portForward, both with kubectl's default (SPDY tunnelled in a WebSocket)
// and with the plain SPDY upgrade (KUBECTL_PORT_FORWARD_WEBSOCKETS=false), to a pod whose
// container serves files over HTTP on a loopback port; curl fetches them through the forward.
#include <dirent.h>
#include <signal.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test/integration/apiserver_test_util.h"
#include "test/support/integration_env.h"
#include "test/support/kubelet_env.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using testing::KubeletEnv;

namespace {

int countEntries(const std::string& dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n - 2;
}

// The pod: python's HTTP server on `port` (loopback) serving `dir`.
std::string webPod(int port, const std::filesystem::path& dir) {
  return "apiVersion: v1\nkind: Pod\nmetadata: {name: files, namespace: default}\nspec:\n"
         "  containers:\n  - name: http\n    image: python\n"
         "    command: [\"/usr/bin/python3\", \"-m\", \"http.server\", \"" +
         std::to_string(port) + "\", \"--bind\", \"127.0.0.1\", \"--directory\", \"" +
         dir.string() + "\"]\n";
}

std::string randomBytes(size_t n) {
  std::mt19937_64 rng(42);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

struct Setup {
  Setup() {
    served = env.dir / "served";
    std::filesystem::create_directories(served);
    testing::writeFile(served / "hello.txt", "hello through the forward\n");
    testing::writeFile(served / "big.bin", big);
    testing::writeFile(env.manifests / "files.yaml", webPod(pod_port, served));
    env.startAgent();
    // The server answers on its port once the container runs.
    const bool up = testing::eventually(
        [&] {
          auto r = testing::runCommand({"curl", "-sf", "--max-time", "2", direct("hello.txt")},
                                       env.dir, 5s);
          return r.exit_code == 0;
        },
        40s);
    if (!up) FAIL("the pod's HTTP server did not start\n" << env.diagnostics());
    if (!testing::eventually(
            [&] {
              return env.kubectl({"get", "pod", pod}).exit_code == 0;
            },
            40s)) {
      FAIL("no mirror pod\n" << env.diagnostics());
    }
  }

  std::string direct(const std::string& file) const {
    return "http://127.0.0.1:" + std::to_string(pod_port) + "/" + file;
  }

  // `kubectl port-forward pod ports...`, running once it says it forwards.
  std::unique_ptr<testing::ChildProcess> forward(const std::vector<std::string>& ports,
                                                 bool websockets) {
    std::vector<std::string> argv = {
        "env", std::string("KUBECTL_PORT_FORWARD_WEBSOCKETS=") + (websockets ? "true" : "false")};
    std::vector<std::string> args = {"port-forward", "pod/" + pod};
    args.insert(args.end(), ports.begin(), ports.end());
    for (auto& a : env.kubectlArgv(args)) argv.push_back(a);
    const std::string tag = "pf" + std::to_string(++forwards);
    auto child = std::make_unique<testing::ChildProcess>(argv, env.dir / (tag + ".out"),
                                                         env.dir / (tag + ".err"));
    const bool ready = testing::eventually(
        [&] {
          return child->out().find("Forwarding from") != std::string::npos || !child->running();
        },
        30s);
    INFO("kubectl port-forward: " << child->out() << child->err());
    REQUIRE(ready);
    REQUIRE(child->running());
    return child;
  }

  // curl through the local port: the body on success.
  std::optional<std::string> fetch(int local, const std::string& file) {
    const auto out = env.dir / ("got-" + std::to_string(++fetches));
    auto r = testing::runCommand({"curl", "-sS", "--max-time", "30", "-o", out.string(),
                                  "http://127.0.0.1:" + std::to_string(local) + "/" + file},
                                 env.dir, 40s);
    if (r.exit_code != 0) return std::nullopt;
    return testing::readFile(out);
  }

  int fds() const { return countEntries("/proc/" + std::to_string(env.agent->pid()) + "/fd"); }

  KubeletEnv env;
  std::filesystem::path served;
  const std::string big = randomBytes(4 * 1024 * 1024 + 123);
  const int pod_port = testing::unusedLoopbackPort();
  const std::string pod = KubeletEnv::mirrorName("files");
  std::atomic<int> fetches{0};
  int forwards = 0;
};

}  // namespace

TEST_CASE(
    "kubectl port-forward carries HTTP requests and a 4 MiB file to a pod's port, over the "
    "WebSocket tunnel and over plain SPDY, and leaves no descriptor behind",
    "[e2e][kubelet-api][port-forward]") {
  Setup s;
  const bool websockets = GENERATE(true, false);
  INFO("KUBECTL_PORT_FORWARD_WEBSOCKETS=" << websockets);
  const int fds_before = s.fds();
  const int local = testing::unusedLoopbackPort();
  auto kubectl = s.forward({std::to_string(local) + ":" + std::to_string(s.pod_port)}, websockets);
  for (int i = 0; i < 5; ++i) {
    auto got = s.fetch(local, "hello.txt");
    INFO(kubectl->err());
    REQUIRE(got);
    CHECK(*got == "hello through the forward\n");
  }
  auto big = s.fetch(local, "big.bin");
  REQUIRE(big);
  CHECK(big->size() == s.big.size());
  CHECK(*big == s.big);
  // Several connections at once share the session.
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto got = s.fetch(local, "big.bin");
      if (got && *got == s.big) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == 4);
  CHECK(kubectl->running());
  kubectl->signal(SIGKILL);
  kubectl->wait(10s);
  CHECK(testing::eventually([&] { return s.fds() <= fds_before + 2; }, 30s));
  INFO("agent descriptors before " << fds_before << " after " << s.fds());
  CHECK(s.fds() <= fds_before + 2);
  CHECK(s.env.agent->running());
}

TEST_CASE(
    "kubectl port-forward to a port nobody listens on reports kubelet's error, and forwarding "
    "works again for the next good request",
    "[e2e][kubelet-api][port-forward]") {
  Setup s;
  const bool websockets = GENERATE(true, false);
  INFO("KUBECTL_PORT_FORWARD_WEBSOCKETS=" << websockets);
  const int dead_port = testing::unusedLoopbackPort();
  const int bad_local = testing::unusedLoopbackPort();
  const int good_local = testing::unusedLoopbackPort();
  auto kubectl = s.forward({std::to_string(bad_local) + ":" + std::to_string(dead_port),
                            std::to_string(good_local) + ":" + std::to_string(s.pod_port)},
                           websockets);
  CHECK_FALSE(s.fetch(bad_local, "hello.txt"));
  const std::string expected = "error forwarding port " + std::to_string(dead_port) + " to pod ";
  CHECK(
      testing::eventually([&] { return kubectl->err().find(expected) != std::string::npos; }, 20s));
  INFO("kubectl: " << kubectl->err());
  CHECK(kubectl->err().find("connection refused") != std::string::npos);
  // kubectl (1.31+) gives up the whole connection after an error on the error stream ("lost
  // connection to pod") and exits; an older one keeps forwarding. Either way a good request then
  // succeeds, on a new forward if needed.
  if (testing::eventually(
          [&] { return kubectl->err().find("lost connection to pod") != std::string::npos; }, 5s)) {
    REQUIRE(kubectl->wait(20s));
    kubectl =
        s.forward({std::to_string(good_local) + ":" + std::to_string(s.pod_port)}, websockets);
  }
  auto got = s.fetch(good_local, "hello.txt");
  REQUIRE(got);
  CHECK(*got == "hello through the forward\n");
  CHECK(s.env.agent->running());
}
