#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/resources.h"
#include "cmd/test-apiserver/table.h"
#include "cmd/test-apiserver/util.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using std::chrono::seconds;

namespace {

const nodeagent::base::SystemTime kNow{seconds(1714564800 + 3 * 3600 + 125)};

json runningPod() {
  return json::parse(R"({
    "metadata":{"name":"web","namespace":"default","creationTimestamp":"2024-05-01T12:00:00Z"},
    "spec":{"nodeName":"node1","containers":[{"name":"a","image":"x"},{"name":"b","image":"y"}]},
    "status":{"phase":"Running","podIP":"10.0.0.7",
      "conditions":[{"type":"Ready","status":"False"}],
      "containerStatuses":[
        {"name":"a","ready":true,"restartCount":2,"state":{"running":{}},
         "lastState":{"terminated":{"exitCode":1,"finishedAt":"2024-05-01T15:00:00Z"}}},
        {"name":"b","ready":false,"restartCount":0,"state":{"waiting":{"reason":"CrashLoopBackOff"}}}]}})");
}

}  // namespace

TEST_CASE("table: pod row has kubectl's READY, STATUS, RESTARTS, AGE, IP and NODE",
          "[unit][apiserver]") {
  const ResourceInfo& pods = *findResource("pods");
  json cells = tableCells(pods, runningPod(), kNow);
  REQUIRE(cells.size() == tableColumnDefinitions(pods).size());
  CHECK(cells[0] == "web");
  CHECK(cells[1] == "1/2");
  CHECK(cells[2] == "CrashLoopBackOff");
  CHECK(cells[3] == "2 (2m5s ago)");
  CHECK(cells[4] == "3h2m");
  CHECK(cells[5] == "10.0.0.7");
  CHECK(cells[6] == "node1");
  CHECK(tableColumnDefinitions(pods)[5]["priority"] == 1);
}

TEST_CASE("table: pod STATUS column follows kubectl's rules", "[unit][apiserver]") {
  json p = runningPod();
  p["status"]["containerStatuses"][1]["state"] = {{"running", json::object()}};
  p["status"]["containerStatuses"][1]["ready"] = true;
  CHECK(podStatusReason(p) == "Running");
  p["status"]["containerStatuses"][1]["state"] = {{"terminated", {{"exitCode", 3}}}};
  CHECK(podStatusReason(p) == "ExitCode:3");
  p["status"]["containerStatuses"][1]["state"] = {
      {"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}};
  CHECK(podStatusReason(p) == "NotReady");
  p["metadata"]["deletionTimestamp"] = "2024-05-01T12:00:00Z";
  CHECK(podStatusReason(p) == "Terminating");

  json init = json::parse(
      R"({"metadata":{},"spec":{"initContainers":[{"name":"i"}],"containers":[{"name":"c"}]},
    "status":{"phase":"Pending","initContainerStatuses":[{"name":"i","state":{"running":{}}}]}})");
  CHECK(podStatusReason(init) == "Init:0/1");
  init["status"]["initContainerStatuses"][0]["state"] = {{"terminated", {{"exitCode", 2}}}};
  CHECK(podStatusReason(init) == "Init:ExitCode:2");
  CHECK(podStatusReason(json::parse(R"({"status":{"phase":"Pending"}})")) == "Pending");
}

TEST_CASE("table: node row shows readiness, roles and version", "[unit][apiserver]") {
  const ResourceInfo& nodes = *findResource("nodes");
  json node = json::parse(R"({"metadata":{"name":"n1","creationTimestamp":"2024-05-01T12:00:00Z",
      "labels":{"node-role.kubernetes.io/control-plane":"","kubernetes.io/hostname":"n1"}},
    "spec":{"unschedulable":true},
    "status":{"conditions":[{"type":"Ready","status":"True"}],
      "addresses":[{"type":"InternalIP","address":"10.0.0.5"}],
      "nodeInfo":{"kubeletVersion":"v1.30.0","osImage":"Debian"}}})");
  json cells = tableCells(nodes, node, kNow);
  CHECK(cells[0] == "n1");
  CHECK(cells[1] == "Ready,SchedulingDisabled");
  CHECK(cells[2] == "control-plane");
  CHECK(cells[4] == "v1.30.0");
  CHECK(cells[5] == "10.0.0.5");
  node["status"]["conditions"][0]["status"] = "False";
  node["metadata"]["labels"].erase("node-role.kubernetes.io/control-plane");
  node["spec"].erase("unschedulable");
  cells = tableCells(nodes, node, kNow);
  CHECK(cells[1] == "NotReady");
  CHECK(cells[2] == "<none>");
}

