// CriRuntime against a containerd of the test's own (test/support/containerd.h): a pod's sandbox
// and a busybox container started through the Runtime interface, its status from containerd's
// lists and kubelet's labels, exec, kill, the running-pod list, removal and the sandbox calls;
// the image calls of image garbage collection, and the collection itself.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/images/image_gc_manager.h"
#include "agent/pod_lifecycle_sandbox.h"
#include "agent/runtime/apparmor.h"
#include "agent/runtime/cri/cri_runtime.h"
#include "agent/volume/subpath.h"
#include "test/support/containerd.h"
#include "test/support/cri_runtime_fixture.h"
#include "test/support/pod_builder.h"
#include "test/support/run_awaitable.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
namespace fs = std::filesystem;

namespace {

constexpr auto kWait = std::chrono::seconds(20);

using Fixture = testing::CriRuntimeFixture;

api::PodPtr busyboxPod() {
  return testing::PodBuilder()
      .name("web")
      .ns("default")
      .uid("uid-1234")
      .hostNetwork()
      .terminationGracePeriodSeconds(1)
      .container("main", {"sh", "-c", "echo hello $(GREETING); sleep 3600"},
                 "nodeagent.test/busybox:1")
      .edit([](nlohmann::json& j) {
        j["spec"]["containers"][0]["env"] = {{{"name", "GREETING"}, {"value", "world"}}};
      })
      .build();
}

PodSandboxConfig sandboxConfig(const CriRuntime& runtime, const api::Pod& pod) {
  PodSandboxConfig config;
  config.uid = pod.metadata.uid;
  config.name = pod.metadata.name;
  config.namespace_ = pod.metadata.namespace_;
  config.log_directory =
      runtime.podLogsDirectory(pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid);
  config.hostname = "web";
  config.labels = {{"app", "web"}};
  config.host_network = pod.spec->host_network;
  return config;
}

ContainerId start(Fixture& f, const api::PodPtr& pod, const std::string& sandbox_id, int attempt,
                  std::vector<Mount> mounts = {}) {
  StartContainerOptions options;
  options.mounts = std::move(mounts);
  options.sandbox_id = sandbox_id;
  options.sandbox_config =
      std::make_shared<const PodSandboxConfig>(sandboxConfig(*f.runtime, *pod));
  options.image = pod->spec->containers[0].image;
  auto id = f.run(f.runtime->startContainer(pod, pod->spec->containers[0], attempt, options));
  INFO(id.status().message());
  REQUIRE(id.ok());
  CHECK(id->type == "containerd");
  return *id;
}

// A sandbox for `pod`, then the start of its first container, whose result is returned.
base::StatusOr<ContainerId> sandboxAndStart(Fixture& f, const api::PodPtr& pod) {
  auto sandbox_id = f.run(f.runtime->runPodSandbox(sandboxConfig(*f.runtime, *pod)));
  REQUIRE(sandbox_id.ok());
  StartContainerOptions options;
  options.sandbox_id = *sandbox_id;
  options.sandbox_config =
      std::make_shared<const PodSandboxConfig>(sandboxConfig(*f.runtime, *pod));
  options.image = pod->spec->containers[0].image;
  return f.run(f.runtime->startContainer(pod, pod->spec->containers[0], 0, options));
}

PodStatus podStatus(Fixture& f) {
  auto status = f.run(f.runtime->getPodStatus("uid-1234", "web", "default"));
  REQUIRE(status.ok());
  return *std::move(status);
}

// Running, with the attempt and the spec hash read back from kubelet's annotations.
void expectRunning(Fixture& f, const api::Pod& pod, const ContainerId& id,
                   const std::string& sandbox_id) {
  const PodStatus status = podStatus(f);
  CHECK(status.uid == "uid-1234");
  REQUIRE(status.sandbox_statuses.size() == 1);
  CHECK(status.sandbox_statuses[0].id == sandbox_id);
  CHECK(status.sandbox_statuses[0].state == SandboxState::kReady);
  REQUIRE(status.container_statuses.size() == 1);
  const ContainerStatus& c = status.container_statuses[0];
  CHECK(c.id == id);
  CHECK(c.name == "main");
  CHECK(c.state == ContainerState::kRunning);
  CHECK(c.restart_count == 0);
  CHECK(c.hash == pod.spec->containers[0].hash);
  CHECK(c.started_at >= c.created_at);
  const fs::path log = f.runtime->containerLogsPath("default", "web", "uid-1234", "main", 0);
  CHECK(c.log_path == log);
  CHECK(testing::eventually(
      [&] { return testing::readFile(log).find("stdout F hello world\n") != std::string::npos; },
      kWait));

  auto pods = f.run(f.runtime->getPods(false));
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].uid == "uid-1234");
  CHECK((*pods)[0].name == "web");
  CHECK((*pods)[0].namespace_ == "default");
  REQUIRE((*pods)[0].containers.size() == 1);
  CHECK((*pods)[0].containers[0].id == id);
  CHECK((*pods)[0].containers[0].hash == pod.spec->containers[0].hash);
  // Its sandbox, as one more container of it for the PLEG.
  REQUIRE((*pods)[0].sandboxes.size() == 1);
  CHECK((*pods)[0].sandboxes[0].id == ContainerId{"containerd", sandbox_id});
  CHECK((*pods)[0].sandboxes[0].state == ContainerState::kRunning);
}

