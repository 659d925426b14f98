#include "agent/runtime/fake_runtime.h"

#include <catch2/catch.hpp>
#include <memory>
#include <optional>

#include "test/support/fake_clock.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
using namespace std::chrono_literals;

namespace {

api::PodPtr makePod(const std::string& uid, std::optional<int64_t> grace = std::nullopt) {
  auto pod = std::make_shared<api::Pod>();
  pod->metadata.name = "pod-" + uid;
  pod->metadata.namespace_ = "default";
  pod->metadata.uid = uid;
  pod->spec->termination_grace_period_seconds = grace;
  api::Container c;
  c.name = "main";
  c.image = "busybox";
  c.hash = api::Hash128{1, 2};
  pod->spec->containers.push_back(c);
  return pod;
}

class Harness {
 public:
  Harness() : guard_(asio::make_work_guard(ioc)), runtime(ioc.get_executor(), clock) {
    runtime.setEventHandler([this](const ContainerEvent& e) { events.push_back(e); });
  }

  template <typename T>
  T run(asio::awaitable<T> aw) {
    std::optional<T> out;
    asio::co_spawn(
        ioc, [&]() -> asio::awaitable<void> { out.emplace(co_await std::move(aw)); },
        asio::detached);
    ioc.poll();
    REQUIRE(out.has_value());
    return std::move(*out);
  }

  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  testing::FakeClock clock;
  FakeRuntime runtime;
  std::vector<ContainerEvent> events;
};

}  // namespace

TEST_CASE("fake runtime: start records the action, runs the container and emits started",
          "[unit][runtime]") {
  Harness h;
  auto pod = makePod("u1");
  auto id = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
  REQUIRE(id.ok());
  CHECK(id->type == "fake");

  auto actions = h.runtime.actions();
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].kind == FakeRuntime::Action::Kind::kStart);
  CHECK(actions[0].pod_uid == "u1");
  CHECK(actions[0].container_name == "main");
  CHECK(actions[0].attempt == 0);
  CHECK(actions[0].id == *id);

  REQUIRE(h.events.size() == 1);
  CHECK(h.events[0].type == ContainerEvent::Type::kStarted);
  CHECK(h.events[0].container_id == *id);

  auto status = h.run(h.runtime.getPodStatus("u1", "pod-u1", "default"));
  REQUIRE(status.ok());
  REQUIRE(status->container_statuses.size() == 1);
  const auto& cs = status->container_statuses[0];
  CHECK(cs.state == ContainerState::kRunning);
  CHECK(cs.hash == api::Hash128{1, 2});
  CHECK(cs.image == "busybox");

  auto pods = h.run(h.runtime.getPods(false));
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].containers.size() == 1);
}

TEST_CASE("fake runtime: tests make containers exit with a code, newest status first",
          "[unit][runtime]") {
  Harness h;
  auto pod = makePod("u1");
  auto first = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
  REQUIRE(first.ok());
  CHECK(h.runtime.exitContainer("u1", "main", 3));
  CHECK_FALSE(h.runtime.exitContainer("u1", "main", 3));  // nothing runs any more
  h.ioc.poll();
  REQUIRE(h.events.size() == 2);
  CHECK(h.events[1].type == ContainerEvent::Type::kDied);

  auto exited = h.runtime.containerStatus("u1", "main");
  REQUIRE(exited);
  CHECK(exited->state == ContainerState::kExited);
  CHECK(exited->exit_code == 3);
  CHECK(exited->reason == "Error");

  auto running = h.run(h.runtime.getPods(false));
  REQUIRE(running.ok());
  CHECK(running->empty());
  auto all = h.run(h.runtime.getPods(true));
  REQUIRE(all.ok());
  CHECK(all->size() == 1);

  auto second = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 1, {}));
  REQUIRE(second.ok());
  auto status = h.run(h.runtime.getPodStatus("u1", "pod-u1", "default"));
  REQUIRE(status.ok());
  REQUIRE(status->container_statuses.size() == 2);
  CHECK(status->findContainerStatusByName("main")->restart_count == 1);
  CHECK(status->findContainerStatusByName("main")->state == ContainerState::kRunning);
}

TEST_CASE("fake runtime: injected start errors", "[unit][runtime]") {
  Harness h;
  auto pod = makePod("u1");
  SECTION("a config error leaves nothing behind") {
    h.runtime.injectStartError("", "main", base::invalidArgumentError("bad env"));
    auto id = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE_FALSE(id.ok());
    CHECK(startErrorReason(id.status()) == kCreateContainerConfigError);
    CHECK_FALSE(h.runtime.containerStatus("u1", "main"));
  }
  SECTION("a run error leaves an exited ContainerCannotRun container") {
    h.runtime.injectStartError("u1", "main", base::unknownError("exec: not found"));
    auto id = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE_FALSE(id.ok());
    CHECK(startErrorReason(id.status()) == kRunContainerError);
    auto cs = h.runtime.containerStatus("u1", "main");
    REQUIRE(cs);
    CHECK(cs->state == ContainerState::kExited);
    CHECK(cs->reason == "ContainerCannotRun");
    h.runtime.clearStartErrors();
    CHECK(h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 1, {})).ok());
  }
}