TEST_CASE("table: a Table document has rows with partial object metadata", "[unit][apiserver]") {
  const ResourceInfo& pods = *findResource("pods");
  json p = runningPod();
  json t = makeTable(pods, {&p}, kNow, IncludeObject::kMetadata, {{"resourceVersion", "7"}});
  CHECK(t["kind"] == "Table");
  CHECK(t["apiVersion"] == "meta.k8s.io/v1");
  CHECK(t["metadata"]["resourceVersion"] == "7");
  REQUIRE(t["rows"].size() == 1);
  CHECK(t["rows"][0]["object"]["kind"] == "PartialObjectMetadata");
  CHECK(t["rows"][0]["object"]["metadata"]["name"] == "web");
  json bare = makeTable(pods, {&p}, kNow, IncludeObject::kNone, json::object(), false);
  CHECK(bare["columnDefinitions"].empty());
  CHECK_FALSE(bare["rows"][0].contains("object"));
}

TEST_CASE("table: configmaps, secrets and serviceaccounts have kube-apiserver's columns",
          "[unit][apiserver]") {
  auto names = [](const ResourceInfo& res) {
    std::vector<std::string> out;
    for (const auto& c : tableColumnDefinitions(res)) out.push_back(c["name"]);
    return out;
  };
  const ResourceInfo& cms = *findResource("configmaps");
  const ResourceInfo& secrets = *findResource("secrets");
  const ResourceInfo& sas = *findResource("serviceaccounts");
  CHECK(names(cms) == std::vector<std::string>{"Name", "Data", "Age"});
  CHECK(names(secrets) == std::vector<std::string>{"Name", "Type", "Data", "Age"});
  CHECK(names(sas) == std::vector<std::string>{"Name", "Secrets", "Age"});

  json cm = json::parse(R"({"metadata":{"name":"cfg","creationTimestamp":"2024-05-01T12:00:00Z"},
    "data":{"a":"1","b":"2"},"binaryData":{"c":"AAE="}})");
  CHECK(tableCells(cms, cm, kNow) == json({"cfg", 3, "3h2m"}));
  cm.erase("binaryData");
  cm.erase("data");
  CHECK(tableCells(cms, cm, kNow)[1] == 0);

  json secret = json::parse(R"({"metadata":{"name":"s","creationTimestamp":"2024-05-01T12:00:00Z"},
    "type":"kubernetes.io/tls","data":{"tls.crt":"YQ==","tls.key":"YQ=="}})");
  CHECK(tableCells(secrets, secret, kNow) == json({"s", "kubernetes.io/tls", 2, "3h2m"}));

  json sa =
      json::parse(R"({"metadata":{"name":"default","creationTimestamp":"2024-05-01T12:00:00Z"},
    "secrets":[{"name":"tok"}]})");
  CHECK(tableCells(sas, sa, kNow) == json({"default", 1, "3h2m"}));
  sa.erase("secrets");
  CHECK(tableCells(sas, sa, kNow)[1] == 0);
}

