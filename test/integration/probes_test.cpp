// Probes, lifecycle hooks and termination messages against real processes: the probe handler
// on its own (exec through nodeagent-shim, httpGet against a server in the test, tcpSocket), then
// the whole agent on ProcessRuntime (readiness, liveness restarts, postStart, messages).
#include <httplib.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "agent/agent.h"
#include "agent/prober/probe_handler.h"
#include "agent/runtime/process_runtime.h"
#include "agent/status/pod_status.h"
#include "base/random.h"
#include "podmanager/mirror_client.h"
#include "test/support/integration_env.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Kind = agent::ProbeOutcome::Kind;

namespace {

// An HTTP server on 127.0.0.1:<port 0> with canned answers by path; "/slow" never answers.
class TestHttpServer {
 public:
  TestHttpServer() : acceptor_(ioc_, {asio::ip::address_v4::loopback(), 0}) {
    port_ = acceptor_.local_endpoint().port();
    accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~TestHttpServer() {
    asio::post(ioc_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      held_.clear();
    });
    ioc_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string lastRequest() {
    std::lock_guard lock(mu_);
    return last_request_;
  }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, asio::ip::tcp::socket socket) {
      if (ec) return;
      serve(std::make_shared<asio::ip::tcp::socket>(std::move(socket)));
      accept();
    });
  }
  void serve(std::shared_ptr<asio::ip::tcp::socket> socket) {
    auto buf = std::make_shared<std::string>();
    asio::async_read_until(*socket, asio::dynamic_buffer(*buf), "\r\n\r\n",
                           [this, socket, buf](boost::system::error_code ec, size_t) {
                             if (ec) return;
                             {
                               std::lock_guard lock(mu_);
                               last_request_ = *buf;
                             }
                             auto path = buf->substr(4, buf->find(' ', 4) - 4);
                             if (path == "/slow") {
                               held_.push_back(socket);
                               return;
                             }
                             auto reply = std::make_shared<std::string>(answer(path));
                             asio::async_write(*socket, asio::buffer(*reply),
                                               [socket, reply](boost::system::error_code, size_t) {
                                                 boost::system::error_code e;
                                                 socket->shutdown(
                                                     asio::ip::tcp::socket::shutdown_both, e);
                                               });
                           });
  }
  std::string answer(const std::string& path) {
    auto reply = [](const std::string& status, const std::string& extra, const std::string& body) {
      return "HTTP/1.1 " + status + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
             extra + "Connection: close\r\n\r\n" + body;
    };
    if (path == "/ok") return reply("200 OK", "", "fine");
    if (path == "/bad") return reply("500 Internal Server Error", "", "broken");
    if (path == "/local") return reply("302 Found", "Location: /ok\r\n", "");
    if (path == "/local-bad") return reply("302 Found", "Location: /bad\r\n", "");
    if (path == "/away")
      return reply("302 Found", "Location: http://elsewhere.invalid/\r\n", "moved");
    return reply("404 Not Found", "", "no");
  }

  asio::io_context ioc_;
  asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::vector<std::shared_ptr<asio::ip::tcp::socket>> held_;
  std::mutex mu_;
  std::string last_request_;
  std::thread thread_;
};

// A ProcessRuntime and the real probe handler on an io_context run by two threads.
class HandlerEnv {
 public:
  HandlerEnv() {
    runtime_ =
        testing::makeProcessRuntime(io_.executor(), testing::processRuntimeOptions(dir_.path()));
    handler_ = std::make_unique<agent::RealProbeHandler>(*runtime_, base::realClock());
    io_.start(2);
  }
  ~HandlerEnv() {
    for (const auto& id : started_) {
      auto kill =
          runtime_->killContainer(nullptr, id, runtime::KillOptions::graceOverride(0), "test over");
      (void)run(std::move(kill));
    }
    runtime_.reset();
    io_.stop();
  }

  template <typename T>
  T run(asio::awaitable<T> aw) {
    std::promise<T> promise;
    auto future = promise.get_future();
    asio::co_spawn(
        asio::make_strand(io_.context()),
        [&]() -> asio::awaitable<void> { promise.set_value(co_await std::move(aw)); },
        asio::detached);
    REQUIRE(future.wait_for(30s) == std::future_status::ready);
    return future.get();
  }

