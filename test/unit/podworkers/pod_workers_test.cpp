#include <catch2/catch.hpp>

#include <algorithm>

#include "podworkers/pod_workers_impl.h"
#include "test/unit/podworkers/pod_workers_harness.h"

using namespace nodeagent;
using namespace nodeagent::podworkers_test;

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

TEST_CASE(
    "pod workers: a kill is not forgotten behind later updates "
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

TEST_CASE("pod workers: a pending kill is never replaced by a later update", "[unit][podworkers]") {
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

TEST_CASE(
    "pod workers: syncKnownPods forgets finished workers not desired "
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
  CHECK(known["2"] ==
        podworkers::PodWorkerSync{PodWorkerState::kTerminatedPod, false, true, false});
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

TEST_CASE(
    "pod workers: real workers pass the same pods to the syncer as the serial fake "
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
    UpdatePodOptions o{s.pod, s.mirror, std::nullopt, s.type, false};
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

TEST_CASE(
    "pod workers: a kill's completion callback runs once containers are stopped "
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
  CHECK(h.methods("a") ==
        std::vector<Method>{Method::kSyncTerminatingPod, Method::kSyncTerminatingPod,
                            Method::kSyncTerminatingPod, Method::kSyncTerminatedPod});
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
    asio::awaitable<base::Status> syncTerminatingRuntimePod(api::PodPtr, std::stop_token) override {
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

TEST_CASE("pod workers: a worker's state at rest stays small", "[unit][podworkers]") {
  // Tens of thousands of workers rest between resyncs: what only termination, a pending update
  // or a kill needs is boxed (one pointer each while unset). A worker's status is made with
  // make_shared: with the 16-byte control block it fills one 256-byte block, its place in the
  // resync queue included.
  CHECK(sizeof(podworkers::pod_workers_internal::SyncStatus) <= 240);
  CHECK(sizeof(podworkers::UpdatePodOptions) <= 48);
  podworkers::pod_workers_internal::SyncStatus st("uid",
                                                  asio::make_strand(asio::system_executor()));
  CHECK_FALSE(st.termination);
  CHECK_FALSE(st.terminationRequested());
  CHECK_FALSE(st.gracePeriod());
  st.term().grace_period = 3;
  CHECK_FALSE(st.terminationRequested());  // a record alone requests nothing
  CHECK(st.gracePeriod() == 3);
  st.term().terminating_at = base::MonotonicTime{};
  CHECK(st.terminationRequested());
  CHECK_FALSE(st.terminated());
}

// ---------------------------------------------------------------------------------------------
// UID reuse
