// The agent's handlers and syncPod against the FakeRuntime, on the fake clock (agent_harness.h).
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

#include <httplib.h>

#include "agent/agent.h"
#include "agent/cm/container_manager.h"
#include "agent/read_only_server.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/status/pod_status.h"
#include "agent/volume/tmpfs.h"
#include "api/pod_json.h"
#include "api/pod_update.h"
#include "podmanager/mirror_client.h"
#include "test/support/fake_clock.h"
#include "test/support/integration_env.h"
#include "test/support/pod_builder.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"
#include "test/unit/agent/agent_harness.h"

using namespace nodeagent;
using namespace nodeagent::testing::agent_harness;

TEST_CASE("agent: an added pod gets its containers started and reports Running", "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  auto starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].pod_uid == "uid-web");
  CHECK(starts[0].container_name == "web");
  CHECK(starts[0].attempt == 0);
  CHECK(h.phase("uid-web") == "Running");
  auto status = *h.status_manager.getPodStatus("uid-web");
  CHECK(status.pod_ip == "10.0.0.1");
  REQUIRE(status.container_statuses.size() == 1);
  CHECK(status.container_statuses[0].ready);
  CHECK(agent::findCondition(status.conditions, "Ready")->status == "True");
  auto counted = h.agent->metrics().configUpdates();
  CHECK(counted[{"ADD", "file"}] == 1);
  CHECK(h.agent->metrics().containers_started == 1);

  SECTION("a periodic resync of an unchanged pod starts nothing") {
    h.advance(2min);
    CHECK(h.actions(Action::Kind::kStart).size() == 1);
  }
  SECTION("removing it kills its container") {
    h.update(api::PodOperation::kRemove, {webPod()});
    auto kills = h.actions(Action::Kind::kKill);
    REQUIRE(kills.size() == 1);
    CHECK(kills[0].container_name == "web");
    CHECK(h.runtime.runningContainerCount() == 0);
  }
}

TEST_CASE("agent: a container starts with the node allocatable its resourceFieldRefs read",
          "[unit][agent]") {
  Harness h;  // allocatable: 4 CPUs, 8 GiB
  h.update(api::PodOperation::kAdd, {webPod()});
  auto starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].node_allocatable.cpu_milli == 4000);
  CHECK(starts[0].node_allocatable.memory_bytes == int64_t{8} << 30);
}

TEST_CASE("agent: a changed container spec restarts that container", "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  auto changed = testing::PodBuilder()
                     .name("web-node1")
                     .uid("uid-web")
                     .annotation("kubernetes.io/config.source", "file")
                     .container("web", {"sleep", "2000"})
                     .build();
  h.update(api::PodOperation::kUpdate, {changed});
  auto all = h.runtime.actions();
  REQUIRE(all.size() == 3);
  CHECK(all[1].kind == Action::Kind::kKill);  // the old one is stopped before the new starts
  CHECK(all[2].kind == Action::Kind::kStart);
  CHECK(all[2].attempt == 1);
}

TEST_CASE("agent: a crashing container restarts at once, then backs off 10s doubling",
          "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  CHECK(h.actions(Action::Kind::kStart).size() == 2);  // first restart: no backoff yet

  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  auto status = *h.status_manager.getPodStatus("uid-web");
  REQUIRE(status.container_statuses[0].state.waiting);
  CHECK(status.container_statuses[0].state.waiting->reason == "CrashLoopBackOff");
  CHECK(status.container_statuses[0].last_state.terminated);
  CHECK(h.phase("uid-web") == "Running");

  h.advance(9s);
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  h.advance(1500ms);
  REQUIRE(h.actions(Action::Kind::kStart).size() == 3);
  CHECK(h.actions(Action::Kind::kStart).back().attempt == 2);

  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  h.advance(15s);
  CHECK(h.actions(Action::Kind::kStart).size() == 3);  // now 20s
  h.advance(6s);
  CHECK(h.actions(Action::Kind::kStart).size() == 4);
  CHECK(h.status_manager.getPodStatus("uid-web")->container_statuses[0].restart_count == 3);
}

TEST_CASE("agent: restart policies Never and OnFailure", "[unit][agent]") {
  Harness h;
  SECTION("Never: a failed container stays down and the pod fails") {
    h.update(api::PodOperation::kAdd, {webPod("u1", "Never")});
    REQUIRE(h.runtime.exitContainer("u1", "web", 3));
    h.drain();
    CHECK(h.actions(Action::Kind::kStart).size() == 1);
    CHECK(h.phase("u1") == "Failed");
    auto s = *h.status_manager.getPodStatus("u1");
    REQUIRE(s.container_statuses[0].state.terminated);
    CHECK(s.container_statuses[0].state.terminated->exit_code == 3);
  }
  SECTION("OnFailure: restarted after a failure, done after success") {
    h.update(api::PodOperation::kAdd, {webPod("u1", "OnFailure")});
    REQUIRE(h.runtime.exitContainer("u1", "web", 1));
    h.drain();
    CHECK(h.actions(Action::Kind::kStart).size() == 2);
    REQUIRE(h.runtime.exitContainer("u1", "web", 0));
    h.drain();
    h.advance(30s);
    CHECK(h.actions(Action::Kind::kStart).size() == 2);
    CHECK(h.phase("u1") == "Succeeded");
  }
}