  runtime::ContainerId startSleeper() {
    auto pod = std::make_shared<api::Pod>();
    pod->metadata.name = "sleeper";
    pod->metadata.namespace_ = "default";
    pod->metadata.uid = "uid-sleeper";
    api::Container c;
    c.name = "main";
    c.command = {"sleep", "1000"};
    api::EnvVar greeting;
    greeting.name = "GREETING";
    greeting.value = "hello";
    c.env.push_back(greeting);
    pod->spec->containers.push_back(c);
    runtime::StartContainerOptions options;
    options.pod_dir = dir_ / "pod";
    auto start = runtime_->startContainer(pod, pod->spec->containers[0], 0, options);
    auto id = run(std::move(start));
    REQUIRE(id.ok());
    started_.push_back(*id);
    return *id;
  }

  agent::ProbeOutcome probe(agent::ProbeTarget target) {
    auto task = handler_->probe(std::move(target));
    return run(std::move(task));
  }

  agent::ProbeTarget httpTarget(int port, const std::string& path, base::Duration timeout = 2s) {
    agent::ProbeTarget t;
    t.handler.http_get = api::HTTPGetAction{};
    t.handler.http_get->path = path;
    t.handler.http_get->port.int_value = port;
    t.timeout = timeout;
    t.pod_ip = "127.0.0.1";
    return t;
  }

  fs::path dir() const { return dir_.path(); }
  runtime::ProcessRuntime& runtime() { return *runtime_; }

 private:
  testing::TempDir dir_{"nodeagent-probes"};
  testing::IoThreads io_;
  std::unique_ptr<runtime::ProcessRuntime> runtime_;
  std::unique_ptr<agent::RealProbeHandler> handler_;
  std::vector<runtime::ContainerId> started_;
};

}  // namespace

TEST_CASE("probe handler: exec runs in the container's env, reports exit code and output",
          "[integration][prober]") {
  HandlerEnv env;
  auto id = env.startSleeper();
  agent::ProbeTarget t;
  t.container_id = id;
  t.timeout = 5s;
  t.handler.exec = api::ExecAction{{"/bin/sh", "-c", "echo $GREETING from $(pwd); exit 0"}};
  auto ok = env.probe(t);
  CHECK(ok.kind == Kind::kSuccess);
  CHECK(ok.output == "hello from " + (env.dir() / "pod").string() + "\n");

  t.handler.exec = api::ExecAction{{"/bin/sh", "-c", "echo nope >&2; exit 3"}};
  auto failed = env.probe(t);
  CHECK(failed.kind == Kind::kFailure);
  CHECK(failed.output == "nope\n");

  SECTION("a command past timeoutSeconds is killed and fails") {
    t.timeout = 1s;
    t.handler.exec = api::ExecAction{{"/bin/sh", "-c", "echo started; sleep 30"}};
    const auto began = std::chrono::steady_clock::now();
    auto slow = env.probe(t);
    CHECK(std::chrono::steady_clock::now() - began < 10s);
    CHECK(slow.kind == Kind::kFailure);
    CHECK(slow.output == "command \"/bin/sh -c echo started; sleep 30\" timed out after 1s");
  }
  SECTION("output beyond 10 KiB is cut, and a command that cannot run is an error") {
    t.handler.exec = api::ExecAction{{"/bin/sh", "-c", "head -c 50000 /dev/zero | tr '\\\\0' x"}};
    auto big = env.probe(t);
    CHECK(big.kind == Kind::kSuccess);
    CHECK(big.output.size() == runtime::kMaxExecOutput);
    t.container_id = runtime::ContainerId{"process", "no-such-container"};
    CHECK(env.probe(t).kind == Kind::kUnknown);
  }
}

