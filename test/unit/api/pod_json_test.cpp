#include "api/pod_json.h"

#include <chrono>
#include <string>
#include <utility>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "api/canonical_json.h"
#include "api/yaml.h"
#include "test/support/pod_builder.h"

namespace nodeagent::api {
namespace {

using nlohmann::json;
using namespace std::chrono;

// A pod using every modelled field, with an unknown field ("x-*") at every level.
const char* const kRichPod = R"({
  "apiVersion": "v1", "kind": "Pod", "x-top": 1,
  "metadata": {
    "name": "web", "generateName": "web-", "namespace": "prod", "uid": "u-1",
    "resourceVersion": "42", "generation": 3,
    "creationTimestamp": "2024-02-29T12:00:00Z", "deletionTimestamp": "2024-03-01T00:00:00Z",
    "deletionGracePeriodSeconds": 30,
    "labels": {"app": "web"}, "annotations": {"a": "b"},
    "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "nu",
                         "controller": true, "blockOwnerDeletion": false, "x-owner": true}],
    "managedFields": [{"manager": "kubectl"}]
  },
  "spec": {
    "x-spec": {"deep": [1, 2]},
    "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
    "containers": [{
      "name": "c", "image": "nginx", "imagePullPolicy": "IfNotPresent",
      "command": ["/bin/sh", "-c"], "args": ["exec nginx"], "workingDir": "/srv",
      "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP", "x-port": 1},
                {"containerPort": 443, "hostPort": 8443, "hostIP": "127.0.0.1", "protocol": "UDP"}],
      "env": [{"name": "A", "value": "1"},
              {"name": "NODE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
              {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
      "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": 2}},
      "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true, "subPath": "x"}],
      "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTPS",
                                    "httpHeaders": [{"name": "H", "value": "v"}]},
                        "initialDelaySeconds": 5, "timeoutSeconds": 2, "periodSeconds": 7,
                        "successThreshold": 1, "failureThreshold": 4,
                        "terminationGracePeriodSeconds": 9},
      "readinessProbe": {"tcpSocket": {"port": "http", "host": "h"}},
      "startupProbe": {"exec": {"command": ["cat", "/ready"]}},
      "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}},
                    "postStart": {"httpGet": {"port": 1}}},
      "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
      "securityContext": {"runAsUser": 1000, "runAsGroup": 2000, "runAsNonRoot": true,
                          "allowPrivilegeEscalation": false, "privileged": false,
                          "readOnlyRootFilesystem": true, "capabilities": {"add": ["NET_ADMIN"]}},
      "stdin": true, "tty": true, "x-container": "kept"
    }],
    "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 45,
    "activeDeadlineSeconds": 600, "dnsPolicy": "ClusterFirst", "nodeName": "n1",
    "serviceAccountName": "sa", "hostNetwork": true, "hostPID": true, "hostIPC": false,
    "schedulerName": "default-scheduler",
    "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
    "volumes": [{"name": "data", "hostPath": {"path": "/var/data", "type": "Directory"}},
                {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                {"name": "cm", "configMap": {"name": "cfg"}}],
    "readinessGates": [{"conditionType": "example.com/ready"}],
    "priority": 2000000000, "priorityClassName": "system-node-critical",
    "securityContext": {"runAsUser": 65534, "runAsGroup": 65533, "runAsNonRoot": true,
                        "supplementalGroups": [5, 6], "fsGroup": 2000, "x-psc": 1}
  },
  "status": {
    "phase": "Running", "message": "m", "reason": "r", "hostIP": "10.0.0.1",
    "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}, {"ip": "fd00::5"}],
    "startTime": "2024-02-29T12:00:01Z", "qosClass": "Burstable", "x-status": null,
    "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": "2024-02-29T12:00:05Z", "reason": "", "message": ""}],
    "initContainerStatuses": [{"name": "init", "ready": true, "restartCount": 0, "image": "busybox",
      "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed",
      "startedAt": "2024-02-29T12:00:01Z", "finishedAt": "2024-02-29T12:00:02Z", "containerID": "x://1"}},
      "lastState": {}}],
    "containerStatuses": [{"name": "c", "ready": true, "started": true, "restartCount": 2,
      "image": "nginx", "imageID": "sha", "containerID": "x://2",
      "state": {"running": {"startedAt": "2024-02-29T12:00:03Z"}},
      "lastState": {"terminated": {"exitCode": 137, "signal": 9, "reason": "Error", "message": "killed"}}},
      {"name": "d", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}]
  }
})";

Timestamp at(int y, unsigned mo, unsigned d, int h, int mi, int s) {
  return sys_days(year_month_day{year(y), month(mo), day(d)}) + hours(h) + minutes(mi) + seconds(s);
}

Pod mustDecode(std::string_view text) {
  auto j = yamlToJson(text);
  REQUIRE(j.ok());
  auto pod = decodePod(*j);
  INFO(pod.status().toString());
  REQUIRE(pod.ok());
  return *pod;
}

std::string decodeError(std::string_view text) {
  auto j = parseJson(text);
  REQUIRE(j.ok());
  auto pod = decodePod(*j);
  REQUIRE_FALSE(pod.ok());
  CHECK(pod.status().code() == base::StatusCode::kInvalidArgument);
  return pod.status().message();
}

