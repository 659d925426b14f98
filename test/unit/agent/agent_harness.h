// The agent with its handlers and syncPod against the FakeRuntime, on the fake clock (no threads,
// no sleeps): each step posts work and drains the io_context. Shared by the agent's unit tests.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/runtime/fake_runtime.h"
#include "api/pod_update.h"
#include "podmanager/mirror_client.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

namespace nodeagent::testing::agent_harness {

using namespace std::chrono_literals;
using Action = runtime::FakeRuntime::Action;

class FixedRandom final : public base::Random {
 public:
  double uniform() override { return 0.0; }
  uint64_t next64() override { return 0; }
};

// Counts the mirror pods created; every call succeeds once the node is `registered` (before, a
// creation is refused as ApiMirrorClient refuses it).
class RecordingMirrorClient final : public podmanager::MirrorClient {
 public:
  asio::awaitable<base::Status> createMirrorPod(api::PodPtr) override {
    if (!registered.load()) {
      refused_.fetch_add(1);
      co_return base::failedPreconditionError("node node1 is not registered yet");
    }
    created_.fetch_add(1);
    co_return base::okStatus();
  }
  asio::awaitable<base::StatusOr<bool>> deleteMirrorPod(std::string,
                                                        std::optional<std::string>) override {
    co_return true;
  }
  int created() const { return created_.load(); }
  int refused() const { return refused_.load(); }
  std::atomic<bool> registered{true};

 private:
  std::atomic<int> created_{0};
  std::atomic<int> refused_{0};
};

struct Harness {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  FakeClock clock;
  FixedRandom random;
  runtime::FakeRuntime runtime{ioc.get_executor(), clock};
  RecordingMirrorClient mirror_client;
  podmanager::PodManager pod_manager{mirror_client};
  agent::StatusManager status_manager{clock, pod_manager};
  TempDir root;
  bool sources_ready = true;
  std::unique_ptr<agent::Agent> agent;
  struct Event {
    std::string pod, type, reason, message;
  };
  std::mutex events_mu;
  std::vector<Event> events;

  explicit Harness(int64_t max_pods = 110,
                   const std::function<void(agent::AgentOptions&)>& configure = {}) {
    agent::AgentOptions o;
    o.node_name = "node1";
    o.node_ip = "10.0.0.1";
    o.root_dir = root.path();
    o.allocatable = {"node1", 4000, int64_t{8} << 30, max_pods};
    o.record_event = [this](const api::Pod& pod, const std::string& type, const std::string& reason,
                            const std::string& message, const std::string&) {
      std::lock_guard lock(events_mu);
      events.push_back({pod.metadata.name, type, reason, message});
    };
    if (configure) configure(o);
    agent = std::make_unique<agent::Agent>(
        ioc.get_executor(), clock, random, runtime, pod_manager, status_manager,
        [this](const std::string&) { return sources_ready; }, [this] { return sources_ready; }, o);
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
    // Step in small increments so timers armed by handlers fire in order.
    for (auto step = 100ms; d > base::Duration::zero(); d -= step) {
      clock.advance(std::min<base::Duration>(step, d));
      drain();
    }
  }
  void update(api::PodOperation op, std::vector<api::PodPtr> pods, std::string source = "file") {
    agent->onPodUpdate(api::PodUpdate{std::move(pods), op, std::move(source)});
    drain();
  }
  std::vector<Action> actions(Action::Kind kind) {
    std::vector<Action> out;
    for (auto& a : runtime.actions()) {
      if (a.kind == kind) out.push_back(a);
    }
    return out;
  }
  std::vector<Event> eventsWithReason(const std::string& reason) {
    std::lock_guard lock(events_mu);
    std::vector<Event> out;
    for (const auto& e : events) {
      if (e.reason == reason) out.push_back(e);
    }
    return out;
  }
  bool hasEvent(const std::string& text) {
    std::lock_guard lock(events_mu);
    return std::any_of(events.begin(), events.end(),
                       [&](const Event& e) { return e.reason + ": " + e.message == text; });
  }
  std::string phase(const std::string& uid) {
    auto s = status_manager.getPodStatus(uid);
    return s ? s->phase : "";
  }
  // What the runtime holds for the pod, sandboxes included.
  runtime::PodStatus runtimeStatus(const std::string& uid) {
    std::optional<runtime::PodStatus> out;
    asio::co_spawn(
        ioc,
        [this, uid, &out]() -> asio::awaitable<void> {
          auto s = co_await runtime.getPodStatus(uid, "web-node1", "default");
          if (s.ok()) out = std::move(*s);
        },
        asio::detached);
    drain();
    REQUIRE(out.has_value());
    return *out;
  }
};

inline api::PodPtr webPod(const std::string& uid = "uid-web",
                          const std::string& policy = "Always") {
  return PodBuilder()
      .name("web-node1")
      .uid(uid)
      .annotation("kubernetes.io/config.source", "file")
      .container("web", {"sleep", "1000"})
      .restartPolicy(policy)
      .build();
}

}  // namespace nodeagent::testing::agent_harness
