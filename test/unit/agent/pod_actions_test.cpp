// kubelet's podSandboxChanged and the actions computePodActions takes when a pod's sandbox is
// replaced (agent/pod_actions.h), on hand-made runtime statuses.
#include <catch2/catch.hpp>

#include "agent/pod_actions.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using runtime::ContainerState;
using runtime::SandboxState;

namespace {

runtime::PodSandboxStatus sandbox(const std::string& id, SandboxState state, uint32_t attempt) {
  return {id, state, attempt, base::SystemTime(std::chrono::seconds(attempt + 1))};
}

runtime::ContainerStatus container(const std::string& name, ContainerState state,
                                   int exit_code = 0) {
  runtime::ContainerStatus cs;
  cs.id = {"fake", name + "-id"};
  cs.name = name;
  cs.state = state;
  cs.exit_code = exit_code;
  return cs;
}

api::PodPtr twoContainers(const std::string& policy, bool host_network = false) {
  auto builder = testing::PodBuilder()
                     .name("web")
                     .uid("uid-1")
                     .container("a", {"sleep"})
                     .container("b", {"sleep"})
                     .restartPolicy(policy);
  builder.hostNetwork(host_network);
  return builder.build();
}

// Both containers running, with the hashes of the spec (so that nothing else changes).
runtime::PodStatus runningIn(const api::Pod& pod, std::vector<runtime::PodSandboxStatus> sandboxes,
                             std::vector<std::string> ips = {}) {
  runtime::PodStatus status;
  status.uid = pod.metadata.uid;
  status.ips = std::move(ips);
  status.sandbox_statuses = std::move(sandboxes);
  for (const auto& c : pod.spec->containers) {
    auto cs = container(c.name, ContainerState::kRunning);
    cs.hash = c.hash;
    status.container_statuses.push_back(cs);
  }
  return status;
}

}  // namespace

TEST_CASE("pod actions: kubelet's podSandboxChanged", "[unit][agent]") {
  auto pod = twoContainers("Always");
  SECTION("no sandbox: the first one, attempt 0, nothing to replace") {
    auto change = agent::podSandboxChanged(*pod, runtime::PodStatus{}, true);
    CHECK(change.create);
    CHECK_FALSE(change.replace);
    CHECK(change.attempt == 0);
  }
  SECTION("the newest ready sandbox with an IP is kept") {
    auto status = runningIn(
        *pod, {sandbox("s1", SandboxState::kReady, 1), sandbox("s0", SandboxState::kNotReady, 0)},
        {"10.200.0.5"});
    auto change = agent::podSandboxChanged(*pod, status, true);
    CHECK_FALSE(change.create);
    CHECK(change.ready_id == "s1");
    CHECK(change.attempt == 1);
  }
  SECTION("the newest sandbox not ready: replaced as attempt + 1") {
    auto status = runningIn(*pod, {sandbox("s3", SandboxState::kNotReady, 3)});
    auto change = agent::podSandboxChanged(*pod, status, false);
    CHECK(change.replace);
    CHECK(change.attempt == 4);
    CHECK(change.reason == "no ready sandbox");
  }
  SECTION("two ready sandboxes: replaced") {
    auto status = runningIn(
        *pod, {sandbox("s1", SandboxState::kReady, 1), sandbox("s0", SandboxState::kReady, 0)});
    CHECK(agent::podSandboxChanged(*pod, status, false).replace);
  }
  SECTION("with sandbox networks: no IP for a pod network, or one for hostNetwork, replaces it") {
    auto status = runningIn(*pod, {sandbox("s0", SandboxState::kReady, 0)});
    CHECK(agent::podSandboxChanged(*pod, status, true).reason == "the sandbox has no IP address");
    CHECK_FALSE(agent::podSandboxChanged(*pod, status, false).create);  // process runtime
    auto host = twoContainers("Always", true);
    CHECK_FALSE(agent::podSandboxChanged(*host, status, true).create);
    status.ips = {"10.200.0.5"};
    CHECK(agent::podSandboxChanged(*host, status, true).reason ==
          "the sandbox's network namespace changed");
  }
}

TEST_CASE("pod actions: a replaced sandbox kills the pod and starts it over", "[unit][agent]") {
  const auto dead =
      std::vector<runtime::PodSandboxStatus>{sandbox("s0", SandboxState::kNotReady, 0)};
  SECTION("Always: every container again, in sandbox attempt 1") {
    auto pod = twoContainers("Always");
    auto actions = agent::computePodActions(*pod, runningIn(*pod, dead));
    CHECK(actions.kill_pod);
    CHECK(actions.replace_sandbox);
    CHECK(actions.create_sandbox);
    CHECK(actions.sandbox_attempt == 1);
    CHECK(actions.containers_to_start == std::vector<size_t>{0, 1});
    CHECK(actions.containers_to_kill.empty());
  }
  SECTION("OnFailure: the containers that succeeded stay done") {
    auto pod = twoContainers("OnFailure");
    auto status = runningIn(*pod, dead);
    status.container_statuses[0] = container("a", ContainerState::kExited, 0);
    auto actions = agent::computePodActions(*pod, status);
    CHECK(actions.containers_to_start == std::vector<size_t>{1});
    SECTION("all of them succeeded: no new sandbox") {
      status.container_statuses[1] = container("b", ContainerState::kExited, 0);
      auto done = agent::computePodActions(*pod, status);
      CHECK(done.kill_pod);
      CHECK_FALSE(done.create_sandbox);
      CHECK(done.containers_to_start.empty());
    }
  }
  SECTION("Never: a pod that ran gets no new sandbox, its containers are killed") {
    auto pod = twoContainers("Never");
    auto actions = agent::computePodActions(*pod, runningIn(*pod, dead));
    CHECK(actions.kill_pod);
    CHECK_FALSE(actions.create_sandbox);
    CHECK(actions.containers_to_start.empty());
  }
  SECTION("init containers: the first one again") {
    auto pod = testing::PodBuilder()
                   .name("web")
                   .uid("uid-1")
                   .initContainer("init", {"true"})
                   .container("a", {"sleep"})
                   .build();
    auto status = runningIn(*pod, dead);
    status.container_statuses.push_back(container("init", ContainerState::kExited, 0));
    auto actions = agent::computePodActions(*pod, status);
    CHECK(actions.next_init_container == size_t{0});
    CHECK(actions.containers_to_start.empty());
  }
  SECTION("a kept sandbox is the one the starts go to") {
    auto pod = twoContainers("Always");
    auto status = runningIn(*pod, {sandbox("s0", SandboxState::kReady, 0)});
    status.container_statuses[1] = container("b", ContainerState::kExited, 1);
    auto actions = agent::computePodActions(*pod, status);
    CHECK_FALSE(actions.kill_pod);
    CHECK_FALSE(actions.create_sandbox);
    CHECK(actions.sandbox_id == "s0");
    CHECK(actions.containers_to_start == std::vector<size_t>{1});
  }
}
