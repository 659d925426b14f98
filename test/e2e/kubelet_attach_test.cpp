// kubectl attach and kubectl exec with a terminal through the apiserver to the kubelet API: a
// container's own stdin and output, and a TTY session (driven through tmux) whose size follows
// the terminal's.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

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

TEST_CASE("kubectl attach sends stdin to a container's own stdin and shows its output",
          "[e2e][kubelet-api]") {
  testing::KubeletEnv env;
  testing::writeFile(env.manifests / "talk.yaml", kAttachPod);
  env.startAgent();
  const std::string pod = testing::KubeletEnv::mirrorName("talk");
  if (!env.logsShow(pod, "echo", "ready")) FAIL(env.diagnostics());

  // stdinOnce: the end of kubectl's input ends cat's, the container exits and so does kubectl.
  auto attached = env.shell(
      "printf 'hello\\nworld\\n' | " + env.kubectlCommand() + " attach -i " + pod + " -c echo",
      60s);
  INFO(attached.err);
  CHECK(attached.exit_code == 0);
  CHECK_THAT(attached.out, Catch::Contains("hello\nworld\n"));
  CHECK(env.logsShow(pod, "echo", "bye"));

  // The container without stdin: kubectl attach -i is refused.
  auto refused =
      env.shell("echo x | " + env.kubectlCommand() + " attach -i " + pod + " -c shell", 60s);
  CHECK(refused.exit_code != 0);
}

TEST_CASE("kubectl exec -it gives a terminal whose size follows the client's (tmux)",
          "[e2e][kubelet-api]") {
  testing::KubeletEnv env;
  testing::writeFile(env.manifests / "talk.yaml", kAttachPod);
  env.startAgent();
  const std::string pod = testing::KubeletEnv::mirrorName("talk");
  if (!env.logsShow(pod, "echo", "ready")) FAIL(env.diagnostics());

  Tmux tmux{env, (env.dir / "tmux.sock").string()};
  const std::string command = env.kubectlCommand() + " exec -it " + pod + " -c shell -- sh";
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
