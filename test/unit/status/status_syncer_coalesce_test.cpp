// The status syncer's sending on a fake clock, with a recording PodStatusWriter instead of an
// apiserver: a pod's changes within the coalescing window go out as one PATCH with the newest
// status, the first change waits no longer than the window, a pod's requests never overtake each
// other, pods queued behind a request in flight are sent once with their newest status, and the
// batch resync, mirror pods and the final DELETE work as before.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/redirect_error.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/status/status_manager.h"
#include "agent/status/status_syncer.h"
#include "api/pod_json.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Request {
  std::string method;
  std::string path;
  json body;
};

// Records each request and answers as an apiserver would: a PATCH is merged into the stored
// status (conditions by type, null removes) and the pod comes back. With `hold` set, requests
// wait until release().
class RecordingWriter final : public agent::PodStatusWriter {
 public:
  explicit RecordingWriter(asio::io_context& ioc) : ioc_(ioc) {}

  std::vector<Request> requests;
  bool hold = false;
  // The next PATCH fails with this (then the flag clears).
  std::optional<base::Status> fail_next;

  asio::awaitable<base::StatusOr<json>> patchStatus(std::string path, json body) override {
    requests.push_back({"PATCH", path, body});
    auto waiting = wait();
    co_await std::move(waiting);
    if (fail_next) {
      base::Status failure = *fail_next;
      fail_next.reset();
      co_return failure;
    }
    json& stored = stored_[path];
    merge(stored, body["status"]);
    co_return json{{"metadata", body["metadata"]}, {"status", stored}};
  }

  asio::awaitable<base::StatusOr<json>> deletePod(std::string path, json options) override {
    requests.push_back({"DELETE", path, options});
    auto waiting = wait();
    co_await std::move(waiting);
    co_return json{{"kind", "Status"}, {"status", "Success"}};
  }

  // Lets every held request finish.
  void release() {
    for (auto& timer : held_) timer->cancel();
    held_.clear();
  }
  size_t heldCount() const { return held_.size(); }

  std::vector<Request> patches() const {
    std::vector<Request> out;
    for (const auto& r : requests) {
      if (r.method == "PATCH") out.push_back(r);
    }
    return out;
  }

 private:
  asio::awaitable<void> wait() {
    if (!hold) co_return;
    auto timer = std::make_shared<asio::steady_timer>(ioc_, asio::steady_timer::time_point::max());
    held_.push_back(timer);
    boost::system::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

  static void merge(json& stored, const json& patch) {
    if (!stored.is_object()) stored = json::object();
    for (const auto& [key, value] : patch.items()) {
      if (value.is_null()) {
        stored.erase(key);
      } else if (key == "conditions") {
        json& conditions = stored["conditions"];
        if (!conditions.is_array()) conditions = json::array();
        for (const auto& c : value) {
          auto it = std::find_if(conditions.begin(), conditions.end(),
                                 [&](const json& o) { return o["type"] == c["type"]; });
          if (it == conditions.end()) it = conditions.insert(conditions.end(), json::object());
          for (const auto& [field, v] : c.items()) {
            if (v.is_null()) {
              it->erase(field);
            } else {
              (*it)[field] = v;
            }
          }
        }
      } else {
        stored[key] = value;
      }
    }
  }

  asio::io_context& ioc_;
  std::map<std::string, json> stored_;
  std::vector<std::shared_ptr<asio::steady_timer>> held_;
};

api::PodPtr apiPod(const std::string& name) {
  return testing::PodBuilder().name(name).ns("default").uid("uid-" + name).container("c").build();
}

// A syncer with its status manager, pod manager and writer, all on one io_context that the test
// polls: nothing runs but what the test lets run.
struct Env {
  explicit Env(agent::StatusSyncerOptions options = {}) {
    syncer = std::make_shared<agent::StatusSyncer>(ioc.get_executor(), clock, writer, statuses,
                                                   pods, std::move(options));
    syncer->start();
    poll();
  }
  ~Env() {
    syncer->stop();
    writer->release();
    poll();
  }

