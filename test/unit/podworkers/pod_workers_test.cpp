#include <catch2/catch.hpp>

#include <algorithm>

#include "api/pod_update.h"
#include "base/log.h"
#include "podworkers/pod_workers.h"
#include "test/support/fake_clock.h"
#include "test/support/fake_pod_syncer.h"
#include "test/support/fake_pod_workers.h"

// GCC 12 warns about designated initializers that leave defaulted members out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

using namespace nodeagent;
using namespace std::chrono_literals;
using api::SyncPodType;
using Method = testing::FakePodSyncer::Method;
using podworkers::KillPodOptions;
using podworkers::PodWorkerState;
using podworkers::UpdatePodOptions;

namespace {

class FixedRandom final : public base::Random {
 public:
  explicit FixedRandom(double v) : v_(v) {}
  double uniform() override { return v_; }
  uint64_t next64() override { return 0; }

 private:
  double v_;
};

struct PodSpec {
  std::string uid;
  std::string name;
  std::string ns = "default";
  bool is_static = false;
  std::optional<int64_t> grace = 30;
  std::optional<int64_t> deletion_grace;
  std::string phase;
};

api::PodPtr makePod(const PodSpec& s) {
  api::Pod pod;
  pod.metadata.uid = s.uid;
  pod.metadata.name = s.name.empty() ? s.uid : s.name;
  pod.metadata.namespace_ = s.ns;
  pod.metadata.annotations[std::string(api::kConfigSourceAnnotationKey)] =
      s.is_static ? "file" : "api";
  if (s.is_static) pod.metadata.annotations[std::string(api::kConfigHashAnnotationKey)] = s.uid;
  pod.spec.termination_grace_period_seconds = s.grace;
  if (s.deletion_grace) {
    pod.metadata.deletion_timestamp = api::Timestamp(std::chrono::seconds(1767225600));
    pod.metadata.deletion_grace_period_seconds = s.deletion_grace;
  }
  pod.status.phase = s.phase;
  return std::make_shared<const api::Pod>(std::move(pod));
}

api::PodPtr pod(const std::string& uid, const std::string& name = "") {
  return makePod({.uid = uid, .name = name});
}

api::PodPtr staticPod(const std::string& uid, const std::string& name) {
  return makePod({.uid = uid, .name = name, .is_static = true});
}

KillPodOptions killOptions(std::optional<int64_t> grace = std::nullopt,
                           std::function<void()> done = {}) {
  KillPodOptions k;
  k.grace_period_seconds_override = grace;
  k.on_completed = std::move(done);
  return k;
}

// Declaration order matters: the clock outlives the io_context (posted handlers own timers),
// and everything is drained before the io_context goes.
struct Harness {
  explicit Harness(podworkers::PodWorkersOptions options = {}, double random = 0.0)
      : random_(random) {
    base::initLogging({.verbosity = 0, .quiet = true});
    workers = std::make_unique<podworkers::BasicPodWorkers>(ioc.get_executor(), clock, random_,
                                                            syncer, options);
  }
  ~Harness() {
    workers->shutdown();
    syncer.stopHolding();
    syncer.release();
    ioc.poll();
    workers.reset();
    ioc.poll();
  }

  void update(SyncPodType type, api::PodPtr p, std::optional<KillPodOptions> kill = std::nullopt,
              api::PodPtr mirror = nullptr) {
    UpdatePodOptions o;
    o.update_type = type;
    o.pod = std::move(p);
    o.mirror_pod = std::move(mirror);
    o.kill_pod_options = std::move(kill);
    workers->updatePod(std::move(o));
  }
  void poll() { ioc.poll(); }
  void advance(base::Duration d) {
    clock.advance(d);
    ioc.poll();
  }
  std::vector<Method> methods(const std::string& uid) const {
    std::vector<Method> out;
    for (const auto& c : syncer.callsFor(uid)) out.push_back(c.method);
    return out;
  }

  testing::FakeClock clock;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  FixedRandom random_;
  testing::FakePodSyncer syncer;
  std::unique_ptr<podworkers::BasicPodWorkers> workers;
};

const std::vector<Method> kFullLife = {Method::kSyncPod, Method::kSyncTerminatingPod,
                                       Method::kSyncTerminatedPod};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Ports of kubelet's pod_workers_test.go

TEST_CASE("pod workers: coalescing keeps the first and the last update (TestUpdatePod)",
          "[unit][podworkers]") {
  Harness h;
  const int kPods = 20;
  for (int i = 0; i < kPods; ++i) {
    for (int j = 0; j <= i; ++j) {
      h.update(SyncPodType::kCreate, pod("uid-" + std::to_string(i), std::to_string(j)));
    }
  }
  h.poll();
  for (int i = 0; i < kPods; ++i) {
    auto calls = h.syncer.callsFor("uid-" + std::to_string(i));
    INFO("pod " << i);
    REQUIRE(!calls.empty());
    CHECK(calls.size() <= static_cast<size_t>(i + 1));
    CHECK(calls.front().pod->metadata.name == "0");
    CHECK(calls.back().pod->metadata.name == std::to_string(i));
    for (const auto& c : calls) CHECK(c.method == Method::kSyncPod);
  }
}

TEST_CASE("pod workers: one sync in flight, the newest update waits and replaces older ones",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncPod);
  h.update(SyncPodType::kCreate, pod("a", "v1"));
  h.poll();
  h.update(SyncPodType::kUpdate, pod("a", "v2"));
  h.update(SyncPodType::kUpdate, pod("a", "v3"));
  h.poll();
  CHECK(h.syncer.callCount() == 1);
  CHECK(h.syncer.activeCount() == 1);

