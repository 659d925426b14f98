// The kubelet API in front of the CRI runtime: the agent joined to the test apiserver runs its
// static pods in a containerd of the test's own, and the real kubectl's logs, exec (output,
// exit code, stdin; over WebSocket and over SPDY) and port-forward reach the containers through
// containerd's streaming server, to which the agent hands the client's connection over
// (kubelet's proxyStream); kubectl attach reaches a container's own stdin and output the same way.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "test/integration/apiserver_test_util.h"
#include "test/support/containerd.h"
#include "test/support/integration_env.h"
#include "test/support/kubectl_transport.h"
#include "test/support/kubelet_env.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using testing::KubeletEnv;

namespace {

// A host-network pod of the test busybox image: `main` says hello and waits; `files` serves a
// file over HTTP on `port` (busybox httpd) for port forwarding.
std::string criPod(int port) {
  return "apiVersion: v1\nkind: Pod\nmetadata: {name: box, namespace: default}\nspec:\n"
         "  hostNetwork: true\n  containers:\n"
         "  - name: main\n    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"echo cri-hello; trap 'exit 0' TERM; sleep 3600 & "
         "wait\"]\n"
         "  - name: files\n    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
         "    command: [\"sh\", \"-c\", \"mkdir -p /www && echo through-containerd > "
         "/www/hello.txt && exec httpd -f -p 127.0.0.1:" +
         std::to_string(port) +
         " -h /www\"]\n    ports:\n    - containerPort: " + std::to_string(port) + "\n";
}

struct CriKubelet {
  CriKubelet() {
    containerd.importTestImages();
    testing::writeFile(env.manifests / "box.yaml", criPod(port));
    env.startAgent(containerd.agentFlags());
    if (!env.logsShow(pod, "main", "cri-hello")) FAIL(env.diagnostics());
  }

  testing::TestContainerd containerd;
  KubeletEnv env{"nodeagent-e2e-cri-kubelet"};
  const int port = testing::unusedLoopbackPort();
  const std::string pod = KubeletEnv::mirrorName("box");
};

}  // namespace

TEST_CASE(
    "cri: kubectl logs and exec reach containerd's containers through the agent, over "
    "WebSocket and over SPDY",
    "[e2e][cri][kubelet-api]") {
  testing::skipUnlessContainerdCanRun();
  CriKubelet s;
  for (const auto transport :
       {testing::KubectlTransport::kWebSocket, testing::KubectlTransport::kSpdy}) {
    INFO("kubectl over " << testing::transportName(transport));
    auto kubectl = [&](const std::vector<std::string>& args) {
      return testing::kubectlOver(s.env, transport, args);
    };
    auto exec = kubectl(
        {"exec", s.pod, "-c", "main", "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3"});
    INFO(exec.err);
    CHECK(exec.exit_code == 3);
    CHECK(exec.out == "to-out\n");
    CHECK_THAT(exec.err, Catch::Contains("to-err"));

    // The command runs in the container: the image's files, not the node's.
    auto inside = kubectl({"exec", s.pod, "-c", "main", "--", "sh", "-c",
                           "test -x /bin/busybox && ! test -e " + s.env.dir.path().string()});
    INFO(inside.err);
    CHECK(inside.exit_code == 0);

    auto piped =
        s.env.shell("printf 'abc\\ndef\\n' | " + testing::kubectlCommandOver(s.env, transport) +
                    " exec -i " + s.pod + " -c main -- tr a-z A-Z");
    INFO(piped.err);
    CHECK(piped.exit_code == 0);
    CHECK(piped.out == "ABC\nDEF\n");
  }
  auto logs = s.env.kubectl({"logs", s.pod, "-c", "main"});
  CHECK(logs.out == "cri-hello\n");
}

TEST_CASE("cri: kubectl port-forward reaches a containerd container's port through the agent",
          "[e2e][cri][kubelet-api]") {
  testing::skipUnlessContainerdCanRun();
  CriKubelet s;
  const int local = testing::unusedLoopbackPort();
  std::vector<std::string> argv = {"env", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"};
  for (auto& a : s.env.kubectlArgv({"port-forward", "pod/" + s.pod,
                                    std::to_string(local) + ":" + std::to_string(s.port)})) {
    argv.push_back(a);
  }
  testing::ChildProcess forward(argv, s.env.dir / "pf.out", s.env.dir / "pf.err");
  REQUIRE(testing::eventually(
      [&] { return forward.out().find("Forwarding from") != std::string::npos; }, 30s));
  std::string body;
  const bool fetched = testing::eventually(
      [&] {
        auto r = testing::runCommand({"curl", "-sS", "--max-time", "10",
                                      "http://127.0.0.1:" + std::to_string(local) + "/hello.txt"},
                                     s.env.dir, 15s);
        body = r.out;
        return r.exit_code == 0;
      },
      30s);
  INFO("kubectl: " << forward.out() << forward.err());
  CHECK(fetched);
  CHECK(body == "through-containerd\n");
}

TEST_CASE(
    "cri: kubectl attach sends stdin to a containerd container's own stdin and shows its output, "
    "over WebSocket and over SPDY",
    "[e2e][cri][kubelet-api]") {
  testing::skipUnlessContainerdCanRun();
  CriKubelet s;
  for (const auto transport :
       {testing::KubectlTransport::kWebSocket, testing::KubectlTransport::kSpdy}) {
    const std::string name =
        transport == testing::KubectlTransport::kSpdy ? "talk-spdy" : "talk-websocket";
    INFO("kubectl over " << testing::transportName(transport));
    // stdinOnce: the end of the first attach's input ends cat's, and the container with it.
    testing::writeFile(
        s.env.manifests / (name + ".yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name +
            ", namespace: default}\nspec:\n  hostNetwork: true\n  restartPolicy: Never\n"
            "  containers:\n  - name: echo\n    image: nodeagent.test/busybox:1\n"
            "    imagePullPolicy: Never\n    stdin: true\n    stdinOnce: true\n"
            "    command: [\"sh\", \"-c\", \"echo ready; cat; echo bye\"]\n");
    const std::string pod = KubeletEnv::mirrorName(name);
    if (!s.env.logsShow(pod, "echo", "ready")) FAIL(s.env.diagnostics());
    auto attached =
        s.env.shell("printf 'hello\\nworld\\n' | " + testing::kubectlCommandOver(s.env, transport) +
                        " attach -i " + pod + " -c echo",
                    60s);
    INFO(attached.err);
    CHECK(attached.exit_code == 0);
    CHECK_THAT(attached.out, Catch::Contains("hello\nworld\n"));
    CHECK(s.env.logsShow(pod, "echo", "bye"));
  }
}