  void poll() {
    ioc.restart();
    ioc.poll();
  }
  void advance(base::Duration d) {
    clock.advance(d);
    poll();
  }
  // API pods of these names (UID uid-<name>), added to the pod manager.
  std::vector<api::PodPtr> addPods(const std::vector<std::string>& names) {
    std::vector<api::PodPtr> out;
    for (const auto& name : names) {
      out.push_back(apiPod(name));
      pods.addPod(out.back());
    }
    return out;
  }
  // Sets the status and lets the syncer see the change.
  void set(const api::PodPtr& pod, const api::PodStatus& status) {
    REQUIRE(statuses.setPodStatus(*pod, status));
    poll();
  }

  asio::io_context ioc;
  testing::FakeClock clock;
  podmanager::NoopMirrorClient mirror;
  podmanager::PodManager pods{mirror};
  agent::StatusManager statuses{clock, pods};
  std::shared_ptr<RecordingWriter> writer = std::make_shared<RecordingWriter>(ioc);
  std::shared_ptr<agent::StatusSyncer> syncer;
};

agent::StatusSyncerOptions withWindow(base::Duration window, size_t max_in_flight = 2) {
  agent::StatusSyncerOptions options;
  options.coalesce_window = window;
  options.max_in_flight = max_in_flight;
  return options;
}

// A status with the phase and the Ready condition (and its reason) given; a pod IP once Running.
api::PodStatus podStatus(const std::string& phase, const std::string& ready,
                         const std::string& reason = "") {
  api::PodStatus s;
  s.phase = phase;
  s.host_ip = "10.0.0.1";
  if (phase != "Pending") s.pod_ip = "10.0.0.1";
  api::PodCondition condition;
  condition.type = "Ready";
  condition.status = ready;
  condition.reason = reason;
  s.conditions.push_back(condition);
  return s;
}
api::PodStatus pending() { return podStatus("Pending", "False", "ContainersNotReady"); }
api::PodStatus running() { return podStatus("Running", "True"); }
api::PodStatus succeeded() { return podStatus("Succeeded", "False", "PodCompleted"); }

std::string phaseOf(const Request& r) { return r.body["status"].value("phase", ""); }

}  // namespace

TEST_CASE("status syncer sends two changes within the window as one PATCH with the newest",
          "[unit][status]") {
  Env env(withWindow(50ms));
  auto pod = env.addPods({"p1"})[0];
  env.set(pod, pending());
  env.advance(20ms);
  CHECK(env.writer->requests.empty());
  env.set(pod, running());  // the containers started 20 ms later
  env.advance(29ms);
  CHECK(env.writer->requests.empty());
  env.advance(1ms);  // 50 ms after the first change
  auto patches = env.writer->patches();
  REQUIRE(patches.size() == 1);
  CHECK(patches[0].path == "/api/v1/namespaces/default/pods/p1/status");
  CHECK(patches[0].body["metadata"]["uid"] == "uid-p1");
  CHECK(phaseOf(patches[0]) == "Running");
  CHECK(patches[0].body["status"]["podIP"] == "10.0.0.1");
  env.advance(1s);
  CHECK(env.writer->requests.size() == 1);
  CHECK(env.syncer->metrics().patches.load() == 1);
}

TEST_CASE("status syncer sends a pod's first change no later than the window after it",
          "[unit][status]") {
  Env env(withWindow(50ms));
  auto pod = env.addPods({"p1"})[0];
  env.set(pod, pending());
  env.advance(50ms - 1ns);
  CHECK(env.writer->requests.empty());
  env.advance(1ns);
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(phaseOf(env.writer->requests[0]) == "Pending");

  // The window runs from the first change not yet sent; later changes do not push it back.
  env.set(pod, running());
  env.advance(40ms);
  auto ready_later = running();
  ready_later.message = "ready";
  env.set(pod, ready_later);
  env.advance(10ms);
  REQUIRE(env.writer->requests.size() == 2);
  CHECK(phaseOf(env.writer->requests[1]) == "Running");
  CHECK(env.writer->requests[1].body["status"]["message"] == "ready");
}

