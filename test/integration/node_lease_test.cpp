// The node lease controller against the in-process test apiserver, with its timers on the fake
// clock: creation with the Node as owner, optimistic renewals, immediate retries of a failed PUT,
// the GET on conflict and the ensure-lease backoff (200 ms doubling to 7 s).
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/node_lease.h"
#include "api/rest_client.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "test/support/api_test_client.h"
#include "test/support/fake_clock.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

constexpr char kLeasePath[] = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1";

struct Fixture {
  std::unique_ptr<testapiserver::TestApiServer> server =
      testapiserver::TestApiServer::start({}).value();
  std::unique_ptr<api::RestClient> client;
  std::unique_ptr<testing::ApiPool> api_pool;
  testing::FakeClock clock;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
  std::thread thread;
  std::atomic<int> repeated_failures{0};
  std::atomic<int> losses{0};
  std::shared_ptr<agent::NodeLeaseController> lease;

  Fixture() {
    client = testing::clientFor(*server);
    api_pool = std::make_unique<testing::ApiPool>(*client);
    agent::NodeLeaseOptions o;
    o.node_name = "n1";
    o.on_repeated_failure = [this] { repeated_failures.fetch_add(1); };
    o.on_state_lost = [this](const std::string&) { losses.fetch_add(1); };
    lease = std::make_shared<agent::NodeLeaseController>(ioc.get_executor(), clock,
                                                         api_pool->async(), o);
    thread = std::thread([this] { ioc.run(); });
  }
  ~Fixture() {
    // Let the stopped controller's last coroutine finish: the context runs out of work.
    lease->stop();
    work.reset();
    thread.join();
    lease.reset();
    api_pool.reset();
    server->stop();
  }

  void createNode() {
    REQUIRE(
        server->store()
            .create("nodes", "",
                    json{{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "n1"}}}})
            .ok());
  }
  std::string nodeUid() {
    return server->store().get("nodes", "", "n1").value()["metadata"]["uid"].get<std::string>();
  }
  json storedLease() { return server->store().get("leases", "kube-node-lease", "n1").value(); }

  // Requests to the lease, as "METHOD" strings in order.
  std::vector<std::string> leaseCalls() {
    std::vector<std::string> out;
    for (const auto& r : server->requests()) {
      if (r.path.starts_with("/apis/coordination.k8s.io/")) out.push_back(r.method);
    }
    return out;
  }
  bool renewalsReach(uint64_t n) {
    return testing::eventually([&] { return lease->renewals() >= n; }, 5s);
  }
  // Waits until the controller has armed its timer for `d` (a renew interval or a backoff).
  bool armedFor(base::Duration d) {
    return testing::eventually([&] { return clock.nextDeadlineIn() == d; }, 5s);
  }
  // Starts the controller: its first sync is due at once.
  void start() {
    lease->start();
    REQUIRE(armedFor(base::Duration::zero()));
    clock.advance(base::Duration::zero());
  }
  // Starts the controller and waits for the lease to be created.
  void startCreated() {
    createNode();
    start();
    REQUIRE(renewalsReach(1));
    REQUIRE(armedFor(10s));
    server->clearRequests();
  }
};

}  // namespace

TEST_CASE("node lease is created owned by the Node, then renewed by a PUT every interval",
          "[integration][lease]") {
  Fixture f;
  f.startCreated();
  json stored = f.storedLease();
  CHECK(stored["spec"]["holderIdentity"] == "n1");
  CHECK(stored["spec"]["leaseDurationSeconds"] == 40);
  REQUIRE(stored["metadata"]["ownerReferences"].size() == 1);
  CHECK(stored["metadata"]["ownerReferences"][0]["kind"] == "Node");
  CHECK(stored["metadata"]["ownerReferences"][0]["uid"] == f.nodeUid());
  const std::string first_renew = stored["spec"]["renewTime"];

  f.clock.advance(10s);
  REQUIRE(f.renewalsReach(2));
  REQUIRE(f.armedFor(10s));
  CHECK(f.leaseCalls() == std::vector<std::string>{"PUT"});
  CHECK(f.storedLease()["spec"]["renewTime"] != first_renew);
  CHECK(f.repeated_failures == 0);
}

TEST_CASE("node lease retries a failed PUT at once, up to 5 times, then re-reads the lease",
          "[integration][lease]") {
  Fixture f;
  f.startCreated();

  SECTION("3 failures: 4 PUTs within one sync, no GET, no clock time") {
    f.server->failNextRequests(500, 3, kLeasePath);
    f.clock.advance(10s);
    REQUIRE(f.renewalsReach(2));
    REQUIRE(f.armedFor(10s));
    CHECK(f.leaseCalls() == std::vector<std::string>{"PUT", "PUT", "PUT", "PUT"});
    // Every failure after the first of the renewal.
    CHECK(f.repeated_failures == 2);
  }
  SECTION("5 failures: the retries are used up, so the lease is read and renewed again") {
    f.server->failNextRequests(500, 5, kLeasePath);
    f.clock.advance(10s);
    REQUIRE(f.renewalsReach(2));
    REQUIRE(f.armedFor(10s));
    CHECK(f.leaseCalls() ==
          std::vector<std::string>{"PUT", "PUT", "PUT", "PUT", "PUT", "GET", "PUT"});
    CHECK(f.repeated_failures == 4);
  }
}

