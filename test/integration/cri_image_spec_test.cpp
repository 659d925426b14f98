// The image a CriRuntime container is created from, as kubelet's: CreateContainer gets the image's
// ID (what the agent's image manager found, passed as StartContainerOptions::image_info, else
// what the runtime's own ImageStatus says), and the image's user comes from that same answer; the
// status still shows the image's tag and ID, as containerd reports them.
#include <catch2/catch.hpp>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/runtime/cri/cri_runtime.h"
#include "test/support/cri_runtime_fixture.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using namespace nodeagent::runtime;

namespace {

constexpr const char* kBusybox = "nodeagent.test/busybox:1";

// A host-network pod of the busybox image (which runs as root) that asks for runAsNonRoot.
api::PodPtr nonRootPod() {
  return testing::PodBuilder()
      .name("image-spec")
      .ns("default")
      .uid("uid-image-spec")
      .hostNetwork()
      .terminationGracePeriodSeconds(1)
      .container("main", {"sleep", "3600"}, kBusybox)
      .edit([](nlohmann::json& j) {
        j["spec"]["containers"][0]["securityContext"] = {{"runAsNonRoot", true}};
      })
      .build();
}

}  // namespace

TEST_CASE("cri runtime: a container is created from its image's ID and user as the start says",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::CriRuntimeFixture f;
  const auto pod = nonRootPod();
  PodSandboxConfig sandbox;
  sandbox.uid = pod->metadata.uid;
  sandbox.name = pod->metadata.name;
  sandbox.namespace_ = "default";
  sandbox.log_directory = f.runtime->podLogsDirectory("default", sandbox.name, sandbox.uid);
  sandbox.host_network = true;
  auto sandbox_id = f.run(f.runtime->runPodSandbox(sandbox));
  REQUIRE(sandbox_id.ok());
  auto image = f.client->imageStatus(kBusybox);
  REQUIRE(image.ok());
  REQUIRE(image->has_value());
  const std::string image_id = (*image)->id;
  CHECK(image_id.starts_with("sha256:"));

  StartContainerOptions options;
  options.sandbox_id = *sandbox_id;
  options.sandbox_config = std::make_shared<const PodSandboxConfig>(sandbox);
  options.image = kBusybox;
  SECTION("without image info the runtime asks: the image runs as root, runAsNonRoot refuses it") {
    auto id = f.run(f.runtime->startContainer(pod, pod->spec->containers[0], 0, options));
    REQUIRE_FALSE(id.ok());
    CHECK(id.status().message().find("runAsNonRoot") != std::string::npos);
  }
  SECTION("the image info given is used as it is: its ID for CreateContainer, its user") {
    // The image manager's answer, here with a user the image does not have: the runtime does not
    // ask ImageStatus again, so runAsNonRoot passes on it.
    options.image_info = ImageInfo{image_id, {kBusybox}, {}, 0, 1000, ""};
    auto id = f.run(f.runtime->startContainer(pod, pod->spec->containers[0], 0, options));
    INFO(id.status().message());
    REQUIRE(id.ok());
    // The runtime's list has the image as CreateContainer got it: the ID, as under kubelet.
    auto pods = f.run(f.runtime->getPods(true));
    REQUIRE(pods.ok());
    REQUIRE(pods->size() == 1);
    REQUIRE((*pods)[0].containers.size() == 1);
    CHECK((*pods)[0].containers[0].image == image_id);
    // The status shows the image's tag and ID, as before.
    auto status = f.run(f.runtime->getPodStatus(pod->metadata.uid, pod->metadata.name, "default"));
    REQUIRE(status.ok());
    const auto* main_status = status->findContainerStatusByName("main");
    REQUIRE(main_status != nullptr);
    CHECK(main_status->state == ContainerState::kRunning);
    CHECK(main_status->image == kBusybox);
    CHECK(main_status->image_id == image_id);
  }
}