TEST_CASE("probe handler: httpGet succeeds on 2xx/3xx, follows only same-host redirects",
          "[integration][prober]") {
  HandlerEnv env;
  TestHttpServer server;
  auto ok = env.probe(env.httpTarget(server.port(), "/ok"));
  CHECK(ok.kind == Kind::kSuccess);
  CHECK(ok.output == "fine");
  auto request = server.lastRequest();
  CHECK(request.rfind("GET /ok HTTP/1.1\r\n", 0) == 0);
  CHECK(request.find("User-Agent: kube-probe/1.18\r\n") != std::string::npos);
  CHECK(request.find("Host: 127.0.0.1:" + std::to_string(server.port()) + "\r\n") !=
        std::string::npos);

  auto bad = env.probe(env.httpTarget(server.port(), "/bad"));
  CHECK(bad.kind == Kind::kFailure);
  CHECK(bad.output == "HTTP probe failed with statuscode: 500");
  CHECK(env.probe(env.httpTarget(server.port(), "/missing")).kind == Kind::kFailure);
  CHECK(env.probe(env.httpTarget(server.port(), "/local")).kind == Kind::kSuccess);
  CHECK(env.probe(env.httpTarget(server.port(), "/local-bad")).kind == Kind::kFailure);
  // Another host is never contacted: the redirect itself counts as a success (Warning).
  auto away = env.probe(env.httpTarget(server.port(), "/away"));
  CHECK(away.kind == Kind::kWarning);
  CHECK(server.lastRequest().rfind("GET /away ", 0) == 0);

  SECTION("custom headers, named ports") {
    auto t = env.httpTarget(0, "ok");
    t.handler.http_get->port = api::IntOrString{true, 0, "web"};
    t.ports.push_back(api::ContainerPort{"web", server.port(), 0, "TCP", ""});
    t.handler.http_get->http_headers.push_back({"X-Probe", "yes"});
    t.handler.http_get->http_headers.push_back({"Host", "example.test"});
    CHECK(env.probe(t).kind == Kind::kSuccess);
    CHECK(server.lastRequest().find("X-Probe: yes\r\n") != std::string::npos);
    CHECK(server.lastRequest().find("Host: example.test\r\n") != std::string::npos);
    t.handler.http_get->port = api::IntOrString{true, 0, "nope"};
    CHECK(env.probe(t).kind == Kind::kUnknown);
  }
  SECTION("a server that does not answer within timeoutSeconds fails the probe") {
    const auto began = std::chrono::steady_clock::now();
    auto slow = env.probe(env.httpTarget(server.port(), "/slow", 1s));
    CHECK(std::chrono::steady_clock::now() - began < 10s);
    CHECK(slow.kind == Kind::kFailure);
    CHECK(slow.output.find("Client.Timeout exceeded") != std::string::npos);
  }
}

TEST_CASE("probe handler: httpGet with scheme HTTPS skips certificate verification",
          "[integration][prober]") {
  HandlerEnv env;
  testing::TempDir dir("probe-tls");
  testing::writeSelfSignedCert(dir.path());
  httplib::SSLServer server((dir / "cert.pem").c_str(), (dir / "key.pem").c_str());
  REQUIRE(server.is_valid());
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("secure ok", "text/plain");
  });
  server.Get("/sick", [](const httplib::Request&, httplib::Response& res) { res.status = 503; });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  REQUIRE(testing::eventually([&] { return server.is_running(); }));
  auto target = env.httpTarget(port, "/healthz");
  target.handler.http_get->scheme = "HTTPS";
  auto ok = env.probe(target);
  CHECK(ok.kind == Kind::kSuccess);
  CHECK(ok.output == "secure ok");
  target.handler.http_get->path = "/sick";
  auto sick = env.probe(target);
  CHECK(sick.kind == Kind::kFailure);
  CHECK(sick.output == "HTTP probe failed with statuscode: 503");
  // Plain HTTP against the TLS port is no success either.
  target.handler.http_get->scheme = "HTTP";
  CHECK(env.probe(target).kind == Kind::kFailure);
  server.stop();
  t.join();
}

TEST_CASE("probe handler: tcpSocket succeeds when it connects", "[integration][prober]") {
  HandlerEnv env;
  TestHttpServer server;
  agent::ProbeTarget t;
  t.timeout = 2s;
  t.pod_ip = "127.0.0.1";
  t.handler.tcp_socket = api::TCPSocketAction{};
  t.handler.tcp_socket->port.int_value = server.port();
  CHECK(env.probe(t).kind == Kind::kSuccess);
  const int closed = testing::refusedLoopbackPort();
  t.handler.tcp_socket->port.int_value = closed;
  auto refused = env.probe(t);
  CHECK(refused.kind == Kind::kFailure);
  CHECK(refused.output.rfind("dial tcp 127.0.0.1:" + std::to_string(closed) + ": connect: ", 0) ==
        0);
}

