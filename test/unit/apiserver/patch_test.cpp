#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/patch.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;

TEST_CASE("patch type: chosen by Content-Type, parameters ignored", "[unit][apiserver]") {
  CHECK(patchTypeFromContentType("application/merge-patch+json") == PatchType::kMergePatch);
  CHECK(patchTypeFromContentType("application/strategic-merge-patch+json; charset=utf-8") ==
        PatchType::kStrategicMergePatch);
  CHECK(patchTypeFromContentType("application/json-patch+json") == PatchType::kJsonPatch);
  CHECK_FALSE(patchTypeFromContentType("application/apply-patch+yaml").has_value());
  CHECK_FALSE(patchTypeFromContentType("application/json").has_value());
}

TEST_CASE("merge patch: maps merge, null deletes, lists are replaced", "[unit][apiserver]") {
  json target = {{"a", {{"b", 1}, {"c", 2}}}, {"list", {1, 2, 3}}, {"keep", true}};
  json patch = {{"a", {{"b", nullptr}, {"d", 4}}}, {"list", {9}}};
  auto out = applyMergePatch(target, patch);
  REQUIRE(out.ok());
  CHECK(*out == json({{"a", {{"c", 2}, {"d", 4}}}, {"list", {9}}, {"keep", true}}));
  CHECK_FALSE(applyMergePatch(target, json::array()).ok());
}

TEST_CASE("strategic merge patch: conditions merge by type and keep the element order asked for",
          "[unit][apiserver]") {
  json target = {
      {"status",
       {{"phase", "Pending"},
        {"conditions",
         {{{"type", "PodScheduled"}, {"status", "True"}},
          {{"type", "Ready"}, {"status", "False"}, {"reason", "ContainersNotReady"}}}}}}};
  // The kubelet's status patch shape (k/k #58711).
  json patch = json::parse(R"({"metadata":{"uid":"u1"},"status":{
    "$setElementOrder/conditions":[{"type":"Initialized"},{"type":"Ready"},{"type":"PodScheduled"}],
    "conditions":[{"type":"Ready","status":"True","reason":null},{"type":"Initialized","status":"True"}],
    "containerStatuses":[{"name":"c","ready":true}],"phase":"Running"}})");
  auto out = applyStrategicMergePatch(target, patch);
  REQUIRE(out.ok());
  const json& conds = (*out)["status"]["conditions"];
  REQUIRE(conds.size() == 3);
  CHECK(conds[0] == json({{"type", "Initialized"}, {"status", "True"}}));
  CHECK(conds[1] == json({{"type", "Ready"}, {"status", "True"}}));
  CHECK(conds[2]["type"] == "PodScheduled");
  CHECK((*out)["status"]["phase"] == "Running");
  CHECK((*out)["status"]["containerStatuses"].size() == 1);
  CHECK((*out)["metadata"]["uid"] == "u1");
  CHECK_FALSE((*out)["status"].contains("$setElementOrder/conditions"));
}

TEST_CASE("strategic merge patch: containers merge by name, containerStatuses are replaced",
          "[unit][apiserver]") {
  json target = {
      {"spec",
       {{"containers", {{{"name", "a"}, {"image", "x:1"}}, {{"name", "b"}, {"image", "y:1"}}}}}},
      {"status",
       {{"containerStatuses",
         {{{"name", "a"}, {"restartCount", 1}}, {{"name", "b"}, {"restartCount", 2}}}}}}};
  json patch = {{"spec", {{"containers", {{{"name", "b"}, {"image", "y:2"}}}}}},
                {"status", {{"containerStatuses", {{{"name", "b"}, {"restartCount", 3}}}}}}};
  auto out = applyStrategicMergePatch(target, patch);
  REQUIRE(out.ok());
  REQUIRE((*out)["spec"]["containers"].size() == 2);
  CHECK((*out)["spec"]["containers"][0]["image"] == "x:1");
  CHECK((*out)["spec"]["containers"][1]["image"] == "y:2");
  CHECK((*out)["status"]["containerStatuses"] ==
        json::array({{{"name", "b"}, {"restartCount", 3}}}));
}

TEST_CASE("strategic merge patch: $patch delete, $patch replace and $retainKeys",
          "[unit][apiserver]") {
  json target = {{"spec",
                  {{"containers", {{{"name", "a"}}, {{"name", "b"}}}},
                   {"strategy", {{"type", "Rolling"}, {"rolling", {{"max", 1}}}}}}},
                 {"metadata", {{"labels", {{"x", "1"}, {"y", "2"}}}}}};
  json patch = json::parse(R"({"spec":{"containers":[{"name":"a","$patch":"delete"}],
    "strategy":{"$retainKeys":["type"],"type":"Recreate"}},
    "metadata":{"labels":{"$patch":"replace","z":"3"}}})");
  auto out = applyStrategicMergePatch(target, patch);
  REQUIRE(out.ok());
  CHECK((*out)["spec"]["containers"] == json::array({{{"name", "b"}}}));
  CHECK((*out)["spec"]["strategy"] == json({{"type", "Recreate"}}));
  CHECK((*out)["metadata"]["labels"] == json({{"z", "3"}}));
}

TEST_CASE("strategic merge patch: maps merge and null deletes a key", "[unit][apiserver]") {
  json target = {
      {"metadata", {{"labels", {{"a", "1"}, {"b", "2"}}}, {"annotations", {{"x", "y"}}}}},
      {"spec", {{"nodeName", "n1"}}}};
  auto out = applyStrategicMergePatch(
      target, json::parse(R"({"metadata":{"labels":{"a":null,"c":"3"},"annotations":null}})"));
  REQUIRE(out.ok());
  CHECK((*out)["metadata"] == json({{"labels", {{"b", "2"}, {"c", "3"}}}}));
  CHECK((*out)["spec"]["nodeName"] == "n1");
}

TEST_CASE("strategic merge patch: finalizers are merged as a set", "[unit][apiserver]") {
  json target = {{"metadata", {{"finalizers", {"a"}}}}};
  auto out = applyStrategicMergePatch(target, {{"metadata", {{"finalizers", {"b", "a"}}}}});
  REQUIRE(out.ok());
  CHECK((*out)["metadata"]["finalizers"] == json({"a", "b"}));
  auto removed = applyStrategicMergePatch(
      *out, json::parse(R"({"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]}})"));
  REQUIRE(removed.ok());
  CHECK((*removed)["metadata"]["finalizers"] == json({"b"}));
}

TEST_CASE("strategic merge patch: a keyed element without its key is rejected",
          "[unit][apiserver]") {
  json target = {{"status", {{"conditions", json::array()}}}};
  auto out =
      applyStrategicMergePatch(target, {{"status", {{"conditions", {{{"status", "True"}}}}}}});
  REQUIRE_FALSE(out.ok());
  CHECK(out.status().message().find("status.conditions") != std::string::npos);
}

TEST_CASE("json patch: RFC 6902 operations, failures are errors", "[unit][apiserver]") {
  json target = {{"metadata", {{"labels", {{"a", "1"}}}}}};
  auto out =
      applyJsonPatch(target, json::parse(R"([{"op":"add","path":"/metadata/labels/b","value":"2"},
      {"op":"remove","path":"/metadata/labels/a"}])"));
  REQUIRE(out.ok());
  CHECK((*out)["metadata"]["labels"] == json({{"b", "2"}}));
  CHECK_FALSE(applyJsonPatch(target, json::parse(R"([{"op":"remove","path":"/nope"}])")).ok());
  CHECK_FALSE(applyJsonPatch(target, json::object()).ok());
}