void expectExec(Fixture& f, const ContainerId& id) {
  auto result = f.run(
      f.runtime->execInContainer(id, {"sh", "-c", "echo hi; exit 3"}, std::chrono::seconds(10)));
  INFO(result.status().message());
  REQUIRE(result.ok());
  CHECK(result->exit_code == 3);
  CHECK(result->output == "hi\n");
  CHECK_FALSE(result->timed_out);

  // A command that outlives its timeout is killed and reported as timed out.
  const auto begin = std::chrono::steady_clock::now();
  auto slow = f.run(f.runtime->execInContainer(id, {"sleep", "30"}, std::chrono::seconds(1)));
  INFO(slow.status().message());
  REQUIRE(slow.ok());
  CHECK(slow->timed_out);
  CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds(20));
}

// A restart is a new container, listed first; killPod ends it.
ContainerId restartAndKillPod(Fixture& f, const api::PodPtr& pod, const std::string& sandbox_id,
                              const ContainerId& first) {
  const ContainerId second = start(f, pod, sandbox_id, 1);
  PodStatus status = podStatus(f);
  REQUIRE(status.container_statuses.size() == 2);
  CHECK(status.container_statuses[0].id == second);
  CHECK(status.container_statuses[0].restart_count == 1);
  CHECK(status.container_statuses[1].id == first);
  auto all = f.run(f.runtime->getPods(true));
  REQUIRE(all.ok());
  REQUIRE(all->size() == 1);
  CHECK((*all)[0].containers.size() == 2);
  auto running = f.run(f.runtime->getPods(false));
  REQUIRE(running.ok());
  REQUIRE(running->size() == 1);
  REQUIRE(f.run(f.runtime->killPod(pod, (*running)[0], 0)).ok());
  CHECK(podStatus(f).runningContainerStatuses().empty());
  return second;
}

}  // namespace