TEST_CASE("decodePod: builds every typed field", "[unit][api]") {
  Pod pod = mustDecode(kRichPod);
  const auto& m = pod.metadata;
  CHECK(m.name == "web");
  CHECK(m.generate_name == "web-");
  CHECK(m.namespace_ == "prod");
  CHECK(m.uid == "u-1");
  CHECK(m.resource_version == "42");
  CHECK(m.generation == 3);
  CHECK(m.creation_timestamp == at(2024, 2, 29, 12, 0, 0));
  CHECK(m.deletion_timestamp == at(2024, 3, 1, 0, 0, 0));
  CHECK(m.deletion_grace_period_seconds == 30);
  CHECK(m.labels == StringMap{{"app", "web"}});
  CHECK(m.annotations == StringMap{{"a", "b"}});
  REQUIRE(m.owner_references.size() == 1);
  CHECK(m.owner_references[0] == OwnerReference{"v1", "Node", "n1", "nu", true, false});
  CHECK(pod.fullName() == "web_prod");

  const api::PodSpec& s = *pod.spec;
  REQUIRE(s.init_containers.size() == 1);
  CHECK(s.init_containers[0].command == std::vector<std::string>{"true"});
  REQUIRE(s.containers.size() == 1);
  const Container& c = s.containers[0];
  CHECK(c.name == "c");
  CHECK(c.image == "nginx");
  CHECK(c.image_pull_policy == "IfNotPresent");
  CHECK(c.command == std::vector<std::string>{"/bin/sh", "-c"});
  CHECK(c.args == std::vector<std::string>{"exec nginx"});
  CHECK(c.working_dir == "/srv");
  REQUIRE(c.ports.size() == 2);
  CHECK(c.ports[0] == ContainerPort{"http", 80, 0, "TCP", ""});
  CHECK(c.ports[1] == ContainerPort{"", 443, 8443, "UDP", "127.0.0.1"});
  REQUIRE(c.env.size() == 3);
  CHECK(c.env[0].value == "1");
  CHECK(c.env[0].value_from_kind.empty());
  CHECK(c.env[1].value_from_kind == "fieldRef");
  CHECK(c.env[1].field_ref == ObjectFieldSelector{"v1", "spec.nodeName"});
  CHECK(c.env[2].value_from_kind == "secretKeyRef");
  CHECK_FALSE(c.env[2].field_ref.has_value());
  CHECK(c.resources.requests.at("cpu").milliValue() == 100);
  CHECK(c.resources.requests.at("memory").value() == 128 * 1024 * 1024);
  CHECK(c.resources.limits.at("cpu").toString() == "2");
  CHECK(c.volume_mounts[0] == VolumeMount{"data", "/data", true, "x"});
  REQUIRE(c.liveness_probe);
  const Probe& lp = *c.liveness_probe;
  REQUIRE(lp.handler.http_get);
  CHECK(lp.handler.http_get->path == "/healthz");
  CHECK(lp.handler.http_get->port == IntOrString{false, 8080, ""});
  CHECK(lp.handler.http_get->scheme == "HTTPS");
  CHECK(lp.handler.http_get->http_headers == std::vector<HTTPHeader>{{"H", "v"}});
  CHECK(lp.initial_delay_seconds == 5);
  CHECK(lp.timeout_seconds == 2);
  CHECK(lp.period_seconds == 7);
  CHECK(lp.failure_threshold == 4);
  CHECK(lp.termination_grace_period_seconds == 9);
  REQUIRE(c.readiness_probe);
  REQUIRE(c.readiness_probe->handler.tcp_socket);
  CHECK(c.readiness_probe->handler.tcp_socket->port == IntOrString{true, 0, "http"});
  CHECK(c.readiness_probe->handler.tcp_socket->host == "h");
  CHECK(c.readiness_probe->period_seconds == 10);  // the struct's initial value, not a default
  REQUIRE(c.startup_probe);
  CHECK(c.startup_probe->handler.exec->command == std::vector<std::string>{"cat", "/ready"});
  REQUIRE(c.lifecycle);
  CHECK(c.lifecycle->pre_stop->exec->command == std::vector<std::string>{"sleep", "5"});
  CHECK(c.lifecycle->post_start->http_get->port.int_value == 1);
  CHECK(c.termination_message_path == "/dev/termination-log");
  CHECK(c.termination_message_policy == "File");
  REQUIRE(c.security_context);
  CHECK(c.security_context->run_as_user == 1000);
  CHECK(c.security_context->run_as_group == 2000);
  CHECK(c.security_context->run_as_non_root == true);
  CHECK(c.security_context->allow_privilege_escalation == false);
  CHECK(c.security_context->read_only_root_filesystem == true);
  REQUIRE(c.security_context->capabilities);
  CHECK(c.security_context->capabilities->add == std::vector<std::string>{"NET_ADMIN"});
  CHECK(c.security_context->capabilities->drop.empty());
  CHECK(c.stdin);
  CHECK(c.tty);
  CHECK(s.restart_policy == "OnFailure");
  CHECK(s.termination_grace_period_seconds == 45);
  CHECK(s.active_deadline_seconds == 600);
  CHECK(s.dns_policy == "ClusterFirst");
  CHECK(s.node_name == "n1");
  CHECK(s.service_account_name == "sa");
  CHECK(s.host_network);
  CHECK(s.host_pid);
  CHECK_FALSE(s.host_ipc);
  CHECK(s.scheduler_name == "default-scheduler");
  REQUIRE(s.tolerations.size() == 1);
  CHECK(s.tolerations[0] == Toleration{"k", "Exists", "", "NoExecute", 300});
  REQUIRE(s.volumes.size() == 3);
  CHECK(s.volumes[0].source_type == "hostPath");
  CHECK(s.volumes[0].host_path == "/var/data");
  CHECK(s.volumes[0].host_path_type == "Directory");
  CHECK(s.volumes[1].source_type == "emptyDir");
  CHECK(s.volumes[1].empty_dir_medium == "Memory");
  CHECK(s.volumes[1].empty_dir_size_limit->value() == 1024 * 1024 * 1024);
  CHECK(s.volumes[2].source_type == "configMap");
  CHECK(s.readiness_gates == std::vector<std::string>{"example.com/ready"});
  CHECK(s.priority == 2000000000);
  CHECK(s.priority_class_name == "system-node-critical");
  REQUIRE(s.security_context);
  CHECK(s.security_context->run_as_user == 65534);
  CHECK(s.security_context->run_as_group == 65533);
  CHECK(s.security_context->run_as_non_root == true);
  CHECK(s.security_context->supplemental_groups == std::vector<int64_t>{5, 6});
  CHECK(s.security_context->fs_group == 2000);

  const auto& st = pod.status;
  CHECK(st->phase == "Running");
  CHECK(st->message == "m");
  CHECK(st->reason == "r");
  CHECK(st->host_ip == "10.0.0.1");
  CHECK(st->pod_ip == "10.1.0.5");
  CHECK(st->pod_ips == std::vector<std::string>{"10.1.0.5", "fd00::5"});
  CHECK(st->start_time == at(2024, 2, 29, 12, 0, 1));
  CHECK(st->qos_class == "Burstable");
  REQUIRE(st->conditions.size() == 1);
  CHECK(st->conditions[0].type == "Ready");
  CHECK_FALSE(st->conditions[0].last_probe_time.has_value());
  CHECK(st->conditions[0].last_transition_time == at(2024, 2, 29, 12, 0, 5));
  REQUIRE(st->init_container_statuses.size() == 1);
  CHECK(st->init_container_statuses[0].state.terminated->reason == "Completed");
  CHECK(st->init_container_statuses[0].state.terminated->finished_at == at(2024, 2, 29, 12, 0, 2));
  REQUIRE(st->container_statuses.size() == 2);
  const auto& cs = st->container_statuses[0];
  CHECK(cs.ready);
  CHECK(cs.started == true);
  CHECK(cs.restart_count == 2);
  CHECK(cs.image_id == "sha");
  CHECK(cs.container_id == "x://2");
  CHECK(cs.state.running->started_at == at(2024, 2, 29, 12, 0, 3));
  CHECK(cs.last_state.terminated->exit_code == 137);
  CHECK(cs.last_state.terminated->signal == 9);
  CHECK(st->container_statuses[1].state.waiting->reason == "CrashLoopBackOff");
}

