// The status syncer and the mirror client against the in-process test apiserver: what goes over
// the wire (PATCH bodies with the UID precondition, nothing when nothing changed, the final
// DELETE only once the pod's resources are reclaimed) and the mirror client's bounded calls and
// its wait for the node's registration.
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/api_mirror_client.h"
#include "agent/status/status_manager.h"
#include "agent/status/status_syncer.h"
#include "api/api_errors.h"
#include "api/pod_json.h"
#include "api/rest_client.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "config/pod_storage.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"
#include "test/support/api_test_client.h"
#include "test/support/fake_clock.h"
#include "test/support/log_capture.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Fixture {
  std::unique_ptr<testapiserver::TestApiServer> server =
      testapiserver::TestApiServer::start({}).value();
  std::unique_ptr<api::RestClient> client;
  std::unique_ptr<testing::ApiPool> api_pool;
  testing::FakeClock batch_clock;  // for syncers whose batch the test runs
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
  std::vector<std::thread> threads;
  podmanager::NoopMirrorClient noop;
  podmanager::PodManager pod_manager{noop};
  agent::StatusManager status_manager{base::realClock(), pod_manager};

  Fixture() {
    client = testing::clientFor(*server);
    api_pool = std::make_unique<testing::ApiPool>(*client);
    for (int i = 0; i < 2; ++i) threads.emplace_back([this] { ioc.run(); });
  }
  ~Fixture() {
    work.reset();
    ioc.stop();
    for (auto& t : threads) t.join();
    api_pool.reset();
    server->stop();
  }

  api::PodPtr createPod(const std::string& name) {
    auto j = testing::PodBuilder().name(name).ns("default").nodeName("n1").container("c").toJson();
    j["metadata"].erase("uid");
    auto stored = server->store().create("pods", "default", j);
    REQUIRE(stored.ok());
    auto pod = api::decodePodPtr(*stored);
    REQUIRE(pod.ok());
    return *pod;
  }

  std::vector<testapiserver::RecordedRequest> statusPatches() {
    std::vector<testapiserver::RecordedRequest> out;
    for (auto& r : server->requests()) {
      if (r.method == "PATCH" && r.path.ends_with("/status")) out.push_back(r);
    }
    return out;
  }
};

api::PodStatus runningStatus() {
  api::PodStatus s;
  s.phase = "Running";
  s.host_ip = "10.0.0.1";
  s.pod_ip = "10.0.0.1";
  api::PodCondition ready;
  ready.type = "Ready";
  ready.status = "True";
  s.conditions.push_back(ready);
  return s;
}

// The static pod web-n1 of node n1, as the file source makes it.
api::PodPtr staticPod() {
  return testing::PodBuilder()
      .name("web-n1")
      .ns("default")
      .uid("static-uid")
      .annotation("kubernetes.io/config.hash", "h1")
      .annotation("kubernetes.io/config.source", "file")
      .nodeName("n1")
      .container("c")
      .build();
}

}  // namespace

TEST_CASE("status syncer sends one PATCH with the uid precondition and nothing when unchanged",
          "[integration][status]") {
  Fixture f;
  auto pod = f.createPod("p1");
  f.pod_manager.addPod(pod);
  auto syncer =
      std::make_shared<agent::StatusSyncer>(f.ioc.get_executor(), base::realClock(),
                                            f.api_pool->async(), f.status_manager, f.pod_manager);
  syncer->start();
  REQUIRE(f.status_manager.setPodStatus(*pod, runningStatus()));
  REQUIRE(testing::eventually([&] {
    auto got = f.server->store().get("pods", "default", "p1");
    return got.ok() && (*got)["status"].value("phase", "") == "Running";
  }));
  auto patches = f.statusPatches();
  REQUIRE(patches.size() == 1);
  auto body = json::parse(patches[0].body);
  CHECK(body["metadata"]["uid"] == pod->metadata.uid);
  CHECK(patches[0].content_type.find("strategic-merge-patch") != std::string::npos);
  CHECK(body["status"]["podIP"] == "10.0.0.1");

  // Re-syncs with nothing new send nothing, even before the pod manager saw the write.
  const auto unchanged = syncer->metrics().unchanged.load();
  for (int i = 0; i < 3; ++i) syncer->notify(pod->metadata.uid);
  REQUIRE(testing::eventually([&] { return syncer->metrics().unchanged.load() > unchanged; }));
  CHECK(f.statusPatches().size() == 1);
  syncer->stop();
}