  h.syncer.stopHolding();
  h.syncer.release();
  h.poll();
  auto calls = h.syncer.callsFor("a");
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].type == SyncPodType::kCreate);
  CHECK(calls[1].pod->metadata.name == "v3");
  CHECK(calls[1].type == SyncPodType::kUpdate);
  CHECK(h.workers->inFlight() == 0);
}

TEST_CASE("pod workers: a kill is not forgotten behind later updates "
          "(TestUpdatePodDoesNotForgetSyncPodKill)",
          "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, pod("a"));
  h.update(SyncPodType::kKill, pod("a"));
  h.update(SyncPodType::kUpdate, pod("a"));
  h.poll();
  auto calls = h.syncer.callsFor("a");
  REQUIRE(calls.size() >= 2);
  CHECK(calls[0].method == Method::kSyncPod);
  CHECK(calls[0].type == SyncPodType::kCreate);
  // The create was cancelled before it began: a real syncer starts nothing.
  CHECK(calls[0].cancelled_at_start);
  CHECK(calls[1].method == Method::kSyncTerminatingPod);
  CHECK(h.methods("a") == kFullLife);
  CHECK(h.workers->isPodKnownTerminated("a"));
}

TEST_CASE("pod workers: a pending kill is never replaced by a later update",
          "[unit][podworkers]") {
  Harness h;
  int killed = 0;
  h.syncer.holdCalls(Method::kSyncPod);
  h.update(SyncPodType::kCreate, pod("a", "v1"));
  h.poll();
  h.update(SyncPodType::kKill, pod("a", "v1"), killOptions(3, [&] { ++killed; }));
  h.update(SyncPodType::kUpdate, pod("a", "v2"));
  h.update(SyncPodType::kSync, pod("a", "v3"));
  h.poll();
  auto calls = h.syncer.callsFor("a");
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].cancelled);  // the kill cancelled the running create
  CHECK(calls[2].method == Method::kSyncTerminatedPod);
  CHECK(calls[1].method == Method::kSyncTerminatingPod);
  CHECK(calls[1].grace_period == 3);
  CHECK(calls[1].pod->metadata.name == "v3");  // newest pod, still a kill
  CHECK(killed == 1);
  CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 1);
}

TEST_CASE("pod workers: a pod that starts terminating leaves the resync queue",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.pushResult(Method::kSyncTerminatingPod, base::internalError("still running"));
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.update(SyncPodType::kKill, pod("a"));
  h.poll();
  h.advance(2min);
  CHECK(h.workers->getWorkToSync().empty());
  CHECK(h.workers->isPodKnownTerminated("a"));  // retried by the worker itself
}

TEST_CASE("pod workers: syncKnownPods forgets finished workers not desired "
          "(TestForgetNonExistingPodWorkers)",
          "[unit][podworkers]") {
  Harness h;
  const int kPods = 20;
  std::vector<api::PodPtr> pods;
  for (int i = 0; i < kPods; ++i) {
    pods.push_back(pod(std::to_string(i)));
    h.update(SyncPodType::kCreate, pods.back());
  }
  h.poll();
  for (const auto& p : pods) h.update(SyncPodType::kKill, p);
  h.poll();

  auto known = h.workers->syncKnownPods({pods[2], pods[14]});
  CHECK(known.size() == 2);
  CHECK(known.contains("2"));
  CHECK(known.contains("14"));
  CHECK(known["2"] == podworkers::PodWorkerSync{PodWorkerState::kTerminatedPod, false, true, false});
  CHECK(h.workers->podWorkerState("3") == std::nullopt);

  CHECK(h.workers->syncKnownPods({}).empty());
}

TEST_CASE("pod workers: syncKnownPods keeps workers that may still run containers",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncTerminatingPod);
  h.update(SyncPodType::kCreate, pod("running"));
  h.update(SyncPodType::kCreate, pod("terminating"));
  h.poll();
  h.update(SyncPodType::kKill, pod("terminating"));
  h.poll();

  auto known = h.workers->syncKnownPods({});
  REQUIRE(known.size() == 2);
  CHECK(known["running"] == podworkers::PodWorkerSync{PodWorkerState::kSyncPod, true, true, false});
  CHECK(known["terminating"].state == PodWorkerState::kTerminatingPod);
  CHECK(known["terminating"].orphan);
}