TEST_CASE("agent: a terminated pod's secret tmpfs is unmounted while its exited container is kept",
          "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod("u1", "Never")});
  const auto pod_dir = h.root.path() / "pods" / "u1";
  const auto secret = pod_dir / "volumes" / "kubernetes.io~secret" / "creds";
  auto mounted = agent::ensureTmpfs(secret);
  REQUIRE(mounted.ok());
  if (!*mounted) testing::skipTest("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
  struct Unmount {  // even when a check fails, before the temporary directory goes
    std::filesystem::path dir;
    ~Unmount() { agent::unmountPodVolumes(dir); }
  } unmount{pod_dir};
  h.drain();
  CHECK(agent::isMountPoint(secret));  // a running pod keeps it
  REQUIRE(h.runtime.exitContainer("u1", "web", 3));
  h.drain();
  REQUIRE(h.phase("u1") == "Failed");
  CHECK_FALSE(agent::isMountPoint(secret));
  // The pod is still wanted: its exited container (and so its directory) stays.
  CHECK(h.runtimeStatus("u1").container_statuses.size() == 1);
  CHECK(std::filesystem::is_directory(pod_dir));
}

TEST_CASE("agent: init containers run in order, each to success, before app containers",
          "[unit][agent]") {
  Harness h;
  auto pod = testing::PodBuilder()
                 .name("job-node1")
                 .uid("u-init")
                 .annotation("kubernetes.io/config.source", "file")
                 .initContainer("init1", {"true"})
                 .initContainer("init2", {"true"})
                 .container("app", {"sleep", "100"})
                 .build();
  h.update(api::PodOperation::kAdd, {pod});
  auto names = [&] {
    std::vector<std::string> out;
    for (auto& a : h.actions(Action::Kind::kStart)) out.push_back(a.container_name);
    return out;
  };
  CHECK(names() == std::vector<std::string>{"init1"});
  CHECK(h.phase("u-init") == "Pending");
  REQUIRE(h.runtime.exitContainer("u-init", "init1", 0));
  h.drain();
  CHECK(names() == std::vector<std::string>{"init1", "init2"});
  REQUIRE(h.runtime.exitContainer("u-init", "init2", 0));
  h.drain();
  CHECK(names() == std::vector<std::string>{"init1", "init2", "app"});
  CHECK(h.phase("u-init") == "Running");
  auto s = *h.status_manager.getPodStatus("u-init");
  CHECK(agent::findCondition(s.conditions, "Initialized")->status == "True");
}

TEST_CASE("agent: admission rejects a pod over --max-pods, it gets Failed and no worker",
          "[unit][agent]") {
  Harness h(/*max_pods=*/1);
  h.update(api::PodOperation::kAdd, {webPod("u1")});
  auto second = testing::PodBuilder()
                    .name("other-node1")
                    .uid("u2")
                    .annotation("kubernetes.io/config.source", "file")
                    .container("c", {"sleep", "1"})
                    .build();
  h.update(api::PodOperation::kAdd, {second});
  CHECK(h.actions(Action::Kind::kStart).size() == 1);
  auto s = *h.status_manager.getPodStatus("u2");
  CHECK(s.phase == "Failed");
  CHECK(s.reason == "OutOfpods");
  CHECK(s.message.rfind("Pod Node didn't have enough resource: pods", 0) == 0);
  h.update(api::PodOperation::kUpdate, {second});
  h.advance(5s);
  CHECK(h.actions(Action::Kind::kStart).size() == 1);
}

TEST_CASE("agent: a pod past activeDeadlineSeconds is killed and fails", "[unit][agent]") {
  Harness h;
  auto pod = testing::PodBuilder()
                 .name("deadline-node1")
                 .uid("u-dl")
                 .annotation("kubernetes.io/config.source", "file")
                 .container("c", {"sleep", "1000"})
                 .activeDeadlineSeconds(30)
                 .build();
  h.update(api::PodOperation::kAdd, {pod});
  CHECK(h.runtime.runningContainerCount() == 1);
  h.advance(29s);
  CHECK(h.runtime.runningContainerCount() == 1);
  h.advance(3s);
  CHECK(h.runtime.runningContainerCount() == 0);
  auto s = *h.status_manager.getPodStatus("u-dl");
  CHECK(s.phase == "Failed");
  CHECK(s.reason == "DeadlineExceeded");
}

TEST_CASE("agent: housekeeping kills runtime pods no source wants, only once sources are ready",
          "[unit][agent]") {
  Harness h;
  h.sources_ready = false;
  h.update(api::PodOperation::kAdd, {webPod("orphan")});
  // The pod disappears from the pod manager without a REMOVE (as after an agent restart).
  h.pod_manager.deletePod(webPod("orphan"));
  h.advance(5s);
  CHECK(h.runtime.runningContainerCount() == 1);
  h.sources_ready = true;
  h.advance(3s);
  CHECK(h.runtime.runningContainerCount() == 0);
}

TEST_CASE(
    "agent: housekeeping stops the ready sandbox of a runtime pod no source wants, then removes "
    "its exited containers and sandboxes, and only then its directory",
    "[unit][agent]") {
  Harness h;
  h.runtime.setListsSandboxes(true);
  h.sources_ready = false;
  h.update(api::PodOperation::kAdd, {webPod("orphan")});
  h.advance(1s);
  REQUIRE(h.runtime.runningContainerCount() == 1);
  // The container ended on its own: only the ready sandbox still runs.
  REQUIRE(h.runtime.exitContainer("orphan", "web", 0));
  h.drain();
  h.pod_manager.deletePod(webPod("orphan"));  // as after an agent restart
  const auto dir = h.root.path() / "pods" / "orphan";
  REQUIRE(std::filesystem::exists(dir));
  h.advance(5s);
  CHECK(h.runtimeStatus("orphan").sandbox_statuses.at(0).state == runtime::SandboxState::kReady);
  h.sources_ready = true;
  h.advance(10s);
  auto gone = h.runtimeStatus("orphan");
  CHECK(gone.container_statuses.empty());
  CHECK(gone.sandbox_statuses.empty());
  h.advance(10s);
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE(
    "agent: housekeeping keeps only the newest exited container of each name of a pod that "
    "restarts (kubelet's container GC)",
    "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  h.advance(1s);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
    h.drain();
    // Past the crash-loop backoff (at most 40 s here) and kubelet's container GC period (1 min),
    // well before housekeeping's full pass (5 min).
    h.advance(70s);
  }
  auto status = h.runtimeStatus("uid-web");
  size_t running = 0;
  size_t exited = 0;
  for (const auto& cs : status.container_statuses) {
    if (cs.state == runtime::ContainerState::kRunning) ++running;
    if (cs.state == runtime::ContainerState::kExited) ++exited;
  }
  CHECK(h.actions(Action::Kind::kStart).size() == 4);
  CHECK(running == 1);
  CHECK(exited == 1);
  // The one kept is the last that ran (restart count 2), shown as the last state.
  const auto* last = status.findContainerStatusByName("web");
  REQUIRE(last != nullptr);
  CHECK(last->restart_count == 3);
  REQUIRE(status.container_statuses.size() == 2);
  CHECK(status.container_statuses[1].restart_count == 2);
}

TEST_CASE(
    "agent: housekeeping removes a wanted pod's older sandboxes that are not ready and hold no "
    "container, and keeps its newest (kubelet's sandbox GC)",
    "[unit][agent]") {
  Harness h;
  h.runtime.setListsSandboxes(true);
  h.update(api::PodOperation::kAdd, {webPod()});
  h.advance(1s);
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  h.advance(15s);  // past the crash-loop backoff: restarted, the exited one stays
  std::string exited_id;
  for (const auto& cs : h.runtimeStatus("uid-web").container_statuses) {
    if (cs.state == runtime::ContainerState::kExited) exited_id = cs.id.id;
  }
  REQUIRE_FALSE(exited_id.empty());
  using runtime::SandboxState;
  h.runtime.addOlderSandbox("uid-web", {"old-busy", SandboxState::kNotReady, 0, {}}, {exited_id});
  h.runtime.addOlderSandbox("uid-web", {"old-idle", SandboxState::kNotReady, 0, {}});
  h.advance(5min);  // a full housekeeping period
  std::vector<std::string> left;
  for (const auto& s : h.runtimeStatus("uid-web").sandbox_statuses) left.push_back(s.id);
  CHECK(left == std::vector<std::string>{"uid-web", "old-busy"});
  CHECK(h.runtime.runningContainerCount() == 1);
}

TEST_CASE("agent: a removal from a source that has not reported is not acted on", "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  h.sources_ready = false;
  h.update(api::PodOperation::kRemove, {webPod()});
  CHECK(h.actions(Action::Kind::kKill).empty());
}

TEST_CASE(
    "agent: a pod's sandbox is made before its first container, stopped once its containers are "
    "killed, and removed with the pod",
    "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  CHECK(h.runtime.sandboxesRun() == 1);
  auto running = h.runtimeStatus("uid-web");
  REQUIRE(running.sandbox_statuses.size() == 1);
  CHECK(running.sandbox_statuses[0].state == runtime::SandboxState::kReady);
  CHECK(running.sandbox_statuses[0].attempt == 0);
  REQUIRE(running.container_statuses.size() == 1);

  SECTION("a restart of a container reuses the ready sandbox") {
    REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
    h.advance(1s);
    CHECK(h.actions(Action::Kind::kStart).size() == 2);
    CHECK(h.runtime.sandboxesRun() == 1);
  }
  SECTION("a pod that ends on its own has its sandbox stopped") {
    h.update(api::PodOperation::kUpdate, {webPod("uid-web", "Never")});
    REQUIRE(h.runtime.exitContainer("uid-web", "web", 0));
    h.advance(3s);
    CHECK(h.phase("uid-web") == "Succeeded");
    auto ended = h.runtimeStatus("uid-web");
    REQUIRE(ended.sandbox_statuses.size() == 1);
    CHECK(ended.sandbox_statuses[0].state == runtime::SandboxState::kNotReady);
  }
  SECTION("a removed pod loses its containers and its sandbox") {
    h.update(api::PodOperation::kRemove, {webPod()});
    h.advance(3s);
    auto gone = h.runtimeStatus("uid-web");
    CHECK(gone.sandbox_statuses.empty());
    CHECK(gone.container_statuses.empty());
    SECTION("added again, it gets a new sandbox") {
      h.update(api::PodOperation::kAdd, {webPod()});
      h.advance(3s);
      CHECK(h.runtime.sandboxesRun() == 2);
      CHECK(h.runtimeStatus("uid-web").sandbox_statuses.at(0).state ==
            runtime::SandboxState::kReady);
    }
  }
}

TEST_CASE(
    "agent: a sandbox that stops being ready is seen by the next relist and replaced, its "
    "containers started again in the new one, without waiting for the resync",
    "[unit][agent]") {
  Harness h;
  h.runtime.setListsSandboxes(true);
  h.update(api::PodOperation::kAdd, {webPod()});
  h.advance(1s);
  REQUIRE(h.runtime.sandboxesRun() == 1);
  REQUIRE(h.actions(Action::Kind::kStart).size() == 1);
  // Its pause process died: the runtime says the sandbox is not ready; the container runs on.
  asio::co_spawn(h.ioc, h.runtime.stopPodSandbox("uid-web"), asio::detached);
  h.drain();
  h.advance(11s);  // one relist period (10 s), well within the resync (1 min)
  CHECK(h.runtime.sandboxesRun() == 2);
  CHECK(h.actions(Action::Kind::kKill).size() == 1);
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  auto status = h.runtimeStatus("uid-web");
  REQUIRE_FALSE(status.sandbox_statuses.empty());
  CHECK(status.sandbox_statuses[0].state == runtime::SandboxState::kReady);
  CHECK(status.sandbox_statuses[0].attempt == 1);
}

TEST_CASE("agent: containers the runtime had before sandboxes existed keep running in theirs",
          "[unit][agent]") {
  Harness h;
  // A container started straight through the runtime (as one adopted from a previous agent).
  auto pod = webPod();
  asio::co_spawn(
      h.ioc,
      [&h, pod]() -> asio::awaitable<void> {
        runtime::StartContainerOptions options;  // named: see GCC 12 and co_await temporaries
        auto id = co_await h.runtime.startContainer(pod, pod->spec->containers[0], 0, options);
        CHECK(id.ok());
      },
      asio::detached);
  h.drain();
  h.update(api::PodOperation::kAdd, {pod});
  h.advance(3s);
  CHECK(h.runtime.sandboxesRun() == 0);
  CHECK(h.actions(Action::Kind::kKill).empty());
  CHECK(h.runtime.runningContainerCount() == 1);
  CHECK(h.phase("uid-web") == "Running");
}

TEST_CASE("agent: the same manifest removed and added again is started again", "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  h.update(api::PodOperation::kRemove, {webPod()});
  CHECK(h.runtime.runningContainerCount() == 0);
  h.update(api::PodOperation::kAdd, {webPod()});
  h.advance(3s);
  CHECK(h.runtime.runningContainerCount() == 1);
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  CHECK(h.phase("uid-web") == "Running");
}

namespace {

api::PodPtr probedWebPod(nlohmann::json probes, const std::string& policy = "Always") {
  return testing::PodBuilder()
      .name("web-node1")
      .uid("uid-web")
      .annotation("kubernetes.io/config.source", "file")
      .container("web", {"sleep", "1000"})
      .restartPolicy(policy)
      .edit([&](nlohmann::json& j) {
        for (auto& [k, v] : probes.items()) j["spec"]["containers"][0][k] = v;
      })
      .build();
}

nlohmann::json execCheck(const std::string& word, int period = 10) {
  return {{"exec", {{"command", {word}}}}, {"periodSeconds", period}};
}

}  // namespace

TEST_CASE("agent: a readiness probe holds the pod's Ready condition until it succeeds",
          "[unit][agent][prober]") {
  Harness h;
  std::atomic<int> ready_exit{1};
  h.runtime.setExecHandler([&](const std::string&, const std::vector<std::string>& cmd) {
    return runtime::ExecResult{cmd.at(0) == "ready" ? ready_exit.load() : 0, false, "not yet"};
  });
  h.update(api::PodOperation::kAdd, {probedWebPod({{"readinessProbe", execCheck("ready", 5)}})});
  h.advance(100ms);
  auto status = *h.status_manager.getPodStatus("uid-web");
  CHECK(status.phase == "Running");
  CHECK_FALSE(status.container_statuses.at(0).ready);
  CHECK(agent::findCondition(status.conditions, "Ready")->status == "False");
  CHECK(agent::findCondition(status.conditions, "ContainersReady")->reason == "ContainersNotReady");
  CHECK(h.hasEvent("Unhealthy: Readiness probe failed: not yet"));

  ready_exit = 0;
  h.advance(5s);  // the next run succeeds and wakes the pod's sync
  status = *h.status_manager.getPodStatus("uid-web");
  CHECK(status.container_statuses.at(0).ready);
  CHECK(agent::findCondition(status.conditions, "Ready")->status == "True");

  ready_exit = 1;
  h.advance(16s);  // three failures in a row (failureThreshold 3)
  status = *h.status_manager.getPodStatus("uid-web");
  CHECK_FALSE(status.container_statuses.at(0).ready);
  CHECK(h.actions(Action::Kind::kKill).empty());  // readiness never restarts anything
}

TEST_CASE("agent: a liveness probe failing failureThreshold times restarts the container",
          "[unit][agent][prober]") {
  std::string policy = GENERATE(std::string("Always"), std::string("Never"));
  Harness h;
  h.runtime.setKillExitCode(137);
  h.runtime.setExecHandler([](const std::string&, const std::vector<std::string>&) {
    return runtime::ExecResult{1, false, "sick"};
  });
  h.update(api::PodOperation::kAdd,
           {probedWebPod({{"livenessProbe", execCheck("live", 10)}}, policy)});
  h.advance(19s);  // failures at 0s and 10s
  CHECK(h.actions(Action::Kind::kKill).empty());
  h.advance(2s);  // the third at 20s
  auto kills = h.actions(Action::Kind::kKill);
  REQUIRE(!kills.empty());
  if (policy == "Always") {
    REQUIRE(kills.size() == 1);
    CHECK(kills[0].reason == "Container web failed liveness probe, will be restarted");
    CHECK(h.hasEvent("Killing: Container web failed liveness probe, will be restarted"));
    auto starts = h.actions(Action::Kind::kStart);
    REQUIRE(starts.size() == 2);
    CHECK(starts[1].attempt == 1);
    // The new container is probed afresh: three more failures before the next restart.
    h.advance(19s);
    CHECK(h.actions(Action::Kind::kKill).size() == 1);
  } else {
    CHECK(kills.back().reason == "Container web failed liveness probe");
    CHECK(h.actions(Action::Kind::kStart).size() == 1);
    CHECK(h.phase("uid-web") == "Failed");
  }
  CHECK(h.hasEvent("Unhealthy: Liveness probe failed: sick"));
}

TEST_CASE("agent: a failed postStart hook kills the container with FailedPostStartHook",
          "[unit][agent][prober]") {
  Harness h;
  std::atomic<int> failures_left{1};
  h.runtime.setExecHandler([&](const std::string&, const std::vector<std::string>&) {
    if (failures_left.load() == 0) return runtime::ExecResult{};
    --failures_left;
    return runtime::ExecResult{3, false, "no config"};
  });
  SECTION("once: it is started again at once (before any backoff) and keeps running") {}
  SECTION("always: it ends in CrashLoopBackOff") { failures_left = 1000; }
  h.update(api::PodOperation::kAdd,
           {probedWebPod(
               {{"lifecycle", {{"postStart", {{"exec", {{"command", {"setup", "--now"}}}}}}}}})});
  auto execs = h.runtime.execs();
  REQUIRE(execs.size() == 2);
  CHECK(execs[0].second == std::vector<std::string>{"setup", "--now"});
  auto kills = h.actions(Action::Kind::kKill);
  REQUIRE(!kills.empty());
  CHECK(kills[0].reason == "FailedPostStartHook");
  CHECK(h.hasEvent(
      "FailedPostStartHook: Exec lifecycle hook ([setup --now]) for Container \"web\" in Pod "
      "\"web-node1_default(uid-web)\" failed - error: command 'setup --now' exited with 3: "
      "no config, message: \"no config\""));
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  auto status = *h.status_manager.getPodStatus("uid-web");
  const auto& cs = status.container_statuses.at(0);
  CHECK(cs.restart_count == 1);
  if (failures_left == 0) {
    CHECK(kills.size() == 1);
    CHECK(h.runtime.runningContainerCount() == 1);
    CHECK(cs.state.running);
  } else {
    CHECK(kills.size() == 2);
    REQUIRE(cs.state.waiting);
    CHECK(cs.state.waiting->reason == "CrashLoopBackOff");
  }
}

TEST_CASE("agent: a liveness or startup probe's terminationGracePeriodSeconds bounds its kill",
          "[unit][agent][prober]") {
  const std::string probe = GENERATE(std::string("livenessProbe"), std::string("startupProbe"));
  const bool probe_grace = GENERATE(true, false);
  Harness h;
  h.runtime.setExecHandler([](const std::string&, const std::vector<std::string>&) {
    return runtime::ExecResult{1, false, "sick"};
  });
  auto check = execCheck("live", 10);
  check["failureThreshold"] = 1;
  if (probe_grace) check["terminationGracePeriodSeconds"] = 5;
  h.update(api::PodOperation::kAdd, {probedWebPod({{probe, check}})});
  h.advance(1s);
  auto kills = h.actions(Action::Kind::kKill);
  // The first two restarts come at once (the second finds no backoff entry yet, as kubelet's
  // doBackOff), the third waits out the 10 s backoff.
  REQUIRE(kills.size() == 3);
  CHECK(h.actions(Action::Kind::kStart).size() == 3);
  for (const auto& kill : kills) {
    CHECK(kill.kill_options.probe_grace ==
          (probe_grace ? std::optional<int64_t>(5) : std::nullopt));
    // Without the probe's own, the pod's (defaulted) terminationGracePeriodSeconds: 30.
    CHECK(kill.grace_seconds == (probe_grace ? 5 : 30));
  }
  auto cs = h.status_manager.getPodStatus("uid-web")->container_statuses.at(0);
  REQUIRE(cs.state.waiting);
  CHECK(cs.state.waiting->reason == "CrashLoopBackOff");
}

TEST_CASE("agent: a pod being deleted is killed with its deletion grace, not a probe's",
          "[unit][agent][prober]") {
  auto pod =
      *probedWebPod({{"livenessProbe",
                      {{"exec", {{"command", {"live"}}}}, {"terminationGracePeriodSeconds", 5}}}});
  pod.metadata.deletion_grace_period_seconds = 7;
  CHECK(runtime::killGracePeriodSeconds(pod, 5) == 7);
  pod.metadata.deletion_grace_period_seconds.reset();
  CHECK(runtime::killGracePeriodSeconds(pod, 5) == 5);
  CHECK(runtime::killGracePeriodSeconds(pod, std::nullopt) == 30);
}

TEST_CASE(
    "agent: a preStop hook runs before the kill, and its failure is a FailedPreStopHook event",
    "[unit][agent][prober]") {
  Harness h;
  const bool fails = GENERATE(false, true);
  h.runtime.setExecHandler([&](const std::string&, const std::vector<std::string>&) {
    return fails ? runtime::ExecResult{2, false, "drain failed"} : runtime::ExecResult{};
  });
  auto pod =
      probedWebPod({{"lifecycle", {{"preStop", {{"exec", {{"command", {"drain", "-q"}}}}}}}}});
  h.update(api::PodOperation::kAdd, {pod});
  REQUIRE(h.runtime.execs().empty());
  h.update(api::PodOperation::kRemove, {pod});
  auto execs = h.runtime.execs();
  REQUIRE(execs.size() == 1);
  CHECK(execs[0].second == std::vector<std::string>{"drain", "-q"});
  auto kills = h.actions(Action::Kind::kKill);
  REQUIRE(kills.size() == 1);
  CHECK(h.runtime.runningContainerCount() == 0);
  if (fails) {
    CHECK(
        h.hasEvent("FailedPreStopHook: Exec lifecycle hook ([drain -q]) for Container \"web\" in "
                   "Pod \"web-node1_default(uid-web)\" failed - error: command 'drain -q' exited "
                   "with 2: drain failed, message: \"drain failed\""));
  } else {
    CHECK(h.eventsWithReason("FailedPreStopHook").empty());
  }
}

TEST_CASE("agent: housekeeping does no work while nothing changes, with a periodic full pass",
          "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  h.advance(5s);  // the first passes after the start
  const auto skipped = h.agent->metrics().housekeeping_skipped.load();
  // A stray pod directory nothing reports as a change: only the safety-net pass finds it.
  const auto stray = h.root.path() / "pods" / "stray-uid";
  std::filesystem::create_directories(stray);
  h.advance(10s);
  CHECK(h.agent->metrics().housekeeping_skipped >= skipped + 4);
  CHECK(std::filesystem::exists(stray));
  h.advance(5min);
  CHECK_FALSE(std::filesystem::exists(stray));
  CHECK(std::filesystem::exists(h.root.path() / "pods" / "uid-web"));
  CHECK(h.runtime.runningContainerCount() == 1);
}

TEST_CASE("agent: housekeeping runs at the next tick after the pod manager changes",
          "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  h.advance(10s);
  REQUIRE(h.runtime.runningContainerCount() == 1);
  const auto skipped = h.agent->metrics().housekeeping_skipped.load();
  REQUIRE(skipped > 0);
  // Gone from the pod manager without a REMOVE: housekeeping, not a handler, must notice.
  h.pod_manager.deletePod(webPod());
  h.advance(2100ms);
  CHECK(h.runtime.runningContainerCount() == 0);
  CHECK(h.actions(Action::Kind::kKill).size() == 1);
}

TEST_CASE("agent: housekeeping runs at the next tick after a container nobody wants appears",
          "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  h.advance(10s);
  const auto stray = h.root.path() / "pods" / "stray-uid";
  std::filesystem::create_directories(stray);
  // A container exit of a wanted pod is no reason to look at everything again.
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.advance(2100ms);
  CHECK(std::filesystem::exists(stray));
  // A container of a pod nobody wants (PLEG event for an unknown UID) is.
  auto unknown = webPod("uid-unknown");
  asio::co_spawn(
      h.ioc,
      [&h, unknown]() -> asio::awaitable<void> {
        runtime::StartContainerOptions options;  // named: see GCC 12 and co_await temporaries
        auto id =
            co_await h.runtime.startContainer(unknown, unknown->spec->containers[0], 0, options);
        CHECK(id.ok());
      },
      asio::detached);
  h.drain();
  REQUIRE(h.runtime.containerStatus("uid-unknown", "web")->state ==
          runtime::ContainerState::kRunning);
  h.advance(2100ms);
  CHECK_FALSE(std::filesystem::exists(stray));
  CHECK(h.runtime.containerStatus("uid-unknown", "web")->state == runtime::ContainerState::kExited);
}

TEST_CASE("agent: admission counts pods of earlier batches, and frees a slot once a pod ends",
          "[unit][agent]") {
  Harness h(/*max_pods=*/2);
  auto pod = [](const std::string& uid, const std::string& policy = "Always") {
    return testing::PodBuilder()
        .name("p-" + uid + "-node1")
        .uid(uid)
        .annotation("kubernetes.io/config.source", "file")
        .container("c", {"sleep", "1"})
        .restartPolicy(policy)
        .build();
  };
  h.update(api::PodOperation::kAdd, {pod("u1", "Never")});
  h.update(api::PodOperation::kAdd, {pod("u2")});
  h.update(api::PodOperation::kAdd, {pod("u3")});
  CHECK(h.phase("u1") == "Running");
  CHECK(h.phase("u2") == "Running");
  CHECK(h.status_manager.getPodStatus("u3")->reason == "OutOfpods");
  // u1 completes (restartPolicy Never): it no longer counts.
  REQUIRE(h.runtime.exitContainer("u1", "c", 0));
  h.advance(1s);
  REQUIRE(h.phase("u1") == "Succeeded");
  h.update(api::PodOperation::kAdd, {pod("u4")});
  CHECK(h.phase("u4") == "Running");
  h.update(api::PodOperation::kAdd, {pod("u5")});
  CHECK(h.status_manager.getPodStatus("u5")->reason == "OutOfpods");
  // A removed pod frees its slot too.
  h.update(api::PodOperation::kRemove, {pod("u2")});
  h.advance(1s);
  h.update(api::PodOperation::kAdd, {pod("u6")});
  CHECK(h.phase("u6") == "Running");
}

TEST_CASE(
    "agent: housekeeping removes pod directories of unknown pods, and lists again only after a "
    "change",
    "[unit][agent]") {
  Harness h;
  auto pod = [](const std::string& name) {
    return testing::PodBuilder()
        .name(name + "-node1")
        .uid("uid-" + name)
        .annotation("kubernetes.io/config.source", "file")
        .container("web", {"sleep", "1000"})
        .build();
  };
  h.update(api::PodOperation::kAdd, {pod("a"), pod("b")});
  const auto pods = h.root.path() / "pods";
  std::filesystem::create_directories(pods / "stray-1");
  h.advance(6s);  // the pass that removes it, and the one after it that finds nothing to do
  CHECK(std::filesystem::exists(pods / "uid-a"));
  CHECK(std::filesystem::exists(pods / "uid-b"));
  CHECK_FALSE(std::filesystem::exists(pods / "stray-1"));

  // The same known pods: the directory is not listed again (only the agent makes pod directories).
  std::filesystem::create_directories(pods / "stray-2");
  h.advance(3s);
  CHECK(std::filesystem::exists(pods / "stray-2"));

  // A pod goes away: the next housekeeping lists again and removes both.
  h.update(api::PodOperation::kRemove, {pod("b")});
  h.advance(10s);
  CHECK_FALSE(std::filesystem::exists(pods / "uid-b"));
  CHECK_FALSE(std::filesystem::exists(pods / "stray-2"));
  CHECK(std::filesystem::exists(pods / "uid-a"));
}

TEST_CASE(
    "agent: a kill that outlasts grace plus half of it, at least 10s, gets ExceededGracePeriod",
    "[unit][agent]") {
  Harness h;
  auto slowPod = [](int64_t grace) {
    return testing::PodBuilder()
        .name("slow-node1")
        .uid("u-slow")
        .annotation("kubernetes.io/config.source", "file")
        .container("c", {"sleep", "1000"})
        .terminationGracePeriodSeconds(grace)
        .build();
  };

  SECTION("grace 30: reported after 45s, while the kill goes on") {
    h.update(api::PodOperation::kAdd, {slowPod(30)});
    h.runtime.setKillDelay(60s);
    h.update(api::PodOperation::kRemove, {slowPod(30)});
    h.advance(44s);
    CHECK(h.eventsWithReason("ExceededGracePeriod").empty());
    CHECK(h.runtime.runningContainerCount() == 1);
    h.advance(2s);
    auto exceeded = h.eventsWithReason("ExceededGracePeriod");
    REQUIRE(exceeded.size() == 1);
    CHECK(exceeded[0].pod == "slow-node1");
    CHECK(exceeded[0].type == "Warning");
    CHECK(exceeded[0].message ==
          "Container runtime did not kill the pod within specified grace period.");
    h.advance(20s);
    CHECK(h.runtime.runningContainerCount() == 0);
    CHECK(h.eventsWithReason("ExceededGracePeriod").size() == 1);
  }
  SECTION("grace 2: the 10s minimum applies") {
    h.update(api::PodOperation::kAdd, {slowPod(2)});
    h.runtime.setKillDelay(12s);
    h.update(api::PodOperation::kRemove, {slowPod(2)});
    h.advance(9s);
    CHECK(h.eventsWithReason("ExceededGracePeriod").empty());
    h.advance(2s);
    CHECK(h.eventsWithReason("ExceededGracePeriod").size() == 1);
    // The kill ends before the harness goes (its wait must not outlive the clock).
    h.advance(2s);
    CHECK(h.runtime.runningContainerCount() == 0);
  }
  SECTION("a kill within the window reports nothing") {
    h.update(api::PodOperation::kAdd, {slowPod(30)});
    h.runtime.setKillDelay(40s);
    h.update(api::PodOperation::kRemove, {slowPod(30)});
    h.advance(41s);
    CHECK(h.runtime.runningContainerCount() == 0);
    h.advance(60s);
    CHECK(h.eventsWithReason("ExceededGracePeriod").empty());
    CHECK(h.eventsWithReason("Killing").size() == 1);
  }
}

TEST_CASE("agent: /pods writes every pod with its newest status, also after its text changed",
          "[unit][agent]") {
  Harness h;
  testing::IoThreads io;
  io.start(1);
  agent::ReadOnlyServerOptions o;
  o.http.port = 0;
  agent::ReadOnlyServer server(io.executor(), base::realClock(), *h.agent, o);
  REQUIRE(server.start().ok());
  auto pods = [&] {
    httplib::Client cli("127.0.0.1", server.port());
    auto res = cli.Get("/pods");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    return nlohmann::json::parse(res->body).at("items");
  };
  CHECK(pods().empty());

  auto web = webPod("uid-web", "Never");
  h.update(api::PodOperation::kAdd, {web});
  auto items = pods();
  REQUIRE(items.size() == 1);
  CHECK(items[0]["status"]["phase"] == "Running");
  CHECK(items[0]["status"]["containerStatuses"][0]["state"].contains("running"));

  // A new status is written, the pod's text is kept.
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 3));
  h.drain();
  items = pods();
  REQUIRE(items.size() == 1);
  CHECK(items[0]["status"]["phase"] == "Failed");
  CHECK(items[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3);
  CHECK(items[0]["metadata"]["uid"] == "uid-web");

  // The same UID with other text (a label): the new text, with the status.
  auto labelled = testing::PodBuilder()
                      .name("web-node1")
                      .uid("uid-web")
                      .annotation("kubernetes.io/config.source", "file")
                      .label("tier", "front")
                      .container("web", {"sleep", "1000"})
                      .restartPolicy("Never")
                      .build();
  h.update(api::PodOperation::kUpdate, {labelled});
  items = pods();
  REQUIRE(items.size() == 1);
  CHECK(items[0]["metadata"]["labels"]["tier"] == "front");
  CHECK(items[0]["status"]["phase"] == "Failed");

  // Another pod, then the first one goes: each answer lists exactly the pods there are.
  h.update(api::PodOperation::kAdd, {webPod("uid-two")});
  CHECK(pods().size() == 2);
  h.update(api::PodOperation::kRemove, {labelled});
  h.advance(3s);
  items = pods();
  REQUIRE(items.size() == 1);
  CHECK(items[0]["metadata"]["uid"] == "uid-two");
  server.stop();
}