TEST_CASE("status syncer reverts a status edited by another client on its batch",
          "[integration][status]") {
  Fixture f;
  auto pod = f.createPod("p2");
  f.pod_manager.addPod(pod);
  agent::StatusSyncerOptions options;
  options.batch_period = 200ms;
  auto syncer = std::make_shared<agent::StatusSyncer>(f.ioc.get_executor(), base::realClock(),
                                                      f.api_pool->async(), f.status_manager,
                                                      f.pod_manager, options);
  syncer->start();
  REQUIRE(f.status_manager.setPodStatus(*pod, runningStatus()));
  REQUIRE(testing::eventually([&] {
    auto got = f.server->store().get("pods", "default", "p2");
    return got.ok() && (*got)["status"].value("phase", "") == "Running";
  }));
  auto edited =
      f.server->store().patch("pods", "default", "p2", testapiserver::PatchType::kMergePatch,
                              json{{"status", {{"podIP", "10.9.9.9"}}}}, "status");
  REQUIRE(edited.ok());
  f.pod_manager.updatePod(api::decodePodPtr(*edited).value());  // what the watch would deliver
  REQUIRE(testing::eventually([&] {
    auto got = f.server->store().get("pods", "default", "p2");
    return got.ok() && (*got)["status"].value("podIP", "") == "10.0.0.1";
  }));
  syncer->stop();
}

namespace {

// The agent's path from the apiserver to the pod manager: the server's current object merged by
// the pod config's storage (which keeps the first resourceVersion and takes later statuses, as
// kubelet's does) and handed to the pod manager, as the watch and the sync loop would.
// Creating one makes the pod in the apiserver and delivers it.
struct WatchedPod {
  WatchedPod(Fixture& fixture, std::string pod_name) : f(fixture), name(std::move(pod_name)) {
    f.createPod(name);
    initial = deliver();
    REQUIRE(initial);
  }

  Fixture& f;
  std::string name;
  testing::FakeClock storage_clock;
  config::PodStorage storage{config::PodConfigNotificationMode::kIncremental, storage_clock};
  api::PodPtr initial;

  api::PodPtr deliver() {
    auto obj = f.server->store().get("pods", "default", name);
    REQUIRE(obj.ok());
    const std::string source(api::kApiserverSource);
    api::PodUpdate u{{api::decodePodPtr(*obj).value()}, api::PodOperation::kUpdate, source};
    for (auto& out : storage.merge(source, std::move(u))) {
      for (auto& pod : out.pods) f.pod_manager.updatePod(pod);
    }
    return f.pod_manager.getPodByName("default", name);
  }
};

// A syncer whose 10 s batch runs when the test advances `f.batch_clock`; its first batch (at
// start, with no statuses yet) is over once constructed. Stopped and released before the fixture
// goes: its timers' callbacks, which the clock holds, own it until the stop reaches its strand.
struct BatchedSyncer {
  explicit BatchedSyncer(Fixture& f) {
    agent::StatusSyncerOptions options;
    options.batch_period = 10s;
    options.coalesce_window = 0s;  // each change at once: only the test moves the fake clock
    syncer = std::make_shared<agent::StatusSyncer>(f.ioc.get_executor(), f.batch_clock,
                                                   f.api_pool->async(), f.status_manager,
                                                   f.pod_manager, options);
    syncer->start();
    REQUIRE(testing::eventually([&] { return f.batch_clock.pendingTimers() == 1; }));
  }
  ~BatchedSyncer() {
    syncer->stop();
    testing::eventually([&] { return syncer.use_count() == 1; });
  }
  agent::StatusSyncer* operator->() const { return syncer.get(); }

  std::shared_ptr<agent::StatusSyncer> syncer;
};

// Another client sets the pod's status.message.
void editMessage(Fixture& f, const std::string& name) {
  REQUIRE(f.server->store()
              .patch("pods", "default", name, testapiserver::PatchType::kMergePatch,
                     json{{"status", {{"message", "edited elsewhere"}}}}, "status")
              .ok());
}

std::string serverMessage(Fixture& f, const std::string& name) {
  auto got = f.server->store().get("pods", "default", name);
  REQUIRE(got.ok());
  return (*got)["status"].value("message", "");
}

}  // namespace

