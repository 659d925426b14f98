// Static-pod defaults (kubelet's common.go applyDefaults) and Kubernetes API defaulting.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "config/pod_defaults.h"
#include "config/static_pod.h"
#include "test/unit/config/static_pod_test_util.h"

namespace nodeagent::config {
namespace {

using nlohmann::json;
using test::decodeFile;
using test::decodeHttp;
using test::errorLines;
using test::manifest;
using test::rawOf;

const json kNoExecuteToleration = {{"operator", "Exists"}, {"effect", "NoExecute"}};

TEST_CASE("static pod names get the lower-cased node name as suffix", "[unit][config]") {
  for (const char* node : {"node1", "Node1", "NODE1"}) {
    CAPTURE(node);
    auto result = decodeFile(manifest("static-pod1"), node);
    REQUIRE(result.ok());
    CHECK(result.pods[0]->metadata.name == "static-pod1-node1");
    CHECK(result.pods[0]->spec->node_name == "node1");
    CHECK(generatePodName("static-pod1", node) == "static-pod1-node1");
  }
}

TEST_CASE("an upper-case pod name suffix fails name validation", "[unit][config]") {
  auto result = decodeFile(manifest("static-pod1-NODE1"));
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].field == "metadata.name");
  CHECK(result.errors[0].message.starts_with(
      R"(Invalid value: "static-pod1-NODE1-node1": a lowercase RFC 1123 subdomain)"));
}

TEST_CASE("the namespace defaults to default and a given one is kept", "[unit][config]") {
  auto defaulted = decodeFile(manifest("web"));
  REQUIRE(defaulted.ok());
  CHECK(defaulted.pods[0]->metadata.namespace_ == "default");
  CHECK(defaulted.pods[0]->fullName() == "web-node1_default");

  auto given = decodeFile(manifest("web", "", "", "  namespace: kube-system\n"));
  REQUIRE(given.ok());
  CHECK(given.pods[0]->metadata.namespace_ == "kube-system");
}

TEST_CASE("a given UID is kept and copied into config.hash", "[unit][config]") {
  auto result = decodeFile(manifest("web", "", "", "  uid: \"12345\"\n"));
  REQUIRE(result.ok());
  const auto& pod = *result.pods[0];
  CHECK(pod.metadata.uid == "12345");
  CHECK(pod.metadata.annotations.at("kubernetes.io/config.hash") == "12345");
}

