// The agent's container starts on a runtime that runs images (the FakeRuntime with images on), on
// the fake clock: the image step before a start, its Waiting reasons in the pod's API status, its
// events, and the resyncs at the end of a pull backoff. No threads, no sleeps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>

#include <nlohmann/json.hpp>

#include "test/unit/agent/agent_harness.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using nodeagent::testing::agent_harness::Action;

namespace {

// The agent's harness with a runtime that runs images (or not), and the image tests' queries.
struct Harness : testing::agent_harness::Harness {
  explicit Harness(bool runs_images = true)
      : testing::agent_harness::Harness(110, [this, runs_images](agent::AgentOptions&) {
          runtime.setRunsImages(runs_images);
        }) {}
  void add(const api::PodPtr& pod) { update(api::PodOperation::kAdd, {pod}); }
  size_t starts() { return actions(Action::Kind::kStart).size(); }
  api::ContainerStatus container(const std::string& uid = "uid-web") {
    auto status = status_manager.getPodStatus(uid);
    REQUIRE(status.has_value());
    REQUIRE(status->container_statuses.size() == 1);
    return status->container_statuses[0];
  }
  std::string waitingReason() {
    auto c = container();
    return c.state.waiting ? c.state.waiting->reason : "";
  }
  // Events recorded as "<type> <reason>: <message>".
  size_t countEvents(const std::string& text) {
    std::lock_guard lock(events_mu);
    return std::count_if(events.begin(), events.end(), [&](const Event& e) {
      return e.type + " " + e.reason + ": " + e.message == text;
    });
  }
};

const std::string kImage = "registry.test/app:1";

api::PodPtr webPod(const std::string& policy, const std::string& image = kImage) {
  return testing::PodBuilder()
      .name("web-node1")
      .uid("uid-web")
      .annotation("kubernetes.io/config.source", "file")
      .container("web", {"sleep", "1000"}, image)
      .restartPolicy("Always")
      .edit([&](nlohmann::json& j) { j["spec"]["containers"][0]["imagePullPolicy"] = policy; })
      .build();
}

}  // namespace

TEST_CASE(
    "image pulls: a failing pull waits as ErrImagePull, then ImagePullBackOff, retried "
    "after 10s then 20s",
    "[unit][images]") {
  Harness h;
  h.runtime.setPullResult(kImage, base::unknownError("dial tcp 127.0.0.1:1: connection refused"));
  h.add(webPod("IfNotPresent"));
  CHECK(h.starts() == 0);
  CHECK(h.runtime.pulls().size() == 1);
  auto c = h.container();
  REQUIRE(c.state.waiting);
  CHECK(c.state.waiting->reason == "ErrImagePull");
  CHECK(c.state.waiting->message == "dial tcp 127.0.0.1:1: connection refused");
  CHECK(c.restart_count == 0);
  CHECK(h.status_manager.getPodStatus("uid-web")->phase == "Pending");
  CHECK(h.countEvents("Normal Pulling: Pulling image \"" + kImage + "\"") == 1);
  CHECK(h.countEvents("Warning Failed: Failed to pull image \"" + kImage +
                      "\": dial tcp 127.0.0.1:1: connection refused") == 1);
  CHECK(h.countEvents("Warning Failed: Error: ErrImagePull") == 1);

  h.advance(9500ms);
  CHECK(h.runtime.pulls().size() == 1);
  h.advance(1s);  // the backoff's end resyncs the pod: pulled again, now 20 s
  CHECK(h.runtime.pulls().size() == 2);
  // The failed sync is retried before the backoff ends: ImagePullBackOff.
  h.advance(10s);
  CHECK(h.runtime.pulls().size() == 2);
  CHECK(h.waitingReason() == "ImagePullBackOff");
  CHECK(h.container().state.waiting->message == "Back-off pulling image \"" + kImage + "\"");
  CHECK(h.countEvents("Normal BackOff: Back-off pulling image \"" + kImage + "\"") >= 1);
  CHECK(h.countEvents("Warning Failed: Error: ImagePullBackOff") >= 1);
  CHECK(h.container().restart_count == 0);
  h.advance(10s);  // 20 s after the second failure
  CHECK(h.runtime.pulls().size() == 3);
  CHECK(h.waitingReason() == "ErrImagePull");

  SECTION("a pull that works after the next backoff (40s) starts the container") {
    h.runtime.setPullResult(kImage, base::okStatus());
    h.advance(39s);
    CHECK(h.runtime.pulls().size() == 3);
    CHECK(h.starts() == 0);
    h.advance(2s);
    CHECK(h.runtime.pulls().size() == 4);
    CHECK(h.starts() == 1);
    auto running = h.container();
    CHECK(running.state.running);
    CHECK(running.restart_count == 0);
    CHECK(h.countEvents("Normal Pulled: Successfully pulled image \"" + kImage + "\" in 0s") == 1);
  }
}

