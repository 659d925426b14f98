#include <catch2/catch.hpp>

#include <algorithm>

#include "test/unit/podworkers/pod_workers_harness.h"

using namespace nodeagent;
using namespace nodeagent::podworkers_test;

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
  h.update(SyncPodType::kCreate,
           makePod({.uid = "c", .name = "etcd", .ns = "kube-system", .is_static = true}));
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