TEST_CASE("decodePod: raw is the canonical JSON of the whole object", "[unit][api]") {
  json j = json::parse(kRichPod);
  Pod pod = *decodePod(j);
  REQUIRE(pod.raw);
  CHECK(*pod.raw == canonicalJson(j));
  CHECK(pod.content_hash == canonicalHash(j));
  CHECK(pod.spec_hash == canonicalHash(j["spec"]));
  CHECK(pod.spec->containers[0].hash == canonicalHash(j["spec"]["containers"][0]));
  CHECK(pod.spec->init_containers[0].hash == canonicalHash(j["spec"]["initContainers"][0]));
}

TEST_CASE("encodePod: unknown fields survive a round trip at every level", "[unit][api]") {
  json j = json::parse(kRichPod);
  Pod pod = *decodePod(j);
  json out = encodePod(pod);
  CHECK(out == j);
  CHECK(out["x-top"] == 1);
  CHECK(out["metadata"]["managedFields"][0]["manager"] == "kubectl");
  CHECK(out["metadata"]["ownerReferences"][0]["x-owner"] == true);
  CHECK(out["spec"]["x-spec"]["deep"] == json({1, 2}));
  CHECK(out["spec"]["containers"][0]["x-container"] == "kept");
  CHECK(out["spec"]["containers"][0]["securityContext"]["capabilities"]["add"][0] == "NET_ADMIN");
  CHECK(out["status"].contains("x-status"));
  Pod again = *decodePod(out);
  CHECK(*again.raw == *pod.raw);
  CHECK(again.content_hash == pod.content_hash);
  CHECK(again.metadata == pod.metadata);
  CHECK(again.spec == pod.spec);
  CHECK(again.status == pod.status);
}

TEST_CASE("decodePod: YAML and JSON of the same pod decode identically", "[unit][api]") {
  Pod from_yaml = mustDecode(R"(apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - name: c
    image: busybox
    command: [sleep, "10"]
    resources: {limits: {cpu: 1}}
)");
  Pod from_json = mustDecode(
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"default"},)"
      R"("spec":{"containers":[{"name":"c","image":"busybox","command":["sleep","10"],)"
      R"("resources":{"limits":{"cpu":1}}}]}})");
  CHECK(*from_yaml.raw == *from_json.raw);
  CHECK(from_yaml.spec_hash == from_json.spec_hash);
  CHECK(from_yaml.spec == from_json.spec);
}