TEST_CASE("cri runtime: a pod's sandbox and busybox container run, exec, are killed and removed",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  REQUIRE(f.runtime->recover().ok());
  CHECK(f.runtime->type() == "containerd");
  CHECK_FALSE(f.runtime->version().empty());

  const api::PodPtr pod = busyboxPod();
  auto sandbox_id = f.run(f.runtime->runPodSandbox(sandboxConfig(*f.runtime, *pod)));
  INFO(sandbox_id.status().message());
  REQUIRE(sandbox_id.ok());
  auto sandbox = f.client->podSandboxStatus(*sandbox_id);
  REQUIRE(sandbox.ok());
  CHECK(sandbox->labels.at(kPodUidLabel) == "uid-1234");
  CHECK(sandbox->labels.at(kPodNameLabel) == "web");
  CHECK(sandbox->labels.at("app") == "web");

  const ContainerId id = start(f, pod, *sandbox_id, 0);
  expectRunning(f, *pod, id, *sandbox_id);
  expectExec(f, id);
  CHECK(f.run(f.runtime->removeContainer(id)).code() == base::StatusCode::kFailedPrecondition);

  // sleep is PID 1 and ignores SIGTERM: SIGKILL after the 1 s grace.
  REQUIRE(f.run(f.runtime->killContainer(pod, id, KillOptions::graceOverride(1), "test")).ok());
  const PodStatus killed = podStatus(f);
  REQUIRE(killed.container_statuses.size() == 1);
  CHECK(killed.container_statuses[0].state == ContainerState::kExited);
  CHECK(killed.container_statuses[0].exit_code == 137);
  auto exited_exec = f.run(f.runtime->execInContainer(id, {"true"}, std::chrono::seconds(5)));
  CHECK(exited_exec.status().code() == base::StatusCode::kFailedPrecondition);
  // No running container: the pod is listed for its ready sandbox alone.
  auto running = f.run(f.runtime->getPods(false));
  REQUIRE(running.ok());
  REQUIRE(running->size() == 1);
  CHECK((*running)[0].containers.empty());
  REQUIRE((*running)[0].sandboxes.size() == 1);
  CHECK((*running)[0].sandboxes[0].state == ContainerState::kRunning);

  const ContainerId second = restartAndKillPod(f, pod, *sandbox_id, id);
  REQUIRE(f.run(f.runtime->removeContainer(id)).ok());
  REQUIRE(f.run(f.runtime->removeContainer(second)).ok());
  CHECK(f.run(f.runtime->removeContainer(id)).code() == base::StatusCode::kNotFound);
  CHECK(podStatus(f).container_statuses.empty());
  CHECK_FALSE(fs::exists(f.runtime->containerLogsPath("default", "web", "uid-1234", "main", 0)));

  REQUIRE(f.run(f.runtime->stopPodSandbox(*sandbox_id)).ok());
  const PodStatus stopped = podStatus(f);
  REQUIRE(stopped.sandbox_statuses.size() == 1);
  CHECK(stopped.sandbox_statuses[0].state == SandboxState::kNotReady);
  // A stopped sandbox is listed as an exited one, and not among the running.
  auto listed = f.run(f.runtime->getPods(true));
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 1);
  REQUIRE((*listed)[0].sandboxes.size() == 1);
  CHECK((*listed)[0].sandboxes[0].state == ContainerState::kExited);
  CHECK(f.run(f.runtime->getPods(false))->empty());
  REQUIRE(f.run(f.runtime->removePodSandbox(*sandbox_id)).ok());
  CHECK(podStatus(f).sandbox_statuses.empty());
  CHECK(f.run(f.runtime->getPods(true))->empty());
  CHECK(f.run(f.runtime->stopPodSandbox(*sandbox_id)).ok());
  CHECK(f.run(f.runtime->removePodSandbox(*sandbox_id)).ok());
  CHECK(testing::eventually([&] { return f.containerd.containerProcesses().empty(); }, kWait));
}