TEST_CASE("pod workers: forgetWorker drops a worker and its pending work at once",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncPod);
  h.update(SyncPodType::kCreate, pod("a", "v1"));
  h.poll();
  h.update(SyncPodType::kUpdate, pod("a", "v2"));
  h.workers->forgetWorker("a");
  CHECK(h.workers->podWorkerState("a") == std::nullopt);

  h.syncer.stopHolding();
  h.syncer.release();
  h.poll();
  // The in-flight sync finished; the pending update died with the worker.
  CHECK(h.syncer.callsFor("a").size() == 1);
  CHECK(h.workers->getWorkToSync().empty());
  CHECK(h.workers->inFlight() == 0);

  // The UID can come back as a new pod.
  h.update(SyncPodType::kCreate, pod("a", "v3"));
  h.poll();
  CHECK(h.syncer.callsFor("a").size() == 2);
}

TEST_CASE("pod workers: real workers pass the same pods to the syncer as the serial fake "
          "(TestFakePodWorkers)",
          "[unit][podworkers]") {
  Harness h;
  testing::FakePodSyncer fake_syncer;
  testing::FakePodWorkers fake(h.ioc.get_executor(), fake_syncer);

  auto mirror = makePod({.uid = "m1", .name = "s"});
  struct Step {
    SyncPodType type;
    api::PodPtr pod;
    api::PodPtr mirror;
  };
  std::vector<Step> steps = {
      {SyncPodType::kCreate, pod("a"), nullptr},
      {SyncPodType::kCreate, staticPod("s1", "s"), mirror},
      {SyncPodType::kUpdate, pod("a", "a2"), nullptr},
      {SyncPodType::kSync, staticPod("s1", "s"), mirror},
      {SyncPodType::kKill, pod("a", "a2"), nullptr},
  };
  for (const auto& s : steps) {
    UpdatePodOptions o{s.type, s.pod, s.mirror, std::nullopt, false};
    h.workers->updatePod(o);
    fake.updatePod(o);
    h.poll();
  }
  auto real = h.syncer.calls();
  auto serial = fake_syncer.calls();
  REQUIRE(real.size() == serial.size());
  for (size_t i = 0; i < real.size(); ++i) {
    INFO("call " << i);
    CHECK(real[i].method == serial[i].method);
    CHECK(real[i].pod == serial[i].pod);
    CHECK(real[i].mirror_pod == serial[i].mirror_pod);
    if (real[i].method == Method::kSyncPod) CHECK(real[i].type == serial[i].type);
  }
  CHECK(fake.updates().size() == steps.size());
}

TEST_CASE("pod workers: a kill's completion callback runs once containers are stopped "
          "(TestKillPodNowFunc)",
          "[unit][podworkers]") {
  Harness h;
  int completed = 0;
  h.syncer.holdCalls(Method::kSyncTerminatingPod);
  h.update(SyncPodType::kKill, pod("a"), killOptions(0, [&] { ++completed; }));
  h.poll();
  CHECK(h.syncer.callsOf(Method::kSyncTerminatingPod).size() == 1);
  CHECK(h.syncer.callsOf(Method::kSyncPod).empty());
  CHECK(completed == 0);
  h.syncer.release();
  h.poll();
  CHECK(completed == 1);
  // Grace 0 is raised to the minimum of 1 s.
  CHECK(h.syncer.callsOf(Method::kSyncTerminatingPod)[0].grace_period == 1);

  // A kill of a finished pod completes at once.
  h.update(SyncPodType::kKill, pod("a"), killOptions(0, [&] { ++completed; }));
  CHECK(completed == 2);
  h.poll();
  CHECK(h.syncer.callsOf(Method::kSyncTerminatingPod).size() == 1);
}

// ---------------------------------------------------------------------------------------------
// Termination rules

TEST_CASE("pod workers: a kill cancels the running syncPod and terminates the pod",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncPod);
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  CHECK(h.workers->couldHaveRunningContainers("a"));
  CHECK_FALSE(h.workers->isPodTerminationRequested("a"));
  REQUIRE(h.syncer.heldCount() == 1);

  h.update(SyncPodType::kKill, pod("a"), killOptions(5));
  CHECK(h.workers->isPodTerminationRequested("a"));
  // The worker has not seen it yet: syncPod may still start containers.
  CHECK_FALSE(h.workers->shouldPodContainersBeTerminating("a"));
  h.poll();

  auto calls = h.syncer.callsFor("a");
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].cancelled);
  CHECK(calls[1].method == Method::kSyncTerminatingPod);
  CHECK(calls[1].grace_period == 5);
  CHECK(calls[2].method == Method::kSyncTerminatedPod);
  CHECK(h.workers->isPodKnownTerminated("a"));
  CHECK_FALSE(h.workers->couldHaveRunningContainers("a"));
  CHECK(h.workers->shouldPodContainersBeTerminating("a"));
  CHECK(h.workers->shouldPodRuntimeBeRemoved("a"));
  // A kill is not a deletion: content stays until the pod is deleted or evicted.
  CHECK_FALSE(h.workers->shouldPodContentBeRemoved("a"));
  CHECK(h.workers->podWorkerState("a") == PodWorkerState::kTerminatedPod);
}