TEST_CASE("decodePod: hashes separate spec changes from metadata changes", "[unit][api]") {
  auto a = testing::PodBuilder().name("p").container("c", {"sleep", "1"}).buildPod();
  auto b =
      testing::PodBuilder().name("p").container("c", {"sleep", "1"}).label("x", "y").buildPod();
  auto c = testing::PodBuilder().name("p").container("c", {"sleep", "2"}).buildPod();
  CHECK(a.spec_hash == b.spec_hash);
  CHECK(a.content_hash != b.content_hash);
  CHECK(a.spec_hash != c.spec_hash);
  CHECK(a.spec->containers[0].hash == b.spec->containers[0].hash);
  CHECK(a.spec->containers[0].hash != c.spec->containers[0].hash);
}

TEST_CASE("decodePod: missing kind and apiVersion are fine, wrong ones are not", "[unit][api]") {
  CHECK(mustDecode(R"({"metadata":{"name":"x"}})").metadata.name == "x");
  CHECK_THAT(decodeError(R"({"kind":"Service"})"), Catch::Contains("kind: expected \"Pod\""));
  CHECK_THAT(decodeError(R"({"kind":"Pod","apiVersion":"v2"})"),
             Catch::Contains("apiVersion: expected \"v1\""));
  CHECK_THAT(decodeError(R"({"kind":7})"), Catch::Contains("kind"));
}

TEST_CASE("decodePod: wrong types name the field path", "[unit][api]") {
  struct Case {
    const char* json;
    const char* want;
  };
  const Case cases[] = {
      {R"({"spec":{"containers":[{"name":"c","ports":[{"containerPort":1},{"containerPort":"80"}]}]}})",
       "spec.containers[0].ports[1].containerPort: expected an integer, got string"},
      {R"({"spec":{"containers":[{"name":"c","ports":[{"containerPort":1.5}]}]}})",
       "spec.containers[0].ports[0].containerPort: expected an integer, got 1.5"},
      {R"({"spec":{"containers":[{"ports":[{"containerPort":2147483648}]}]}})",
       "spec.containers[0].ports[0].containerPort: integer 2147483648 is out of the 32-bit range"},
      {R"({"spec":{"terminationGracePeriodSeconds":9223372036854775808}})",
       "spec.terminationGracePeriodSeconds: integer 9223372036854775808 is out of range"},
      {R"({"spec":{"terminationGracePeriodSeconds":1e300}})",
       "spec.terminationGracePeriodSeconds: integer 1e+300 is out of range"},
      {R"({"metadata":{"name":5}})", "metadata.name: expected a string, got integer"},
      {R"({"metadata":{"labels":{"a":true}}})",
       "metadata.labels.a: expected a string, got boolean"},
      {R"({"metadata":{"annotations":[]}})", "metadata.annotations: expected an object, got array"},
      {R"({"metadata":"x"})", "metadata: expected an object, got string"},
      {R"({"metadata":{"creationTimestamp":"yesterday"}})",
       "metadata.creationTimestamp: invalid RFC 3339"},
      {R"({"metadata":{"creationTimestamp":"2023-02-29T00:00:00Z"}})",
       "metadata.creationTimestamp: invalid RFC 3339"},
      {R"({"spec":{"containers":{}}})", "spec.containers: expected an array, got object"},
      {R"({"spec":{"containers":["c"]}})", "spec.containers[0]: expected an object, got string"},
      {R"({"spec":{"containers":[{"command":"sleep 1"}]}})",
       "spec.containers[0].command: expected an array"},
      {R"({"spec":{"containers":[{"command":["a", 1]}]}})",
       "spec.containers[0].command[1]: expected a string, got integer"},
      {R"({"spec":{"containers":[{"resources":{"limits":{"memory":"1Mb"}}}]}})",
       "spec.containers[0].resources.limits.memory: invalid quantity \"1Mb\""},
      {R"({"spec":{"containers":[{"livenessProbe":{"httpGet":{"port":true}}}]}})",
       "spec.containers[0].livenessProbe.httpGet.port: expected an integer or a string, got "
       "boolean"},
      {R"({"spec":{"hostNetwork":"true"}})", "spec.hostNetwork: expected a boolean, got string"},
      {R"({"spec":{"securityContext":{"supplementalGroups":[1,"x"]}}})",
       "spec.securityContext.supplementalGroups[1]: expected an integer, got string"},
      {R"({"spec":{"containers":[{"securityContext":{"capabilities":{"drop":"ALL"}}}]}})",
       "spec.containers[0].securityContext.capabilities.drop: expected an array, got string"},
      {R"({"spec":{"initContainers":[{"securityContext":{"runAsUser":"root"}}]}})",
       "spec.initContainers[0].securityContext.runAsUser: expected an integer, got string"},
      {R"({"status":{"containerStatuses":[{"restartCount":-1.25}]}})",
       "status.containerStatuses[0].restartCount: expected an integer, got -1.25"},
      {R"({"status":{"startTime":5}})",
       "status.startTime: expected an RFC 3339 time string, got integer"},
      {R"({"spec":{"volumes":[{"name":"v","emptyDir":{"sizeLimit":[]}}]}})",
       "spec.volumes[0].emptyDir.sizeLimit: expected a quantity string, got array"},
      {R"([])", "<root>: expected an object, got array"},
  };
  for (const auto& c : cases) {
    INFO(c.json);
    CHECK_THAT(decodeError(c.json), Catch::Contains(c.want));
  }
}