TEST_CASE(
    "agent: /pods of many decoded pods is whole JSON past the writer's chunk size, and an "
    "unchanged node answers the same text",
    "[unit][agent]") {
  Harness h(/*max_pods=*/1000);
  testing::IoThreads io;
  io.start(1);
  agent::ReadOnlyServerOptions o;
  o.http.port = 0;
  agent::ReadOnlyServer server(io.executor(), base::realClock(), *h.agent, o);
  REQUIRE(server.start().ok());
  auto get = [&] {
    httplib::Client cli("127.0.0.1", server.port());
    auto res = cli.Get("/pods");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    return res->body;
  };
  // Decoded pods carry their raw text, which /pods slices around the status; half of them
  // carry a status of their own, which the live one replaces.
  std::vector<api::PodPtr> pods;
  const std::string padding(2000, 'x');
  for (int i = 0; i < 300; ++i) {
    nlohmann::json j = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata",
         {{"name", "p" + std::to_string(i) + "-node1"},
          {"namespace", "default"},
          {"uid", "uid-" + std::to_string(1000 + i)},
          {"annotations", {{"kubernetes.io/config.source", "file"}, {"pad", padding}}}}},
        {"spec",
         {{"restartPolicy", "Never"},
          {"containers", {{{"name", "c"}, {"image", "x"}, {"command", {"sleep", "1000"}}}}}}}};
    if (i % 2 == 0) j["status"] = {{"phase", "Unknown"}, {"message", "from the manifest"}};
    auto pod = api::decodePodPtr(j);
    REQUIRE(pod.ok());
    pods.push_back(*pod);
  }
  h.update(api::PodOperation::kAdd, pods);
  const std::string body = get();
  REQUIRE(body.size() > 8 * 64 * 1024);
  auto items = nlohmann::json::parse(body).at("items");
  REQUIRE(items.size() == pods.size());
  for (size_t i = 0; i < items.size(); ++i) {
    INFO(i);
    CHECK(items[i]["metadata"]["uid"] == "uid-" + std::to_string(1000 + i));
    CHECK(items[i]["metadata"]["annotations"]["pad"] == padding);
    CHECK(items[i]["status"]["phase"] == "Running");
    CHECK_FALSE(items[i]["status"].contains("message"));
  }
  CHECK(get() == body);

  REQUIRE(h.runtime.exitContainer("uid-1150", "c", 4));
  h.drain();
  items = nlohmann::json::parse(get()).at("items");
  REQUIRE(items.size() == pods.size());
  CHECK(items[150]["status"]["phase"] == "Failed");
  CHECK(items[149]["status"]["phase"] == "Running");
  CHECK(items[151]["status"]["phase"] == "Running");
  server.stop();
}