TEST_CASE("pod workers: a deletionTimestamp terminates with the deletion grace period",
          "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.update(SyncPodType::kUpdate, makePod({.uid = "a", .grace = 30, .deletion_grace = 7}));
  h.poll();
  CHECK(h.methods("a") == kFullLife);
  CHECK(h.syncer.callsOf(Method::kSyncTerminatingPod)[0].grace_period == 7);
  CHECK(h.workers->shouldPodContentBeRemoved("a"));
}

TEST_CASE("pod workers: an eviction lets the pod's content be removed", "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncTerminatingPod);
  auto kill = killOptions(2);
  kill.evict = true;
  kill.pod_status_fn = [](api::PodStatus& s) { s.reason = "Evicted"; };
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.update(SyncPodType::kKill, pod("a"), kill);
  h.poll();
  CHECK(h.workers->shouldPodContentBeRemoved("a"));
  auto term = h.syncer.callsOf(Method::kSyncTerminatingPod);
  REQUIRE(term.size() == 1);
  CHECK(term[0].has_status_fn);
}

TEST_CASE("pod workers: grace periods only shrink, and a shorter one restarts the kill",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncTerminatingPod);
  // Consumed by the first call that is not cancelled (the one with 10 s).
  h.syncer.pushResult(Method::kSyncTerminatingPod, base::internalError("kill failed"));
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.update(SyncPodType::kKill, pod("a"), killOptions(30));
  h.poll();
  REQUIRE(h.syncer.callsOf(Method::kSyncTerminatingPod).size() == 1);

  h.update(SyncPodType::kKill, pod("a"), killOptions(10));
  h.poll();
  auto term = h.syncer.callsOf(Method::kSyncTerminatingPod);
  REQUIRE(term.size() == 2);
  CHECK(term[0].grace_period == 30);
  CHECK(term[0].cancelled);
  CHECK(term[1].grace_period == 10);

  // A longer grace period changes nothing and cancels nothing.
  h.update(SyncPodType::kKill, pod("a"), killOptions(20));
  h.poll();
  CHECK(h.syncer.callsOf(Method::kSyncTerminatingPod).size() == 2);
  h.syncer.stopHolding();
  h.syncer.release();
  h.poll();
  term = h.syncer.callsOf(Method::kSyncTerminatingPod);
  // The 10 s attempt failed; the pending kill retries at once, still with 10 s.
  REQUIRE(term.size() == 3);
  CHECK_FALSE(term[1].cancelled);
  CHECK(term[2].grace_period == 10);
  CHECK(h.workers->isPodKnownTerminated("a"));
}

TEST_CASE("pod workers: termination is one way and a finished pod ignores updates",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncTerminatingPod);
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.update(SyncPodType::kKill, pod("a"));
  h.poll();
  // Updates while terminating become termination work, never syncPod.
  h.update(SyncPodType::kUpdate, pod("a", "newer"));
  h.update(SyncPodType::kSync, pod("a", "newer"));
  h.syncer.stopHolding();
  h.syncer.release();
  h.poll();
  CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 1);
  CHECK(h.workers->isPodKnownTerminated("a"));
  auto terminated = h.syncer.callsOf(Method::kSyncTerminatedPod);
  REQUIRE(terminated.size() == 1);
  CHECK(terminated[0].pod->metadata.name == "newer");

  const auto before = h.syncer.callCount();
  h.update(SyncPodType::kUpdate, pod("a"));
  h.update(SyncPodType::kSync, pod("a"));
  h.poll();
  CHECK(h.syncer.callCount() == before);
  CHECK(h.workers->getWorkToSync().empty());
}

TEST_CASE("pod workers: syncTerminatingPod is retried with backoff until it succeeds",
          "[unit][podworkers]") {
  Harness h({}, 0.5);  // jitter adds half of the maximum 50%: 10 s -> 12.5 s
  h.syncer.pushResult(Method::kSyncTerminatingPod, base::unavailableError("runtime down"));
  h.syncer.pushResult(Method::kSyncTerminatingPod, base::unavailableError("runtime down"));
  h.update(SyncPodType::kKill, pod("a"));
  h.poll();
  CHECK(h.methods("a") == std::vector<Method>{Method::kSyncTerminatingPod});
  CHECK(h.workers->couldHaveRunningContainers("a"));

  h.advance(12s);
  CHECK(h.syncer.callCount() == 1);
  h.advance(500ms);
  CHECK(h.syncer.callCount() == 2);
  h.advance(12500ms);
  CHECK(h.methods("a") == std::vector<Method>{Method::kSyncTerminatingPod,
                                              Method::kSyncTerminatingPod,
                                              Method::kSyncTerminatingPod,
                                              Method::kSyncTerminatedPod});
  CHECK(h.workers->isPodKnownTerminated("a"));
  // Terminating pods never go through the sync loop's queue.
  h.advance(10min);
  CHECK(h.workers->getWorkToSync().empty());
  CHECK(h.clock.pendingTimers() == 0);
}

