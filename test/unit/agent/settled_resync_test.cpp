// The periodic resync of a settled pod (PodLifecycle::Settled): skipped while every input of the
// pod's last sync is unchanged, done in full as soon as one of them changes.
#include <catch2/catch.hpp>

#include <atomic>
#include <functional>

#include <nlohmann/json.hpp>

#include "agent/status/pod_status.h"
#include "test/unit/agent/agent_harness.h"

using namespace nodeagent;
using namespace nodeagent::testing::agent_harness;

namespace {

uint64_t unchanged(Harness& h) { return h.agent->metrics().sync_pod_unchanged.load(); }
uint64_t syncs(Harness& h) { return h.agent->metrics().sync_pod_total.load(); }

// A pod from the apiserver (a static pod settles only once its mirror pod is in place, and the
// harness' mirror client makes none that the pod manager sees).
api::PodPtr apiPod(const std::function<void(nlohmann::json&)>& edit = {}) {
  return testing::PodBuilder()
      .name("web")
      .uid("uid-web")
      .annotation("kubernetes.io/config.source", "api")
      .container("web", {"sleep", "1000"})
      .restartPolicy("Always")
      .edit([&](nlohmann::json& j) {
        if (edit) edit(j);
      })
      .build();
}

// Adds `pod` and lets it run until its resyncs are skipped.
void addSettled(Harness& h, api::PodPtr pod) {
  h.update(api::PodOperation::kAdd, {std::move(pod)}, "api");
  h.advance(3min);
  REQUIRE(unchanged(h) > 0);
}

}  // namespace

TEST_CASE("settled resync: a running pod's resyncs are skipped and its status stays as it was",
          "[unit][agent]") {
  Harness h;
  h.update(api::PodOperation::kAdd, {apiPod()}, "api");
  REQUIRE(h.phase("uid-web") == "Running");
  const auto stamp = h.status_manager.statusStamp("uid-web");
  const auto syncs_before = syncs(h);
  REQUIRE(unchanged(h) == 0);

  h.advance(5min);  // several --sync-frequency periods
  const auto resyncs = syncs(h) - syncs_before;
  CHECK(resyncs >= 4);
  // Every resync but possibly the first (the sync after the start may still have had work) is
  // skipped.
  CHECK(unchanged(h) >= resyncs - 1);
  CHECK(unchanged(h) > 0);
  CHECK(h.status_manager.statusStamp("uid-web") == stamp);
  CHECK(h.actions(Action::Kind::kStart).size() == 1);
}

TEST_CASE("settled resync: a container that exits after the pod settled is restarted",
          "[unit][agent]") {
  Harness h;
  addSettled(h, apiPod());
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  auto status = *h.status_manager.getPodStatus("uid-web");
  REQUIRE(status.container_statuses.size() == 1);
  CHECK(status.container_statuses[0].restart_count == 1);
}

TEST_CASE("settled resync: a status changed by someone else is generated again at the next resync",
          "[unit][agent]") {
  Harness h;
  addSettled(h, apiPod());
  auto pod = h.pod_manager.getPodByUID("uid-web");
  REQUIRE(pod);
  auto foreign = *h.status_manager.getPodStatus("uid-web");
  // (A reason and a message stay with their phase: a field the sync generates is changed.)
  foreign.container_statuses.at(0).ready = false;
  REQUIRE(h.status_manager.setPodStatus(*pod, foreign));
  const auto unchanged_before = unchanged(h);

  h.advance(2min);  // at least one resync
  auto status = *h.status_manager.getPodStatus("uid-web");
  CHECK(status.container_statuses.at(0).ready);  // the generated status again
  CHECK(status.phase == "Running");
  // After the full sync, the pod settles again.
  h.advance(2min);
  CHECK(unchanged(h) > unchanged_before);
}

TEST_CASE(
    "settled resync: a status written for one pod moves the node-wide watermark and the other "
    "pods still notice their own changes afterwards",
    "[unit][agent]") {
  // Settled resyncs look a pod's status up only when the status manager's version moved since
  // the pod last checked; a move caused by another pod is taken in once checked, and must not
  // hide a later change of this pod.
  Harness h;
  h.update(api::PodOperation::kAdd, {apiPod(), apiPod([](nlohmann::json& j) {
                                       j["metadata"]["name"] = "db";
                                       j["metadata"]["uid"] = "uid-db";
                                     })},
           "api");
  h.advance(3min);
  REQUIRE(unchanged(h) > 0);
  auto overwrite = [&h](const std::string& uid) {
    auto pod = h.pod_manager.getPodByUID(uid);
    REQUIRE(pod);
    auto foreign = *h.status_manager.getPodStatus(uid);
    foreign.container_statuses.at(0).ready = false;
    REQUIRE(h.status_manager.setPodStatus(*pod, foreign));
  };
  auto ready = [&h](const std::string& uid) {
    return h.status_manager.getPodStatus(uid)->container_statuses.at(0).ready;
  };

  overwrite("uid-web");
  const auto db_stamp = h.status_manager.statusStamp("uid-db");
  h.advance(2min);  // web is synced in full, db checks its own status and stays settled
  CHECK(ready("uid-web"));
  CHECK(h.status_manager.statusStamp("uid-db") == db_stamp);
  const auto unchanged_before = unchanged(h);
  h.advance(2min);
  CHECK(unchanged(h) >= unchanged_before + 2);  // both settled again

  overwrite("uid-db");
  h.advance(2min);
  CHECK(ready("uid-db"));
  CHECK(ready("uid-web"));
}

TEST_CASE("settled resync: a pod with volumes is resynced in full", "[unit][agent]") {
  Harness h;
  auto pod = apiPod([](nlohmann::json& j) {
    j["spec"]["volumes"] = {{{"name", "scratch"}, {"emptyDir", nlohmann::json::object()}}};
  });
  h.update(api::PodOperation::kAdd, {pod}, "api");
  REQUIRE(h.phase("uid-web") == "Running");
  h.advance(5min);
  CHECK(unchanged(h) == 0);  // its volumes are refreshed by every sync
}

TEST_CASE("settled resync: a liveness probe that starts failing on a settled pod restarts it",
          "[unit][agent][prober]") {
  Harness h;
  h.runtime.setKillExitCode(137);
  std::atomic<int> live_exit{0};
  h.runtime.setExecHandler([&](const std::string&, const std::vector<std::string>&) {
    return runtime::ExecResult{live_exit.load(), false, "sick"};
  });
  addSettled(h, apiPod([](nlohmann::json& j) {
               j["spec"]["containers"][0]["livenessProbe"] = {{"exec", {{"command", {"live"}}}},
                                                              {"periodSeconds", 10}};
             }));
  CHECK(h.actions(Action::Kind::kKill).empty());

  live_exit = 1;
  h.advance(31s);  // three failures in a row (failureThreshold 3)
  auto kills = h.actions(Action::Kind::kKill);
  REQUIRE(kills.size() == 1);
  CHECK(kills[0].reason == "Container web failed liveness probe, will be restarted");
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
}

TEST_CASE("settled resync: a runtime without per-pod versions is compared by its status",
          "[unit][agent]") {
  Harness h;
  h.runtime.setReportsPodStatusVersions(false);
  h.update(api::PodOperation::kAdd, {apiPod()}, "api");
  h.advance(5min);
  CHECK(unchanged(h) > 0);  // skipped once the status read matched the settled one

  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  CHECK(h.actions(Action::Kind::kStart).size() == 2);
  const auto unchanged_before = unchanged(h);
  h.advance(3min);
  CHECK(unchanged(h) > unchanged_before);  // settled again after the restart
}