TEST_CASE(
    "agent: a pod whose UID or volume name is not a path component is refused, nothing is "
    "created",
    "[unit][agent][security]") {
  Harness h;
  const auto escape_uid = testing::PodBuilder()
                              .name("escape-uid")
                              .uid("../../escape-u")
                              .container("web", {"sleep", "1000"})
                              .build();
  const auto escape_volume =
      testing::PodBuilder()
          .name("escape-volume")
          .uid("uid-volume")
          .container("web", {"sleep", "1000"})
          .edit([](nlohmann::json& p) {
            p["spec"]["volumes"] = {
                {{"name", "../../../../../escape-v"}, {"emptyDir", nlohmann::json::object()}}};
          })
          .build();
  REQUIRE(escape_volume->spec->volumes.size() == 1);
  h.update(api::PodOperation::kAdd, {escape_uid, escape_volume, webPod()}, "api");
  h.advance(3s);
  // Only the good pod's container started.
  auto starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].pod_uid == "uid-web");
  for (const auto* uid : {"../../escape-u", "uid-volume"}) {
    INFO(uid);
    auto status = h.status_manager.getPodStatus(uid);
    REQUIRE(status);
    CHECK(status->reason == "InvalidPodName");
    CHECK(status->message.find("is not a valid path component") != std::string::npos);
  }
  // <root>/pods/../../escape-u and the emptyDir's ../../../../../escape-v are both next to root.
  const auto parent = h.root.path().parent_path();
  CHECK_FALSE(std::filesystem::exists(parent / "escape-u"));
  CHECK_FALSE(std::filesystem::exists(parent / "escape-v"));
  CHECK_FALSE(std::filesystem::exists(h.root.path() / "pods" / "uid-volume"));
}

