#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/api_mirror_client.h"
#include "agent/node_status.h"
#include "agent/status/status_syncer.h"
#include "cmd/test-apiserver/patch.h"
#include "test/support/pod_builder.h"

using nlohmann::json;
using namespace nodeagent;

TEST_CASE("status patch is empty when nothing changed", "[unit][status]") {
  json s = {{"phase", "Running"},
            {"podIP", "10.0.0.1"},
            {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
  CHECK(agent::podStatusPatch(s, s).empty());
}

TEST_CASE("status patch carries changed fields and changed conditions only", "[unit][status]") {
  json old_s = {{"phase", "Pending"},
                {"hostIP", "10.0.0.1"},
                {"conditions",
                 {{{"type", "Ready"}, {"status", "False"}},
                  {{"type", "Initialized"}, {"status", "True"}},
                  {{"type", "Custom"}, {"status", "True"}}}}};
  json new_s = {
      {"phase", "Running"},
      {"hostIP", "10.0.0.1"},
      {"containerStatuses", {{{"name", "c"}, {"ready", true}}}},
      {"conditions",
       {{{"type", "Ready"}, {"status", "True"}}, {{"type", "Initialized"}, {"status", "True"}}}}};
  auto p = agent::podStatusPatch(old_s, new_s);
  CHECK(p["phase"] == "Running");
  CHECK_FALSE(p.contains("hostIP"));
  CHECK(p["containerStatuses"] == new_s["containerStatuses"]);
  REQUIRE(p["conditions"].size() == 1);
  CHECK(p["conditions"][0]["type"] == "Ready");
  // A condition owned by someone else is left alone (never removed by the agent).
  CHECK(p.dump().find("Custom") == std::string::npos);
}

TEST_CASE("status patch removes with null the fields a changed condition lost", "[unit][status]") {
  json old_s = {{"conditions",
                 {{{"type", "Ready"},
                   {"status", "False"},
                   {"reason", "ContainersNotReady"},
                   {"message", "containers with unready status: [c]"},
                   {"lastTransitionTime", "2026-01-01T00:00:00Z"}},
                  {{"type", "Initialized"}, {"status", "True"}, {"reason", "Done"}}}}};
  json new_s = {
      {"conditions",
       {{{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-01-01T00:00:05Z"}},
        {{"type", "Initialized"}, {"status", "True"}, {"reason", "Done"}},
        {{"type", "PodScheduled"}, {"status", "True"}}}}};
  auto p = agent::podStatusPatch(old_s, new_s);
  REQUIRE(p["conditions"].size() == 2);
  const json& ready = p["conditions"][0];
  CHECK(ready["type"] == "Ready");
  CHECK(ready["status"] == "True");
  CHECK(ready["lastTransitionTime"] == "2026-01-01T00:00:05Z");
  REQUIRE(ready.contains("reason"));
  CHECK(ready["reason"].is_null());
  REQUIRE(ready.contains("message"));
  CHECK(ready["message"].is_null());
  // A new condition has nothing to remove.
  CHECK(p["conditions"][1] == new_s["conditions"][2]);
  // Merged into the old status as the apiserver merges conditions (by type, field by field), it
  // gives the new conditions.
  auto merged =
      testapiserver::applyStrategicMergePatch(json{{"status", old_s}}, json{{"status", p}});
  REQUIRE(merged.ok());
  CHECK((*merged)["status"]["conditions"][0] == new_s["conditions"][0]);
  CHECK(agent::podStatusPatch((*merged)["status"], new_s).empty());
}

TEST_CASE("status patch clears a message another client set", "[unit][status]") {
  json old_s = {{"phase", "Running"}, {"message", "edited"}, {"nominatedNodeName", "x"}};
  json new_s = {{"phase", "Running"}};
  auto p = agent::podStatusPatch(old_s, new_s);
  CHECK(p.contains("message"));
  CHECK(p["message"].is_null());
  CHECK_FALSE(p.contains("nominatedNodeName"));
}

TEST_CASE("mirror pod body drops server fields, adds the mirror annotation and the node owner",
          "[unit][status][mirror]") {
  auto pod = testing::PodBuilder()
                 .name("web-n1")
                 .ns("default")
                 .uid("static-uid")
                 .resourceVersion("12")
                 .annotation("kubernetes.io/config.hash", "abc")
                 .annotation("kubernetes.io/config.source", "file")
                 .container("main", {"sleep", "1"})
                 .phase("Running")
                 .buildPod();
  auto j = agent::buildMirrorPod(pod, "n1", "node-uid");
  CHECK_FALSE(j["metadata"].contains("uid"));
  CHECK_FALSE(j["metadata"].contains("resourceVersion"));
  CHECK_FALSE(j.contains("status"));
  CHECK(j["metadata"]["annotations"]["kubernetes.io/config.mirror"] == "abc");
  CHECK(j["metadata"]["ownerReferences"][0]["kind"] == "Node");
  CHECK(j["metadata"]["ownerReferences"][0]["uid"] == "node-uid");
  CHECK(j["metadata"]["ownerReferences"][0]["controller"] == true);
  CHECK(j["spec"]["containers"][0]["name"] == "main");
}

TEST_CASE("node labels parse and bad entries are named", "[unit][status][node]") {
  auto l = agent::parseNodeLabels("a=1,b/c=2");
  REQUIRE(l.ok());
  CHECK(l->at("a") == "1");
  CHECK(l->at("b/c") == "2");
  auto bad = agent::parseNodeLabels("a=1,oops");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("oops") != std::string::npos);
}

TEST_CASE("node object carries the well-known labels", "[unit][status][node]") {
  agent::NodeStatusOptions o;
  o.node_name = "n1";
  o.labels = {{"role", "edge"}};
  o.info.architecture = "amd64";
  auto j = agent::buildNode(o);
  CHECK(j["metadata"]["labels"]["kubernetes.io/hostname"] == "n1");
  CHECK(j["metadata"]["labels"]["kubernetes.io/os"] == "linux");
  CHECK(j["metadata"]["labels"]["kubernetes.io/arch"] == "amd64");
  CHECK(j["metadata"]["labels"]["role"] == "edge");
}
