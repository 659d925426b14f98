// Status stamps: unique over the manager and every update, so caches derived from a status can
// key on them even when a UID's versions start again.
#include <catch2/catch.hpp>

#include "agent/status/status_manager.h"
#include "podmanager/mirror_client.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;

TEST_CASE("status: every stored update gets a new stamp, also for a re-created UID",
          "[unit][status]") {
  testing::FakeClock clock;
  podmanager::NoopMirrorClient mirror;
  podmanager::PodManager pods(mirror);
  agent::StatusManager manager(clock, pods);
  auto a = testing::PodBuilder().name("a").uid("ua").container("c", {"true"}).build();
  auto b = testing::PodBuilder().name("b").uid("ub").container("c", {"true"}).build();
  api::PodStatus pending;
  pending.phase = "Pending";
  api::PodStatus running;
  running.phase = "Running";

  REQUIRE(manager.setPodStatus(*a, pending));
  const auto first = manager.getVersionedPodStatus("ua")->stamp;
  REQUIRE(manager.setPodStatus(*b, pending));
  CHECK(manager.getVersionedPodStatus("ub")->stamp != first);
  CHECK_FALSE(manager.setPodStatus(*a, pending));  // unchanged: not stored, same stamp
  CHECK(manager.getVersionedPodStatus("ua")->stamp == first);
  REQUIRE(manager.setPodStatus(*a, running));
  const auto second = manager.getVersionedPodStatus("ua")->stamp;
  CHECK(second > first);

  manager.removeStatus("ua");
  REQUIRE(manager.setPodStatus(*a, running));
  const auto again = *manager.getVersionedPodStatus("ua");
  CHECK(again.version == 1);  // versions start again
  CHECK(again.stamp > second);  // stamps do not
}
