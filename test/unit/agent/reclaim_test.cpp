// The agent's node-level reclaim for the eviction manager (kubelet's container GC): a coroutine
// that removes exited containers, keeping the newest of each container of a pod that still runs.
// One thread and the FakeRuntime: a reclaim that waited for the collection on that thread would
// never finish.
#include <catch2/catch.hpp>

#include <optional>

#include "agent/agent.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/status/pod_status.h"
#include "api/pod_update.h"
#include "podmanager/mirror_client.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using Action = runtime::FakeRuntime::Action;

namespace {

class FixedRandom final : public base::Random {
 public:
  double uniform() override { return 0.0; }
  uint64_t next64() override { return 0; }
};

class NoMirrorClient final : public podmanager::MirrorClient {
 public:
  asio::awaitable<base::Status> createMirrorPod(api::PodPtr) override {
    co_return base::okStatus();
  }
  asio::awaitable<base::StatusOr<bool>> deleteMirrorPod(std::string,
                                                        std::optional<std::string>) override {
    co_return true;
  }
};

struct Harness {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  FixedRandom random;
  runtime::FakeRuntime runtime{ioc.get_executor(), clock};
  NoMirrorClient mirror_client;
  podmanager::PodManager pod_manager{mirror_client};
  agent::StatusManager status_manager{clock, pod_manager};
  testing::TempDir root;
  std::unique_ptr<agent::Agent> agent;

  Harness() {
    agent::AgentOptions o;
    o.node_name = "node1";
    o.node_ip = "10.0.0.1";
    o.root_dir = root.path();
    o.allocatable = {"node1", 4000, int64_t{8} << 30, 110};
    agent = std::make_unique<agent::Agent>(
        ioc.get_executor(), clock, random, runtime, pod_manager, status_manager,
        [](const std::string&) { return true; }, [] { return true; }, o);
    agent->start();
    drain();
  }
  ~Harness() {
    agent->stop({});
    drain();
    agent.reset();
    drain();
  }
  void drain() {
    for (int i = 0; i < 50; ++i) {
      if (ioc.poll() == 0) break;
    }
  }
  void advance(base::Duration d) {
    for (auto step = 100ms; d > base::Duration::zero(); d -= step) {
      clock.advance(std::min<base::Duration>(step, d));
      drain();
    }
  }
  size_t removals() {
    size_t n = 0;
    for (const auto& a : runtime.actions()) n += a.kind == Action::Kind::kRemove ? 1 : 0;
    return n;
  }
  // Runs the reclaim from `caller` (the eviction manager's strand in the daemon) on this thread.
  std::optional<base::Status> reclaim(asio::any_io_executor caller) {
    std::optional<base::Status> out;
    asio::co_spawn(
        caller,
        [this, &out]() -> asio::awaitable<void> {
          asio::awaitable<base::Status> removing = agent->removeDeadContainers();
          base::Status status = co_await std::move(removing);
          out = status;
        },
        asio::detached);
    drain();
    return out;
  }
};

api::PodPtr pod(const std::string& uid, const std::string& policy) {
  return testing::PodBuilder()
      .name("web-" + uid)
      .uid(uid)
      .annotation("kubernetes.io/config.source", "file")
      .container("web", {"sleep", "1000"})
      .restartPolicy(policy)
      .build();
}

}  // namespace

TEST_CASE(
    "agent: removeDeadContainers is a coroutine: it completes on a single thread, keeps the newest "
    "exited container of a running pod and removes a finished pod's",
    "[unit][agent]") {
  Harness h;
  h.agent->onPodUpdate(api::PodUpdate{
      {pod("u-run", "Always"), pod("u-done", "Never")}, api::PodOperation::kAdd, "file"});
  h.drain();
  // u-run: two exits (restarted at once, then after a 10 s backoff); u-done: exited and finished.
  REQUIRE(h.runtime.exitContainer("u-run", "web", 1));
  h.drain();
  REQUIRE(h.runtime.exitContainer("u-run", "web", 1));
  h.drain();
  REQUIRE(h.runtime.exitContainer("u-done", "web", 0));
  h.drain();
  h.advance(11s);
  REQUIRE(h.status_manager.getPodStatus("u-done")->phase == "Succeeded");
  const size_t before = h.removals();

  asio::strand<asio::io_context::executor_type> caller(h.ioc.get_executor());
  auto status = h.reclaim(caller);
  REQUIRE(status.has_value());
  CHECK(status->ok());
  // u-run's older exited container and u-done's only one.
  CHECK(h.removals() == before + 2);
  CHECK_FALSE(h.runtime.containerStatus("u-done", "web").has_value());
  REQUIRE(h.runtime.containerStatus("u-run", "web").has_value());

  // Nothing left to remove: the next reclaim removes nothing and still completes.
  status = h.reclaim(h.ioc.get_executor());
  REQUIRE(status.has_value());
  CHECK(status->ok());
  CHECK(h.removals() == before + 2);
}