TEST_CASE("status syncer reverts an edit the watch delivers after its own write on the next batch",
          "[integration][status]") {
  Fixture f;
  WatchedPod watched(f, "p4");
  BatchedSyncer syncer(f);
  REQUIRE(f.status_manager.setPodStatus(*watched.initial, runningStatus()));
  REQUIRE(testing::eventually([&] { return syncer->metrics().patches.load() == 1; }));
  // The watch brings our own write, then another client's edit: each a status-only change, so the
  // stored pod keeps its first resourceVersion through both.
  const std::string first_rv = watched.initial->metadata.resource_version;
  REQUIRE(watched.deliver()->status->phase == "Running");
  editMessage(f, "p4");
  REQUIRE(watched.deliver()->status->message == "edited elsewhere");
  CHECK(f.pod_manager.getPodByName("default", "p4")->metadata.resource_version == first_rv);

  const auto unchanged = syncer->metrics().unchanged.load();
  f.batch_clock.advance(10s);  // the batch
  REQUIRE(testing::eventually([&] {
    return syncer->metrics().patches.load() + syncer->metrics().unchanged.load() > 1 + unchanged;
  }));
  CHECK(syncer->metrics().patches.load() == 2);
  CHECK(serverMessage(f, "p4").empty());
}

TEST_CASE("status syncer reverts an edit that reached the apiserver just before its own write",
          "[integration][status]") {
  Fixture f;
  WatchedPod watched(f, "p5");
  BatchedSyncer syncer(f);
  // Another client's edit reaches the apiserver just before our PATCH (computed from the pod
  // manager's older copy); the watch has delivered neither.
  editMessage(f, "p5");
  REQUIRE(f.status_manager.setPodStatus(*watched.initial, runningStatus()));
  REQUIRE(testing::eventually([&] { return syncer->metrics().patches.load() == 1; }));
  REQUIRE(serverMessage(f, "p5") == "edited elsewhere");
  f.batch_clock.advance(10s);  // the batch: the PATCH's answer showed the edit
  REQUIRE(testing::eventually([&] { return syncer->metrics().patches.load() == 2; }));
  CHECK(serverMessage(f, "p5").empty());
}

TEST_CASE(
    "status syncer drops the reason and message a condition lost and then has nothing to send",
    "[integration][status]") {
  Fixture f;
  WatchedPod watched(f, "p6");
  BatchedSyncer syncer(f);
  auto not_ready = runningStatus();
  not_ready.conditions[0].status = "False";
  not_ready.conditions[0].reason = "ContainersNotReady";
  not_ready.conditions[0].message = "containers with unready status: [c]";
  REQUIRE(f.status_manager.setPodStatus(*watched.initial, not_ready));
  REQUIRE(testing::eventually([&] { return syncer->metrics().patches.load() == 1; }));
  REQUIRE(f.status_manager.setPodStatus(*watched.deliver(), runningStatus()));
  REQUIRE(testing::eventually([&] { return syncer->metrics().patches.load() == 2; }));
  auto got = f.server->store().get("pods", "default", "p6");
  REQUIRE(got.ok());
  const json& ready = (*got)["status"]["conditions"][0];
  CHECK(ready.value("status", "") == "True");
  CHECK_FALSE(ready.contains("reason"));
  CHECK_FALSE(ready.contains("message"));

  // Once the watch showed it, the batch finds the apiserver's copy right.
  watched.deliver();
  const auto unchanged = syncer->metrics().unchanged.load();
  f.batch_clock.advance(10s);
  REQUIRE(testing::eventually([&] { return syncer->metrics().unchanged.load() > unchanged; }));
  CHECK(syncer->metrics().patches.load() == 2);
}

TEST_CASE("a gracefully deleted pod is removed with grace 0 only once its resources are reclaimed",
          "[integration][status]") {
  Fixture f;
  auto pod = f.createPod("p3");
  f.pod_manager.addPod(pod);
  std::atomic<bool> reclaimed{false};
  agent::StatusSyncerOptions options;
  options.deletion_check_period = 50ms;
  options.pod_resources_reclaimed = [&](const std::string&) { return reclaimed.load(); };
  auto syncer = std::make_shared<agent::StatusSyncer>(f.ioc.get_executor(), base::realClock(),
                                                      f.api_pool->async(), f.status_manager,
                                                      f.pod_manager, options);
  syncer->start();
  testapiserver::DeleteOptions del;
  del.grace_period_seconds = 30;
  auto marked = f.server->store().remove("pods", "default", "p3", del);
  REQUIRE(marked.ok());
  REQUIRE_FALSE(marked->removed);
  auto deleting = api::decodePodPtr(marked->object).value();
  f.pod_manager.updatePod(deleting);
  REQUIRE(f.status_manager.setPodStatus(*deleting, runningStatus()));
  REQUIRE(testing::eventually([&] { return syncer->metrics().patches.load() >= 1; }));
  // Still there while containers may run.
  CHECK(f.server->store().get("pods", "default", "p3").ok());
  CHECK(syncer->metrics().deletes.load() == 0);
  reclaimed = true;
  // The counter moves once the DELETE's answer is handled, after the server dropped the object.
  REQUIRE(testing::eventually([&] { return syncer->metrics().deletes.load() == 1; }));
  CHECK(f.server->store().get("pods", "default", "p3").status().code() ==
        base::StatusCode::kNotFound);
  syncer->stop();
}