namespace {

// The whole agent on ProcessRuntime with real nodeagent-shim processes.
class AgentEnv {
 public:
  AgentEnv() {
    runtime_ = testing::makeProcessRuntime(asio::make_strand(io_.context()),
                                           testing::processRuntimeOptions(dir_.path()));
    pod_manager_ = std::make_unique<podmanager::PodManager>(mirror_client_);
    status_manager_ = std::make_unique<agent::StatusManager>(base::realClock(), *pod_manager_);
    agent::AgentOptions ao;
    ao.node_name = "node-a";
    ao.node_ip = "127.0.0.1";
    // The test pods carry no source annotation (API pods) and run as root.
    ao.allow_root_api_pods = true;
    ao.root_dir = dir_ / "root";
    ao.allocatable = {"node-a", 64000, int64_t{64} << 30, 110};
    ao.crashloop_backoff_initial = 1s;
    ao.pleg.relist_period = 1s;
    ao.record_event = [this](const api::Pod&, const std::string&, const std::string& reason,
                             const std::string& message, const std::string&) {
      std::lock_guard lock(mu_);
      events_.push_back(reason + ": " + message);
    };
    agent_ = std::make_unique<agent::Agent>(
        io_.executor(), base::realClock(), base::defaultRandom(), *runtime_, *pod_manager_,
        *status_manager_, [](const std::string&) { return true; }, [] { return true; }, ao);
    io_.start(2);
    agent_->start();
  }
  ~AgentEnv() {
    for (const auto& pod : pods_) {
      agent_->onPodUpdate(api::PodUpdate{{pod}, api::PodOperation::kRemove, "file"});
    }
    testing::eventually([&] { return runningContainers() == 0; }, 20s);
    std::promise<void> idle;
    agent_->stop([&idle] { idle.set_value(); });
    idle.get_future().wait_for(10s);
    io_.stop();
    agent_.reset();
    runtime_.reset();
  }

  void add(const api::PodPtr& pod) {
    pods_.push_back(pod);
    agent_->onPodUpdate(api::PodUpdate{{pod}, api::PodOperation::kAdd, "file"});
  }
  void remove(const api::PodPtr& pod) {
    std::erase(pods_, pod);
    agent_->onPodUpdate(api::PodUpdate{{pod}, api::PodOperation::kRemove, "file"});
  }
  std::optional<api::ContainerStatus> container(const std::string& uid) {
    auto s = status_manager_->getPodStatus(uid);
    if (!s || s->container_statuses.empty()) return std::nullopt;
    return s->container_statuses[0];
  }
  std::string condition(const std::string& uid, std::string_view type) {
    auto s = status_manager_->getPodStatus(uid);
    if (!s) return "";
    const auto* c = agent::findCondition(s->conditions, type);
    return c ? c->status : "";
  }
  bool hasEvent(const std::string& prefix) {
    std::lock_guard lock(mu_);
    return std::any_of(events_.begin(), events_.end(),
                       [&](const std::string& e) { return e.rfind(prefix, 0) == 0; });
  }
  size_t runningContainers() {
    std::promise<size_t> count;
    asio::co_spawn(
        io_.context(),
        [&]() -> asio::awaitable<void> {
          auto list = runtime_->getPods(false);
          auto pods = co_await std::move(list);
          size_t n = 0;
          if (pods.ok()) {
            for (const auto& p : *pods) n += p.containers.size();
          }
          count.set_value(n);
        },
        asio::detached);
    return count.get_future().get();
  }
  fs::path podDir(const std::string& uid) const { return dir_ / "root" / "pods" / uid; }