TEST_CASE("pod workers: syncTerminatedPod is retried until it succeeds", "[unit][podworkers]") {
  Harness h;
  h.syncer.pushResult(Method::kSyncTerminatedPod, base::internalError("volumes busy"));
  h.update(SyncPodType::kKill, pod("a"));
  h.poll();
  CHECK(h.methods("a") ==
        std::vector<Method>{Method::kSyncTerminatingPod, Method::kSyncTerminatedPod});
  CHECK(h.workers->isPodKnownTerminated("a"));
  h.advance(10s);
  CHECK(h.methods("a") == std::vector<Method>{Method::kSyncTerminatingPod,
                                              Method::kSyncTerminatedPod,
                                              Method::kSyncTerminatedPod});
  // Finished: nothing is retried any more.
  h.advance(1h);
  CHECK(h.syncer.callCount() == 3);
}

TEST_CASE("pod workers: a terminal syncPod result terminates the pod with its own grace period",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.pushSyncPodResult(true);
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  CHECK(h.methods("a") == kFullLife);
  CHECK(h.syncer.callsOf(Method::kSyncTerminatingPod)[0].grace_period == std::nullopt);
  CHECK(h.workers->isPodKnownTerminated("a"));
  CHECK_FALSE(h.workers->shouldPodContentBeRemoved("a"));
}

TEST_CASE("pod workers: a pod that arrives in a terminal phase is only torn down",
          "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, makePod({.uid = "a", .phase = "Succeeded"}));
  h.poll();
  CHECK(h.methods("a") ==
        std::vector<Method>{Method::kSyncTerminatingPod, Method::kSyncTerminatedPod});
}

TEST_CASE("pod workers: an exception from the syncer is an error, not a crash",
          "[unit][podworkers]") {
  struct ThrowingSyncer final : podworkers::PodSyncer {
    int calls = 0;
    asio::awaitable<base::StatusOr<bool>> syncPod(SyncPodType, api::PodPtr, api::PodPtr,
                                                  std::stop_token) override {
      ++calls;
      throw std::runtime_error("boom");
      co_return false;
    }
    asio::awaitable<base::Status> syncTerminatingPod(api::PodPtr, std::optional<int64_t>,
                                                     podworkers::PodStatusFn,
                                                     std::stop_token) override {
      co_return base::okStatus();
    }
    asio::awaitable<base::Status> syncTerminatingRuntimePod(api::PodPtr,
                                                            std::stop_token) override {
      co_return base::okStatus();
    }
    asio::awaitable<base::Status> syncTerminatedPod(api::PodPtr) override {
      co_return base::okStatus();
    }
  };
  testing::FakeClock clock;
  asio::io_context ioc;
  FixedRandom random(0.0);
  ThrowingSyncer syncer;
  {
    podworkers::BasicPodWorkers workers(ioc.get_executor(), clock, random, syncer);
    UpdatePodOptions o;
    o.update_type = SyncPodType::kCreate;
    o.pod = pod("a");
    workers.updatePod(o);
    ioc.poll();
    CHECK(syncer.calls == 1);
    CHECK(workers.inFlight() == 0);
    clock.advance(10s);  // retried like any failed sync
    CHECK(workers.getWorkToSync() == std::vector<std::string>{"a"});
    workers.shutdown();
  }
  ioc.poll();
}

// ---------------------------------------------------------------------------------------------
// UID reuse

TEST_CASE("pod workers: a UID created again while terminating restarts once terminated",
          "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, pod("a", "v1"));
  h.poll();
  h.syncer.holdCalls(Method::kSyncTerminatingPod);
  h.update(SyncPodType::kKill, pod("a", "v1"));
  h.poll();
  h.update(SyncPodType::kCreate, pod("a", "v2"));
  h.update(SyncPodType::kUpdate, pod("a", "v3"));
  h.poll();
  CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 1);
  CHECK(h.workers->isPodTerminationRequested("a"));

  h.syncer.stopHolding();
  h.syncer.release();
  h.poll();
  CHECK(h.methods("a") == std::vector<Method>{Method::kSyncPod, Method::kSyncTerminatingPod,
                                              Method::kSyncTerminatedPod, Method::kSyncPod});
  auto last = h.syncer.callsFor("a").back();
  CHECK(last.type == SyncPodType::kCreate);
  CHECK(last.pod->metadata.name == "v3");
  CHECK(h.workers->podWorkerState("a") == PodWorkerState::kSyncPod);
  CHECK_FALSE(h.workers->isPodTerminationRequested("a"));
  CHECK(h.workers->couldHaveRunningContainers("a"));
}

