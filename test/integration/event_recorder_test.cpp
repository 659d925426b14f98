// The event recorder against the in-process test apiserver: FailedValidation events for manifest
// errors go to the pod the manifest names, else to the Node, and repeats are aggregated.
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/event_recorder.h"
#include "api/rest_client.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "config/manifest_errors.h"
#include "test/support/api_test_client.h"
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
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(ioc);
  std::thread thread;
  std::shared_ptr<agent::EventRecorder> recorder;

  Fixture() {
    client = testing::clientFor(*server);
    api_pool = std::make_unique<testing::ApiPool>(*client);
    agent::EventRecorderOptions o;
    o.node_name = "n1";
    recorder = std::make_shared<agent::EventRecorder>(ioc.get_executor(), base::realClock(),
                                                      api_pool->async(), o);
    thread = std::thread([this] { ioc.run(); });
  }
  ~Fixture() {
    // Let the stopped controller's last coroutine finish: the context runs out of work.
    recorder->stop();
    work.reset();
    thread.join();
    recorder.reset();
    api_pool.reset();
    server->stop();
  }

  std::vector<json> events(const std::string& ns) {
    auto list = server->store().listJson("events", ns);
    REQUIRE(list.ok());
    return (*list)["items"].get<std::vector<json>>();
  }
};

config::ManifestError manifestError(std::string location, std::string invalid,
                                    config::ManifestPodRef pod = {}) {
  config::ManifestError e;
  e.source = "file";
  e.location = std::move(location);
  e.message = invalid;
  e.invalid = std::move(invalid);
  e.pod = std::move(pod);
  return e;
}

}  // namespace

TEST_CASE("FailedValidation events name the pod when the manifest names one, else the Node",
          "[integration][events]") {
  Fixture f;
  REQUIRE(
      f.server->store()
          .create(
              "namespaces", "",
              json{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "prod"}}}})
          .ok());
  agent::recordManifestError(*f.recorder,
                             manifestError("/m/web.yaml",
                                           "spec.containers[0].name: Invalid value: \"Bad_Name\"\n"
                                           "spec.containers[0].image: Required value",
                                           {"prod", "web-n1", "uid-web"}));
  agent::recordManifestError(*f.recorder,
                             manifestError("/m/broken.yaml", "yaml: line 3: did not find ']'"));
  // A problem that is only a read failure is no validation event.
  agent::recordManifestError(*f.recorder, manifestError("/m/x.yaml", ""));

  bool posted = testing::eventually([&] { return f.recorder->posted() == 2; }, 10s);
  INFO("posted=" << f.recorder->posted() << " failed=" << f.recorder->failed()
                 << " dropped=" << f.recorder->dropped());
  REQUIRE(posted);
  auto pod_events = f.events("prod");
  REQUIRE(pod_events.size() == 1);
  const json& p = pod_events[0];
  CHECK(p["reason"] == "FailedValidation");
  CHECK(p["type"] == "Warning");
  CHECK(p["involvedObject"] == json{{"kind", "Pod"},
                                    {"apiVersion", "v1"},
                                    {"namespace", "prod"},
                                    {"name", "web-n1"},
                                    {"uid", "uid-web"}});
  CHECK(p["message"] ==
        "Error validating pod web-n1_prod(uid-web) from file /m/web.yaml: "
        "spec.containers[0].name: Invalid value: \"Bad_Name\"; "
        "spec.containers[0].image: Required value");
  CHECK(p["source"]["host"] == "n1");

  auto node_events = f.events("default");
  REQUIRE(node_events.size() == 1);
  const json& n = node_events[0];
  CHECK(n["involvedObject"] ==
        json{{"kind", "Node"}, {"apiVersion", "v1"}, {"name", "n1"}, {"uid", "n1"}});
  CHECK(n["message"] ==
        "Error validating pod manifest from file /m/broken.yaml: yaml: line 3: did not find ']'");

  // The same error again is aggregated into the same Event.
  agent::recordManifestError(*f.recorder,
                             manifestError("/m/broken.yaml", "yaml: line 3: did not find ']'"));
  REQUIRE(testing::eventually([&] { return f.recorder->patched() == 1; }, 10s));
  node_events = f.events("default");
  REQUIRE(node_events.size() == 1);
  CHECK(node_events[0]["count"] == 2);
}