TEST_CASE("agent: an API pod may not have the agent create a hostPath, a static pod may",
          "[unit][agent][security]") {
  Harness h;
  const auto made_by = [&](const std::string& name, const std::string& type,
                           const std::string& source) {
    const auto target = h.root.path() / ("host-" + name) / "sub";
    return std::make_pair(
        target,
        testing::PodBuilder()
            .name(name)
            .uid("uid-" + name)
            .container("web", {"sleep", "1000"})
            .annotation("kubernetes.io/config.source", source)
            .edit([&](nlohmann::json& p) {
              p["spec"]["volumes"] = {
                  {{"name", "data"}, {"hostPath", {{"path", target.string()}, {"type", type}}}}};
            })
            .build());
  };
  auto [api_dir, api_dir_pod] = made_by("api-dir", "DirectoryOrCreate", "api");
  auto [api_file, api_file_pod] = made_by("api-file", "FileOrCreate", "api");
  auto [static_dir, static_dir_pod] = made_by("static-dir", "DirectoryOrCreate", "file");
  h.update(api::PodOperation::kAdd, {api_dir_pod, api_file_pod}, "api");
  h.update(api::PodOperation::kAdd, {static_dir_pod}, "file");
  h.advance(3s);
  for (const auto& [path, uid] :
       {std::pair{api_dir, "uid-api-dir"}, std::pair{api_file, "uid-api-file"}}) {
    INFO(uid);
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK_FALSE(std::filesystem::exists(path.parent_path()));
    auto status = h.status_manager.getPodStatus(uid);
    REQUIRE(status);
    CHECK_THAT(status->message, Catch::Contains("pods from the apiserver may not") &&
                                    Catch::Contains("--allow-root-api-pods") &&
                                    Catch::Contains(path.string()));
  }
  CHECK(std::filesystem::is_directory(static_dir));
  auto starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].pod_uid == "uid-static-dir");
}

