#include <catch2/catch.hpp>

#include "agent/status/pod_status.h"

using namespace nodeagent;
using agent::getPhase;

namespace {

api::Container container(const std::string& name) {
  api::Container c;
  c.name = name;
  return c;
}

api::PodSpec spec(const std::string& restart_policy, std::vector<std::string> names,
                  std::vector<std::string> init_names = {}) {
  api::PodSpec s;
  s.restart_policy = restart_policy;
  for (auto& n : names) s.containers.push_back(container(n));
  for (auto& n : init_names) s.init_containers.push_back(container(n));
  return s;
}

api::ContainerStatus running(const std::string& name) {
  api::ContainerStatus s;
  s.name = name;
  s.state.running = api::ContainerStateRunning{};
  return s;
}

api::ContainerStatus terminated(const std::string& name, int exit_code) {
  api::ContainerStatus s;
  s.name = name;
  s.state.terminated = api::ContainerStateTerminated{};
  s.state.terminated->exit_code = exit_code;
  return s;
}

api::ContainerStatus waiting(const std::string& name, std::optional<int> last_exit = {}) {
  api::ContainerStatus s;
  s.name = name;
  s.state.waiting = api::ContainerStateWaiting{"CrashLoopBackOff", ""};
  if (last_exit) {
    s.last_state.terminated = api::ContainerStateTerminated{};
    s.last_state.terminated->exit_code = *last_exit;
  }
  return s;
}

api::ContainerStatus ready(api::ContainerStatus s) {
  s.ready = true;
  return s;
}

}  // namespace

TEST_CASE("getPhase with restartPolicy Always", "[unit][agent]") {
  auto s = spec("Always", {"a", "b"});
  CHECK(getPhase(s, {}, {running("a"), running("b")}) == "Running");
  CHECK(getPhase(s, {}, {running("a"), terminated("b", 0)}) == "Running");
  CHECK(getPhase(s, {}, {terminated("a", 0), terminated("b", 1)}) == "Running");
  CHECK(getPhase(s, {}, {running("a")}) == "Pending");  // b unknown
  CHECK(getPhase(s, {}, {running("a"), waiting("b")}) == "Pending");
  CHECK(getPhase(s, {}, {running("a"), waiting("b", 1)}) ==
        "Running");  // crash loop counts as stopped
  CHECK(getPhase(s, {}, {}) == "Pending");
}

TEST_CASE("getPhase with restartPolicy Never", "[unit][agent]") {
  auto s = spec("Never", {"a", "b"});
  CHECK(getPhase(s, {}, {running("a"), running("b")}) == "Running");
  CHECK(getPhase(s, {}, {terminated("a", 0), terminated("b", 0)}) == "Succeeded");
  CHECK(getPhase(s, {}, {terminated("a", 0), terminated("b", 2)}) == "Failed");
  CHECK(getPhase(s, {}, {running("a"), terminated("b", 2)}) == "Running");
  CHECK(getPhase(s, {}, {running("a"), waiting("b")}) == "Pending");
}

TEST_CASE("getPhase with restartPolicy OnFailure", "[unit][agent]") {
  auto s = spec("OnFailure", {"a", "b"});
  CHECK(getPhase(s, {}, {terminated("a", 0), terminated("b", 0)}) == "Succeeded");
  CHECK(getPhase(s, {}, {terminated("a", 0), terminated("b", 1)}) == "Running");
  CHECK(getPhase(s, {}, {terminated("a", 0), waiting("b", 1)}) == "Running");
  CHECK(getPhase(s, {}, {running("a"), waiting("b")}) == "Pending");
}

TEST_CASE("getPhase with init containers", "[unit][agent]") {
  auto never = spec("Never", {"app"}, {"init"});
  CHECK(getPhase(never, {}, {}) == "Pending");
  CHECK(getPhase(never, {running("init")}, {}) == "Pending");
  CHECK(getPhase(never, {terminated("init", 1)}, {}) == "Failed");
  CHECK(getPhase(never, {terminated("init", 0)}, {running("app")}) == "Running");
  auto always = spec("Always", {"app"}, {"init"});
  CHECK(getPhase(always, {terminated("init", 1)}, {}) == "Pending");  // retried, app waits
  CHECK(getPhase(always, {waiting("init", 1)}, {waiting("app")}) == "Pending");
  CHECK(getPhase(always, {waiting("init")}, {}) == "Pending");
}