TEST_CASE("status syncer cuts a longer window to 100 ms and sends at once with none",
          "[unit][status]") {
  SECTION("a window of 1 s waits 100 ms") {
    Env env(withWindow(1s));
    auto pod = env.addPods({"p1"})[0];
    env.set(pod, running());
    env.advance(100ms - 1ns);
    CHECK(env.writer->requests.empty());
    env.advance(1ns);
    CHECK(env.writer->requests.size() == 1);
  }
  SECTION("no window sends each change at once") {
    Env env(withWindow(0s));
    auto pod = env.addPods({"p1"})[0];
    env.set(pod, pending());
    REQUIRE(env.writer->requests.size() == 1);
    env.set(pod, running());
    REQUIRE(env.writer->requests.size() == 2);
    CHECK(phaseOf(env.writer->requests[0]) == "Pending");
    CHECK(phaseOf(env.writer->requests[1]) == "Running");
  }
}

TEST_CASE("status syncer sends a change made while the pod's PATCH is in flight only after it",
          "[unit][status]") {
  Env env(withWindow(50ms, 4));
  auto pod = env.addPods({"p1"})[0];
  env.writer->hold = true;
  env.set(pod, pending());
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 1);
  REQUIRE(env.writer->heldCount() == 1);
  env.set(pod, running());
  env.advance(50ms);
  env.advance(1s);
  // Room for more requests, but not for a second one of the same pod.
  CHECK(env.writer->requests.size() == 1);
  env.writer->release();
  env.poll();
  REQUIRE(env.writer->requests.size() == 2);
  CHECK(phaseOf(env.writer->requests[0]) == "Pending");
  CHECK(phaseOf(env.writer->requests[1]) == "Running");
  // Computed from the first PATCH's answer: only what changed since.
  CHECK_FALSE(env.writer->requests[1].body["status"].contains("hostIP"));
}

TEST_CASE("status syncer sends pods queued behind a request in flight once with their newest",
          "[unit][status]") {
  Env env(withWindow(50ms, 1));
  auto pods = env.addPods({"a", "b", "c"});
  const auto& b = pods[1];
  const auto& c = pods[2];
  env.writer->hold = true;  // as a request waiting for the QPS limit
  for (const auto& pod : pods) env.set(pod, pending());
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(env.writer->requests[0].path.find("/pods/a/") != std::string::npos);
  env.set(b, running());
  env.set(c, running());
  env.advance(100ms);
  CHECK(env.writer->requests.size() == 1);
  env.writer->hold = false;
  env.writer->release();
  env.poll();
  REQUIRE(env.writer->requests.size() == 3);
  CHECK(env.writer->requests[1].path.find("/pods/b/") != std::string::npos);
  CHECK(phaseOf(env.writer->requests[1]) == "Running");
  CHECK(env.writer->requests[2].path.find("/pods/c/") != std::string::npos);
  CHECK(phaseOf(env.writer->requests[2]) == "Running");
  env.advance(1s);
  CHECK(env.writer->requests.size() == 3);
}

TEST_CASE("status syncer sends up to max_in_flight requests of different pods at once",
          "[unit][status]") {
  Env env(withWindow(50ms, 2));
  env.writer->hold = true;
  for (const auto& pod : env.addPods({"a", "b", "c"})) env.set(pod, running());
  env.advance(50ms);
  CHECK(env.writer->heldCount() == 2);
  env.writer->hold = false;
  env.writer->release();
  env.poll();
  CHECK(env.writer->requests.size() == 3);
}

TEST_CASE("status syncer's batch resends a failed PATCH without waiting for a window",
          "[unit][status]") {
  agent::StatusSyncerOptions options = withWindow(50ms);
  options.batch_period = 10s;
  Env env(options);
  auto pod = env.addPods({"p1"})[0];
  env.writer->fail_next = base::Status(base::StatusCode::kUnavailable, "apiserver down");
  env.set(pod, running());
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(env.syncer->metrics().patch_errors.load() == 1);
  env.advance(10s - 50ms - 1ns);
  CHECK(env.writer->requests.size() == 1);
  env.advance(1ns);  // the batch
  REQUIRE(env.writer->requests.size() == 2);
  CHECK(phaseOf(env.writer->requests[1]) == "Running");
  CHECK(env.syncer->metrics().patches.load() == 1);
  // The next batch finds the apiserver's copy right.
  env.advance(10s);
  CHECK(env.writer->requests.size() == 2);
}