TEST_CASE(
    "agent: a static pod's mirror pod is asked for again each second until the node is "
    "registered",
    "[unit][agent][mirror]") {
  Harness h;
  h.mirror_client.registered = false;
  h.update(api::PodOperation::kAdd,
           {testing::PodBuilder()
                .name("web")
                .uid("uid-static")
                .container("web", {"sleep", "1000"})
                .annotation("kubernetes.io/config.source", "file")
                .annotation("kubernetes.io/config.hash", "h1")
                .build()},
           "file");
  h.advance(3500ms);
  CHECK(h.mirror_client.created() == 0);
  CHECK(h.mirror_client.refused() >= 3);
  h.mirror_client.registered = true;
  h.advance(1s);
  CHECK(h.mirror_client.created() >= 1);
}

TEST_CASE("agent: a mirror pod that vanished from the apiserver is re-created at once",
          "[unit][agent][mirror]") {
  Harness h;
  auto static_pod = testing::PodBuilder()
                        .name("web")
                        .uid("uid-static")
                        .container("web", {"sleep", "1000"})
                        .annotation("kubernetes.io/config.source", "file")
                        .annotation("kubernetes.io/config.hash", "h1")
                        .build();
  auto mirror = testing::PodBuilder()
                    .name("web")
                    .uid("uid-mirror")
                    .container("web", {"sleep", "1000"})
                    .annotation("kubernetes.io/config.source", "api")
                    .annotation("kubernetes.io/config.mirror", "h1")
                    .build();
  h.update(api::PodOperation::kAdd, {static_pod}, "file");
  h.advance(1s);
  REQUIRE(h.mirror_client.created() >= 1);
  h.update(api::PodOperation::kAdd, {mirror}, "api");
  h.advance(1s);
  const int created = h.mirror_client.created();
  h.advance(5s);
  CHECK(h.mirror_client.created() == created);  // the mirror is there and is the static pod's
  // Gone without a deletion through the apiserver (its state was lost): made again at once.
  h.update(api::PodOperation::kRemove, {mirror}, "api");
  CHECK(h.mirror_client.created() == created + 1);
}

