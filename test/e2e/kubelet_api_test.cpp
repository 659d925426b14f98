// The kubelet API (port 10250) end to end: the nodeagent binary joined to the in-process test
// apiserver over TLS with tokens, the apiserver reaching the agent with a client certificate of
// its own, and the real kubectl running logs, exec and cp through it; direct requests to the
// port authenticated and authorized as kubelet does.
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/printable.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/kubectl_transport.h"
#include "test/support/kubelet_env.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"
#include "test/support/ws_client.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::KubeletEnv;

namespace {

constexpr const char* kNode = KubeletEnv::kNode;

// Two containers: main counts lines (and reads stdin when attached), side says hello once.
constexpr char kWebPod[] = R"(apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done"]
  - name: side
    image: busybox
    command: ["sh", "-c", "echo side-hello; echo side-err >&2; exec sleep 3600"]
)";

// Exits at once, so that it has a previous (terminated) instance.
constexpr char kCrashPod[] = R"(apiVersion: v1
kind: Pod
metadata: {name: crash, namespace: default}
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "echo run-$$; exit 1"]
)";

std::string mirrorName(const std::string& pod) { return KubeletEnv::mirrorName(pod); }

}  // namespace

TEST_CASE(
    "kubectl logs reads a container's log through the apiserver: plain, tail, timestamps, "
    "since, a chosen container, follow and previous",
    "[e2e][kubelet-api]") {
  KubeletEnv env;
  testing::writeFile(env.manifests / "web.yaml", kWebPod);
  testing::writeFile(env.manifests / "crash.yaml", kCrashPod);
  env.startAgent();
  const std::string web = mirrorName("web");
  if (!env.logsShow(web, "main", "line 3")) FAIL(env.diagnostics());

  // Node status reports the kubelet port.
  auto node = env.kubectl({"get", "node", kNode, "-o", "json"});
  REQUIRE(node.exit_code == 0);
  CHECK(json::parse(node.out)["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == env.port);

  auto tail = env.kubectl({"logs", web, "-c", "main", "--tail=2"});
  REQUIRE(tail.exit_code == 0);
  CHECK(std::count(tail.out.begin(), tail.out.end(), '\n') == 2);

  auto stamped = env.kubectl({"logs", web, "-c", "main", "--tail=1", "--timestamps"});
  REQUIRE(stamped.exit_code == 0);
  CHECK_THAT(stamped.out, Catch::Matches("20[0-9-]+T[0-9:.]+Z line [0-9]+\n"));

  REQUIRE(env.logsShow(web, "main", "line 15"));  // three seconds of lines
  auto since = env.kubectl({"logs", web, "-c", "main", "--since=1s"});
  auto all = env.kubectl({"logs", web, "-c", "main"});
  REQUIRE(since.exit_code == 0);
  CHECK(since.out.size() < all.out.size());

  auto side = env.kubectl({"logs", web, "-c", "side"});
  REQUIRE(side.exit_code == 0);
  CHECK(side.out == "side-hello\nside-err\n");

  // Without -c kubectl picks the first container and says so.
  auto defaulted = env.kubectl({"logs", web, "--tail=1"});
  CHECK(defaulted.exit_code == 0);
  CHECK_THAT(defaulted.out, Catch::StartsWith("line "));

  // -f: lines keep coming while the container writes.
  testing::ChildProcess follow({"kubectl", "--kubeconfig=" + env.kubeconfig.string(), "logs", "-f",
                                web, "-c", "main", "--tail=1"},
                               env.dir / "follow.out", env.dir / "follow.err");
  CHECK(testing::eventually(
      [&] {
        const std::string out = follow.out();
        return std::count(out.begin(), out.end(), '\n') >= 5;
      },
      20s));
  CHECK(follow.running());
  follow.signal(SIGINT);

  // --previous after a crash: the earlier instance's output.
  const std::string crash = mirrorName("crash");
  REQUIRE(testing::eventually(
      [&] {
        auto r = env.kubectl({"logs", crash, "--previous"}, 10s);
        return r.exit_code == 0 && r.out.rfind("run-", 0) == 0;
      },
      40s));
  auto no_previous = env.kubectl({"logs", web, "-c", "side", "--previous"});
  CHECK(no_previous.exit_code != 0);
  CHECK_THAT(no_previous.err, Catch::Contains("previous terminated container \"side\""));
}

TEST_CASE(
    "kubectl exec runs a command in a container through the apiserver: output, exit code, "
    "stdin, and kubectl cp copies both ways, over WebSocket and over SPDY",
    "[e2e][kubelet-api]") {
  const auto transport =
      GENERATE(testing::KubectlTransport::kWebSocket, testing::KubectlTransport::kSpdy);
  INFO("kubectl over " << testing::transportName(transport));
  KubeletEnv env;
  auto kubectl = [&](const std::vector<std::string>& args) {
    return testing::kubectlOver(env, transport, args);
  };
  testing::writeFile(env.manifests / "web.yaml", kWebPod);
  env.startAgent();
  const std::string web = mirrorName("web");
  if (!env.logsShow(web, "side", "side-hello")) FAIL(env.diagnostics());

  auto exec = kubectl(
      {"exec", web, "-c", "side", "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3"});
  INFO(exec.err);
  CHECK(exec.exit_code == 3);
  CHECK(exec.out == "to-out\n");
  CHECK_THAT(exec.err, Catch::Contains("to-err"));

  auto ok = kubectl({"exec", web, "-c", "side", "--", "true"});
  CHECK(ok.exit_code == 0);

  auto piped = env.shell("printf 'abc\\ndef\\n' | " + testing::kubectlCommandOver(env, transport) +
                         " exec -i " + web + " -c side -- sh -c 'tr a-z A-Z'");
  INFO(piped.err);
  CHECK(piped.exit_code == 0);
  CHECK(piped.out == "ABC\nDEF\n");

  auto missing = kubectl({"exec", web, "-c", "nope", "--", "true"});
  CHECK(missing.exit_code != 0);

  // cp: into the container's filesystem (the process runtime's is the host's) and back.
  testing::writeFile(env.dir / "up.txt", "payload-123\n");
  const std::string remote = (env.dir / "remote.txt").string();
  auto up = kubectl({"cp", (env.dir / "up.txt").string(), web + ":" + remote, "-c", "side"});
  INFO(up.err);
  CHECK(up.exit_code == 0);
  CHECK(testing::readFile(remote) == "payload-123\n");
  auto down = kubectl({"cp", web + ":" + remote, (env.dir / "down.txt").string(), "-c", "side"});
  INFO(down.err);
  CHECK(down.exit_code == 0);
  CHECK(testing::readFile(env.dir / "down.txt") == "payload-123\n");
}

TEST_CASE(
    "the kubelet API refuses a request without credentials (401) and a user without rights "
    "(403), and serves a verified client certificate and a reviewed token",
    "[e2e][kubelet-api]") {
  KubeletEnv env;
  testing::writeFile(env.manifests / "web.yaml", kWebPod);
  env.startAgent();
  REQUIRE(testing::eventually([&] { return env.direct()->Get("/healthz") != nullptr; }, 20s));

  auto anonymous = env.direct()->Get("/pods");
  REQUIRE(anonymous);
  CHECK(anonymous->status == 401);
  CHECK(json::parse(anonymous->body)["kind"] == "Status");

  httplib::Headers nobody{{"Authorization", "Bearer nobody-token"}};
  auto forbidden = env.direct()->Get("/pods", nobody);
  REQUIRE(forbidden);
  CHECK(forbidden->status == 403);
  CHECK_THAT(forbidden->body, Catch::Contains("user=nobody, verb=get, resource=nodes, "
                                              "subresource=proxy"));

  httplib::Headers admin{{"Authorization", "Bearer admin-token"}};
  auto with_token = env.direct()->Get("/pods", admin);
  REQUIRE(with_token);
  CHECK(with_token->status == 200);

  auto ops = env.pki.issueClient("ops", {"system:masters"});
  auto with_cert = env.direct(&ops)->Get("/runningpods/");
  REQUIRE(with_cert);
  CHECK(with_cert->status == 200);
  CHECK(json::parse(with_cert->body)["kind"] == "PodList");

  // Only kubelet's methods reach a handler: the verb the authorizer saw follows the method.
  auto deleted = env.direct(&ops)->Delete("/containerLogs/default/" + mirrorName("web") + "/side");
  REQUIRE(deleted);
  CHECK(deleted->status == 405);
  CHECK(json::parse(deleted->body)["reason"] == "MethodNotAllowed");
  auto put = env.direct(&ops)->Put("/exec/default/" + mirrorName("web") + "/side?command=true", "",
                                   "text/plain");
  REQUIRE(put);
  CHECK(put->status == 405);

  // A certificate of another CA is no user.
  testing::TestPki other(env.dir / "other", "other-ca");
  auto forged = other.issueClient("ops", {"system:masters"});
  auto refused = env.direct(&forged)->Get("/pods");
  REQUIRE(refused);
  CHECK(refused->status == 401);

  // An exec WebSocket straight to the port, with the v5 protocol.
  testing::WsClient ws;
  testing::WsClientOptions wo;
  wo.client_cert = ops.cert_file;
  wo.client_key = ops.key_file;
  wo.protocols = {"v5.channel.k8s.io"};
  REQUIRE(testing::eventually(
      [&] {
        testing::WsClient probe;
        return probe.connect(
            env.port, "/exec/default/" + mirrorName("web") + "/side?command=true&output=1", wo);
      },
      30s));
  REQUIRE(ws.connect(env.port,
                     "/exec/default/" + mirrorName("web") +
                         "/side?command=sh&command=-c&command=echo+hi%3B+exit+7&output=1&error=1",
                     wo));
  CHECK(ws.protocol() == "v5.channel.k8s.io");
  auto out = testing::readChannels(ws);
  CHECK(out.stdout_data == "hi\n");
  CHECK_THAT(out.error, Catch::Contains("\"reason\":\"NonZeroExitCode\""));
  CHECK_THAT(out.error, Catch::Contains("\"message\":\"7\""));
}

TEST_CASE(
    "50 followed logs and 20 exec sessions at once all complete and leave no descriptors "
    "or threads behind in the agent",
    "[e2e][kubelet-api][slow]") {
  KubeletEnv env;
  testing::writeFile(env.manifests / "web.yaml", kWebPod);
  env.startAgent();
  const std::string web = mirrorName("web");
  if (!env.logsShow(web, "side", "side-hello")) FAIL(env.diagnostics());
  const std::string proc = "/proc/" + std::to_string(env.agent->pid());
  // Settle: the first requests open the apiserver connections the agent keeps.
  REQUIRE(env.kubectl({"exec", web, "-c", "side", "--", "true"}).exit_code == 0);
  const int fds_before = testing::countEntries(proc + "/fd");
  const int threads_before = testing::countEntries(proc + "/task");

  std::vector<std::unique_ptr<testing::ChildProcess>> follows;
  for (int i = 0; i < 50; ++i) {
    follows.push_back(std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{"kubectl", "--kubeconfig=" + env.kubeconfig.string(), "logs", "-f",
                                 web, "-c", "main", "--tail=1"},
        env.dir / ("f" + std::to_string(i) + ".out"),
        env.dir / ("f" + std::to_string(i) + ".err")));
  }
  std::vector<std::thread> execs;
  std::atomic<int> exec_ok{0};
  std::mutex failures_mu;
  std::string failures;  // what each failed exec printed, for the report
  for (int i = 0; i < 20; ++i) {
    execs.emplace_back([&, i] {
      auto r = env.kubectl(
          {"exec", web, "-c", "side", "--", "sh", "-c", "echo " + std::to_string(i)}, 60s);
      if (r.exit_code == 0 && r.out == std::to_string(i) + "\n") {
        ++exec_ok;
        return;
      }
      std::lock_guard lock(failures_mu);
      const std::string exit = r.exit_code ? std::to_string(*r.exit_code) : "killed at 60 s";
      failures += "exec " + std::to_string(i) + ": exit " + exit + " out=" + base::goQuote(r.out) +
                  " err=" + base::goQuote(r.err) + "\n";
    });
  }
  for (auto& t : execs) t.join();
  INFO(failures);
  CHECK(exec_ok == 20);
  CHECK(testing::eventually(
      [&] {
        for (auto& f : follows) {
          const std::string out = f->out();
          if (std::count(out.begin(), out.end(), '\n') < 3) return false;
        }
        return true;
      },
      60s));
  for (auto& f : follows) f->signal(SIGKILL);
  follows.clear();
  // Closed streams are noticed within the follow check period; descriptors and threads go back.
  CHECK(testing::eventually(
      [&] {
        return testing::countEntries(proc + "/fd") <= fds_before + 2 &&
               testing::countEntries(proc + "/task") <= threads_before;
      },
      30s));
  INFO("fds before " << fds_before << " after " << testing::countEntries(proc + "/fd")
                     << ", threads before " << threads_before << " after "
                     << testing::countEntries(proc + "/task"));
  CHECK(env.agent->running());
}