TEST_CASE(
    "cri runtime: image garbage collection keeps the images of containers and the sandbox image",
    "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  REQUIRE(f.runtime->recover().ok());
  const api::PodPtr pod = busyboxPod();
  auto sandbox_id = f.run(f.runtime->runPodSandbox(sandboxConfig(*f.runtime, *pod)));
  REQUIRE(sandbox_id.ok());
  const ContainerId id = start(f, pod, *sandbox_id, 0);

  auto busybox = f.run(f.runtime->imageStatus("nodeagent.test/busybox:1"));
  auto nonroot = f.run(f.runtime->imageStatus("nodeagent.test/busybox-nonroot:1"));
  REQUIRE((busybox.ok() && busybox->has_value() && nonroot.ok() && nonroot->has_value()));
  const std::string busybox_id = (*busybox)->id;

  // The sandbox image is pinned: containerd's config names it (TestContainerdOptions).
  auto images = f.run(f.runtime->listImages());
  REQUIRE(images.ok());
  REQUIRE(images->size() == 3);
  for (const auto& image : *images) {
    INFO(image.id);
    const bool pause = std::find(image.repo_tags.begin(), image.repo_tags.end(),
                                 "nodeagent.test/pause:1") != image.repo_tags.end();
    CHECK(image.pinned == pause);
  }
  auto in_use = f.run(f.runtime->imagesInUse());
  REQUIRE(in_use.ok());
  CHECK(*in_use == std::set<std::string>{busybox_id});

  auto fs_info = f.run(f.runtime->imageFsInfo());
  INFO(fs_info.status().message());
  REQUIRE(fs_info.ok());
  // containerd's snapshotter directory (its usage figure is refreshed every few seconds).
  CHECK(fs_info->mountpoint.string().starts_with(f.containerd.dir().string()));
  CHECK(fs::is_directory(fs_info->mountpoint));
  CHECK(fs_info->capacity_bytes >= fs_info->available_bytes);
  CHECK(fs_info->capacity_bytes > 0);

  // A policy that always collects and can never free enough: only the unused image goes.
  std::vector<std::string> warnings;
  agent::images::ImageGcOptions options;
  options.policy = {1, 0, std::chrono::seconds(0)};
  options.record_node_warning = [&](const std::string& reason, const std::string&) {
    warnings.push_back(reason);
  };
  auto gc = std::make_shared<agent::images::ImageGcManager>(f.ioc.get_executor(), base::realClock(),
                                                            *f.runtime, options);
  auto collected = f.run(gc->garbageCollect());
  INFO(collected.message());
  CHECK_THAT(collected.message(), Catch::Contains("failed to garbage collect"));
  CHECK(warnings == std::vector<std::string>{"FreeDiskSpaceFailed"});
  CHECK_FALSE(f.run(f.runtime->imageStatus("nodeagent.test/busybox-nonroot:1"))->has_value());
  CHECK(f.run(f.runtime->imageStatus("nodeagent.test/busybox:1"))->has_value());
  CHECK(f.run(f.runtime->imageStatus("nodeagent.test/pause:1"))->has_value());

  // An exited container still holds its image; once removed, the image may go.
  REQUIRE(f.run(f.runtime->killContainer(pod, id, KillOptions::graceOverride(1), "test")).ok());
  auto kept = f.run(gc->deleteUnusedImages());
  REQUIRE(kept.ok());
  CHECK(*kept == 0);
  REQUIRE(f.run(f.runtime->removeContainer(id)).ok());
  auto freed = f.run(gc->deleteUnusedImages());
  REQUIRE(freed.ok());
  CHECK(*freed == (*busybox)->size);
  CHECK_FALSE(f.run(f.runtime->imageStatus(busybox_id))->has_value());
  CHECK(f.run(f.runtime->imageStatus("nodeagent.test/pause:1"))->has_value());
  // Removing an image that is gone is not an error.
  CHECK(f.run(f.runtime->removeImage(busybox_id)).ok());

  REQUIRE(f.run(f.runtime->stopPodSandbox(*sandbox_id)).ok());
  REQUIRE(f.run(f.runtime->removePodSandbox(*sandbox_id)).ok());
}

TEST_CASE("cri runtime: recover names the endpoint when no runtime listens", "[integration][cri]") {
  asio::thread_pool pool{1};
  const fs::path dir =
      fs::temp_directory_path() / ("nodeagent-cri-none-" + std::to_string(::getpid()));
  auto client =
      cri::CriClient::create({"unix://" + (dir / "none.sock").string(), std::chrono::seconds(5)});
  REQUIRE(client.ok());
  CriRuntimeOptions options;
  options.blocking_executor = pool.get_executor();
  CriRuntime runtime(*std::move(client), base::realClock(), options);
  auto status = runtime.recover();
  INFO(status.message());
  CHECK_FALSE(status.ok());
  CHECK(status.message().find((dir / "none.sock").string()) != std::string::npos);
  CHECK(runtime.type() == "remote");
  pool.join();
}