namespace {

// A cgroup v1 layout in a temp dir: one plain directory per controller, as the cgroup manager
// expects them mounted.
cm::CgroupMounts fakeV1Mounts(const std::filesystem::path& root) {
  cm::CgroupMounts mounts;
  mounts.version = cm::CgroupVersion::kV1;
  for (const char* controller : {"memory", "cpu", "cpuacct", "pids", "freezer"}) {
    std::filesystem::create_directories(root / controller);
    mounts.v1_roots[controller] = (root / controller).string();
  }
  return mounts;
}

// From the apiserver: a static pod would be critical (OOM score -998 whatever its QoS).
api::PodPtr burstablePod(const std::string& uid) {
  return testing::PodBuilder()
      .name("web-node1")
      .uid(uid)
      .nodeName("node1")
      .annotation("kubernetes.io/config.source", "api")
      .container("web", {"sleep", "1000"})
      .edit([](nlohmann::json& j) {
        j["spec"]["containers"][0]["resources"] = {
            {"requests", {{"cpu", "100m"}, {"memory", "64Mi"}}}, {"limits", {{"memory", "128Mi"}}}};
      })
      .build();
}

}  // namespace

TEST_CASE(
    "agent: a pod's cgroup is made before its containers start, they get kubelet's resources "
    "under it, and it goes with the pod",
    "[unit][agent][cgroups]") {
  testing::TempDir fs_root;
  auto manager = cm::ContainerManager::start(cm::CgroupManager(fakeV1Mounts(fs_root.path())),
                                             cm::ContainerManagerOptions{});
  REQUIRE(manager.ok());
  std::shared_ptr<cm::ContainerManager> cgroups = std::move(*manager);
  Harness h(110, [&](agent::AgentOptions& o) {
    o.container_manager = cgroups;
    o.memory_capacity = int64_t{8} << 30;
  });
  const auto pod_dir = fs_root.path() / "memory" / "kubepods" / "burstable" / "poduid-b";

  h.update(api::PodOperation::kAdd, {burstablePod("uid-b")}, "api");
  CHECK(h.phase("uid-b") == "Running");
  auto started = h.runtime.startedResources("uid-b", "web");
  REQUIRE(started.has_value());
  CHECK(started->cgroup_parent == "/kubepods/burstable/poduid-b");
  CHECK(started->resources.cpu_shares == 102);  // 100m * 1024 / 1000
  CHECK(started->resources.memory_limit_in_bytes == int64_t{128} << 20);
  CHECK(started->resources.cpu_quota == 0);  // no CPU limit
  // 1000 - 1000 * 64Mi / 8Gi
  CHECK(started->resources.oom_score_adj == 993);
  CHECK(testing::readFile(pod_dir / "memory.limit_in_bytes").find("134217728") == 0);
  CHECK(testing::readFile(fs_root.path() / "cpu" / "kubepods" / "burstable" / "cpu.shares")
            .find("102") == 0);

  SECTION("removing the pod removes its cgroup and its record") {
    h.update(api::PodOperation::kRemove, {burstablePod("uid-b")}, "api");
    h.advance(3s);
    CHECK_FALSE(std::filesystem::exists(pod_dir));
    CHECK_FALSE(std::filesystem::exists(h.root.path() / "pod-cgroups" / "uid-b"));
    CHECK(testing::readFile(fs_root.path() / "cpu" / "kubepods" / "burstable" / "cpu.shares")
              .find("2") == 0);
  }
  SECTION(
      "a pod cgroup this agent made for a pod nothing knows is removed by housekeeping; a known "
      "one and one it did not make (another node agent's) stay") {
    auto makePodCgroup = [&](const std::string& name) {
      for (const char* c : {"memory", "cpu", "cpuacct", "pids", "freezer"}) {
        std::filesystem::create_directories(fs_root.path() / c / "kubepods" / "besteffort" / name);
      }
      return fs_root.path() / "memory" / "kubepods" / "besteffort" / name;
    };
    const auto orphan = makePodCgroup("podorphan");
    testing::writeFile(h.root.path() / "pod-cgroups" / "orphan", "");
    const auto foreign = makePodCgroup("podforeign");
    CHECK(std::filesystem::exists(h.root.path() / "pod-cgroups" / "uid-b"));
    h.advance(3s);
    CHECK_FALSE(std::filesystem::exists(orphan));
    CHECK_FALSE(std::filesystem::exists(h.root.path() / "pod-cgroups" / "orphan"));
    CHECK(std::filesystem::exists(foreign));
    CHECK(std::filesystem::exists(pod_dir));
  }
}

TEST_CASE(
    "agent: an evicted pod is killed, stays Failed with the eviction's reason and message, and "
    "is no longer active",
    "[unit][agent][eviction]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  REQUIRE(h.phase("uid-web") == "Running");
  REQUIRE(h.agent->activePods().size() == 1);
  CHECK_FALSE(h.agent->podCleanedUp(*webPod()));

  api::PodStatus evicted;
  evicted.phase = "Failed";
  evicted.reason = "Evicted";
  evicted.message = "The node was low on resource: memory. ";
  h.agent->evictPod(webPod(), evicted, 0);
  h.advance(3s);
  CHECK(h.runtime.runningContainerCount() == 0);
  auto status = h.status_manager.getPodStatus("uid-web");
  REQUIRE(status.has_value());
  CHECK(status->phase == "Failed");
  CHECK(status->reason == "Evicted");
  CHECK(status->message == "The node was low on resource: memory. ");
  CHECK(h.agent->activePods().empty());
  CHECK(h.agent->podCleanedUp(*webPod()));
  // A periodic sync later does not bring it back.
  h.advance(2min);
  CHECK(h.phase("uid-web") == "Failed");
  CHECK(h.actions(Action::Kind::kStart).size() == 1);
}

TEST_CASE("agent: an admit handler refuses a pod before the resource checks", "[unit][agent]") {
  Harness h(110, [](agent::AgentOptions& o) {
    o.admit_handler = [](const api::Pod&) {
      return agent::AdmitResult{false, "Evicted", "The node had condition: [MemoryPressure]. "};
    };
  });
  h.update(api::PodOperation::kAdd, {webPod()});
  CHECK(h.actions(Action::Kind::kStart).empty());
  auto status = h.status_manager.getPodStatus("uid-web");
  REQUIRE(status.has_value());
  CHECK(status->phase == "Failed");
  CHECK(status->reason == "Evicted");
  CHECK(status->message == "Pod The node had condition: [MemoryPressure]. ");
}

TEST_CASE("agent: a container the OOM killer ended is OOMKilled with one Warning event",
          "[unit][agent][cgroups]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 137, "OOMKilled"));
  h.advance(15s);  // the crash backoff (10 s) passes: restarted by its policy
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  auto status = h.status_manager.getPodStatus("uid-web");
  REQUIRE(status.has_value());
  REQUIRE(status->container_statuses.size() == 1);
  const auto& last = status->container_statuses[0].last_state.terminated;
  REQUIRE(last.has_value());
  CHECK(last->reason == "OOMKilled");
  CHECK(last->exit_code == 137);
  h.advance(2min);  // more syncs: still one event
  auto events = h.eventsWithReason("OOMKilled");
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == "Warning");
  CHECK(events[0].message == "Container web was killed by the kernel's OOM killer");
}

namespace {

// Runs the agent's node-level reclaim from `caller` (the eviction manager's strand in the daemon)
// on the harness' one thread.
std::optional<base::Status> reclaimFrom(Harness& h, asio::any_io_executor caller) {
  std::optional<base::Status> out;
  asio::co_spawn(
      caller,
      [&h, &out]() -> asio::awaitable<void> {
        asio::awaitable<base::Status> removing = h.agent->removeDeadContainers();
        base::Status status = co_await std::move(removing);
        out = status;
      },
      asio::detached);
  h.drain();
  return out;
}

api::PodPtr namedPod(const std::string& uid, const std::string& policy) {
  return testing::PodBuilder()
      .name("web-" + uid)
      .uid(uid)
      .annotation("kubernetes.io/config.source", "file")
      .container("web", {"sleep", "1000"})
      .restartPolicy(policy)
      .build();
}

}  // namespace