TEST_CASE("a generated UID is 32 lower-case hex digits and is the config.hash", "[unit][config]") {
  auto result = decodeFile(manifest("web"));
  REQUIRE(result.ok());
  const auto& uid = result.pods[0]->metadata.uid;
  REQUIRE(uid.size() == 32);
  CHECK(uid.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(result.pods[0]->metadata.annotations.at("kubernetes.io/config.hash") == uid);
}

TEST_CASE("file pods get the NoExecute toleration, HTTP pods none", "[unit][config]") {
  auto file = decodeFile(manifest("web"));
  REQUIRE(file.ok());
  CHECK(rawOf(file)["spec"]["tolerations"] == json::array({kNoExecuteToleration}));
  REQUIRE(file.pods[0]->spec->tolerations.size() == 1);
  CHECK(file.pods[0]->spec->tolerations[0].operator_ == "Exists");
  CHECK(file.pods[0]->spec->tolerations[0].effect == "NoExecute");
  CHECK(file.pods[0]->spec->tolerations[0].key.empty());

  auto http = decodeHttp(manifest("web"));
  REQUIRE(http.ok());
  CHECK(http.pods[0]->spec->tolerations.empty());
  CHECK_FALSE(rawOf(http)["spec"].contains("tolerations"));
}

TEST_CASE("the NoExecute toleration is added only when not already present", "[unit][config]") {
  SECTION("an equal toleration is kept as the only one") {
    auto result = decodeFile(
        manifest("web", "", "  tolerations:\n  - operator: Exists\n    effect: NoExecute\n"));
    REQUIRE(result.ok());
    CHECK(rawOf(result)["spec"]["tolerations"] == json::array({kNoExecuteToleration}));
  }
  SECTION("other tolerations are kept and the toleration appended") {
    auto result = decodeFile(manifest(
        "web", "", "  tolerations:\n  - key: dedicated\n    operator: Equal\n    value: infra\n"));
    REQUIRE(result.ok());
    auto tolerations = rawOf(result)["spec"]["tolerations"];
    REQUIRE(tolerations.size() == 2);
    CHECK(tolerations[0]["key"] == "dedicated");
    CHECK(tolerations[1] == kNoExecuteToleration);
  }
  SECTION("a matching toleration with tolerationSeconds is replaced, as kubelet does") {
    auto result = decodeFile(manifest("web", "",
                                      "  tolerations:\n  - operator: Exists\n    effect: "
                                      "NoExecute\n    tolerationSeconds: 60\n"));
    REQUIRE(result.ok());
    CHECK(rawOf(result)["spec"]["tolerations"] == json::array({kNoExecuteToleration}));
  }
}

TEST_CASE("static pods are Pending whatever status the manifest carries", "[unit][config]") {
  std::string text = manifest("web") + "status:\n  phase: Running\n  podIP: 10.1.2.3\n";
  auto result = decodeFile(text);
  REQUIRE(result.ok());
  CHECK(result.pods[0]->status->phase == "Pending");
  CHECK(result.pods[0]->status->pod_ip == "10.1.2.3");
}

TEST_CASE("a minimal manifest gets every Kubernetes API default", "[unit][config]") {
  auto result = decodeFile(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n"
      "  - name: main\n    image: nginx\n");
  REQUIRE(result.ok());
  json raw = rawOf(result);
  std::string uid = raw["metadata"]["uid"];
  json expected = json::parse(R"({
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
      "name": "web-node1",
      "namespace": "default",
      "uid": ")" + uid + R"(",
      "annotations": {"kubernetes.io/config.hash": ")" +
                              uid + R"("}
    },
    "spec": {
      "containers": [{
        "name": "main",
        "image": "nginx",
        "imagePullPolicy": "Always",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
      }],
      "dnsPolicy": "ClusterFirst",
      "enableServiceLinks": true,
      "nodeName": "node1",
      "restartPolicy": "Always",
      "schedulerName": "default-scheduler",
      "securityContext": {},
      "terminationGracePeriodSeconds": 30,
      "tolerations": [{"operator": "Exists", "effect": "NoExecute"}]
    },
    "status": {"phase": "Pending"}
  })");
  CHECK(raw == expected);

  const auto& pod = *result.pods[0];
  CHECK(pod.spec->restart_policy == "Always");
  CHECK(pod.spec->termination_grace_period_seconds == 30);
  CHECK(pod.spec->dns_policy == "ClusterFirst");
  CHECK(pod.spec->scheduler_name == "default-scheduler");
  CHECK(pod.spec->containers[0].image_pull_policy == "Always");
}

TEST_CASE("values given in the manifest are not overridden by defaults", "[unit][config]") {
  auto result = decodeFile(
      manifest("web",
               "    imagePullPolicy: Never\n    terminationMessagePath: /tmp/msg\n"
               "    terminationMessagePolicy: FallbackToLogsOnError\n",
               "  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  dnsPolicy: Default\n"
               "  schedulerName: custom\n  enableServiceLinks: false\n  securityContext:\n    "
               "runAsUser: 1000\n"));
  REQUIRE(result.ok());
  json spec = rawOf(result)["spec"];
  CHECK(spec["restartPolicy"] == "Never");
  CHECK(spec["terminationGracePeriodSeconds"] == 0);
  CHECK(spec["dnsPolicy"] == "Default");
  CHECK(spec["schedulerName"] == "custom");
  CHECK(spec["enableServiceLinks"] == false);
  CHECK(spec["securityContext"] == json{{"runAsUser", 1000}});
  CHECK(spec["containers"][0]["imagePullPolicy"] == "Never");
  CHECK(spec["containers"][0]["terminationMessagePath"] == "/tmp/msg");
  CHECK(spec["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError");
}

TEST_CASE("image pull policy defaults from the image tag", "[unit][config]") {
  const std::string digest =
      "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  struct Case {
    std::string image;
    std::string policy;
  };
  const std::vector<Case> cases = {
      {"nginx", "Always"},
      {"nginx:latest", "Always"},
      {"nginx:1.25", "IfNotPresent"},
      {"library/nginx", "Always"},
      {"docker.io/library/nginx:1.25-alpine", "IfNotPresent"},
      {"registry.example.com:5000/team/app", "Always"},
      {"registry.example.com:5000/team/app:v2", "IfNotPresent"},
      {"localhost/app", "Always"},
      {"localhost:5000/app:latest", "Always"},
      {"nginx@" + digest, "IfNotPresent"},
      {"nginx:1.25@" + digest, "IfNotPresent"},
      {"nginx:latest@" + digest, "Always"},
      {"my_app__x", "Always"},
      {"", "IfNotPresent"},
      {"Nginx", "IfNotPresent"},
      {"nginx:", "IfNotPresent"},
      {"nginx@sha256:short", "IfNotPresent"},
      {" nginx", "IfNotPresent"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.image);
    CHECK(defaultImagePullPolicy(c.image) == c.policy);
  }
}