TEST_CASE("decodePod: integral floats and negative numbers in range are accepted", "[unit][api]") {
  Pod pod = mustDecode(R"({"spec":{"terminationGracePeriodSeconds":30.0,"priority":-5,
                           "containers":[{"ports":[{"containerPort":1e3}]}]}})");
  CHECK(pod.spec->termination_grace_period_seconds == 30);
  CHECK(pod.spec->priority == -5);
  CHECK(pod.spec->containers[0].ports[0].container_port == 1000);
}

TEST_CASE("decodePod: nulls are treated as absent", "[unit][api]") {
  Pod pod = mustDecode(R"({"metadata":{"name":"x","labels":null,"deletionTimestamp":null},
                           "spec":{"containers":null,"nodeName":null},"status":null})");
  CHECK(pod.metadata.labels.empty());
  CHECK_FALSE(pod.metadata.deletion_timestamp);
  CHECK(pod.spec->containers.empty());
}

TEST_CASE("decodePodJson: parses strictly then decodes", "[unit][api]") {
  CHECK(decodePodJson(R"({"metadata":{"name":"x"}})")->metadata.name == "x");
  CHECK_FALSE(decodePodJson(R"({"metadata":{"name":"x","name":"y"}})").ok());
  CHECK_FALSE(decodePodJson("not json").ok());
  CHECK_FALSE(decodePodJson("").ok());
}

TEST_CASE("withAnnotations: sets and removes keys on a new pod", "[unit][api]") {
  auto pod =
      testing::PodBuilder().name("p").annotation("keep", "1").annotation("drop", "2").build();
  auto updated = withAnnotations(*pod, {{"new", "3"}, {"keep", "9"}}, {"drop"});
  REQUIRE(updated.ok());
  CHECK((*updated)->metadata.annotations == StringMap{{"keep", "9"}, {"new", "3"}});
  CHECK(pod->metadata.annotations == StringMap{{"drop", "2"}, {"keep", "1"}});  // untouched
  CHECK((*updated)->spec_hash == pod->spec_hash);
  CHECK((*updated)->content_hash != pod->content_hash);
  auto emptied = withAnnotations(*pod, {}, {"keep", "drop"});
  REQUIRE(emptied.ok());
  CHECK_FALSE(encodePod(**emptied)["metadata"].contains("annotations"));
}

TEST_CASE("withStatus: replaces the status wholesale", "[unit][api]") {
  Pod pod = mustDecode(kRichPod);
  PodStatus st;
  st.phase = "Succeeded";
  auto updated = withStatus(pod, st);
  REQUIRE(updated.ok());
  CHECK((*updated)->status == st);
  CHECK(encodePod(**updated)["status"] == json{{"phase", "Succeeded"}});
  CHECK((*updated)->spec == pod.spec);
}

TEST_CASE("appendPodJsonWithStatus: the pod with its status replaced, from the raw text",
          "[unit][api]") {
  Pod rich = mustDecode(kRichPod);
  // Keys sorting after "status", escapes and brackets inside strings, nested arrays.
  json tricky = json::parse(kRichPod);
  tricky["zz-after-status"] = {{"a", json::array({1, json::array({2, "]}"}), "\"{"})}};
  tricky["metadata"]["annotations"]["q"] = "say \"}\" and \\";
  Pod odd = mustDecode(tricky.dump());
  tricky.erase("status");
  Pod odd_without_status = mustDecode(tricky.dump());
  tricky["status"] = json::object();
  auto bare = testing::PodBuilder().name("p").container("c").build();
  // Without a spec the text is one piece; a null spec is no spec; a spec that has a "status" key
  // of its own.
  Pod specless = mustDecode(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"s"},)"
                            R"("status":{"phase":"Pending"},"zz":1})");
  Pod null_spec = mustDecode(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"n"},)"
                             R"("spec":null})");
  Pod spec_with_status =
      mustDecode(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"w"},)"
                 R"("spec":{"containers":[{"name":"c","image":"i"}],"status":{"x":1}}})");
  CHECK_FALSE(specless.raw->hasSpec());
  CHECK_FALSE(null_spec.raw->hasSpec());
  CHECK(spec_with_status.raw->hasSpec());
  PodStatus st;
  st.phase = "Running";
  st.pod_ip = "10.0.0.1";
  for (const Pod* pod : std::vector<const Pod*>{&rich, &odd, &odd_without_status, bare.get(),
                                                &specless, &null_spec, &spec_with_status}) {
    for (const PodStatus* status : std::vector<const PodStatus*>{nullptr, &st}) {
      std::string out = "[";
      appendPodJsonWithStatus(*pod, status, out);
      out += "]";
      json expected = encodePod(*pod);
      if (status != nullptr) expected["status"] = encodePodStatus(*status);
      CHECK(json::parse(out) == json::array({expected}));
      // Byte for byte canonical (so a duplicate "status" cannot hide behind the parse): the
      // status member is replaced in place, or inserted where its key sorts.
      CHECK(out == "[" + canonicalJson(expected) + "]");
      // The slot found once serves any status.
      if (status != nullptr) {
        auto slot = findStatusSlot(*pod->raw);
        REQUIRE(slot);
        std::string again;
        appendWithStatusAt(*pod->raw, *slot, canonicalJson(encodePodStatus(*status)), again);
        CHECK(again == out.substr(1, out.size() - 2));
      }
    }
  }
  CHECK(tricky.contains("zz-after-status"));
}

