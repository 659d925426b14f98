// The daemon on the CRI runtime joined to the test apiserver: a pod created with kubectl runs in a
// containerd container with a network of its own, and kubectl shows what it shows of a kubelet's
// pod: Running, the pod's IP, containerd:// container IDs and the image and its ID; the Node lists
// containerd's images; kubectl delete's grace period holds for a container that ignores SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>

#include "test/e2e/apiserver_env.h"
#include "test/support/containerd.h"

namespace nodeagent::apiserver_e2e {
namespace {

constexpr char kImage[] = "nodeagent.test/busybox:1";

// A pod bound to the node whose container runs `script` in the busybox image's shell, with
// `marker` as the shell's $0 (in its command line) when given.
std::string apiPodYaml(const std::string& name, int grace_seconds = 1,
                       const std::string& script = "trap 'exit 0' TERM; sleep 3600 & wait",
                       const std::string& marker = "") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  namespace: default\nspec:\n  nodeName: " + std::string(kNode) +
         "\n  terminationGracePeriodSeconds: " + std::to_string(grace_seconds) +
         "\n  containers:\n  - name: main\n    image: " + kImage +
         "\n    imagePullPolicy: IfNotPresent\n    command: [\"/bin/sh\", \"-c\", \"" + script +
         "\"" + (marker.empty() ? "" : ", \"" + marker + "\"") + "]\n";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("cri: an API pod runs in containerd and kubectl shows Running, its IP, IDs and image ID",
          "[e2e][apiserver][cri]") {
  testing::skipUnlessCniCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Env env;
  env.startCriAgent(containerd.endpoint());
  testing::writeFile(env.dir / "api-cri.yaml", apiPodYaml("api-cri"));
  auto created = env.kubectl({"create", "-f", (env.dir / "api-cri.yaml").string()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);

  std::optional<json> pod;
  const bool running = testing::eventually(
      [&] {
        pod = env.pod("api-cri");
        return pod && (*pod)["status"].value("phase", "") == "Running" &&
               condition(*pod, "Ready") == "True";
      },
      60s);
  INFO(env.diagnostics());
  REQUIRE(running);
  const std::string ip = (*pod)["status"].value("podIP", "");
  CHECK(containerd.inPodSubnet(ip));

  // kubectl get -o wide: the status, the pod's IP and the node.
  auto wide = env.kubectl({"get", "pod", "api-cri", "-n", "default", "-o", "wide"});
  INFO(wide.out << wide.err);
  REQUIRE(wide.exit_code == 0);
  CHECK(contains(wide.out, "Running"));
  CHECK(contains(wide.out, "1/1"));
  CHECK(contains(wide.out, ip));
  CHECK(contains(wide.out, kNode));

  // kubectl get -o jsonpath: the container's ID is containerd's, its image the spec's, its image
  // ID the image's (its config's digest).
  auto fields = env.kubectl(
      {"get", "pod", "api-cri", "-n", "default", "-o",
       "jsonpath={.status.phase} {.status.podIP} {.status.containerStatuses[0].containerID} "
       "{.status.containerStatuses[0].image} {.status.containerStatuses[0].imageID}"});
  INFO(fields.out << fields.err);
  REQUIRE(fields.exit_code == 0);
  std::istringstream words(fields.out);
  std::string phase, pod_ip, container_id, image, image_id;
  words >> phase >> pod_ip >> container_id >> image >> image_id;
  CHECK(phase == "Running");
  CHECK(pod_ip == ip);
  CHECK(container_id.starts_with("containerd://"));
  CHECK(container_id.size() == std::string("containerd://").size() + 64);
  CHECK(image == kImage);
  CHECK(image_id.starts_with("sha256:"));
  CHECK(image_id.size() == std::string("sha256:").size() + 64);

  // The Node lists the images containerd holds (kubelet's status.images), with their sizes.
  std::string node_images;
  const bool listed = testing::eventually(
      [&] {
        auto got = env.kubectl({"get", "node", kNode, "-o",
                                "jsonpath={range .status.images[*]}{.names} {.sizeBytes}{\"\\n\"}"
                                "{end}"});
        node_images = got.out;
        return got.exit_code == 0 && contains(node_images, kImage) &&
               contains(node_images, "nodeagent.test/pause:1");
      },
      60s, 500ms);
  INFO(node_images);
  CHECK(listed);

  auto del = env.kubectl({"delete", "pod", "api-cri", "-n", "default"}, 60s);
  INFO(del.err);
  CHECK(del.exit_code == 0);
}

TEST_CASE(
    "cri: a runtime that stops answering turns the Node NotReady with kubelet's message, and "
    "Ready again once it answers",
    "[e2e][apiserver][cri]") {
  testing::skipUnlessCniCanRun();  // NetworkReady: without it the Node is never Ready
  testing::TestContainerd containerd;
  Env env;
  env.startCriAgent(containerd.endpoint(), {"--runtime-request-timeout=2s"});
  std::string ready, message;
  auto readyIs = [&](const std::string& want) {
    auto node = env.kubectlJson({"get", "node", kNode});
    if (!node) return false;
    for (const auto& c : (*node)["status"]["conditions"]) {
      if (c.value("type", "") != "Ready") continue;
      ready = c.value("status", "");
      message = c.value("message", "");
    }
    return ready == want;
  };
  REQUIRE(testing::eventually([&] { return readyIs("True"); }, 60s));

  // containerd frozen (SIGSTOP): its socket accepts, nothing answers; thawed at the end even when
  // a check fails.
  REQUIRE(::kill(containerd.pid(), SIGSTOP) == 0);
  struct Thaw {
    pid_t pid;
    ~Thaw() { ::kill(pid, SIGCONT); }
  } thaw{containerd.pid()};
  const bool not_ready = testing::eventually([&] { return readyIs("False"); }, 90s, 500ms);
  INFO("Ready " << ready << ": " << message << "\n" << env.diagnostics());
  REQUIRE(not_ready);
  CHECK(contains(message, "container runtime is down"));

  REQUIRE(::kill(containerd.pid(), SIGCONT) == 0);
  const bool ready_again = testing::eventually([&] { return readyIs("True"); }, 60s, 500ms);
  INFO("Ready " << ready << ": " << message);
  CHECK(ready_again);
}

TEST_CASE(
    "cri: kubectl delete --grace-period=3 kills a container that ignores SIGTERM after those 3 s, "
    "not its spec's 60, while one that ends on SIGTERM goes at once",
    "[e2e][apiserver][cri]") {
  testing::skipUnlessCniCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Env env;
  env.startCriAgent(containerd.endpoint());
  const std::string tag = std::to_string(::getpid());
  testing::writeFile(
      env.dir / "grace.yaml",
      apiPodYaml("deaf", 60, "trap '' TERM; while :; do sleep 1; done", "deaf-" + tag) + "---\n" +
          apiPodYaml("polite", 60, "trap 'exit 0' TERM; sleep 3600 & wait", "polite-" + tag));
  auto created = env.kubectl({"create", "-f", (env.dir / "grace.yaml").string()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  auto running = [&](const std::string& name) {
    for (const auto& [pid, cmd] : containerd.containerProcesses()) {
      if (contains(cmd, name + "-" + tag)) return true;
    }
    return false;
  };
  const bool both = testing::eventually(
      [&] {
        for (const char* name : {"deaf", "polite"}) {
          auto pod = env.pod(name);
          if (!pod || (*pod)["status"].value("phase", "") != "Running") return false;
        }
        return running("deaf") && running("polite");
      },
      60s);
  INFO(env.diagnostics());
  REQUIRE(both);

  using Clock = std::chrono::steady_clock;
  const auto deleted = Clock::now();
  auto del = env.kubectl(
      {"delete", "pod", "deaf", "polite", "-n", "default", "--grace-period=3", "--wait=false"});
  INFO(del.err);
  REQUIRE(del.exit_code == 0);
  std::optional<Clock::duration> polite_gone, deaf_gone;
  const bool gone = testing::eventually(
      [&] {
        if (!polite_gone && !running("polite")) polite_gone = Clock::now() - deleted;
        if (!deaf_gone && !running("deaf")) deaf_gone = Clock::now() - deleted;
        return polite_gone && deaf_gone;
      },
      50s, 50ms);
  INFO(env.diagnostics());
  REQUIRE(gone);
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };
  INFO("polite gone after " << ms(*polite_gone) << " ms, deaf after " << ms(*deaf_gone) << " ms");
  // The deaf one lives out the delete's grace period (SIGKILL then), not the spec's 60 s; the
  // polite one is not held for it.
  CHECK(ms(*deaf_gone) >= 2900);
  CHECK(ms(*deaf_gone) < 20000);
  CHECK(*polite_gone < *deaf_gone);
  // Both leave the apiserver once the agent saw them end (kubelet's status manager deletes them).
  CHECK(testing::eventually([&] { return !env.pod("deaf") && !env.pod("polite"); }, 30s));
}

}  // namespace nodeagent::apiserver_e2e
