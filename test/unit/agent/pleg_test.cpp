// The PLEG against the FakeRuntime on the fake clock: events from the runtime, the periodic
// relist as a safety net, and relists that skip an unchanged runtime.
#include <catch2/catch.hpp>

#include "agent/pleg.h"
#include "agent/runtime/fake_runtime.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using Type = agent::PodLifecycleEvent::Type;

namespace {

struct Harness {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  runtime::FakeRuntime runtime{ioc.get_executor(), clock};
  std::shared_ptr<agent::Pleg> pleg =
      std::make_shared<agent::Pleg>(ioc.get_executor(), clock, runtime, agent::PlegOptions{});
  std::vector<agent::PodLifecycleEvent> events;

  ~Harness() {
    pleg->stop();
    drain();
  }
  void drain() {
    for (int i = 0; i < 50; ++i) {
      if (ioc.poll() == 0) break;
    }
  }
  void advance(base::Duration d) {
    for (auto step = 1s; d > base::Duration::zero(); d -= step) {
      clock.advance(std::min<base::Duration>(step, d));
      drain();
    }
  }
  void start() {
    pleg->start([this](const agent::PodLifecycleEvent& e) { events.push_back(e); });
    drain();
  }
  void startContainer(const std::string& uid) {
    auto pod = testing::PodBuilder().name("p-" + uid).uid(uid).container("main", {"sleep"}).build();
    asio::co_spawn(
        ioc,
        [this, pod]() -> asio::awaitable<void> {
          // Named: GCC 12 destroys temporaries inside a co_await expression twice.
          runtime::StartContainerOptions options;
          auto id = co_await runtime.startContainer(pod, pod->spec->containers[0], 0, options);
          CHECK(id.ok());
        },
        asio::detached);
    drain();
  }
  void runSandbox(const std::string& uid) {
    asio::co_spawn(
        ioc,
        [this, uid]() -> asio::awaitable<void> {
          runtime::PodSandboxConfig config;
          config.uid = uid;
          config.name = "p-" + uid;
          auto id = co_await runtime.runPodSandbox(config);
          CHECK(id.ok());
        },
        asio::detached);
    drain();
  }
  size_t count(Type type) const {
    return static_cast<size_t>(std::count_if(events.begin(), events.end(),
                                             [type](const auto& e) { return e.type == type; }));
  }
};

}  // namespace

TEST_CASE("pleg: the first relist reports containers that already run", "[unit][agent][pleg]") {
  Harness h;
  h.startContainer("u1");  // before start: no handler, so only a relist can see it
  h.start();
  REQUIRE(h.events.size() == 1);
  CHECK(h.events[0].pod_uid == "u1");
  CHECK(h.events[0].type == Type::kContainerStarted);
  CHECK(h.pleg->healthy());
}

TEST_CASE("pleg: runtime events arrive at once and are not repeated by relists",
          "[unit][agent][pleg]") {
  Harness h;
  h.start();
  h.startContainer("u1");
  CHECK(h.count(Type::kContainerStarted) == 1);
  REQUIRE(h.runtime.exitContainer("u1", "main", 2));
  h.drain();
  CHECK(h.count(Type::kContainerDied) == 1);
  h.advance(30s);
  CHECK(h.events.size() == 2);
}

TEST_CASE("pleg: a relist skips an unchanged runtime but still counts for health",
          "[unit][agent][pleg]") {
  Harness h;
  h.startContainer("u1");
  h.start();
  const auto calls = h.runtime.getPodsCalls();
  const auto relists = h.pleg->relistCount();
  h.advance(5min);
  CHECK(h.runtime.getPodsCalls() == calls);
  CHECK(h.pleg->relistCount() >= relists + 29);
  std::string why;
  CHECK(h.pleg->healthy(&why));
  CHECK(why.empty());
}

TEST_CASE("pleg: a change whose event was lost is found by the next relist",
          "[unit][agent][pleg]") {
  Harness h;
  h.startContainer("u1");
  h.start();
  h.runtime.setEventHandler({});  // events are lost from here on
  REQUIRE(h.runtime.exitContainer("u1", "main", 1));
  h.drain();
  CHECK(h.count(Type::kContainerDied) == 0);
  const auto calls = h.runtime.getPodsCalls();
  h.advance(10s);
  CHECK(h.runtime.getPodsCalls() == calls + 1);
  CHECK(h.count(Type::kContainerDied) == 1);
}

TEST_CASE(
    "pleg: a sandbox the runtime lists is one more container of its pod: its start and its "
    "loss of readiness are events of the pod",
    "[unit][agent][pleg]") {
  Harness h;
  h.runtime.setListsSandboxes(true);
  h.start();
  h.runSandbox("u1");
  h.advance(10s);
  REQUIRE(h.events.size() == 1);
  CHECK(h.events[0].pod_uid == "u1");
  CHECK(h.events[0].type == Type::kContainerStarted);
  CHECK(h.events[0].container_id == "fake://u1");
  // The sandbox stops being ready (its pause process died): the pod's ContainerDied.
  asio::co_spawn(h.ioc, h.runtime.stopPodSandbox("u1"), asio::detached);
  h.drain();
  h.advance(10s);
  REQUIRE(h.events.size() == 2);
  CHECK(h.events[1].type == Type::kContainerDied);
  CHECK(h.events[1].container_id == "fake://u1");
  // Sandboxes are not containers in the running counts.
  CHECK(h.pleg->runningContainers() == 0);
}
