// A sync the syncer takes as done at once (PodSyncer::trySettledSync): asked only for a plain
// sync of an idle worker with the objects of its last sync; such a sync runs nothing and queues
// the pod for its next resync.
#include <catch2/catch.hpp>

#include "test/unit/podworkers/pod_workers_harness.h"

using namespace nodeagent;
using namespace nodeagent::podworkers_test;

TEST_CASE("pod workers: a settled sync runs no syncPod and is queued for the next resync",
          "[unit][podworkers]") {
  Harness h;
  auto a = pod("a");
  h.update(SyncPodType::kCreate, a);
  h.poll();
  REQUIRE(h.syncer.callsOf(Method::kSyncPod).size() == 1);
  h.advance(2min);
  REQUIRE(h.workers->getWorkToSync() == std::vector<std::string>{"a"});

  h.syncer.settled = true;
  h.update(SyncPodType::kSync, a);
  h.poll();
  CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 1);
  CHECK(h.syncer.settled_syncs == 1);
  CHECK(h.workers->getWorkToSync().empty());
  h.advance(2min);
  CHECK(h.workers->getWorkToSync() == std::vector<std::string>{"a"});  // resynced again later

  SECTION("a new object of the pod is synced by the worker") {
    h.update(SyncPodType::kSync, pod("a"));
    h.poll();
    CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 2);
    CHECK(h.syncer.settled_syncs == 1);
  }
  SECTION("an update is synced by the worker") {
    h.update(SyncPodType::kUpdate, a);
    h.poll();
    CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 2);
  }
  SECTION("a busy worker takes the sync as pending work") {
    h.syncer.holdCalls(Method::kSyncPod);
    h.update(SyncPodType::kUpdate, a);
    h.poll();
    REQUIRE(h.syncer.heldCount() == 1);
    h.update(SyncPodType::kSync, a);
    h.syncer.stopHolding();
    h.syncer.release();
    h.poll();
    CHECK(h.syncer.callsOf(Method::kSyncPod).size() == 3);
    CHECK(h.syncer.settled_syncs == 1);
  }
  SECTION("a terminating pod is not asked") {
    h.syncer.holdCalls(Method::kSyncTerminatingPod);
    h.update(SyncPodType::kKill, a);
    h.poll();
    h.update(SyncPodType::kSync, a);
    h.poll();
    CHECK(h.syncer.settled_syncs == 1);
  }
}