TEST_CASE("withJsonEdit: edits and re-decodes, bad edits are errors", "[unit][api]") {
  auto pod = testing::PodBuilder().name("p").container("c").build();
  auto renamed = withJsonEdit(*pod, [](json& j) { j["metadata"]["name"] = "q"; });
  REQUIRE(renamed.ok());
  CHECK((*renamed)->metadata.name == "q");
  auto broken = withJsonEdit(*pod, [](json& j) { j["spec"]["nodeName"] = 5; });
  CHECK_FALSE(broken.ok());
  auto throwing = withJsonEdit(*pod, [](json& j) { (void)j.at("missing"); });
  CHECK_FALSE(throwing.ok());
}

TEST_CASE("encodePodStatus: omits empty fields and round-trips", "[unit][api]") {
  CHECK(encodePodStatus(PodStatus{}) == json::object());
  Pod pod = mustDecode(kRichPod);
  json enc = encodePodStatus(*pod.status);
  auto back = decodePodStatus(enc);
  REQUIRE(back.ok());
  CHECK(*back == pod.status);
  const json& cs = enc["containerStatuses"][1];
  CHECK(cs["ready"] == false);
  CHECK(cs["restartCount"] == 0);
  CHECK(cs["lastState"] == json::object());
  CHECK_FALSE(cs.contains("started"));
  CHECK_FALSE(cs.contains("containerID"));
  CHECK(enc["conditions"][0] == json{{"type", "Ready"},
                                     {"status", "True"},
                                     {"lastTransitionTime", "2024-02-29T12:00:05Z"}});
  CHECK(enc["podIPs"] == json::parse(R"([{"ip":"10.1.0.5"},{"ip":"fd00::5"}])"));
  CHECK(enc["startTime"] == "2024-02-29T12:00:01Z");
}

TEST_CASE("decodePodStatus: errors name the status path", "[unit][api]") {
  auto r = decodePodStatus(json::parse(R"({"phase": 1})"));
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("status.phase: expected a string"));
}

TEST_CASE("PodBuilder: builds pods whose raw and typed views agree", "[unit][api]") {
  auto t = at(2024, 1, 1, 0, 0, 0);
  auto pod = testing::PodBuilder()
                 .name("web")
                 .ns("kube-system")
                 .uid("u1")
                 .container("c", {"sleep", "10"})
                 .annotation("k", "v")
                 .label("app", "web")
                 .nodeName("n1")
                 .deletionTimestamp(t)
                 .build();
  CHECK(pod->metadata.name == "web");
  CHECK(pod->metadata.namespace_ == "kube-system");
  CHECK(pod->metadata.uid == "u1");
  CHECK(pod->metadata.deletion_timestamp == t);
  CHECK(pod->spec->containers[0].command == std::vector<std::string>{"sleep", "10"});
  CHECK(pod->spec->node_name == "n1");
  CHECK(*decodePod(encodePod(*pod))->raw == *pod->raw);
  CHECK(testing::podFromJson(pod->raw->str())->content_hash == pod->content_hash);
  CHECK(testing::podFromJson("metadata: {name: web2}")->metadata.name == "web2");
}

}  // namespace
}  // namespace nodeagent::api

