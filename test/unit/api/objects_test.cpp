#include "api/objects.h"

#include <chrono>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "api/time.h"
#include "test/support/pod_builder.h"

namespace nodeagent::api {
namespace {

using nlohmann::json;

const char* const kNodeJson = R"({"kind":"Node","apiVersion":"v1","x-top":true,
 "metadata":{"name":"node1","uid":"nu","resourceVersion":"7","labels":{"kubernetes.io/os":"linux"}},
 "spec":{"podCIDR":"10.1.0.0/24","unschedulable":true,"providerID":"p://1","x-spec":1,
         "taints":[{"key":"k","value":"v","effect":"NoSchedule","timeAdded":"2024-05-01T12:00:00Z"}]},
 "status":{"capacity":{"cpu":"8","memory":"32Gi","pods":"110"},
           "allocatable":{"cpu":"7500m","memory":"31Gi","pods":110},
           "addresses":[{"type":"InternalIP","address":"10.0.0.5"},{"type":"Hostname","address":"node1"}],
           "conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok",
                          "lastHeartbeatTime":"2024-05-01T12:00:00Z","lastTransitionTime":"2024-05-01T11:00:00Z"}],
           "daemonEndpoints":{"kubeletEndpoint":{"Port":10250}},
           "nodeInfo":{"kubeletVersion":"v1.30.0","operatingSystem":"linux","architecture":"amd64",
                       "machineID":"m","systemUUID":"s","bootID":"b","kernelVersion":"6.1",
                       "osImage":"Debian","containerRuntimeVersion":"process://1","kubeProxyVersion":""},
           "images":[{"names":["x"]}]}})";

TEST_CASE("decodeNode: reads metadata, spec and status", "[unit][api]") {
  auto node = decodeNode(json::parse(kNodeJson));
  REQUIRE(node.ok());
  CHECK(node->metadata.name == "node1");
  CHECK(node->spec.pod_cidr == "10.1.0.0/24");
  CHECK(node->spec.unschedulable);
  CHECK(node->spec.provider_id == "p://1");
  REQUIRE(node->spec.taints.size() == 1);
  CHECK(node->spec.taints[0].effect == "NoSchedule");
  CHECK(node->spec.taints[0].time_added == *parseTime("2024-05-01T12:00:00Z"));
  CHECK(node->status.capacity.at("memory").value() == 32LL * 1024 * 1024 * 1024);
  CHECK(node->status.allocatable.at("cpu").milliValue() == 7500);
  CHECK(node->status.allocatable.at("pods").value() == 110);
  CHECK(node->status.addresses[1] == NodeAddress{"Hostname", "node1"});
  REQUIRE(node->status.conditions.size() == 1);
  CHECK(node->status.conditions[0].last_heartbeat_time == *parseTime("2024-05-01T12:00:00Z"));
  CHECK(node->status.kubelet_endpoint_port == 10250);
  CHECK(node->status.node_info.kubelet_version == "v1.30.0");
  CHECK(node->status.node_info.container_runtime_version == "process://1");
}

TEST_CASE("encodeNode: writes typed fields over the decoded object", "[unit][api]") {
  json in = json::parse(kNodeJson);
  Node node = *decodeNode(in);
  in["status"]["allocatable"]["pods"] = "110";  // quantities are written as strings
  CHECK(encodeNode(node) == in);                // unchanged typed view: same object
  node.status.conditions[0].status = "False";
  node.spec.unschedulable = false;
  node.metadata.labels = {};
  json out = encodeNode(node);
  CHECK(out["status"]["conditions"][0]["status"] == "False");
  CHECK_FALSE(out["spec"].contains("unschedulable"));
  CHECK_FALSE(out["metadata"].contains("labels"));
  CHECK(out["x-top"] == true);
  CHECK(out["spec"]["x-spec"] == 1);
  CHECK(out["status"]["images"][0]["names"][0] == "x");
  auto again = decodeNode(out);
  REQUIRE(again.ok());
  CHECK(again->status == node.status);
  CHECK(again->spec == node.spec);
}