TEST_CASE("ContainersReady and Ready conditions", "[unit][agent]") {
  auto s = spec("Always", {"a", "b"});
  auto c = agent::generateContainersReadyCondition(s, {}, false, "Pending");
  CHECK(c.status == "False");
  CHECK(c.reason == "UnknownContainerStatuses");

  c = agent::generateContainersReadyCondition(s, {ready(running("a"))}, true, "Pending");
  CHECK(c.reason == "ContainersNotReady");
  CHECK(c.message == "containers with unknown status: [b]");

  c = agent::generateContainersReadyCondition(s, {running("a"), running("b")}, true, "Running");
  CHECK(c.message == "containers with unready status: [a b]");

  c = agent::generateContainersReadyCondition(s, {ready(running("a")), ready(running("b"))}, true,
                                              "Running");
  CHECK(c.status == "True");
  CHECK(c.reason.empty());

  c = agent::generateContainersReadyCondition(s, {terminated("a", 0), terminated("b", 0)}, true,
                                              "Succeeded");
  CHECK(c.status == "False");
  CHECK(c.reason == "PodCompleted");

  auto r = agent::generatePodReadyCondition(s, {}, {running("a")}, true, "Pending");
  CHECK(r.type == "Ready");
  CHECK(r.status == "False");
  CHECK(r.message == "containers with unknown status: [b], containers with unready status: [a]");
}

TEST_CASE("Ready condition honours readiness gates", "[unit][agent]") {
  auto s = spec("Always", {"a"});
  s.readiness_gates = {"example.com/lb", "example.com/dns"};
  std::vector<api::ContainerStatus> statuses{ready(running("a"))};
  api::PodCondition lb;
  lb.type = "example.com/lb";
  lb.status = "False";
  auto r = agent::generatePodReadyCondition(s, {lb}, statuses, true, "Running");
  CHECK(r.status == "False");
  CHECK(r.reason == "ReadinessGatesNotReady");
  CHECK(r.message ==
        "the status of pod readiness gate \"example.com/lb\" is not \"True\", but False, "
        "corresponding condition of pod readiness gate \"example.com/dns\" does not exist.");
  lb.status = "True";
  api::PodCondition dns = lb;
  dns.type = "example.com/dns";
  CHECK(agent::generatePodReadyCondition(s, {lb, dns}, statuses, true, "Running").status == "True");
}

TEST_CASE("Initialized condition", "[unit][agent]") {
  auto none = spec("Always", {"a"});
  CHECK(agent::generatePodInitializedCondition(none, {}, false, "Pending").status == "True");
  auto s = spec("Always", {"a"}, {"i1", "i2"});
  auto c = agent::generatePodInitializedCondition(s, {}, false, "Pending");
  CHECK(c.reason == "UnknownContainerStatuses");
  c = agent::generatePodInitializedCondition(s, {ready(terminated("i1", 0))}, true, "Pending");
  CHECK(c.status == "False");
  CHECK(c.reason == "ContainersNotInitialized");
  CHECK(c.message == "containers with incomplete status: [i2]");
  c = agent::generatePodInitializedCondition(
      s, {ready(terminated("i1", 0)), ready(terminated("i2", 0))}, true, "Running");
  CHECK(c.status == "True");
  c = agent::generatePodInitializedCondition(s, {terminated("i1", 0), terminated("i2", 0)}, true,
                                             "Succeeded");
  CHECK(c.status == "True");
  CHECK(c.reason == "PodCompleted");
}

TEST_CASE("notRunning and kubelet-owned conditions", "[unit][agent]") {
  CHECK(agent::notRunning({}));
  CHECK(agent::notRunning({terminated("a", 0), waiting("b")}));
  CHECK_FALSE(agent::notRunning({terminated("a", 0), running("b")}));
  CHECK(agent::podConditionByKubelet("Ready"));
  CHECK(agent::podConditionByKubelet("PodScheduled"));
  CHECK_FALSE(agent::podConditionByKubelet("example.com/lb"));
  CHECK(api::isTerminalPhase("Failed"));
  CHECK_FALSE(api::isTerminalPhase("Running"));
}