TEST_CASE("probe defaults fill zero and missing fields", "[unit][config]") {
  auto result = decodeFile(manifest("web",
                                    "    livenessProbe:\n      httpGet:\n        port: 8080\n"
                                    "      periodSeconds: 0\n"
                                    "    readinessProbe:\n      tcpSocket:\n        port: 8080\n"
                                    "      periodSeconds: 7\n      failureThreshold: 5\n"
                                    "    lifecycle:\n      preStop:\n        httpGet:\n"
                                    "          port: 9000\n          path: /quit\n"));
  REQUIRE(result.ok());
  json c = rawOf(result)["spec"]["containers"][0];
  CHECK(c["livenessProbe"] == json::parse(R"({"httpGet":{"port":8080,"path":"/","scheme":"HTTP"},
      "periodSeconds":10,"timeoutSeconds":1,"successThreshold":1,"failureThreshold":3})"));
  CHECK(c["readinessProbe"] == json::parse(R"({"tcpSocket":{"port":8080},
      "periodSeconds":7,"timeoutSeconds":1,"successThreshold":1,"failureThreshold":5})"));
  CHECK(c["lifecycle"]["preStop"]["httpGet"] ==
        json::parse(R"({"port":9000,"path":"/quit","scheme":"HTTP"})"));
  const auto& probe = *result.pods[0]->spec->containers[0].liveness_probe;
  CHECK(probe.period_seconds == 10);
  CHECK(probe.handler.http_get->path == "/");
}

TEST_CASE("container ports default to TCP and follow the container port on the host network",
          "[unit][config]") {
  auto plain = decodeFile(manifest("web", "    ports:\n    - containerPort: 80\n"));
  REQUIRE(plain.ok());
  CHECK(rawOf(plain)["spec"]["containers"][0]["ports"] ==
        json::parse(R"([{"containerPort":80,"protocol":"TCP"}])"));

  auto host = decodeFile(manifest(
      "web", "    ports:\n    - containerPort: 80\n    - containerPort: 53\n      protocol: UDP\n",
      "  hostNetwork: true\n"));
  REQUIRE(host.ok());
  CHECK(rawOf(host)["spec"]["containers"][0]["ports"] ==
        json::parse(R"([{"containerPort":80,"hostPort":80,"protocol":"TCP"},
                        {"containerPort":53,"hostPort":53,"protocol":"UDP"}])"));
}

TEST_CASE("limits without requests become the requests", "[unit][config]") {
  auto result = decodeFile(manifest("web",
                                    "    resources:\n      limits:\n        cpu: 500m\n"
                                    "        memory: 128Mi\n      requests:\n        cpu: 100m\n"));
  REQUIRE(result.ok());
  CHECK(rawOf(result)["spec"]["containers"][0]["resources"] ==
        json::parse(R"({"limits":{"cpu":"500m","memory":"128Mi"},
                        "requests":{"cpu":"100m","memory":"128Mi"}})"));
}