TEST_CASE("encodeNode: a node built in code has the registration shape", "[unit][api]") {
  Node node;
  node.metadata.name = "n1";
  node.status.capacity["cpu"] = *Quantity::parse("8");
  node.status.kubelet_endpoint_port = 10250;
  node.status.node_info.kubelet_version = "v1.30.0";
  json j = encodeNode(node);
  CHECK(j["kind"] == "Node");
  CHECK(j["metadata"] == json{{"name", "n1"}});
  CHECK(j["spec"] == json::object());
  CHECK(j["status"]["capacity"]["cpu"] == "8");
  CHECK(j["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250);
  CHECK(j["status"]["nodeInfo"]["machineID"] == "");
}

TEST_CASE("decodeNode: errors name the field", "[unit][api]") {
  auto r = decodeNode(json::parse(R"({"status":{"capacity":{"cpu":"lots"}}})"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("status.capacity.cpu: invalid quantity"));
  r = decodeNode(json::parse(R"({"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":"x"}}}})"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(),
             Catch::Contains("status.daemonEndpoints.kubeletEndpoint.Port: expected an integer"));
  CHECK_FALSE(decodeNode(json::parse(R"({"kind":"Pod"})")).ok());
}

TEST_CASE("Lease: renewTime is a MicroTime and round-trips", "[unit][api]") {
  json in = json::parse(R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease",
    "metadata":{"name":"node1","namespace":"kube-node-lease","resourceVersion":"771",
      "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"node1","uid":"nu"}]},
    "spec":{"holderIdentity":"node1","leaseDurationSeconds":40,
            "renewTime":"2024-05-01T12:00:10.123456Z","leaseTransitions":2}})");
  auto lease = decodeLease(in);
  REQUIRE(lease.ok());
  CHECK(lease->spec.holder_identity == "node1");
  CHECK(lease->spec.lease_duration_seconds == 40);
  CHECK(lease->spec.renew_time == *parseTime("2024-05-01T12:00:10.123456Z"));
  CHECK_FALSE(lease->spec.acquire_time);
  CHECK(lease->spec.lease_transitions == 2);
  CHECK(encodeLease(*lease) == in);
  Lease renewed = *lease;
  renewed.spec.renew_time = *parseTime("2024-05-01T12:00:20.5Z");
  CHECK(encodeLease(renewed)["spec"]["renewTime"] == "2024-05-01T12:00:20.500000Z");
  CHECK_FALSE(decodeLease(json::parse(R"({"apiVersion":"v1","kind":"Lease"})")).ok());
}

TEST_CASE("ApiStatus: encodes the apiserver's error shape", "[unit][api]") {
  ApiStatus s = makeApiStatus(404, "NotFound", "pods \"web\" not found", "pods", "web");
  CHECK(encodeApiStatus(s) == json::parse(R"({"kind":"Status","apiVersion":"v1","metadata":{},
    "status":"Failure","message":"pods \"web\" not found","reason":"NotFound",
    "details":{"name":"web","kind":"pods"},"code":404})"));
  CHECK(encodeApiStatus(makeSuccessStatus()) ==
        json::parse(R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"})"));
  CHECK_FALSE(makeApiStatus(500, "InternalError", "boom").details.has_value());
}

TEST_CASE("ApiStatus: decodes causes and round-trips", "[unit][api]") {
  json in = json::parse(R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
    "message":"Pod \"web\" is invalid: spec.containers: Required value","reason":"Invalid",
    "details":{"name":"web","kind":"Pod","causes":[{"reason":"FieldValueRequired",
    "message":"Required value","field":"spec.containers"}],"retryAfterSeconds":3},"code":422})");
  auto s = decodeApiStatus(in);
  REQUIRE(s.ok());
  CHECK(s->code == 422);
  CHECK(s->reason == "Invalid");
  REQUIRE(s->details);
  CHECK(s->details->causes ==
        std::vector<StatusCause>{{"FieldValueRequired", "Required value", "spec.containers"}});
  CHECK(s->details->retry_after_seconds == 3);
  CHECK(encodeApiStatus(*s) == in);
  CHECK_FALSE(decodeApiStatus(json::parse(R"({"code":"410"})")).ok());
}

TEST_CASE("DeleteOptions: round-trip with preconditions", "[unit][api]") {
  DeleteOptions o;
  o.grace_period_seconds = 0;
  o.preconditions = Preconditions{"u1", std::nullopt};
  o.propagation_policy = "Background";
  json j = encodeDeleteOptions(o);
  CHECK(j == json::parse(R"({"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0,
    "preconditions":{"uid":"u1"},"propagationPolicy":"Background"})"));
  CHECK(*decodeDeleteOptions(j) == o);
  CHECK(*decodeDeleteOptions(json::object()) == DeleteOptions{});
  CHECK_FALSE(decodeDeleteOptions(json::parse(R"({"gracePeriodSeconds":1.5})")).ok());
}

TEST_CASE("PodList: items without kind decode, item errors carry the index", "[unit][api]") {
  json in = json::parse(R"({"kind":"PodList","apiVersion":"v1",
    "metadata":{"resourceVersion":"10245","continue":""},
    "items":[{"metadata":{"name":"web-node1","namespace":"default","uid":"u","resourceVersion":"10200"},
              "spec":{"nodeName":"node1","containers":[{"name":"web","image":"nginx"}]},
              "status":{"phase":"Running"}}]})");
  auto list = decodePodList(in);
  REQUIRE(list.ok());
  CHECK(list->resource_version == "10245");
  REQUIRE(list->items.size() == 1);
  CHECK(list->items[0]->metadata.name == "web-node1");
  CHECK(list->items[0]->status->phase == "Running");
  json out = encodePodList(*list);
  CHECK(out["metadata"] == json{{"resourceVersion", "10245"}});
  CHECK(out["items"][0] == in["items"][0]);
  in["items"].push_back(json::parse(R"({"metadata":{"name":1}})"));
  auto bad = decodePodList(in);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("items[1]: metadata.name: expected a string"));
}

TEST_CASE("WatchEvent: encode, line form and decode", "[unit][api]") {
  auto pod = testing::PodBuilder().name("web").build();
  json obj = json::parse(pod->raw->str());
  std::string line = watchEventLine(WatchEventType::kModified, obj);
  CHECK(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);
  auto ev = decodeWatchEvent(json::parse(line));
  REQUIRE(ev.ok());
  CHECK(ev->type == WatchEventType::kModified);
  CHECK(*ev->object == obj);
  CHECK(encodeWatchEvent(WatchEventType::kBookmark, obj)["type"] == "BOOKMARK");
  auto err = decodeWatchEvent(json{
      {"type", "ERROR"}, {"object", encodeApiStatus(makeApiStatus(410, "Expired", "too old"))}});
  REQUIRE(err.ok());
  CHECK(decodeApiStatus(*err->object)->code == 410);
  CHECK_FALSE(decodeWatchEvent(json{{"type", "SNAPSHOT"}, {"object", json::object()}}).ok());
  CHECK_FALSE(decodeWatchEvent(json{{"type", "ADDED"}}).ok());
  CHECK_FALSE(decodeWatchEvent(json{{"type", "ADDED"}, {"object", 5}}).ok());
}

}  // namespace
}  // namespace nodeagent::api