TEST_CASE("fake runtime: kills record the grace period kubelet would use, remove drops state",
          "[unit][runtime]") {
  Harness h;
  auto pod = makePod("u1", 1);  // below the 2s minimum
  auto id = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
  REQUIRE(id.ok());
  CHECK(h.run(h.runtime.removeContainer(*id)).code() == base::StatusCode::kFailedPrecondition);

  auto pods = h.run(h.runtime.getPods(false));
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK(h.run(h.runtime.killPod(pod, (*pods)[0], std::nullopt)).ok());
  auto actions = h.runtime.actions();
  REQUIRE(actions.size() == 2);
  CHECK(actions[1].kind == FakeRuntime::Action::Kind::kKill);
  CHECK(actions[1].grace_seconds == 2);
  CHECK_FALSE(actions[1].kill_options.grace_override);

  CHECK(h.run(h.runtime.killContainer(pod, *id, KillOptions::graceOverride(0), "again")).ok());
  CHECK(h.runtime.actions().back().grace_seconds == 0);
  CHECK(h.runtime.runningContainerCount() == 0);

  CHECK(h.run(h.runtime.removeContainer(*id)).ok());
  CHECK(h.runtime.actions().back().kind == FakeRuntime::Action::Kind::kRemove);
  CHECK(h.run(h.runtime.removeContainer(*id)).code() == base::StatusCode::kNotFound);
  auto all = h.run(h.runtime.getPods(true));
  REQUIRE(all.ok());
  CHECK(all->empty());
}

TEST_CASE("fake runtime: a kill records the grace its preStop hook's time left",
          "[unit][runtime]") {
  struct Case {
    KillOptions options;
    base::Duration hook_takes;
    base::Duration want_timeout;
    int64_t want_grace;
  };
  const Case c = GENERATE(Case{{}, 7s, 30s, 23}, Case{{}, 29s, 30s, 2},
                          Case{KillOptions::probeGrace(10), 4s, 10s, 6},
                          Case{KillOptions::graceOverride(5), 20s, 30s, 5});
  Harness h;
  std::optional<base::Duration> hook_timeout;
  auto hook_runner = [&](PreStopHookRequest request) -> asio::awaitable<void> {
    hook_timeout = request.timeout;
    h.clock.advance(c.hook_takes);
    co_return;
  };
  h.runtime.setPreStopHookRunner(hook_runner);
  auto spec = std::make_shared<api::Pod>(*makePod("u1", 30));
  spec->spec->containers[0].lifecycle = api::Lifecycle{};
  spec->spec->containers[0].lifecycle->pre_stop = api::Handler{};
  spec->spec->containers[0].lifecycle->pre_stop->exec = api::ExecAction{{"true"}};
  api::PodPtr pod = spec;
  auto id = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
  REQUIRE(id.ok());
  REQUIRE(h.run(h.runtime.killContainer(pod, *id, c.options, "test")).ok());
  REQUIRE(hook_timeout);
  CHECK(*hook_timeout == c.want_timeout);
  const auto kill = h.runtime.actions().back();
  CHECK(kill.kind == FakeRuntime::Action::Kind::kKill);
  CHECK(kill.grace_seconds == c.want_grace);
}

TEST_CASE("fake runtime: 50,000 pods stay cheap", "[unit][runtime]") {
  Harness h;
  h.runtime.setRecordActions(false);
  h.runtime.setEventHandler(nullptr);
  for (int i = 0; i < 50'000; ++i) {
    auto pod = makePod("u" + std::to_string(i));
    auto id = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE(id.ok());
  }
  CHECK(h.runtime.runningContainerCount() == 50'000);
  auto pods = h.run(h.runtime.getPods(false));
  REQUIRE(pods.ok());
  CHECK(pods->size() == 50'000);
  CHECK(h.runtime.actions().empty());
}

TEST_CASE("fake runtime: log paths follow the CRI layout", "[unit][runtime]") {
  Harness h;
  CHECK(h.runtime.containerLogsPath("ns", "web", "u1", "main", 2) ==
        "/var/log/pods/ns_web_u1/main/2.log");
}

TEST_CASE("fake runtime: records the cgroup parent and resources a container started with",
          "[unit][runtime]") {
  Harness h;
  auto pod = makePod("u1");
  StartContainerOptions options;
  options.cgroup_parent = "/kubepods/burstable/podu1";
  options.resources.cpu_shares = 256;
  options.resources.cpu_quota = 20000;
  options.resources.cpu_period = 100000;
  options.resources.memory_limit_in_bytes = 64 << 20;
  options.resources.oom_score_adj = 900;
  auto id = h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 0, options));
  REQUIRE(id.ok());
  auto actions = h.runtime.actions();
  REQUIRE(actions.size() == 1);
  CHECK(actions[0].cgroup_parent == "/kubepods/burstable/podu1");
  CHECK(actions[0].resources == options.resources);
  auto started = h.runtime.startedResources("u1", "main");
  REQUIRE(started);
  CHECK(started->cgroup_parent == options.cgroup_parent);
  CHECK(started->resources == options.resources);
  CHECK_FALSE(h.runtime.startedResources("u1", "other"));

  // A restart without them: the newest container's (none) are answered.
  REQUIRE(h.runtime.exitContainer("u1", "main", 1));
  REQUIRE(h.run(h.runtime.startContainer(pod, pod->spec->containers[0], 1, {})).ok());
  started = h.runtime.startedResources("u1", "main");
  REQUIRE(started);
  CHECK(*started == FakeRuntime::StartedResources{});
}