TEST_CASE("cri runtime: killContainer runs the preStop hook through the runner or as recorded",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  REQUIRE(f.runtime->recover().ok());
  const fs::path data = f.containerd.dir() / "data";
  fs::create_directories(data);
  const std::vector<Mount> mounts = {{"data", data, "/data", false}};
  const api::PodPtr pod =
      testing::PodBuilder()
          .name("web")
          .ns("default")
          .uid("uid-1234")
          .hostNetwork()
          .terminationGracePeriodSeconds(1)
          .container("main", {"sleep", "3600"}, "nodeagent.test/busybox:1")
          .edit([](nlohmann::json& j) {
            j["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] = {
                "sh", "-c", "echo stopping > /data/prestop"};
          })
          .build();
  auto sandbox_id = f.run(f.runtime->runPodSandbox(sandboxConfig(*f.runtime, *pod)));
  REQUIRE(sandbox_id.ok());

  // With the pod and a runner: the runner gets the hook, with the pod's grace period.
  std::vector<PreStopHookRequest> requests;
  f.runtime->setPreStopHookRunner([&requests](PreStopHookRequest request) -> asio::awaitable<void> {
    requests.push_back(std::move(request));
    co_return;
  });
  const ContainerId first = start(f, pod, *sandbox_id, 0, mounts);
  REQUIRE(f.run(f.runtime->killContainer(pod, first, {}, "test")).ok());
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].container_name == "main");
  CHECK(requests[0].id == first);
  CHECK(requests[0].timeout == std::chrono::seconds(1));
  CHECK_FALSE(fs::exists(data / "prestop"));
  PodStatus status = podStatus(f);
  REQUIRE(status.container_statuses.size() == 1);
  CHECK(status.container_statuses[0].exit_code == 137);

  // An orphan (no pod): the exec hook recorded at start runs in the container.
  const ContainerId second = start(f, pod, *sandbox_id, 1, mounts);
  REQUIRE(f.run(f.runtime->killContainer(nullptr, second, {}, "orphan")).ok());
  CHECK(requests.size() == 1);
  CHECK(testing::readFile(data / "prestop") == "stopping\n");
  status = podStatus(f);
  REQUIRE(status.container_statuses.size() == 2);
  CHECK(status.container_statuses[0].id == second);
  CHECK(status.container_statuses[0].state == ContainerState::kExited);
  REQUIRE(f.run(f.runtime->stopPodSandbox(*sandbox_id)).ok());
  REQUIRE(f.run(f.runtime->removePodSandbox(*sandbox_id)).ok());
}

TEST_CASE(
    "cri runtime: a container's AppArmor profile reaches containerd, which refuses it where the "
    "kernel has no AppArmor and confines the container where it has",
    "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  REQUIRE(f.runtime->recover().ok());
  const api::PodPtr pod =
      testing::PodBuilder()
          .name("web")
          .ns("default")
          .uid("uid-1234")
          .hostNetwork()
          .annotation("container.apparmor.security.beta.kubernetes.io/main", "runtime/default")
          .container("main", {"sleep", "3600"}, "nodeagent.test/busybox:1")
          .build();
  auto id = sandboxAndStart(f, pod);
  INFO(id.status().message());
  if (!appArmorEnabled()) {
    // (The agent's admission refuses such a pod before it gets here.)
    REQUIRE_FALSE(id.ok());
    CHECK(id.status().message().find("apparmor is not supported") != std::string::npos);
    return;
  }
  REQUIRE(id.ok());
  const PodStatus status = podStatus(f);
  REQUIRE_FALSE(status.container_statuses.empty());
  CHECK(status.container_statuses[0].state == ContainerState::kRunning);
}