TEST_CASE("status syncer sends a static pod's status to its mirror pod within the window",
          "[unit][status]") {
  agent::StatusSyncerOptions options = withWindow(50ms);
  options.deletion_check_period = 500ms;
  Env env(options);
  auto static_pod = testing::PodBuilder()
                        .name("web-n1")
                        .ns("default")
                        .uid("static-uid")
                        .annotation("kubernetes.io/config.hash", "h1")
                        .annotation("kubernetes.io/config.source", "file")
                        .container("c")
                        .build();
  env.pods.addPod(static_pod);
  env.set(static_pod, pending());
  env.advance(50ms);
  CHECK(env.writer->requests.empty());  // no mirror pod yet
  env.set(static_pod, running());
  auto mirror = testing::PodBuilder()
                    .name("web-n1")
                    .ns("default")
                    .uid("mirror-uid")
                    .annotation("kubernetes.io/config.hash", "h1")
                    .annotation("kubernetes.io/config.source", "api")
                    .annotation("kubernetes.io/config.mirror", "h1")
                    .container("c")
                    .build();
  env.pods.addPod(mirror);
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(env.writer->requests[0].path == "/api/v1/namespaces/default/pods/web-n1/status");
  CHECK(env.writer->requests[0].body["metadata"]["uid"] == "mirror-uid");
  CHECK(phaseOf(env.writer->requests[0]) == "Running");
  // A change notified under the mirror's UID is the static pod's.
  auto ready_later = running();
  ready_later.message = "ready";
  env.set(static_pod, ready_later);
  env.syncer->notify("mirror-uid");
  env.poll();
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 2);
  CHECK(env.writer->requests[1].body["status"]["message"] == "ready");
}

TEST_CASE("status syncer sends a deleted pod's terminal status and its DELETE within the window",
          "[unit][status]") {
  bool reclaimed = true;
  agent::StatusSyncerOptions options = withWindow(50ms);
  options.deletion_check_period = 500ms;
  options.pod_resources_reclaimed = [&](const std::string&) { return reclaimed; };
  Env env(options);
  auto builder = testing::PodBuilder().name("p1").ns("default").uid("uid-p1").container("c");
  auto pod = builder.build();
  env.pods.addPod(pod);
  env.set(pod, running());
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 1);

  SECTION("reclaimed at once") {
    auto deleting = builder.deletionTimestamp(api::Timestamp(1700000000s)).build();
    env.pods.updatePod(deleting);
    env.set(deleting, succeeded());
    env.advance(50ms - 1ns);
    CHECK(env.writer->requests.size() == 1);
    env.advance(1ns);
    REQUIRE(env.writer->requests.size() == 3);
    CHECK(phaseOf(env.writer->requests[1]) == "Succeeded");
    CHECK(env.writer->requests[2].method == "DELETE");
    CHECK(env.writer->requests[2].path == "/api/v1/namespaces/default/pods/p1");
    CHECK(env.writer->requests[2].body["gracePeriodSeconds"] == 0);
    CHECK(env.writer->requests[2].body["preconditions"]["uid"] == "uid-p1");
    CHECK(env.syncer->metrics().deletes.load() == 1);
  }
  SECTION("reclaimed later") {
    reclaimed = false;
    auto deleting = builder.deletionTimestamp(api::Timestamp(1700000000s)).build();
    env.pods.updatePod(deleting);
    env.set(deleting, succeeded());
    env.advance(50ms);
    REQUIRE(env.writer->requests.size() == 2);
    CHECK(phaseOf(env.writer->requests[1]) == "Succeeded");
    env.advance(1s);
    CHECK(env.writer->requests.size() == 2);  // containers may still run
    reclaimed = true;
    env.advance(500ms);
    REQUIRE(env.writer->requests.size() == 3);
    CHECK(env.writer->requests[2].method == "DELETE");
    env.advance(1s);
    CHECK(env.writer->requests.size() == 3);
  }
}