TEST_CASE("table: events show LAST SEEN, TYPE, REASON, OBJECT and MESSAGE (and the wide columns)",
          "[unit][apiserver]") {
  const ResourceInfo& events = *findResource("events");
  json defs = tableColumnDefinitions(events);
  std::vector<std::string> shown;
  std::vector<std::string> wide;
  for (const auto& c : defs) (c["priority"] == 0 ? shown : wide).push_back(c["name"]);
  CHECK(shown == std::vector<std::string>{"Last Seen", "Type", "Reason", "Object", "Message"});
  CHECK(wide == std::vector<std::string>{"Subobject", "Source", "First Seen", "Count", "Name"});

  json event = json::parse(R"({"metadata":{"name":"web.17a","namespace":"default",
      "creationTimestamp":"2024-05-01T12:00:00Z"},
    "involvedObject":{"kind":"Pod","name":"web","fieldPath":"spec.containers{web}"},
    "reason":"Pulled","message":"  Container image pulled\n","type":"Normal",
    "source":{"component":"kubelet","host":"node1"},
    "firstTimestamp":"2024-05-01T14:00:00Z","lastTimestamp":"2024-05-01T15:00:00Z","count":3})");
  json cells = tableCells(events, event, kNow);
  REQUIRE(cells.size() == defs.size());
  CHECK(cells == json({"2m5s", "Normal", "Pulled", "pod/web", "spec.containers{web}",
                       "kubelet, node1", "Container image pulled", "62m", 3, "web.17a"}));

  // An events.k8s.io-style event: eventTime, series, reportingController, no name.
  json modern = json::parse(R"({"metadata":{"name":"n.1"},
    "involvedObject":{"kind":"Node"},"reason":"Starting","type":"Warning",
    "reportingComponent":"nodeagent","reportingInstance":"node1",
    "eventTime":"2024-05-01T15:00:00.000000Z",
    "series":{"count":7,"lastObservedTime":"2024-05-01T15:01:05.000000Z"}})");
  cells = tableCells(events, modern, kNow);
  CHECK(cells[0] == "60s");
  CHECK(cells[1] == "Warning");
  CHECK(cells[3] == "node");
  CHECK(cells[5] == "nodeagent, node1");
  CHECK(cells[7] == "2m5s");
  CHECK(cells[8] == 7);
  modern.erase("series");
  modern.erase("eventTime");
  cells = tableCells(events, modern, kNow);
  CHECK(cells[0] == "<unknown>");
  CHECK(cells[8] == 1);
}

TEST_CASE("human duration: kubectl's AGE format", "[unit][apiserver]") {
  CHECK(humanDuration(seconds(5)) == "5s");
  CHECK(humanDuration(seconds(119)) == "119s");
  CHECK(humanDuration(seconds(185)) == "3m5s");
  CHECK(humanDuration(seconds(600)) == "10m");
  CHECK(humanDuration(seconds(3 * 3600 + 120)) == "3h2m");
  CHECK(humanDuration(seconds(10 * 3600)) == "10h");
  CHECK(humanDuration(seconds(3 * 86400 + 3600)) == "3d1h");
  CHECK(humanDuration(seconds(30 * 86400)) == "30d");
  CHECK(humanDuration(seconds(-5)) == "<invalid>");
}

TEST_CASE("time: formats and parses Kubernetes timestamps", "[unit][apiserver]") {
  const nodeagent::base::SystemTime t{std::chrono::microseconds(1714564800123456)};
  CHECK(formatTime(t) == "2024-05-01T12:00:00Z");
  CHECK(formatMicroTime(t) == "2024-05-01T12:00:00.123456Z");
  CHECK(parseTime("2024-05-01T12:00:00.123456Z") == t);
  CHECK(parseTime("2024-05-01T14:00:00+02:00") == parseTime("2024-05-01T12:00:00Z"));
  CHECK_FALSE(parseTime("yesterday").has_value());
  CHECK(base64Decode(base64Encode("hello, world")) == "hello, world");
  CHECK(base64Encode("ab") == "YWI=");
}