TEST_CASE("cri runtime: a command that cannot run fails the start and leaves an exited container",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  REQUIRE(f.runtime->recover().ok());
  const api::PodPtr pod = testing::PodBuilder()
                              .name("web")
                              .ns("default")
                              .uid("uid-1234")
                              .hostNetwork()
                              .container("main", {"/no/such/binary"}, "nodeagent.test/busybox:1")
                              .build();
  auto id = sandboxAndStart(f, pod);
  REQUIRE_FALSE(id.ok());
  INFO(id.status().message());
  CHECK(startErrorReason(id.status()) == kRunContainerError);
  const PodStatus status = podStatus(f);
  REQUIRE(status.container_statuses.size() == 1);
  const ContainerStatus& c = status.container_statuses[0];
  INFO(c.reason + ": " + c.message);
  CHECK(c.state == ContainerState::kExited);
  CHECK(c.restart_count == 0);
  CHECK(c.exit_code == 128);
  // containerd's reason, passed through as kubelet does (the process runtime says
  // ContainerCannotRun).
  CHECK(c.reason == "StartError");
  CHECK(c.message.find("/no/such/binary") != std::string::npos);
}

namespace {

// kubelet's sandbox config for `pod` as the agent makes it, its DNS from `resolv_conf`.
PodSandboxConfig generatedConfig(const CriRuntime& runtime, const api::Pod& pod,
                                 const fs::path& resolv_conf) {
  agent::SandboxInputs inputs;
  inputs.log_directory =
      runtime.podLogsDirectory(pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid);
  inputs.node_ip = "127.0.0.1";
  inputs.dns.resolv_conf = resolv_conf;
  inputs.with_dns = true;
  auto content = agent::readResolvConf(resolv_conf);
  REQUIRE(content.ok());
  inputs.host_resolv_conf = *content;
  auto generated = agent::generatePodSandboxConfig(pod, inputs);
  INFO(generated.status().message());
  REQUIRE(generated.ok());
  return generated->config;
}

std::string execOutput(Fixture& f, const ContainerId& id, std::vector<std::string> command,
                       int expected_exit = 0) {
  auto result = f.run(f.runtime->execInContainer(id, std::move(command), std::chrono::seconds(10)));
  INFO(result.status().message());
  REQUIRE(result.ok());
  INFO(result->output);
  CHECK(result->exit_code == expected_exit);
  return result->output;
}

std::string ownNamespace(const char* ns) {
  return fs::read_symlink(std::string("/proc/self/ns/") + ns).string() + "\n";
}

api::PodPtr sleeperPod(bool host_network, bool host_pid) {
  return testing::PodBuilder()
      .name("web")
      .ns("default")
      .uid("uid-1234")
      .hostNetwork(host_network)
      .terminationGracePeriodSeconds(1)
      .container("main", {"sleep", "3600"}, "nodeagent.test/busybox:1")
      .edit([host_pid](nlohmann::json& j) {
        j["spec"]["dnsPolicy"] = "Default";
        j["spec"]["hostPID"] = host_pid;
      })
      .build();
}

}  // namespace

