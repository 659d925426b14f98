// kubectl attach and kubectl exec with a terminal through the apiserver to the kubelet API: a
// container's own stdin and output, and a TTY session (driven through tmux) whose size follows
// the terminal's.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "test/support/kubectl_transport.h"
#include "test/support/kubelet_env.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

// `cat` with a stdin of its own that closes after the first attach's input ends (stdinOnce),
// and a shell for terminal sessions.
constexpr char kAttachPod[] = R"(apiVersion: v1
kind: Pod
metadata: {name: talk, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: echo
    image: busybox
    stdin: true
    stdinOnce: true
    command: ["sh", "-c", "echo ready; cat; echo bye"]
  - name: shell
    image: busybox
    command: ["sh", "-c", "exec sleep 3600"]
)";

// A tmux server of the test's own (its own socket), killed at the end.
struct Tmux {
  testing::KubeletEnv& env;
  std::string socket;
  ~Tmux() { run({"kill-server"}); }
  testing::RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), {"tmux", "-S", socket});
    return testing::runCommand(args, env.dir, 10s);
  }
  std::string screen() { return run({"capture-pane", "-p", "-t", "s"}).out; }
  bool shows(const std::string& text) {
    return testing::eventually([&] { return screen().find(text) != std::string::npos; }, 30s);
  }
};

}  // namespace

TEST_CASE(
    "kubectl attach sends stdin to a container's own stdin and shows its output, over WebSocket "
    "and over SPDY",
    "[e2e][kubelet-api]") {
  const auto transport =
      GENERATE(testing::KubectlTransport::kWebSocket, testing::KubectlTransport::kSpdy);
  INFO("kubectl over " << testing::transportName(transport));
  testing::KubeletEnv env;
  const std::string kubectl = testing::kubectlCommandOver(env, transport);
  testing::writeFile(env.manifests / "talk.yaml", kAttachPod);
  env.startAgent();
  const std::string pod = testing::KubeletEnv::mirrorName("talk");
  if (!env.logsShow(pod, "echo", "ready")) FAIL(env.diagnostics());

  // stdinOnce: the end of kubectl's input ends cat's, the container exits and so does kubectl.
  auto attached =
      env.shell("printf 'hello\\nworld\\n' | " + kubectl + " attach -i " + pod + " -c echo", 60s);
  INFO(attached.err);
  CHECK(attached.exit_code == 0);
  CHECK_THAT(attached.out, Catch::Contains("hello\nworld\n"));
  CHECK(env.logsShow(pod, "echo", "bye"));

  // The container without stdin: kubectl attach -i is refused.
  auto refused = env.shell("echo x | " + kubectl + " attach -i " + pod + " -c shell", 60s);
  CHECK(refused.exit_code != 0);
}

TEST_CASE(
    "kubectl exec -it gives a terminal whose size follows the client's (tmux), over WebSocket "
    "and over SPDY",
    "[e2e][kubelet-api]") {
  const auto transport =
      GENERATE(testing::KubectlTransport::kWebSocket, testing::KubectlTransport::kSpdy);
  INFO("kubectl over " << testing::transportName(transport));
  testing::KubeletEnv env;
  testing::writeFile(env.manifests / "talk.yaml", kAttachPod);
  env.startAgent();
  const std::string pod = testing::KubeletEnv::mirrorName("talk");
  if (!env.logsShow(pod, "echo", "ready")) FAIL(env.diagnostics());

  Tmux tmux{env, (env.dir / "tmux.sock").string()};
  const std::string command =
      testing::kubectlCommandOver(env, transport) + " exec -it " + pod + " -c shell -- sh";
  REQUIRE(tmux.run({"new-session", "-d", "-s", "s", "-x", "100", "-y", "30", command}).exit_code ==
          0);
  tmux.run({"send-keys", "-t", "s", "tty; stty size", "Enter"});
  INFO(tmux.screen());
  CHECK(tmux.shows("/dev/pts/"));
  CHECK(tmux.shows("30 100"));

  REQUIRE(tmux.run({"resize-window", "-t", "s", "-x", "120", "-y", "40"}).exit_code == 0);
  tmux.run({"send-keys", "-t", "s", "clear; stty size", "Enter"});
  CHECK(tmux.shows("40 120"));

  tmux.run({"send-keys", "-t", "s", "exit 4", "Enter"});
  CHECK(testing::eventually(
      [&] {
        return tmux.run({"has-session", "-t", "s"}).exit_code != 0;
      },
      30s));
}

TEST_CASE(
    "an agent stopped while logs are followed and an exec session is open exits promptly, "
    "and its clients see the end",
    "[e2e][kubelet-api]") {
  testing::KubeletEnv env;
  testing::writeFile(env.manifests / "talk.yaml", kAttachPod);
  env.startAgent();
  const std::string pod = testing::KubeletEnv::mirrorName("talk");
  if (!env.logsShow(pod, "echo", "ready")) FAIL(env.diagnostics());

  testing::ChildProcess follow(env.kubectlArgv({"logs", "-f", pod, "-c", "echo"}),
                               env.dir / "follow.out", env.dir / "follow.err");
  const std::string marker = "exec-session-" + std::to_string(::getpid());
  testing::ChildProcess exec(
      env.kubectlArgv({"exec", pod, "-c", "shell", "--", "sh", "-c", "sleep 600; : " + marker}),
      env.dir / "exec.out", env.dir / "exec.err");
  REQUIRE(
      testing::eventually([&] { return follow.out().find("ready") != std::string::npos; }, 30s));
  // The exec'd command runs (its command line, not kubectl's, starts with sh).
  const std::string command = "^sh -c sleep 600; : " + marker;
  REQUIRE(testing::eventually(
      [&] {
        return testing::runCommand({"pgrep", "-f", command}, env.dir, 5s).exit_code == 0;
      },
      30s));

  env.agent->signal(SIGTERM);
  CHECK(env.agent->wait(15s) == 0);
  CHECK(follow.wait(30s).has_value());
  CHECK(exec.wait(30s).has_value());
  // The exec'd command went with its session.
  CHECK(testing::eventually(
      [&] {
        return testing::runCommand({"pgrep", "-f", command}, env.dir, 5s).exit_code != 0;
      },
      30s));
}
