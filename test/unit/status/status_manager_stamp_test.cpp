// Status stamps: unique over the manager and every update, so caches derived from a status can
// key on them even when a UID's versions start again.
#include <catch2/catch.hpp>

#include "agent/status/status_manager.h"
#include "podmanager/mirror_client.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;

namespace {

// A status manager over an empty pod manager, on a fake clock.
struct Managers {
  testing::FakeClock clock;
  podmanager::NoopMirrorClient mirror;
  podmanager::PodManager pods{mirror};
  agent::StatusManager statuses{clock, pods};
};

}  // namespace

TEST_CASE("status: every stored update gets a new stamp, also for a re-created UID",
          "[unit][status]") {
  Managers m;
  auto& manager = m.statuses;
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
  CHECK(again.version == 1);    // versions start again
  CHECK(again.stamp > second);  // stamps do not
}

TEST_CASE("status: version moves when a status is stored or removed, not for an unchanged one",
          "[unit][status]") {
  Managers m;
  auto& manager = m.statuses;
  auto moved = [&, last = manager.version()]() mutable {
    const bool changed = manager.version() != last;
    last = manager.version();
    return changed;
  };
  auto a = testing::PodBuilder().name("a").uid("ua").container("c", {"true"}).build();
  api::PodStatus pending;
  pending.phase = "Pending";
  api::PodStatus running;
  running.phase = "Running";
  REQUIRE(manager.setPodStatus(*a, pending));
  CHECK(moved());
  CHECK_FALSE(manager.setPodStatus(*a, pending));
  CHECK_FALSE(moved());
  REQUIRE(manager.setPodStatus(*a, running));
  CHECK(moved());
  manager.removeStatus("nobody");
  CHECK_FALSE(moved());
  manager.removeStatus("ua");
  CHECK(moved());
  REQUIRE(manager.setPodStatus(*a, running));
  CHECK(moved());
  manager.removeOrphanedStatuses({"ua"});
  CHECK_FALSE(moved());
  manager.removeOrphanedStatuses({});
  CHECK(moved());
}

TEST_CASE("status: statusStamps gives each pod's stamp in one pass, in any order",
          "[unit][status]") {
  Managers m;
  auto& manager = m.statuses;
  std::vector<api::PodPtr> all;
  for (const char* uid : {"u1", "u2", "u3", "u4", "u5"}) {
    all.push_back(
        testing::PodBuilder().name(std::string("p-") + uid).uid(uid).container("c").build());
  }
  api::PodStatus running;
  running.phase = "Running";
  for (size_t i : {0, 2, 3}) REQUIRE(manager.setPodStatus(*all[i], running));  // u2, u5: none
  auto expect = [&](const std::vector<api::PodPtr>& list) {
    auto stamps = manager.statusStamps(list);
    REQUIRE(stamps.size() == list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      INFO(list[i]->metadata.uid);
      CHECK(stamps[i] == manager.statusStamp(list[i]->metadata.uid));
    }
  };
  expect(all);
  expect({all[4], all[0], all[3], all[1], all[2]});
  expect({all[3], all[3], all[0]});
  expect({});
  CHECK(manager.statusStamps(all)[1] == std::nullopt);
  CHECK(manager.statusStamps(all)[2].has_value());
}