namespace nodeagent::api {
namespace {

std::string yamlDecodeError(std::string_view yaml) {
  auto j = yamlToJson(yaml);
  if (!j.ok()) return j.status().message();
  auto pod = decodePod(*j);
  REQUIRE_FALSE(pod.ok());
  return pod.status().message();
}

TEST_CASE("decodePod: huge numbers from YAML are field errors", "[unit][api]") {
  CHECK_THAT(
      yamlDecodeError("spec:\n  terminationGracePeriodSeconds: 1e999\n"),
      Catch::Contains("spec.terminationGracePeriodSeconds: expected an integer, got string"));
  CHECK_THAT(yamlDecodeError("spec:\n  terminationGracePeriodSeconds: 99999999999999999999999\n"),
             Catch::Contains("is out of range"));
  CHECK_THAT(yamlDecodeError("spec:\n  priority: 4294967296\n"),
             Catch::Contains("spec.priority: integer 4294967296 is out of the 32-bit range"));
  CHECK_THAT(
      yamlDecodeError("spec:\n  containers:\n  - name: c\n    ports:\n    - containerPort: .inf\n"),
      Catch::Contains("cannot be represented in JSON"));
}

TEST_CASE("decodePod: a YAML scalar or list is not a pod", "[unit][api]") {
  CHECK_THAT(yamlDecodeError("hello\n"), Catch::Contains("<root>: expected an object, got string"));
  CHECK_THAT(yamlDecodeError("- a\n- b\n"),
             Catch::Contains("<root>: expected an object, got array"));
}

}  // namespace
TEST_CASE("Boxed: an optional on the heap with value semantics", "[unit][api]") {
  Boxed<Probe> a;
  CHECK_FALSE(a);
  CHECK(a == Boxed<Probe>{});
  Probe p;
  p.period_seconds = 7;
  a = p;
  REQUIRE(a);
  Boxed<Probe> b = a;  // a deep copy
  b->period_seconds = 8;
  CHECK(a->period_seconds == 7);
  CHECK_FALSE(a == b);
  b->period_seconds = 7;
  CHECK(a == b);  // compared by value, not by address
  b = std::nullopt;
  CHECK_FALSE(b);
  CHECK_FALSE(a == b);
  CHECK(sizeof(Container) < 1024);

  // optional's other ways in and out.
  CHECK_THROWS_AS(b.value(), std::bad_optional_access);
  b.emplace().period_seconds = 9;
  CHECK(b.value().period_seconds == 9);
  b = std::optional<Probe>{};
  CHECK_FALSE(b);
  b = std::optional<Probe>{p};
  CHECK(b == a);
}

TEST_CASE("the parts most pods and statuses lack are boxed, not inline", "[unit][api]") {
  // What a status of one container and an env var cost in every cached status and every pod:
  // boxed, a waiting or terminated state or a fieldRef is a pointer until set.
  CHECK(sizeof(ContainerState) <= 48);
  CHECK(sizeof(EnvVar) <= 128);
  // Set and read back through the box.
  Pod pod = mustDecode(R"(
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, uid: u}
spec:
  securityContext: {runAsUser: 1000}
  containers:
  - name: c
    image: i
    securityContext: {runAsNonRoot: true}
    env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
status:
  containerStatuses:
  - name: c
    state: {terminated: {exitCode: 3, reason: Error}}
    lastState: {waiting: {reason: CrashLoopBackOff}}
)");
  REQUIRE(pod.spec->security_context);
  CHECK(pod.spec->security_context->run_as_user == 1000);
  REQUIRE(pod.spec->containers[0].security_context);
  CHECK(pod.spec->containers[0].security_context->run_as_non_root == true);
  REQUIRE(pod.spec->containers[0].env[0].field_ref);
  CHECK(pod.spec->containers[0].env[0].field_ref->field_path == "metadata.name");
  CHECK_FALSE(pod.spec->containers[0].env[0].resource_field_ref);
  const auto& cs = pod.status->container_statuses.at(0);
  REQUIRE(cs.state.terminated);
  CHECK(cs.state.terminated->exit_code == 3);
  CHECK_FALSE(cs.state.waiting);
  REQUIRE(cs.last_state.waiting);
  CHECK(cs.last_state.waiting->reason == "CrashLoopBackOff");
  CHECK_FALSE(cs.last_state.terminated);
}

}  // namespace nodeagent::api