// One thread and the FakeRuntime: a reclaim that waited for the collection on that thread would
// never finish.
TEST_CASE(
    "agent: removeDeadContainers is a coroutine: it completes on a single thread, keeps the newest "
    "exited container of a running pod and removes a finished pod's",
    "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {namedPod("u-run", "Always"), namedPod("u-done", "Never")});
  // u-run: two exits (restarted at once, then after a 10 s backoff); u-done: exited and finished.
  REQUIRE(h.runtime.exitContainer("u-run", "web", 1));
  h.drain();
  REQUIRE(h.runtime.exitContainer("u-run", "web", 1));
  h.drain();
  REQUIRE(h.runtime.exitContainer("u-done", "web", 0));
  h.drain();
  h.advance(11s);
  REQUIRE(h.status_manager.getPodStatus("u-done")->phase == "Succeeded");
  const size_t before = h.actions(Action::Kind::kRemove).size();

  asio::strand<asio::io_context::executor_type> caller(h.ioc.get_executor());
  auto status = reclaimFrom(h, caller);
  REQUIRE(status.has_value());
  CHECK(status->ok());
  // u-done's only one (housekeeping's container GC already took u-run's older exited one).
  CHECK(h.actions(Action::Kind::kRemove).size() == before + 1);
  CHECK_FALSE(h.runtime.containerStatus("u-done", "web").has_value());
  REQUIRE(h.runtime.containerStatus("u-run", "web").has_value());

  // Nothing left to remove: the next reclaim removes nothing and still completes.
  status = reclaimFrom(h, h.ioc.get_executor());
  REQUIRE(status.has_value());
  CHECK(status->ok());
  CHECK(h.actions(Action::Kind::kRemove).size() == before + 1);
  size_t exited = 0;
  for (const auto& cs : h.runtimeStatus("u-run").container_statuses) {
    if (cs.state == runtime::ContainerState::kExited) ++exited;
  }
  CHECK(exited == 1);
}

namespace {

api::PodPtr hostNetworkPod(const std::string& uid) {
  return testing::PodBuilder()
      .name("host-" + uid)
      .uid(uid)
      .annotation("kubernetes.io/config.source", "file")
      .hostNetwork()
      .container("web", {"sleep", "1000"})
      .build();
}

}  // namespace

TEST_CASE(
    "agent: while the runtime's network is not ready only hostNetwork pods start, the others "
    "wait with NetworkNotReady and start once it is",
    "[unit][agent]") {
  auto network_error = std::make_shared<std::string>(
      "runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni "
      "config not initialized");
  Harness h(110, [&](agent::AgentOptions& o) {
    o.network_errors = [network_error] { return *network_error; };
  });
  h.update(api::PodOperation::kAdd, {webPod(), hostNetworkPod("uid-host")});
  auto starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].pod_uid == "uid-host");
  CHECK(h.phase("uid-host") == "Running");
  CHECK(h.phase("uid-web") == "Pending");
  CHECK(h.runtime.sandboxesRun() == 1);
  auto waiting = h.eventsWithReason("NetworkNotReady");
  REQUIRE_FALSE(waiting.empty());
  CHECK(waiting[0].pod == "web-node1");
  CHECK(waiting[0].type == "Warning");
  CHECK(waiting[0].message == "network is not ready: " + *network_error);

  // The pod workers retry such a pod within seconds (kubelet's transient backoff).
  h.advance(3s);
  CHECK(h.eventsWithReason("NetworkNotReady").size() > waiting.size());
  CHECK(h.actions(Action::Kind::kStart).size() == 1);
  network_error->clear();
  h.advance(3s);
  CHECK(h.phase("uid-web") == "Running");
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
}

TEST_CASE(
    "agent: a pod whose sandbox is no longer ready is killed and started again in a new sandbox",
    "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {webPod()});
  REQUIRE(h.runtime.runningContainerCount() == 1);
  // The sandbox goes away under the running container (a CRI pause container that died).
  asio::co_spawn(
      h.ioc,
      [&h]() -> asio::awaitable<void> {
        auto stop = h.runtime.stopPodSandbox("uid-web");
        auto stopped = co_await std::move(stop);
        CHECK(stopped.ok());
      },
      asio::detached);
  h.drain();
  h.advance(2min);  // the periodic resync
  auto kills = h.actions(Action::Kind::kKill);
  REQUIRE(kills.size() == 1);
  CHECK(kills[0].container_name == "web");
  auto starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 2);
  CHECK(starts[1].attempt == 1);
  CHECK(h.runtime.sandboxesRun() == 2);
  auto status = h.runtimeStatus("uid-web");
  REQUIRE_FALSE(status.sandbox_statuses.empty());
  CHECK(status.sandbox_statuses[0].state == runtime::SandboxState::kReady);
  CHECK(status.sandbox_statuses[0].attempt == 1);
  CHECK(h.eventsWithReason("SandboxChanged").size() == 1);
  CHECK(h.phase("uid-web") == "Running");
}

TEST_CASE(
    "agent: with sandbox networks a pod's IP is its sandbox's: none while its sandbox has none "
    "(which is replaced), the node's for hostNetwork",
    "[unit][agent]") {
  Harness h(110, [](agent::AgentOptions& o) { o.sandbox_network = true; });
  h.update(api::PodOperation::kAdd, {webPod(), hostNetworkPod("uid-host")});
  CHECK(h.status_manager.getPodStatus("uid-host")->pod_ip == "10.0.0.1");
  // The fake runtime's sandboxes have no IP: kubelet's podSandboxChanged replaces them.
  CHECK(h.status_manager.getPodStatus("uid-web")->pod_ip.empty());
  const size_t sandboxes = h.runtime.sandboxesRun();
  h.advance(2min);
  CHECK(h.runtime.sandboxesRun() > sandboxes);
  CHECK_FALSE(h.eventsWithReason("SandboxChanged").empty());
  CHECK(h.status_manager.getPodStatus("uid-host")->pod_ip == "10.0.0.1");
}

TEST_CASE("agent: a replaced sandbox runs the pod's init containers again, in order",
          "[unit][agent]") {
  Harness h;
  auto pod = testing::PodBuilder()
                 .name("job-node1")
                 .uid("u-init")
                 .annotation("kubernetes.io/config.source", "file")
                 .initContainer("init1", {"true"})
                 .initContainer("init2", {"true"})
                 .container("app", {"sleep", "100"})
                 .restartPolicy("Always")
                 .build();
  h.update(api::PodOperation::kAdd, {pod});
  REQUIRE(h.runtime.exitContainer("u-init", "init1", 0));
  h.drain();
  REQUIRE(h.runtime.exitContainer("u-init", "init2", 0));
  h.drain();
  REQUIRE(h.phase("u-init") == "Running");
  h.runtime.clearActions();

  asio::co_spawn(
      h.ioc,
      [&h]() -> asio::awaitable<void> {
        auto stop = h.runtime.stopPodSandbox("u-init");
        auto stopped = co_await std::move(stop);
        CHECK(stopped.ok());
      },
      asio::detached);
  h.drain();
  h.advance(2min);
  // The app is killed, both exited init containers removed, and init1 starts again.
  auto kills = h.actions(Action::Kind::kKill);
  REQUIRE(kills.size() == 1);
  CHECK(kills[0].container_name == "app");
  std::vector<std::string> removed;
  for (const auto& a : h.actions(Action::Kind::kRemove)) removed.push_back(a.container_name);
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{"init1", "init2"});
  auto starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 1);
  CHECK(starts[0].container_name == "init1");
  CHECK(h.runtime.sandboxesRun() == 2);

  // The next init container waits for this one, as the first time.
  REQUIRE(h.runtime.exitContainer("u-init", "init1", 0));
  h.drain();
  starts = h.actions(Action::Kind::kStart);
  REQUIRE(starts.size() == 2);
  CHECK(starts[1].container_name == "init2");
}
