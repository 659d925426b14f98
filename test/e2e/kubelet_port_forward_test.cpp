// kubectl port-forward end to end: the real kubectl through the in-process test apiserver to the
// nodeagent binary's /portForward, both with kubectl's default (SPDY tunnelled in a WebSocket)
// and with the plain SPDY upgrade (KUBECTL_PORT_FORWARD_WEBSOCKETS=false), to a pod whose
// container serves files over HTTP on a loopback port; curl fetches them through the forward.
// kubelet's own WebSocket channel protocol, which kubectl does not speak, is driven straight
// against the agent's port.
#include <dirent.h>
#include <signal.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test/integration/apiserver_test_util.h"
#include "test/support/integration_env.h"
#include "test/support/kubelet_env.h"
#include "test/support/test_util.h"
#include "test/support/ws_client.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using testing::KubeletEnv;

namespace {

// The pod: python's HTTP server on `port` (loopback) serving `dir`; it declares `port` and
// `closed_port` (where nothing listens), the ports a client may forward to.
std::string webPod(int port, int closed_port, const std::filesystem::path& dir) {
  return "apiVersion: v1\nkind: Pod\nmetadata: {name: files, namespace: default}\nspec:\n"
         "  containers:\n  - name: http\n    image: python\n"
         "    command: [\"/usr/bin/python3\", \"-m\", \"http.server\", \"" +
         std::to_string(port) + "\", \"--bind\", \"127.0.0.1\", \"--directory\", \"" +
         dir.string() + "\"]\n    ports:\n    - containerPort: " + std::to_string(port) +
         "\n    - containerPort: " + std::to_string(closed_port) + "\n";
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
    testing::writeFile(env.manifests / "files.yaml", webPod(pod_port, closed_port, served));
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
    // The agent's first reviews open its connections to the apiserver for them: before the
    // descriptors are counted.
    for (int i = 0; i < 4; ++i) env.kubectl({"logs", pod, "--tail=1"});
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

  int fds() const {
    return testing::countEntries("/proc/" + std::to_string(env.agent->pid()) + "/fd");
  }

  KubeletEnv env;
  std::filesystem::path served;
  const std::string big = randomBytes(4 * 1024 * 1024 + 123);
  const int pod_port = testing::unusedLoopbackPort();
  const int closed_port = testing::refusedLoopbackPort();
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
  const int dead_port = s.closed_port;
  const int bad_local = testing::unusedLoopbackPort();
  const int good_local = testing::unusedLoopbackPort();
  auto kubectl = s.forward({std::to_string(bad_local) + ":" + std::to_string(dead_port),
                            std::to_string(good_local) + ":" + std::to_string(s.pod_port)},
                           websockets);
  CHECK_FALSE(s.fetch(bad_local, "hello.txt"));
  const std::string expected = "error forwarding port " + std::to_string(dead_port) + " to pod ";
  const bool reported =
      testing::eventually([&] { return kubectl->err().find(expected) != std::string::npos; }, 20s);
  INFO("kubectl: " << kubectl->out() << kubectl->err());
  INFO(s.env.diagnostics());
  CHECK(reported);
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

namespace {

// What a kubelet port-forward WebSocket sent until it closed: each channel's first message (the
// port) and the rest of its data.
struct ChannelCapture {
  std::map<int, std::string> first;
  std::map<int, std::string> data;
  bool closed = false;  // by the server, not at the read deadline
};

ChannelCapture readUntilClosed(testing::WsClient& ws) {
  ChannelCapture out;
  while (auto message = ws.read()) {
    if (message->empty()) continue;
    const int channel = static_cast<unsigned char>((*message)[0]);
    if (out.first.emplace(channel, message->substr(1)).second) continue;
    out.data[channel] += message->substr(1);
  }
  out.closed = ws.error().empty();
  return out;
}

std::string littleEndian(int port) {
  return {static_cast<char>(port & 0xff), static_cast<char>((port >> 8) & 0xff)};
}

// A large body arrives whole on the data channel.
void checkBigFile(Setup& s, const testing::WsClientOptions& options, const std::string& target) {
  testing::WsClient big;
  REQUIRE(big.connect(s.env.port, target + "?port=" + std::to_string(s.pod_port), options));
  REQUIRE(big.send(std::string(1, '\0') + "GET /big.bin HTTP/1.0\r\n\r\n"));
  auto one = readUntilClosed(big);
  CHECK(one.closed);
  const size_t body = one.data[0].find("\r\n\r\n");
  REQUIRE(body != std::string::npos);
  CHECK(one.data[0].size() - body - 4 == s.big.size());
  CHECK(one.data[0].substr(body + 4) == s.big);
}

// Refusals: no port, a port that is none, a subprotocol of neither protocol.
void checkRefusals(Setup& s, testing::WsClientOptions options, const std::string& target) {
  testing::WsClient refused;
  CHECK_FALSE(refused.connect(s.env.port, target, options));
  CHECK(refused.httpStatus() == 400);
  CHECK_THAT(refused.httpBody(), Catch::Contains("query parameter \\\"port\\\" is required"));
  CHECK_FALSE(refused.connect(s.env.port, target + "?port=http", options));
  CHECK(refused.httpStatus() == 400);
  CHECK_THAT(refused.httpBody(), Catch::Contains("unable to parse \\\"http\\\" as a port"));
  options.protocols = {"v4.base64.channel.k8s.io"};
  CHECK_FALSE(refused.connect(s.env.port, target + "?port=80", options));
  CHECK(refused.httpStatus() == 400);
}

}  // namespace

TEST_CASE(
    "kubelet's WebSocket port-forward protocol straight to the agent: the port first on both of "
    "its channels, an HTTP exchange and a 4 MiB file on the data channel, kubelet's error on the "
    "error channel of a closed port, the socket closed once every forward ended, and the pod's "
    "connection closed when the client leaves",
    "[e2e][kubelet-api][port-forward]") {
  Setup s;
  const auto ops = s.env.pki.issueClient("ops", {"system:masters"});
  testing::WsClientOptions options;
  options.client_cert = ops.cert_file;
  options.client_key = ops.key_file;
  options.protocols = {"v4.channel.k8s.io"};
  options.timeout = 30s;
  const std::string target = "/portForward/default/" + s.pod;
  const int dead_port = s.closed_port;
  const int fds_before = s.fds();

  testing::WsClient ws;
  REQUIRE(ws.connect(
      s.env.port, target + "?port=" + std::to_string(s.pod_port) + "," + std::to_string(dead_port),
      options));
  CHECK(ws.protocol() == "v4.channel.k8s.io");
  REQUIRE(ws.send(std::string(1, '\0') + "GET /hello.txt HTTP/1.0\r\n\r\n"));
  auto two = readUntilClosed(ws);
  CHECK(two.closed);
  CHECK(two.first == std::map<int, std::string>{{0, littleEndian(s.pod_port)},
                                                {1, littleEndian(s.pod_port)},
                                                {2, littleEndian(dead_port)},
                                                {3, littleEndian(dead_port)}});
  CHECK_THAT(two.data[0], Catch::StartsWith("HTTP/1.0 200"));
  CHECK_THAT(two.data[0], Catch::EndsWith("\r\n\r\nhello through the forward\n"));
  CHECK_THAT(two.data[3],
             Catch::Contains("error forwarding port " + std::to_string(dead_port) + " to pod "));
  CHECK_THAT(two.data[3], Catch::Contains("connection refused"));
  CHECK(two.data[1].empty());
  CHECK(two.data.count(2) == 0);

  // A port the pod does not declare is not forwarded (its containers share the node's network).
  const int undeclared = testing::unusedLoopbackPort();
  testing::WsClient refused_port;
  REQUIRE(
      refused_port.connect(s.env.port, target + "?port=" + std::to_string(undeclared), options));
  auto refused = readUntilClosed(refused_port);
  CHECK_THAT(refused.data[1], Catch::Contains("is not a containerPort of the pod"));

  options.protocols.clear();  // no subprotocol: the same binary protocol
  checkBigFile(s, options, target);

  // A client that leaves while its forward is open: the agent closes the pod's connection.
  testing::WsClient idle;
  REQUIRE(idle.connect(s.env.port, target + "?port=" + std::to_string(s.pod_port), options));
  CHECK(idle.read() == std::string(1, '\0') + littleEndian(s.pod_port));
  CHECK(idle.read() == std::string(1, '\1') + littleEndian(s.pod_port));
  idle.close();
  CHECK(testing::eventually([&] { return s.fds() <= fds_before + 2; }, 30s));
  INFO("agent descriptors before " << fds_before << " after " << s.fds());

  checkRefusals(s, options, target);
  CHECK(s.env.agent->running());
}