namespace nodeagent::api {
namespace {

Pod replica(const std::string& name, const std::string& image) {
  return mustDecode("apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
                    "\n  labels: {app: web}\nspec:\n  containers:\n  - name: c\n    image: " +
                    image + "\n    command: [sleep, '3600']\n    env: [{name: A, value: b}]\n");
}

}  // namespace

TEST_CASE("decoded pods with the same containers share one copy of them", "[unit][api]") {
  Pod a = replica("a", "debian:12");
  Pod b = replica("b", "debian:12");
  Pod c = replica("c", "debian:13");
  CHECK(a.spec->containers.sharesWith(b.spec->containers));
  CHECK_FALSE(a.spec->containers.sharesWith(c.spec->containers));
  CHECK(a.spec->containers == b.spec->containers);
  CHECK_FALSE(a.spec->containers == c.spec->containers);
  CHECK(a.spec->init_containers.empty());
  // Each pod keeps its own metadata and raw JSON.
  CHECK(a.metadata.name == "a");
  CHECK(b.metadata.name == "b");
  CHECK(*a.raw != *b.raw);

  SECTION("a write through one pod's copy never reaches another pod") {
    Pod edited = a;
    edited.spec->containers[0].image = "busybox";
    edited.spec->containers.push_back(Container{});
    CHECK(a.spec->containers.size() == 1);
    CHECK(a.spec->containers[0].image == "debian:12");
    CHECK(b.spec->containers[0].image == "debian:12");
    CHECK(edited.spec->containers.size() == 2);
    CHECK(edited.spec->containers[0].image == "busybox");
    // Even the last holder of a shared list copies before writing: the codec may hand its
    // items to the next pod decoded.
    Pod last = replica("d", "debian:14");
    last.spec->containers[0].image = "changed";
    CHECK(replica("e", "debian:14").spec->containers[0].image == "debian:14");
  }
  SECTION("lists outlive the pods that made them only while some pod holds them") {
    std::weak_ptr<std::vector<Container>> held = c.spec->containers.sharedItems();
    c = Pod{};
    CHECK(held.expired());
    Pod again = replica("f", "debian:13");
    CHECK(again.spec->containers[0].image == "debian:13");
    // Thousands of distinct lists come and go without the table keeping any of them alive.
    for (int i = 0; i < 3000; ++i) {
      Pod p = replica("g", "img-" + std::to_string(i));
      REQUIRE(p.spec->containers[0].image == "img-" + std::to_string(i));
    }
  }
}

TEST_CASE("decoded pods with the same spec share one copy of it", "[unit][api]") {
  // Reads go through const pods, as PodPtr gives them: any access through a non-const pod makes
  // its spec its own.
  const Pod a = replica("a", "debian:12");
  const Pod b = replica("b", "debian:12");
  const Pod c = replica("c", "debian:13");
  CHECK(a.spec.sharesWith(b.spec));
  CHECK_FALSE(a.spec.sharesWith(c.spec));
  CHECK(a.spec_hash == b.spec_hash);
  CHECK(a.spec->containers[0].image == "debian:12");
  CHECK(c.spec->containers[0].image == "debian:13");
  // The spec is a pointer in the pod, which keeps its own metadata, status and raw JSON.
  CHECK(sizeof(Pod) <= 512);
  const Pod bare = mustDecode("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bare\n");
  CHECK_FALSE(bare.spec.has_value());
  CHECK(bare.spec->containers.empty());
  // The spec's text too: each pod's own text is its head and tail, the spec piece is shared.
  CHECK(a.raw->sharesSpecWith(*b.raw));
  CHECK_FALSE(a.raw->sharesSpecWith(*c.raw));
  CHECK(a.raw->spec() == canonicalJson(encodePod(a)["spec"]));
  CHECK(*a.raw == canonicalJson(encodePod(a)));
  CHECK(a.raw->head().find("\"name\":\"a\"") != std::string_view::npos);
  CHECK(a.raw->tail().find("\"status\"") == std::string_view::npos);
  CHECK(bare.raw->spec().empty());
  CHECK(bare.raw->head().empty());
  CHECK(*bare.raw == canonicalJson(encodePod(bare)));

  SECTION("a write through one pod's copy never reaches another pod") {
    Pod edited = a;
    edited.spec->node_name = "n2";
    edited.spec->containers[0].image = "busybox";
    CHECK_FALSE(edited.spec.sharesWith(a.spec));
    CHECK(a.spec->node_name.empty());
    CHECK(a.spec->containers[0].image == "debian:12");
    CHECK(a.spec.sharesWith(b.spec));
    CHECK(replica("d", "debian:12").spec.sharesWith(b.spec));
  }
  SECTION("even through the last pod that holds it") {
    Pod last = replica("e", "debian:14");
    std::weak_ptr<PodSpec> interned = std::as_const(last).spec.sharedValue();
    last.spec->node_name = "changed";
    CHECK(interned.expired());  // not written in place
    const Pod again = replica("f", "debian:14");
    CHECK(again.spec->node_name.empty());
  }
}

TEST_CASE("SharedList reads like a vector and is empty without allocating", "[unit][api]") {
  SharedList<int> list;
  CHECK(list.empty());
  CHECK(list.begin() == list.end());
  const std::vector<int>& view = list;
  CHECK(view.empty());
  int n = 0;
  for (int& x : list) n += x;  // a non-const walk of an empty list
  CHECK(n == 0);
  CHECK(list.sharedItems() == nullptr);
  list.push_back(1);
  list.emplace_back(2);
  SharedList<int> copy = list;
  CHECK(copy.sharesWith(list));
  copy[0] = 5;
  CHECK_FALSE(copy.sharesWith(list));
  CHECK(list == SharedList<int>{1, 2});
  CHECK(copy == SharedList<int>{5, 2});
  list.clear();
  CHECK(list.empty());
}

TEST_CASE("decoded pods with the status static pods start with share one copy of it",
          "[unit][api]") {
  auto withStatus = [](const std::string& name, const std::string& status) {
    return mustDecode("apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
                      "\nspec:\n  containers:\n  - name: c\n    image: i\nstatus: " + status +
                      "\n");
  };
  Pod a = withStatus("a", "{phase: Pending}");
  Pod b = withStatus("b", "{phase: Pending}");
  Pod running = withStatus("r", "{phase: Running}");
  Pod reported = withStatus("p", "{phase: Pending, hostIP: 10.0.0.1}");
  Pod none = mustDecode("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bare\n");
  // Reads go through const pods, as PodPtr gives them: any access through a non-const pod makes
  // its status its own.
  const Pod& ca = a;
  const Pod& cb = b;
  CHECK(ca.status.sharesWith(cb.status));
  CHECK(ca.status->phase == "Pending");
  CHECK_FALSE(running.status.sharesWith(ca.status));
  CHECK(std::as_const(running).status->phase == "Running");
  CHECK_FALSE(reported.status.sharesWith(ca.status));
  CHECK(std::as_const(reported).status->host_ip == "10.0.0.1");
  CHECK_FALSE(none.status.has_value());
  CHECK(std::as_const(none).status->phase.empty());

  SECTION("a write through one pod's copy never reaches another pod") {
    Pod edited = a;
    edited.status->phase = "Running";
    CHECK_FALSE(edited.status.sharesWith(ca.status));
    CHECK(ca.status->phase == "Pending");
    CHECK(cb.status->phase == "Pending");
    CHECK(ca.status.sharesWith(cb.status));
    CHECK(withStatus("c", "{phase: Pending}").status.sharesWith(cb.status));
  }
  SECTION("even through the last pod that holds it") {
    Pod last = withStatus("c", "{phase: Pending}");
    a = Pod{};
    b = Pod{};
    last.status->phase = "Failed";
    const Pod again = withStatus("d", "{phase: Pending}");
    CHECK(again.status->phase == "Pending");
  }
  SECTION("a copy of a pod with its own status is written apart from it") {
    Pod copy = running;
    copy.status->phase = "Failed";
    CHECK(std::as_const(running).status->phase == "Running");
    CHECK(std::as_const(copy).status->phase == "Failed");
  }
  SECTION("a pod's own status is written in place") {
    const PodStatus* before = &*std::as_const(running).status;
    running.status->phase = "Succeeded";
    CHECK(&*std::as_const(running).status == before);
  }
}

}  // namespace nodeagent::api