namespace {

// A new pod's statuses with its container "c": being created (optionally waiting with another
// reason), then running.
api::PodStatus starting(const std::string& reason = "ContainerCreating") {
  api::PodStatus s = pending();
  api::ContainerStatus cs;
  cs.name = "c";
  cs.state.waiting.emplace().reason = reason;
  s.container_statuses.push_back(cs);
  return s;
}
api::PodStatus startedRunning() {
  api::PodStatus s = running();
  api::ContainerStatus cs;
  cs.name = "c";
  cs.ready = true;
  cs.state.running.emplace();
  s.container_statuses.push_back(cs);
  return s;
}

agent::StatusSyncerOptions withFirstStatusHold(base::Duration hold) {
  agent::StatusSyncerOptions options = withWindow(50ms);
  options.first_status_hold = hold;
  options.batch_period = 10s;
  return options;
}

}  // namespace

TEST_CASE("status syncer holds a new pod's first starting status until its Running one",
          "[unit][status]") {
  Env env(withFirstStatusHold(10s));
  auto pod = env.addPods({"p1"})[0];
  env.advance(1s);  // past the batch at start
  env.set(pod, starting());
  env.advance(3s);  // a start queued behind others
  CHECK(env.writer->requests.empty());
  env.set(pod, startedRunning());
  env.advance(50ms - 1ns);
  CHECK(env.writer->requests.empty());
  env.advance(1ns);  // the window after Running, not the hold
  auto patches = env.writer->patches();
  REQUIRE(patches.size() == 1);
  CHECK(phaseOf(patches[0]) == "Running");
  CHECK(patches[0].body["status"]["containerStatuses"][0]["state"].contains("running"));
  env.advance(20s);
  CHECK(env.writer->requests.size() == 1);
}

TEST_CASE("status syncer sends a first starting status at the end of its hold", "[unit][status]") {
  Env env(withFirstStatusHold(10s));
  auto pod = env.addPods({"p1"})[0];
  env.advance(1s);
  env.set(pod, starting());
  env.advance(9s);  // the batch at 10 s does not send it early
  CHECK(env.writer->requests.empty());
  env.advance(1s - 1ns);
  CHECK(env.writer->requests.empty());
  env.advance(1ns);
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(phaseOf(env.writer->requests[0]) == "Pending");
  CHECK(env.writer->requests[0].body["status"]["containerStatuses"][0]["state"]["waiting"]
                                    ["reason"] == "ContainerCreating");
}

TEST_CASE("status syncer ends a first status hold at a failure", "[unit][status]") {
  Env env(withFirstStatusHold(10s));
  auto pod = env.addPods({"p1"})[0];
  env.advance(1s);
  env.set(pod, starting());
  env.advance(2s);
  env.set(pod, starting("ErrImagePull"));
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(env.writer->requests[0].body["status"]["containerStatuses"][0]["state"]["waiting"]
                                    ["reason"] == "ErrImagePull");
}

TEST_CASE("status syncer holds no first status of a pod reported before, nor a failing one",
          "[unit][status]") {
  Env env(withFirstStatusHold(10s));
  SECTION("the apiserver's copy has container statuses (this agent before a restart)") {
    api::PodStatus reported = starting();
    auto pod = testing::PodBuilder()
                   .name("p1")
                   .ns("default")
                   .uid("uid-p1")
                   .container("c")
                   .phase("Pending")
                   .build();
    auto with_status = api::withStatus(*pod, reported);
    REQUIRE(with_status.ok());
    env.pods.addPod(*with_status);
    env.advance(1s);
    auto changed = starting();
    changed.message = "restarted";
    env.set(*with_status, changed);
    env.advance(50ms);
    REQUIRE(env.writer->requests.size() == 1);
    CHECK(env.writer->requests[0].body["status"]["message"] == "restarted");
  }
  SECTION("a container waiting with another reason") {
    auto pod = env.addPods({"p1"})[0];
    env.advance(1s);
    env.set(pod, starting("CreateContainerConfigError"));
    env.advance(50ms);
    CHECK(env.writer->requests.size() == 1);
  }
}

TEST_CASE("status syncer sends other pods within the window behind a held first status",
          "[unit][status]") {
  Env env(withFirstStatusHold(10s));
  auto pods = env.addPods({"held", "other"});
  env.advance(1s);
  env.set(pods[0], starting());
  env.advance(1s);
  env.set(pods[1], startedRunning());
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(env.writer->requests[0].path.find("/pods/other/") != std::string::npos);
}

