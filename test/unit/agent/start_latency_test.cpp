// kubelet_pod_start_duration_seconds: a pod's start latency (config.seen -> Running) is observed
// once, when its status first turns Running after the agent started its containers.
#include <catch2/catch.hpp>

#include <string>

#include "agent/status/container_statuses.h"
#include "api/pod_update.h"
#include "api/time.h"
#include "test/unit/agent/agent_harness.h"

using namespace nodeagent;
using namespace nodeagent::testing::agent_harness;

TEST_CASE("pod start latency: observed once, when the pod first turns Running", "[unit][agent]") {
  Harness h;
  auto seen = [&](const char* name) {
    return testing::PodBuilder()
        .name(name)
        .uid(std::string("uid-") + name)
        .annotation("kubernetes.io/config.source", "api")
        .annotation(std::string(api::kConfigFirstSeenAnnotationKey),
                    api::formatNanoTime(agent::toApiTime(h.clock.wallNow())))
        .container("c", {"sleep", "1000"})
        .restartPolicy("Always")
        .build();
  };
  auto observed = [&] { return h.agent->metrics().pod_start.count(); };
  h.update(api::PodOperation::kAdd, {seen("a")}, "api");
  REQUIRE(h.phase("uid-a") == "Running");
  CHECK(observed() == 1);

  // Neither a restarted container (the pod stays Running) nor resyncs observe it again.
  REQUIRE(h.runtime.exitContainer("uid-a", "c", 1));
  h.drain();
  h.advance(3min);
  REQUIRE(h.actions(Action::Kind::kStart).size() == 2);
  CHECK(observed() == 1);

  // As after an agent restart: no cached status while the pod's containers run. A sync that
  // starts nothing caches Running again without observing it.
  h.status_manager.removeStatus("uid-a");
  h.advance(2min);
  REQUIRE(h.phase("uid-a") == "Running");
  CHECK(observed() == 1);

  h.update(api::PodOperation::kAdd, {seen("b")}, "api");
  REQUIRE(h.phase("uid-b") == "Running");
  CHECK(observed() == 2);
}