TEST_CASE("node lease answers a conflict with a GET and renews from the newer version",
          "[integration][lease]") {
  Fixture f;
  f.startCreated();
  // Another client writes the lease: our resourceVersion is stale.
  json other = f.storedLease();
  other["metadata"].erase("resourceVersion");
  other["metadata"]["labels"] = {{"written-by", "other"}};
  REQUIRE(f.server->store().update("leases", "kube-node-lease", "n1", other).ok());

  f.clock.advance(10s);
  REQUIRE(f.renewalsReach(2));
  REQUIRE(f.armedFor(10s));
  CHECK(f.leaseCalls() == std::vector<std::string>{"PUT", "GET", "PUT"});
  json stored = f.storedLease();
  CHECK(stored["metadata"]["labels"]["written-by"] == "other");
  CHECK(f.repeated_failures == 0);
}

TEST_CASE("node lease ensure backs off 200ms doubling to 7s while the apiserver fails",
          "[integration][lease]") {
  Fixture f;
  f.createNode();
  f.server->failNextRequests(500, 9, "/apis/coordination.k8s.io/");
  f.start();
  const std::vector<base::Duration> waits = {200ms,  400ms, 800ms, 1600ms, 3200ms,
                                             6400ms, 7s,    7s,    7s};
  for (size_t i = 0; i < waits.size(); ++i) {
    INFO("failure " << i + 1);
    REQUIRE(f.armedFor(waits[i]));
    CHECK(f.leaseCalls().size() == i + 1);
    f.clock.advance(waits[i]);
  }
  REQUIRE(f.renewalsReach(1));
  REQUIRE(f.armedFor(10s));
  CHECK(f.storedLease()["metadata"]["ownerReferences"][0]["uid"] == f.nodeUid());
}

TEST_CASE("node lease is not created before the Node can be read", "[integration][lease]") {
  Fixture f;
  f.start();
  REQUIRE(f.armedFor(10s));
  CHECK(f.lease->renewals() == 0);
  CHECK(f.leaseCalls() == std::vector<std::string>{"GET"});
  CHECK_FALSE(f.server->store().get("leases", "kube-node-lease", "n1").ok());

  f.createNode();
  f.clock.advance(10s);
  REQUIRE(f.renewalsReach(1));
  CHECK(f.storedLease()["metadata"]["ownerReferences"][0]["uid"] == f.nodeUid());
}

TEST_CASE("a lease that answers 404 reports the lost state and is re-created once the Node is back",
          "[integration][lease]") {
  Fixture f;
  f.startCreated();
  // The apiserver lost its state: the Node and the lease are gone.
  REQUIRE(f.server->store().remove("leases", "kube-node-lease", "n1", {}).ok());
  REQUIRE(f.server->store().remove("nodes", "", "n1", {}).ok());
  f.clock.advance(10s);
  REQUIRE(testing::eventually([&] { return f.losses.load() == 1; }, 5s));
  // One PUT was enough to know (no five retries), then the lease is ensured: without its Node it
  // is not created, and the controller retries with the backoff rather than a renew interval.
  REQUIRE(f.armedFor(200ms));
  CHECK(f.leaseCalls() == std::vector<std::string>{"PUT", "GET"});
  CHECK_FALSE(f.server->store().get("leases", "kube-node-lease", "n1").ok());

  f.createNode();  // registered again, with a new UID
  f.clock.advance(200ms);
  REQUIRE(f.renewalsReach(2));
  CHECK(f.storedLease()["metadata"]["ownerReferences"][0]["uid"] == f.nodeUid());
  CHECK(f.losses.load() == 1);
}

TEST_CASE("recreate() forgets the lease and ensures it at once", "[integration][lease]") {
  Fixture f;
  f.startCreated();
  REQUIRE(f.server->store().remove("leases", "kube-node-lease", "n1", {}).ok());
  f.lease->recreate();
  REQUIRE(f.armedFor(base::Duration::zero()));
  f.clock.advance(base::Duration::zero());
  REQUIRE(f.renewalsReach(2));
  // No PUT of the forgotten lease: a GET (404), then the create.
  CHECK(f.leaseCalls() == std::vector<std::string>{"GET", "POST"});
  CHECK(f.losses.load() == 0);  // told, not discovered
}