TEST_CASE("pod workers: a create for a finished UID restarts it at once", "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.update(SyncPodType::kKill, pod("a"));
  h.poll();
  REQUIRE(h.workers->isPodKnownTerminated("a"));
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  CHECK(h.methods("a") == std::vector<Method>{Method::kSyncPod, Method::kSyncTerminatingPod,
                                              Method::kSyncTerminatedPod, Method::kSyncPod});
  CHECK(h.workers->podWorkerState("a") == PodWorkerState::kSyncPod);
}

TEST_CASE("pod workers: a kill after the re-create cancels the restart", "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.syncer.holdCalls(Method::kSyncTerminatingPod);
  h.update(SyncPodType::kKill, pod("a"));
  h.poll();
  h.update(SyncPodType::kCreate, pod("a"));
  h.update(SyncPodType::kKill, pod("a"));
  h.syncer.stopHolding();
  h.syncer.release();
  h.poll();
  CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 1);
  CHECK(h.workers->isPodKnownTerminated("a"));
}

// ---------------------------------------------------------------------------------------------
// Static pods with the same full name

TEST_CASE("pod workers: a new static pod waits until the old one with its name has terminated",
          "[unit][podworkers]") {
  Harness h;
  auto v1 = staticPod("v1", "etcd");
  auto v2 = staticPod("v2", "etcd");
  h.update(SyncPodType::kCreate, v1);
  h.poll();
  h.syncer.holdCalls(Method::kSyncTerminatingPod);

  SECTION("removal first (PodConfig's order)") {
    h.update(SyncPodType::kKill, v1);
    h.update(SyncPodType::kCreate, v2);
  }
  SECTION("addition first") {
    h.update(SyncPodType::kCreate, v2);
    h.poll();
    CHECK(h.syncer.callsFor("v2").empty());
    h.update(SyncPodType::kKill, v1);
  }
  h.update(SyncPodType::kUpdate, v2);  // still waiting; must still start as a create
  h.poll();
  CHECK(h.syncer.callsFor("v2").empty());
  CHECK(h.workers->isPodForMirrorPodTerminatingByFullName("etcd_default"));

  h.syncer.stopHolding();
  h.syncer.release();
  h.poll();
  CHECK(h.methods("v1") == kFullLife);
  auto v2_calls = h.syncer.callsFor("v2");
  REQUIRE(v2_calls.size() == 1);
  CHECK(v2_calls[0].method == Method::kSyncPod);
  CHECK(v2_calls[0].type == SyncPodType::kCreate);
  CHECK_FALSE(h.workers->isPodForMirrorPodTerminatingByFullName("etcd_default"));

  // v2 holds the name now: a third version waits for it.
  h.update(SyncPodType::kCreate, staticPod("v3", "etcd"));
  h.poll();
  CHECK(h.syncer.callsFor("v3").empty());
}

TEST_CASE("pod workers: a waiting static pod that is killed never starts and unblocks the next",
          "[unit][podworkers]") {
  Harness h;
  auto v1 = staticPod("v1", "etcd");
  auto v2 = staticPod("v2", "etcd");
  auto v3 = staticPod("v3", "etcd");
  int v2_done = 0;
  h.update(SyncPodType::kCreate, v1);
  h.update(SyncPodType::kCreate, v2);
  h.update(SyncPodType::kCreate, v3);
  h.poll();
  CHECK(h.syncer.callsFor("v2").empty());
  CHECK(h.syncer.callsFor("v3").empty());

  h.update(SyncPodType::kKill, v2, killOptions(std::nullopt, [&] { ++v2_done; }));
  h.poll();
  CHECK(h.syncer.callsFor("v2").empty());  // nothing ever ran: nothing to stop
  CHECK(v2_done == 1);
  CHECK(h.workers->isPodKnownTerminated("v2"));
  CHECK(h.syncer.callsFor("v3").empty());  // v1 still runs

  h.update(SyncPodType::kKill, v1);
  h.poll();
  CHECK(h.methods("v1") == kFullLife);
  CHECK(h.methods("v3") == std::vector<Method>{Method::kSyncPod});
}

TEST_CASE("pod workers: static pods with different full names run side by side",
          "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, staticPod("a", "etcd"));
  h.update(SyncPodType::kCreate, staticPod("b", "apiserver"));
  h.update(SyncPodType::kCreate, makePod({.uid = "c", .name = "etcd", .ns = "kube-system",
                                          .is_static = true}));
  h.poll();
  CHECK(h.syncer.callCount() == 3);
}

