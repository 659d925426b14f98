// The status manager's cache: stamps unique over the manager and every update (caches derived
// from a status key on them even when a UID's versions start again), and one copy of each distinct
// list of pod conditions among its statuses.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "agent/status/status_manager.h"
#include "podmanager/mirror_client.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

// A status manager over an empty pod manager, on a fake clock.
struct Managers {
  testing::FakeClock clock;
  podmanager::NoopMirrorClient mirror;
  podmanager::PodManager pods{mirror};
  agent::StatusManager statuses{clock, pods};
};

// Pod `name` with UID "u<name>".
api::PodPtr pod(const std::string& name) {
  return testing::PodBuilder().name(name).uid("u" + name).container("c", {"true"}).build();
}

api::PodStatus phaseStatus(const char* phase) {
  api::PodStatus s;
  s.phase = phase;
  return s;
}

api::PodStatus runningStatus(const char* ready) {
  api::PodStatus s = phaseStatus("Running");
  s.conditions.push_back({"Initialized", "True", "", "", std::nullopt, std::nullopt});
  s.conditions.push_back({"Ready", ready, "", "", std::nullopt, std::nullopt});
  return s;
}

}  // namespace

TEST_CASE("status: every stored update gets a new stamp, also for a re-created UID",
          "[unit][status]") {
  Managers m;
  auto& manager = m.statuses;
  auto a = pod("a");
  auto b = pod("b");
  const api::PodStatus pending = phaseStatus("Pending");
  const api::PodStatus running = phaseStatus("Running");

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
  auto a = pod("a");
  const api::PodStatus pending = phaseStatus("Pending");
  const api::PodStatus running = phaseStatus("Running");
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
  const api::PodStatus running = phaseStatus("Running");
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

TEST_CASE("status: pods whose conditions changed within one second share one copy of them",
          "[unit][status]") {
  Managers m;
  auto& manager = m.statuses;
  auto a = pod("a");
  auto b = pod("b");
  auto c = pod("c");
  m.clock.setWallTime(base::SystemTime(std::chrono::seconds(1'800'000'000)));
  REQUIRE(manager.setPodStatus(*a, runningStatus("True")));
  m.clock.advance(300ms);  // the same second: times are whole seconds in the cache
  REQUIRE(manager.setPodStatus(*b, runningStatus("True")));
  m.clock.advance(1s);
  REQUIRE(manager.setPodStatus(*c, runningStatus("True")));

  const auto sa = manager.getPodStatus("ua");
  const auto sb = manager.getPodStatus("ub");
  const auto sc = manager.getPodStatus("uc");
  REQUIRE(sa);
  REQUIRE(sb);
  REQUIRE(sc);
  CHECK(sa->conditions.size() == 2);
  CHECK(sa->conditions.sharesWith(sb->conditions));
  CHECK_FALSE(sa->conditions.sharesWith(sc->conditions));  // other transition times
  CHECK(sa->conditions[1].last_transition_time == sb->conditions[1].last_transition_time);

  // A changed copy reaches neither the cache nor another pod.
  auto copy = *sb;
  copy.conditions[1].status = "False";
  CHECK(manager.getPodStatus("ua")->conditions[1].status == "True");
  CHECK(manager.getPodStatus("ub")->conditions[1].status == "True");

  // b's Ready turns False: b gets its own list, a keeps its own.
  m.clock.advance(1s);
  REQUIRE(manager.setPodStatus(*b, runningStatus("False")));
  const auto a_after = manager.getPodStatus("ua");
  const auto b_after = manager.getPodStatus("ub");
  CHECK_FALSE(a_after->conditions.sharesWith(b_after->conditions));
  CHECK(a_after->conditions[1].status == "True");
  CHECK(b_after->conditions[1].status == "False");
  CHECK(a_after->conditions.sharesWith(sa->conditions));
}