TEST_CASE(
    "cri runtime: a pod without hostNetwork has a network namespace and an IP of the test's "
    "subnet, its own hostname and PIDs, and the DNS config of its dnsPolicy",
    "[integration][cri]") {
  testing::skipUnlessCniCanRun();
  // The node's IP forwarding stays as it is (test/support/containerd.h).
  const std::string forwarding = testing::readFile("/proc/sys/net/ipv4/ip_forward");
  std::string bridge;
  {
    Fixture f;
    REQUIRE(f.runtime->recover().ok());
    const fs::path resolv_conf = f.containerd.dir() / "resolv.conf";
    testing::writeFile(resolv_conf,
                       "nameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch test.example\n"
                       "options ndots:3\n");
    const api::PodPtr pod = sleeperPod(false, false);
    auto sandbox_id =
        f.run(f.runtime->runPodSandbox(generatedConfig(*f.runtime, *pod, resolv_conf)));
    INFO(sandbox_id.status().message() << "\n" << f.containerd.logTail());
    REQUIRE(sandbox_id.ok());
    bridge = f.containerd.bridgeName();
    CHECK(fs::exists("/sys/class/net/" + bridge));

    PodStatus status = podStatus(f);
    REQUIRE(status.ips.size() == 1);
    INFO("pod IP " << status.ips[0] << ", subnet " << f.containerd.podSubnet());
    CHECK(f.containerd.inPodSubnet(status.ips[0]));
    CHECK(status.ips[0] != f.containerd.podGateway());

    const ContainerId id = start(f, pod, *sandbox_id, 0);
    CHECK(execOutput(f, id, {"readlink", "/proc/self/ns/net"}) != ownNamespace("net"));
    CHECK(execOutput(f, id, {"readlink", "/proc/self/ns/pid"}) != ownNamespace("pid"));
    execOutput(f, id, {"test", "-d", "/proc/" + std::to_string(::getpid())}, 1);
    CHECK(execOutput(f, id, {"hostname"}) == "web\n");
    CHECK(execOutput(f, id, {"sh", "-c", "echo $HOSTNAME"}) == "web\n");
    const std::string resolv = execOutput(f, id, {"cat", "/etc/resolv.conf"});
    CHECK_THAT(resolv, Catch::Contains("nameserver 192.0.2.53") &&
                           Catch::Contains("nameserver 192.0.2.54") &&
                           Catch::Contains("search test.example") &&
                           Catch::Contains("options ndots:3"));
    // The pod's address is on an interface of its own, and it has a route to the bridge's subnet
    // only (isGateway without isDefaultGateway): it reaches the node and the other pods.
    CHECK_THAT(execOutput(f, id, {"ip", "-4", "addr"}), Catch::Contains(status.ips[0] + "/24"));
    const std::string routes = execOutput(f, id, {"ip", "route"});
    CHECK_THAT(routes, Catch::Contains(f.containerd.podSubnet() + " dev eth0"));
    CHECK_THAT(routes, !Catch::Contains("default"));

    REQUIRE(f.run(f.runtime->killContainer(pod, id, KillOptions::graceOverride(0), "test")).ok());
    REQUIRE(f.run(f.runtime->stopPodSandbox(*sandbox_id)).ok());
    // A stopped sandbox has given its address back: the pod has no IP any more.
    CHECK(podStatus(f).ips.empty());
    REQUIRE(f.run(f.runtime->removePodSandbox(*sandbox_id)).ok());
  }
  // The bridge goes with the test's containerd.
  CHECK_FALSE(fs::exists("/sys/class/net/" + bridge));
  CHECK(testing::readFile("/proc/sys/net/ipv4/ip_forward") == forwarding);
}

TEST_CASE("cri runtime: hostNetwork shares the node's network namespace, hostPID its processes",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  REQUIRE(f.runtime->recover().ok());
  const fs::path resolv_conf = f.containerd.dir() / "resolv.conf";
  testing::writeFile(resolv_conf, "nameserver 192.0.2.53\n");
  const api::PodPtr pod = sleeperPod(true, true);
  auto config = generatedConfig(*f.runtime, *pod, resolv_conf);
  CHECK(config.hostname.empty());
  auto sandbox_id = f.run(f.runtime->runPodSandbox(config));
  INFO(sandbox_id.status().message());
  REQUIRE(sandbox_id.ok());
  CHECK(podStatus(f).ips.empty());  // the node's network: the agent shows the node's IP

  const ContainerId id = start(f, pod, *sandbox_id, 0);
  CHECK(execOutput(f, id, {"readlink", "/proc/self/ns/net"}) == ownNamespace("net"));
  CHECK(execOutput(f, id, {"readlink", "/proc/self/ns/pid"}) == ownNamespace("pid"));
  // The test's own process is visible in the container.
  execOutput(f, id, {"test", "-d", "/proc/" + std::to_string(::getpid())}, 0);
  CHECK_THAT(execOutput(f, id, {"cat", "/etc/resolv.conf"}),
             Catch::Contains("nameserver 192.0.2.53"));
  REQUIRE(f.run(f.runtime->killContainer(pod, id, KillOptions::graceOverride(0), "test")).ok());
  REQUIRE(f.run(f.runtime->stopPodSandbox(*sandbox_id)).ok());
  REQUIRE(f.run(f.runtime->removePodSandbox(*sandbox_id)).ok());
}