TEST_CASE("pod workers: forgetting the static pod that holds a name lets the next one start",
          "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, staticPod("v1", "etcd"));
  h.update(SyncPodType::kCreate, staticPod("v2", "etcd"));
  h.poll();
  CHECK(h.syncer.callsFor("v2").empty());
  h.workers->forgetWorker("v1");
  h.poll();
  CHECK(h.methods("v2") == std::vector<Method>{Method::kSyncPod});
}

// ---------------------------------------------------------------------------------------------
// Orphans known only to the runtime

TEST_CASE("pod workers: a runtime-only pod is killed and then finished", "[unit][podworkers]") {
  Harness h;
  UpdatePodOptions o;
  o.update_type = SyncPodType::kSync;
  o.pod = pod("orphan");
  o.runtime_pod = true;
  h.workers->updatePod(o);  // runtime pods can only be killed
  h.poll();
  CHECK(h.syncer.callCount() == 0);
  CHECK(h.workers->podWorkerState("orphan") == std::nullopt);

  o.update_type = SyncPodType::kKill;
  h.workers->updatePod(o);
  h.poll();
  CHECK(h.methods("orphan") == std::vector<Method>{Method::kSyncTerminatingRuntimePod});
  CHECK(h.workers->isPodKnownTerminated("orphan"));
  CHECK(h.workers->shouldPodContentBeRemoved("orphan"));
  auto known = h.workers->syncKnownPods({});
  CHECK(known.empty());
}

TEST_CASE("pod workers: a runtime kill of a pod config still has kills the config pod",
          "[unit][podworkers]") {
  Harness h;
  h.update(SyncPodType::kCreate, pod("a", "config-name"));
  h.poll();
  UpdatePodOptions o;
  o.update_type = SyncPodType::kKill;
  o.pod = pod("a", "runtime-name");
  o.runtime_pod = true;
  h.workers->updatePod(o);
  h.poll();
  CHECK(h.methods("a") == kFullLife);
  CHECK(h.syncer.callsOf(Method::kSyncTerminatingPod)[0].pod->metadata.name == "config-name");
}

// ---------------------------------------------------------------------------------------------
// Requeue through the work queue

TEST_CASE("pod workers: a synced pod is due again after the resync interval plus jitter",
          "[unit][podworkers]") {
  podworkers::PodWorkersOptions options;
  options.resync_interval = 60s;
  SECTION("no jitter") {
    Harness h(options, 0.0);
    h.update(SyncPodType::kCreate, pod("a"));
    h.poll();
    h.advance(59s);
    CHECK(h.workers->getWorkToSync().empty());
    h.advance(1s);
    CHECK(h.workers->getWorkToSync() == std::vector<std::string>{"a"});
    CHECK(h.workers->getWorkToSync().empty());  // handed out once

    // The sync loop dispatches the due pod: it is synced again and requeued.
    h.update(SyncPodType::kSync, pod("a"));
    h.poll();
    auto calls = h.syncer.callsFor("a");
    REQUIRE(calls.size() == 2);
    CHECK(calls[1].type == SyncPodType::kSync);
    h.advance(60s);
    CHECK(h.workers->getWorkToSync() == std::vector<std::string>{"a"});
  }
  SECTION("jitter adds up to 50%") {
    Harness h(options, 0.99);
    h.update(SyncPodType::kCreate, pod("a"));
    h.poll();
    h.advance(89s);
    CHECK(h.workers->getWorkToSync().empty());
    h.advance(1s);
    CHECK(h.workers->getWorkToSync() == std::vector<std::string>{"a"});
  }
}

TEST_CASE("pod workers: a failed sync is due again after the backoff period",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.pushSyncPodResult(base::internalError("image pull failed"));
  h.syncer.pushSyncPodResult(base::unavailableError("network is not ready: cni missing"));
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.advance(9s);
  CHECK(h.workers->getWorkToSync().empty());
  h.advance(1s);
  CHECK(h.workers->getWorkToSync() == std::vector<std::string>{"a"});

  h.update(SyncPodType::kSync, pod("a"));
  h.poll();
  h.advance(1s);  // "network is not ready" is retried sooner
  CHECK(h.workers->getWorkToSync() == std::vector<std::string>{"a"});
}

TEST_CASE("pod workers: a newer sync replaces the pending due time", "[unit][podworkers]") {
  Harness h;
  h.syncer.pushSyncPodResult(base::internalError("fails once"));
  h.update(SyncPodType::kCreate, pod("a"));
  h.poll();
  h.update(SyncPodType::kUpdate, pod("a"));  // succeeds: due in 60 s, not 10 s
  h.poll();
  h.advance(30s);
  CHECK(h.workers->getWorkToSync().empty());
  h.advance(30s);
  CHECK(h.workers->getWorkToSync() == std::vector<std::string>{"a"});
}

// ---------------------------------------------------------------------------------------------
// Queries before and after the first syncKnownPods