 private:
  testing::TempDir dir_{"nodeagent-probes-agent"};
  testing::IoThreads io_;
  podmanager::NoopMirrorClient mirror_client_;
  std::unique_ptr<runtime::ProcessRuntime> runtime_;
  std::unique_ptr<podmanager::PodManager> pod_manager_;
  std::unique_ptr<agent::StatusManager> status_manager_;
  std::unique_ptr<agent::Agent> agent_;
  std::vector<api::PodPtr> pods_;
  std::mutex mu_;
  std::vector<std::string> events_;
};

api::PodPtr yamlPod(const std::string& uid, const std::string& container_yaml,
                    const std::string& policy = "Always") {
  return testing::podFromJson("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p-" + uid +
                              "\n  namespace: default\n  uid: " + uid +
                              "\nspec:\n  restartPolicy: " + policy +
                              "\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: c\n"
                              "    image: debian:12\n" +
                              container_yaml);
}

}  // namespace

TEST_CASE("agent with processes: exec readiness gates Ready, exec liveness restarts",
          "[integration][prober]") {
  AgentEnv env;
  env.add(yamlPod(
      "u-exec",
      R"(    command: ["/bin/sh", "-c", "rm -f ready sick; sleep 1; touch ready; sleep 1000"]
    readinessProbe:
      exec: {command: ["test", "-f", "ready"]}
      periodSeconds: 1
    livenessProbe:
      exec: {command: ["test", "!", "-f", "sick"]}
      periodSeconds: 1
      failureThreshold: 2
)"));
  REQUIRE(testing::eventually([&] {
    auto c = env.container("u-exec");
    return c && c->state.running;
  }));
  CHECK(env.condition("u-exec", "Ready") == "False");
  REQUIRE(testing::eventually([&] { return env.condition("u-exec", "Ready") == "True"; }));
  CHECK(env.container("u-exec")->ready);

  testing::writeFile(env.podDir("u-exec") / "sick", "");
  REQUIRE(testing::eventually(
      [&] {
        auto c = env.container("u-exec");
        return c && c->restart_count == 1 && c->state.running;
      },
      20s));
  CHECK(env.hasEvent("Killing: Container c failed liveness probe, will be restarted"));
  CHECK(env.hasEvent("Unhealthy: Liveness probe failed"));
  auto c = *env.container("u-exec");
  REQUIRE(c.last_state.terminated);
  CHECK(c.last_state.terminated->exit_code == 143);  // SIGTERM
  // The new container is probed afresh: ready again once its probe passes.
  CHECK(testing::eventually([&] { return env.condition("u-exec", "Ready") == "True"; }));
}

TEST_CASE("agent with processes: httpGet and tcpSocket probes against python3 http.server",
          "[integration][prober]") {
  AgentEnv env;
  const int port = testing::unusedLoopbackPort();
  env.add(yamlPod("u-http", R"(    command: ["python3", "-m", "http.server", ")" +
                                std::to_string(port) +
                                R"(", "--bind", "127.0.0.1"]
    ports: [{name: http, containerPort: )" +
                                std::to_string(port) + R"(}]
    startupProbe:
      tcpSocket: {port: http}
      periodSeconds: 1
      failureThreshold: 30
    readinessProbe:
      httpGet: {path: /, port: http}
      periodSeconds: 1
    livenessProbe:
      httpGet: {path: /, port: )" +
                                std::to_string(port) + R"(}
      periodSeconds: 1
)"));
  REQUIRE(testing::eventually([&] { return env.condition("u-http", "Ready") == "True"; }, 20s));
  auto c = *env.container("u-http");
  CHECK(c.ready);
  CHECK(*c.started);
  CHECK(c.restart_count == 0);
}

TEST_CASE("agent with processes: a failing postStart hook kills the container",
          "[integration][prober]") {
  AgentEnv env;
  env.add(yamlPod("u-hook", R"(    command: ["sleep", "1000"]
    lifecycle:
      postStart:
        exec: {command: ["/bin/sh", "-c", "echo hook ran > hook; exit 3"]}
)",
                  "Never"));
  REQUIRE(testing::eventually(
      [&] {
        auto c = env.container("u-hook");
        return c && c->state.terminated;
      },
      20s));
  CHECK(testing::readFile(env.podDir("u-hook") / "hook") == "hook ran\n");
  CHECK(
      env.hasEvent("FailedPostStartHook: Exec lifecycle hook ([/bin/sh -c echo hook ran > hook; "
                   "exit 3]) for Container \"c\" in Pod \"p-u-hook_default(u-hook)\" failed - "
                   "error: command '/bin/sh -c echo hook ran > hook; exit 3' exited with 3: "));
  CHECK(env.container("u-hook")->state.terminated->exit_code == 143);
}