TEST_CASE(
    "cri runtime: a subPath reaches the container as a bind mount of the checked directory, and "
    "one that leads out of its volume fails the start",
    "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  // The pod's directory is on a shared mount made before containerd starts, as / is on a systemd
  // node: the agent's bind mount must reach containerd's mount namespace.
  testing::TempDir root("nodeagent-cri-subpath");
  testing::makeSharedMount(root.path());
  struct Unmount {
    fs::path dir;
    ~Unmount() { testing::unmountSharedMount(dir); }
  } unmount{root.path()};
  Fixture f;
  REQUIRE(f.runtime->recover().ok());
  const fs::path vol = root.path() / "vol";
  const fs::path outside = root.path() / "outside";
  const fs::path pod_dir = root.path() / "pods" / "uid-1234";
  fs::create_directories(vol / "data");
  fs::create_directories(outside);
  fs::create_directories(pod_dir);
  testing::writeFile(vol / "data" / "hello", "inside\n");
  testing::writeFile(outside / "hello", "outside\n");
  fs::create_directory_symlink(outside, vol / "escape");

  const api::PodPtr pod = busyboxPod();
  auto sandbox_id = f.run(f.runtime->runPodSandbox(sandboxConfig(*f.runtime, *pod)));
  REQUIRE(sandbox_id.ok());
  auto startWith = [&](const fs::path& sub, int attempt) {
    StartContainerOptions options;
    options.mounts = {Mount{"vol", sub, "/sub", false, vol}};
    options.pod_dir = pod_dir;
    options.sandbox_id = *sandbox_id;
    options.sandbox_config =
        std::make_shared<const PodSandboxConfig>(sandboxConfig(*f.runtime, *pod));
    options.image = pod->spec->containers[0].image;
    return f.run(f.runtime->startContainer(pod, pod->spec->containers[0], attempt, options));
  };
  auto id = startWith(vol / "data", 0);
  INFO(id.status().message());
  REQUIRE(id.ok());
  CHECK(execOutput(f, *id, {"cat", "/sub/hello"}) == "inside\n");
  const fs::path target = agent::subPathTarget(pod_dir, "vol", "main", 0);
  CHECK(agent::mountPointsBelow(pod_dir) == std::vector<fs::path>{target});
  // Swapped for a symlink out of the volume afterwards: the container keeps what was checked.
  fs::rename(vol / "data", vol / "data-old");
  fs::create_directory_symlink(outside, vol / "data");
  CHECK(execOutput(f, *id, {"cat", "/sub/hello"}) == "inside\n");

  // Through a symlink out of the volume: refused, nothing mounted for it, the pod's status shows
  // no node path (CreateContainerConfigError in the agent).
  auto escaped = startWith(vol / "escape", 1);
  REQUIRE_FALSE(escaped.ok());
  CHECK(escaped.status().message() ==
        "failed to prepare subPath for volumeMount \"vol\" of container \"main\"");

  REQUIRE(f.run(f.runtime->killContainer(pod, *id, KillOptions::graceOverride(0), "test")).ok());
  REQUIRE(f.run(f.runtime->stopPodSandbox(*sandbox_id)).ok());
  REQUIRE(f.run(f.runtime->removePodSandbox(*sandbox_id)).ok());
  REQUIRE(agent::cleanSubPaths(pod_dir).ok());
  CHECK(agent::mountPointsBelow(pod_dir).empty());
  CHECK(testing::readFile(vol / "data-old" / "hello") == "inside\n");
  CHECK(testing::readFile(outside / "hello") == "outside\n");
}