TEST_CASE("status syncer sends a first starting status at once without a window or a hold",
          "[unit][status]") {
  SECTION("no hold") {
    Env env(withFirstStatusHold(0s));
    auto pod = env.addPods({"p1"})[0];
    env.advance(1s);
    env.set(pod, starting());
    env.advance(50ms);
    CHECK(env.writer->requests.size() == 1);
  }
  SECTION("no window (kubelet's send at once)") {
    agent::StatusSyncerOptions options = withFirstStatusHold(10s);
    options.coalesce_window = 0s;
    Env env(options);
    auto pod = env.addPods({"p1"})[0];
    env.advance(1s);
    env.set(pod, starting());
    CHECK(env.writer->requests.size() == 1);
  }
}

TEST_CASE("status syncer sends a pod queued behind a held first status on time after a resync",
          "[unit][status]") {
  Env env(withFirstStatusHold(10s));
  auto pods = env.addPods({"held", "other"});
  env.advance(1s);
  env.set(pods[0], starting());
  env.advance(1s);
  env.syncer->resyncAll();  // the apiserver lost its state: the held pod goes now
  env.poll();
  REQUIRE(env.writer->requests.size() == 1);
  CHECK(env.writer->requests[0].path.find("/pods/held/") != std::string::npos);
  // The timer armed for the held pod's 10 s must not hold this one.
  env.set(pods[1], startedRunning());
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 2);
  CHECK(env.writer->requests[1].path.find("/pods/other/") != std::string::npos);
}

TEST_CASE("status syncer holds no starting status of a pod it already sent one for",
          "[unit][status]") {
  Env env(withFirstStatusHold(10s));
  auto pod = env.addPods({"p1"})[0];
  env.advance(1s);
  env.set(pod, starting());
  env.advance(10s);
  REQUIRE(env.writer->requests.size() == 1);
  auto again = starting();
  again.message = "still creating";
  env.set(pod, again);
  env.advance(50ms);
  REQUIRE(env.writer->requests.size() == 2);
  CHECK(env.writer->requests[1].body["status"]["message"] == "still creating");
}

TEST_CASE("status syncer: requests in flight grow with the QPS limit up to the API pool less one",
          "[unit][status]") {
  using agent::statusRequestsInFlight;
  // The limit's spacing covers a round trip: two keep it busy.
  CHECK(statusRequestsInFlight(5, 4) == 2);
  CHECK(statusRequestsInFlight(50, 4) == 2);
  CHECK(statusRequestsInFlight(500, 4) == 2);
  // One more per 2 ms round trip the spacing no longer covers, up to the pool less the thread
  // kept for the lease, node status and mirror pods; no limit at all is that too.
  CHECK(statusRequestsInFlight(1000, 4) == 3);
  CHECK(statusRequestsInFlight(10000, 4) == 3);
  CHECK(statusRequestsInFlight(1500, 8) == 4);
  CHECK(statusRequestsInFlight(10000, 8) == 7);
  CHECK(statusRequestsInFlight(0, 4) == 3);
  CHECK(statusRequestsInFlight(-1, 4) == 3);
  // A small pool still gets the two the syncer has always had.
  CHECK(statusRequestsInFlight(50, 1) == 2);
  CHECK(statusRequestsInFlight(10000, 2) == 2);
  CHECK(statusRequestsInFlight(10000, 0) == 2);
}

TEST_CASE("status syncer: the API pool grows from four threads to eight above 1,000 QPS",
          "[unit][status]") {
  using agent::apiPoolThreadsFor;
  CHECK(apiPoolThreadsFor(50) == 4);
  CHECK(apiPoolThreadsFor(1000) == 4);
  CHECK(apiPoolThreadsFor(1001) == 8);
  CHECK(apiPoolThreadsFor(10000) == 8);
  CHECK(apiPoolThreadsFor(0) == 8);  // no limit
  CHECK(apiPoolThreadsFor(-1) == 8);
  CHECK(agent::statusRequestsInFlight(10000, apiPoolThreadsFor(10000)) == 7);
}