TEST_CASE("volumes get their source defaults", "[unit][config]") {
  auto result = decodeFile(manifest("web", "",
                                    "  volumes:\n  - name: scratch\n"
                                    "  - name: host\n    hostPath:\n      path: /var/log\n"
                                    "  - name: creds\n    secret:\n      secretName: creds\n"
                                    "  - name: info\n    downwardAPI:\n      items:\n"
                                    "      - path: labels\n        fieldRef:\n"
                                    "          fieldPath: metadata.labels\n"));
  REQUIRE(result.ok());
  json volumes = rawOf(result)["spec"]["volumes"];
  CHECK(volumes[0] == json::parse(R"({"name":"scratch","emptyDir":{}})"));
  CHECK(volumes[1] == json::parse(R"({"name":"host","hostPath":{"path":"/var/log","type":""}})"));
  CHECK(volumes[2] ==
        json::parse(R"({"name":"creds","secret":{"secretName":"creds","defaultMode":420}})"));
  CHECK(volumes[3]["downwardAPI"] == json::parse(R"({"defaultMode":420,"items":[{"path":"labels",
      "fieldRef":{"apiVersion":"v1","fieldPath":"metadata.labels"}}]})"));
  CHECK(result.pods[0]->spec->volumes[0].source_type == "emptyDir");
}

TEST_CASE("env fieldRef defaults its apiVersion to v1", "[unit][config]") {
  auto result =
      decodeFile(manifest("web",
                          "    env:\n    - name: NODE\n      valueFrom:\n        fieldRef:\n"
                          "          fieldPath: spec.nodeName\n"));
  REQUIRE(result.ok());
  CHECK(rawOf(result)["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"] ==
        json::parse(R"({"apiVersion":"v1","fieldPath":"spec.nodeName"})"));
  CHECK(result.pods[0]->spec->containers[0].env[0].field_ref->api_version == "v1");
}

TEST_CASE("init containers get container defaults too", "[unit][config]") {
  auto result = decodeFile(manifest("web", "",
                                    "  initContainers:\n  - name: init\n    image: busybox:1.36\n"
                                    "    ports:\n    - containerPort: 81\n"));
  REQUIRE(result.ok());
  json init = rawOf(result)["spec"]["initContainers"][0];
  CHECK(init["imagePullPolicy"] == "IfNotPresent");
  CHECK(init["terminationMessagePolicy"] == "File");
  CHECK(init["ports"][0]["protocol"] == "TCP");
}

TEST_CASE("null values count as absent", "[unit][config]") {
  json value = json::parse(R"({"a":null,"b":{"c":null,"d":[{"e":null,"f":1}]},"g":[null]})");
  stripNulls(value);
  CHECK(value == json::parse(R"({"b":{"d":[{"f":1}]},"g":[null]})"));

  auto result = decodeFile(manifest("web", "", "  restartPolicy: null\n", "  labels: null\n"));
  REQUIRE(result.ok());
  CHECK(result.pods[0]->spec->restart_policy == "Always");
}

TEST_CASE("API defaulting leaves fields of the wrong type for the decoder", "[unit][config]") {
  json pod =
      json::parse(R"({"spec":{"containers":"nginx","volumes":[1,"x"],"hostNetwork":"yes"}})");
  applyApiDefaults(pod);
  CHECK(pod["spec"]["containers"] == "nginx");
  CHECK(pod["spec"]["volumes"] == json::parse(R"([1,"x"])"));

  json not_object = json::array();
  applyApiDefaults(not_object);
  applyStaticPodDefaults(not_object, ManifestSource{"node1", "/x", true});
  CHECK(not_object == json::array());
}

TEST_CASE("HTTP pods get every static default except the toleration", "[unit][config]") {
  auto result = decodeHttp(manifest("web"));
  REQUIRE(result.ok());
  const auto& pod = *result.pods[0];
  CHECK(pod.metadata.name == "web-node1");
  CHECK(pod.metadata.namespace_ == "default");
  CHECK(pod.spec->node_name == "node1");
  CHECK(pod.metadata.annotations.at("kubernetes.io/config.hash") == pod.metadata.uid);
  CHECK(pod.status->phase == "Pending");
}

}  // namespace
}  // namespace nodeagent::config