TEST_CASE("mirror client bounds a call to a slow apiserver by its timeout",
          "[integration][mirror]") {
  Fixture f;
  agent::ApiMirrorClientOptions mo;
  mo.node_name = "n1";
  mo.node_uid = [] { return std::string("node-uid"); };
  // Long enough for the first call on a loaded machine, far below the slow server's latency.
  mo.call_timeout = 2s;
  agent::ApiMirrorClient mirror(f.api_pool->async(), base::realClock(), mo);
  auto pod = staticPod();
  std::atomic<int> done{0};
  base::Status fast_result;
  base::Status slow_result;
  auto run = [&](base::Status* out) {
    asio::co_spawn(
        f.ioc,
        [](agent::ApiMirrorClient& m, api::PodPtr p, base::Status* o,
           std::atomic<int>* d) -> asio::awaitable<void> {
          *o = co_await m.createMirrorPod(p);
          d->fetch_add(1);
        }(mirror, pod, out, &done),
        asio::detached);
  };
  run(&fast_result);
  REQUIRE(testing::eventually([&] { return done.load() == 1; }));
  CHECK(fast_result.ok());
  auto created = f.server->store().get("pods", "default", "web-n1");
  REQUIRE(created.ok());
  CHECK((*created)["metadata"]["annotations"]["kubernetes.io/config.mirror"] == "h1");
  // AlreadyExists with the same hash is fine, but here the apiserver is slow: the caller gets
  // DeadlineExceeded at the timeout instead of waiting for it.
  f.server->setLatency(20s);
  const auto t0 = std::chrono::steady_clock::now();
  run(&slow_result);
  REQUIRE(testing::eventually([&] { return done.load() == 2; }, 12s));
  CHECK(std::chrono::steady_clock::now() - t0 < 12s);
  CHECK(slow_result.code() == base::StatusCode::kDeadlineExceeded);
  f.server->setLatency(0ms);
}

TEST_CASE("mirror client sends nothing before the node is registered and says so once per wait",
          "[integration][mirror]") {
  Fixture f;
  testing::LogCapture logs("mirror");
  std::string node_uid;  // set by the test thread between calls, read on the API pool
  std::mutex mu;
  agent::ApiMirrorClientOptions mo;
  mo.node_name = "n1";
  mo.node_uid = [&] {
    std::lock_guard lock(mu);
    return node_uid;
  };
  agent::ApiMirrorClient mirror(f.api_pool->async(), base::realClock(), mo);
  auto pod = staticPod();
  auto create = [&] {
    std::atomic<bool> done{false};
    base::Status result;
    asio::co_spawn(
        f.ioc,
        [](agent::ApiMirrorClient& m, api::PodPtr p, base::Status* o,
           std::atomic<bool>* d) -> asio::awaitable<void> {
          *o = co_await m.createMirrorPod(p);
          d->store(true);
        }(mirror, pod, &result, &done),
        asio::detached);
    REQUIRE(testing::eventually([&] { return done.load(); }));
    return result;
  };
  const std::string waiting = "Mirror pods wait for the node's registration";
  for (int i = 0; i < 3; ++i) {
    CHECK(create().code() == base::StatusCode::kFailedPrecondition);
  }
  CHECK(f.server->requests().empty());
  auto said = logs.lines(waiting);
  REQUIRE(said.size() == 1);
  CHECK(said[0].find("node=n1 pod=default/web-n1") != std::string::npos);

  {
    std::lock_guard lock(mu);
    node_uid = "node-uid";
  }
  CHECK(create().ok());
  auto created = f.server->store().get("pods", "default", "web-n1");
  REQUIRE(created.ok());
  CHECK((*created)["metadata"]["ownerReferences"][0]["uid"] == "node-uid");
  // The Node is lost and registered again: a new wait, said again once.
  {
    std::lock_guard lock(mu);
    node_uid.clear();
  }
  CHECK(create().code() == base::StatusCode::kFailedPrecondition);
  CHECK(create().code() == base::StatusCode::kFailedPrecondition);
  CHECK(logs.lines(waiting).size() == 2);
}