TEST_CASE("image pulls: pull policies before a start", "[unit][images]") {
  SECTION("Never with the image missing: ErrImageNeverPull, nothing pulled or started") {
    Harness h;
    h.add(webPod("Never"));
    CHECK(h.starts() == 0);
    CHECK(h.runtime.pulls().empty());
    auto c = h.container();
    REQUIRE(c.state.waiting);
    CHECK(c.state.waiting->reason == "ErrImageNeverPull");
    CHECK(c.state.waiting->message ==
          "Container image \"" + kImage + "\" is not present with pull policy of Never");
    CHECK(c.restart_count == 0);
    CHECK(h.countEvents("Warning ErrImageNeverPull: " + c.state.waiting->message) == 1);
    CHECK(h.countEvents("Warning Failed: Error: ErrImageNeverPull") == 1);
    SECTION("the image arriving lets the next sync start it") {
      h.runtime.addImage(kImage);
      h.advance(11s);  // the failed sync's retry
      CHECK(h.starts() == 1);
      CHECK(h.container().state.running);
    }
  }
  SECTION("IfNotPresent with the image present: started, no pull") {
    Harness h;
    h.runtime.addImage(kImage);
    h.add(webPod("IfNotPresent"));
    CHECK(h.starts() == 1);
    CHECK(h.runtime.pulls().empty());
    // The start is given what the image check found (the CRI runtime creates the container from
    // its ID and takes its user from it, without another ImageStatus).
    const auto actions = h.runtime.actions();
    REQUIRE_FALSE(actions.empty());
    REQUIRE(actions.back().image_info.has_value());
    CHECK(actions.back().image_info->id == "sha256:fake-" + kImage);
    CHECK(h.countEvents("Normal Pulled: Container image \"" + kImage +
                        "\" already present on machine") == 1);
  }
  SECTION("Always with the image present: pulled, then started") {
    Harness h;
    h.runtime.addImage(kImage);
    h.add(webPod("Always"));
    CHECK(h.runtime.pulls().size() == 1);
    CHECK(h.starts() == 1);
    CHECK_FALSE(h.runtime.actions().back().image_info.has_value());  // the runtime asks
  }
  SECTION("a runtime that runs no images is asked nothing") {
    Harness h(false);
    h.add(webPod("Never"));
    CHECK(h.starts() == 1);
    CHECK(h.runtime.pulls().empty());
    CHECK(h.countEvents("Warning ErrImageNeverPull: Container image \"" + kImage +
                        "\" is not present with pull policy of Never") == 0);
  }
}

TEST_CASE("image pulls: a restart whose pull fails is no crash: the restart count stays",
          "[unit][images]") {
  Harness h;
  h.add(webPod("Always"));
  REQUIRE(h.starts() == 1);
  h.runtime.setPullResult(kImage, base::unknownError("registry gone"));
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  CHECK(h.starts() == 1);
  auto c = h.container();
  REQUIRE(c.state.waiting);
  CHECK(c.state.waiting->reason == "ErrImagePull");
  CHECK(c.restart_count == 0);
  REQUIRE(c.last_state.terminated);
  CHECK(c.last_state.terminated->exit_code == 1);
}

TEST_CASE(
    "image starts: each start is given its sandbox's config, made again for a start in the kept "
    "sandbox as kubelet gives CreateContainer",
    "[unit][images]") {
  Harness h;
  auto pod = testing::PodBuilder()
                 .name("web-node1")
                 .uid("uid-web")
                 .annotation("kubernetes.io/config.source", "file")
                 .container("web", {"sleep", "1000"}, kImage)
                 .restartPolicy("Always")
                 .edit([&](nlohmann::json& j) {
                   j["spec"]["containers"][0]["imagePullPolicy"] = "Always";
                   j["spec"]["securityContext"] = {
                       {"runAsUser", 1234},
                       {"sysctls", {{{"name", "kernel.shm_rmid_forced"}, {"value", "1"}}}}};
                 })
                 .build();
  h.add(pod);
  REQUIRE(h.starts() == 1);
  auto first = h.actions(Action::Kind::kStart).back().sandbox_config;
  REQUIRE(first);
  CHECK(first->uid == "uid-web");
  CHECK(first->run_as_user == 1234);
  CHECK(first->sysctls.at("kernel.shm_rmid_forced") == "1");
  REQUIRE(h.runtime.exitContainer("uid-web", "web", 1));
  h.drain();
  h.advance(11s);  // past the crash-loop backoff: restarted in the same sandbox
  REQUIRE(h.starts() == 2);
  CHECK(h.runtime.sandboxesRun() == 1);
  auto second = h.actions(Action::Kind::kStart).back().sandbox_config;
  REQUIRE(second);
  CHECK(second != first);  // made again, the same
  CHECK(second->uid == "uid-web");
  CHECK(second->attempt == first->attempt);
  CHECK(second->hostname == first->hostname);
  CHECK(second->run_as_user == 1234);
  CHECK(second->sysctls == first->sysctls);
}