TEST_CASE("pod workers: unknown pods count as running until the workers have synced",
          "[unit][podworkers]") {
  Harness h;
  CHECK(h.workers->couldHaveRunningContainers("x"));
  CHECK_FALSE(h.workers->shouldPodContainersBeTerminating("x"));
  CHECK_FALSE(h.workers->shouldPodRuntimeBeRemoved("x"));
  CHECK_FALSE(h.workers->shouldPodContentBeRemoved("x"));
  CHECK_FALSE(h.workers->isPodTerminationRequested("x"));
  CHECK_FALSE(h.workers->isPodKnownTerminated("x"));

  h.workers->syncKnownPods({});
  CHECK_FALSE(h.workers->couldHaveRunningContainers("x"));
  CHECK(h.workers->shouldPodContainersBeTerminating("x"));
  CHECK(h.workers->shouldPodRuntimeBeRemoved("x"));
  CHECK(h.workers->shouldPodContentBeRemoved("x"));
  CHECK_FALSE(h.workers->isPodTerminationRequested("x"));
}

// ---------------------------------------------------------------------------------------------
// Shutdown

TEST_CASE("pod workers: shutdown lets the running sync finish and drops everything else",
          "[unit][podworkers]") {
  Harness h;
  h.syncer.holdCalls(Method::kSyncPod, std::string("busy"));
  h.syncer.pushResult(Method::kSyncTerminatingPod, base::internalError("retry me"));
  h.update(SyncPodType::kCreate, pod("busy"));
  h.update(SyncPodType::kKill, pod("retrying"));
  h.update(SyncPodType::kCreate, staticPod("s1", "etcd"));
  h.update(SyncPodType::kCreate, staticPod("s2", "etcd"));  // parked behind s1
  h.poll();
  h.update(SyncPodType::kUpdate, pod("busy", "pending"));
  REQUIRE(h.clock.pendingTimers() == 1);  // the terminating retry
  REQUIRE(h.workers->inFlight() == 1);

  bool idle = false;
  h.workers->shutdown([&] { idle = true; });
  h.poll();
  CHECK_FALSE(idle);
  CHECK(h.clock.pendingTimers() == 0);

  h.update(SyncPodType::kCreate, pod("late"));
  h.syncer.release();
  h.poll();
  CHECK(idle);
  CHECK(h.workers->inFlight() == 0);
  CHECK(h.syncer.callsFor("busy").size() == 1);  // the pending update was dropped
  CHECK(h.syncer.callsFor("late").empty());
  CHECK(h.syncer.callsFor("s2").empty());
  CHECK(h.syncer.callsFor("retrying").size() == 1);
  h.advance(1h);
  CHECK(h.syncer.callsFor("retrying").size() == 1);
  CHECK(h.workers->getWorkToSync().empty());

  bool idle_again = false;
  h.workers->shutdown([&] { idle_again = true; });
  h.poll();
  CHECK(idle_again);
}

TEST_CASE("pod workers: destroying the workers with a sync in flight leaks nothing",
          "[unit][podworkers]") {
  testing::FakeClock clock;
  asio::io_context ioc;
  FixedRandom random(0.0);
  testing::FakePodSyncer syncer;
  syncer.holdCalls(Method::kSyncPod);
  {
    podworkers::BasicPodWorkers workers(ioc.get_executor(), clock, random, syncer);
    UpdatePodOptions o;
    o.update_type = SyncPodType::kCreate;
    o.pod = pod("a");
    workers.updatePod(o);
    ioc.poll();
    REQUIRE(syncer.heldCount() == 1);
  }
  // The held coroutine owns the workers' state; releasing it lets everything unwind.
  syncer.release();
  ioc.poll();
  CHECK(syncer.activeCount() == 0);
}

// ---------------------------------------------------------------------------------------------
// The fake for callers

TEST_CASE("fake pod workers: record updates and answer queries from set state",
          "[unit][podworkers]") {
  testing::FakePodWorkers fake;
  UpdatePodOptions o;
  o.update_type = SyncPodType::kCreate;
  o.pod = pod("a");
  fake.updatePod(o);
  REQUIRE(fake.updates().size() == 1);
  CHECK(fake.updates()[0].pod->metadata.uid == "a");

  CHECK(fake.couldHaveRunningContainers("a"));
  fake.setState("a", PodWorkerState::kTerminatingPod);
  CHECK(fake.isPodTerminationRequested("a"));
  CHECK(fake.couldHaveRunningContainers("a"));
  fake.setState("a", PodWorkerState::kTerminatedPod);
  CHECK(fake.isPodKnownTerminated("a"));
  CHECK_FALSE(fake.couldHaveRunningContainers("a"));

  auto known = fake.syncKnownPods({});
  CHECK(known["a"].orphan);
  CHECK_FALSE(fake.couldHaveRunningContainers("unknown"));

  fake.addDue("a");
  CHECK(fake.getWorkToSync() == std::vector<std::string>{"a"});
  CHECK(fake.getWorkToSync().empty());
  fake.forgetWorker("a");
  CHECK(fake.forgotten() == std::vector<std::string>{"a"});
}
