// The daemon on the CRI runtime joined to the test apiserver: a pod created with kubectl runs in a
// containerd container with a network of its own, and kubectl shows what it shows of a kubelet's
// pod: Running, the pod's IP, containerd:// container IDs and the image and its ID; the Node lists
// containerd's images.
#include <signal.h>
#include <unistd.h>

#include <sstream>
#include <string>

#include "test/e2e/apiserver_env.h"
#include "test/support/containerd.h"

namespace nodeagent::apiserver_e2e {
namespace {

constexpr char kImage[] = "nodeagent.test/busybox:1";

std::string apiPodYaml(const std::string& name) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  namespace: default\nspec:\n  nodeName: " + std::string(kNode) +
         "\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: " +
         kImage +
         "\n    imagePullPolicy: IfNotPresent\n"
         "    command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n";
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

}  // namespace nodeagent::apiserver_e2e