TEST_CASE("agent with processes: a preStop httpGet hook reaches the container before SIGTERM",
          "[integration][prober]") {
  AgentEnv env;
  testing::TempDir out("nodeagent-prestop-out");
  const int port = testing::unusedLoopbackPort();
  // http.server logs each request to stderr, here a file that outlives the pod.
  auto pod =
      yamlPod("u-prestop", R"(    command: ["/bin/sh", "-c", "exec python3 -m http.server )" +
                               std::to_string(port) +
                               R"( --bind 127.0.0.1 2>\"$NODEAGENT_VOLUME_OUT/requests\""]
    ports: [{name: http, containerPort: )" +
                               std::to_string(port) + R"(}]
    readinessProbe:
      tcpSocket: {port: http}
      periodSeconds: 1
    lifecycle:
      preStop:
        httpGet: {path: /drain-now, port: http}
  volumes:
  - name: out
    hostPath: {path: ")" + out.path().string() +
                               R"("}
)");
  env.add(pod);
  REQUIRE(testing::eventually([&] { return env.condition("u-prestop", "Ready") == "True"; }, 20s));
  env.remove(pod);
  REQUIRE(testing::eventually([&] { return env.runningContainers() == 0; }, 20s));
  // The server can only have answered while it still ran, i.e. before the SIGTERM that ended it.
  const auto requests = testing::readFile(out.path() / "requests");
  INFO(requests);
  CHECK(requests.find("\"GET /drain-now HTTP/1.1\" 404") != std::string::npos);
  CHECK_FALSE(env.hasEvent("FailedPreStopHook"));
}

TEST_CASE("agent with processes: a failing preStop httpGet hook is a FailedPreStopHook event",
          "[integration][prober]") {
  AgentEnv env;
  const int port = testing::refusedLoopbackPort();
  auto pod = yamlPod("u-badstop", R"(    command: ["sleep", "1000"]
    lifecycle:
      preStop:
        httpGet: {path: /quit, port: )" +
                                      std::to_string(port) + R"(}
)");
  env.add(pod);
  REQUIRE(testing::eventually([&] {
    auto c = env.container("u-badstop");
    return c && c->state.running;
  }));
  env.remove(pod);
  REQUIRE(testing::eventually([&] { return env.runningContainers() == 0; }, 20s));
  CHECK(
      env.hasEvent("FailedPreStopHook: Http lifecycle hook (/quit) for Container \"c\" in Pod "
                   "\"p-u-badstop_default(u-badstop)\" failed - error: "));
}

TEST_CASE("agent with processes: the termination message file and FallbackToLogsOnError",
          "[integration][prober]") {
  AgentEnv env;
  env.add(yamlPod(
      "u-msg",
      R"(    command: ["/bin/sh", "-c", "echo to the log; printf bye > \"$NODEAGENT_TERMINATION_MESSAGE_PATH\"; exit 1"]
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: FallbackToLogsOnError
)",
      "Never"));
  env.add(yamlPod(
      "u-logs",
      R"(    command: ["/bin/sh", "-c", "for i in $(seq 1 100); do echo line $i; done; echo oops >&2; exit 2"]
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: FallbackToLogsOnError
)",
      "Never"));
  env.add(yamlPod("u-ok", R"(    command: ["/bin/sh", "-c", "echo only the log; exit 0"]
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: FallbackToLogsOnError
)",
                  "Never"));
  auto terminated = [&](const std::string& uid) {
    auto c = env.container(uid);
    return c && c->state.terminated;
  };
  REQUIRE(testing::eventually(
      [&] { return terminated("u-msg") && terminated("u-logs") && terminated("u-ok"); }, 20s));
  CHECK(env.container("u-msg")->state.terminated->message == "bye");
  CHECK(env.container("u-ok")->state.terminated->message.empty());  // exit 0: no fallback
  const auto logs = env.container("u-logs")->state.terminated->message;
  CHECK(logs.size() <= runtime::kMaxTerminationMessageLogLength);
  CHECK(logs.find("line 100\noops\n") != std::string::npos);
  CHECK(logs.find("line 21\n") == std::string::npos);  // beyond the last 80 lines
}
