// kube-apiserver's NodeRestriction admission as the test apiserver applies it (node_restriction.h):
// each write a node may make and each refusal with kube-apiserver's message, and the store
// running the check on its writes (admission.h).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/node_restriction.h"
#include "cmd/test-apiserver/store.h"
#include "test/support/fake_clock.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using nodeagent::base::StatusCode;

namespace {

const json kNode = {{"metadata", {{"name", "n1"}, {"uid", "uid-n1"}}}};

json mirrorPod() {
  return json::parse(R"({
    "metadata": {"name": "static-n1", "namespace": "kube-system",
      "annotations": {"kubernetes.io/config.mirror": "abc"},
      "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1",
                           "controller": true}]},
    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}})");
}

json nodeObject(const std::string& name, json labels = json::object(), json taints = nullptr) {
  json node = {{"metadata", {{"name", name}, {"labels", std::move(labels)}}},
               {"spec", json::object()}};
  if (!taints.is_null()) node["spec"]["taints"] = std::move(taints);
  return node;
}

AdmissionAttributes write(AdmissionOperation op, const char* resource, const char* sub,
                          const char* ns, const char* name, const json* object,
                          const json* old = nullptr) {
  AdmissionAttributes a;
  a.operation = op;
  a.resource = resource;
  a.subresource = sub;
  a.ns = ns;
  a.name = name;
  a.object = object;
  a.old_object = old;
  if (a.resource == "leases") a.group = "coordination.k8s.io";
  return a;
}

// "" when admitted, else the refusal's message.
std::string verdict(const AdmissionAttributes& a, const std::string& node = "n1") {
  auto status = admitNodeRestriction("system:node:" + node, node, a, &kNode);
  return status.ok() ? "" : std::string(status.message());
}

}  // namespace

TEST_CASE("node restriction: a node creates only its own mirror pods referring to nothing",
          "[unit][apiserver]") {
  using Op = AdmissionOperation;
  const std::string pods = "pods \"static-n1\" is forbidden: ";
  struct Case {
    const char* what;
    std::function<void(json&)> change;
    std::string refusal;
  };
  const Case cases[] = {
      {"a mirror pod of its own", [](json&) {}, ""},
      {"no mirror annotation", [](json& p) { p["metadata"].erase("annotations"); },
       pods + "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only "
              "create mirror pods"},
      {"bound to another node", [](json& p) { p["spec"]["nodeName"] = "n2"; },
       pods + "node \"n1\" can only create pods with spec.nodeName set to itself"},
      {"no owner", [](json& p) { p["metadata"].erase("ownerReferences"); },
       pods + "node \"n1\" can only create pods with an owner reference set to itself"},
      {"two owners",
       [](json& p) {
         p["metadata"]["ownerReferences"].push_back(p["metadata"]["ownerReferences"][0]);
       },
       pods + "node \"n1\" can only create pods with a single owner reference set to itself"},
      {"owned by another node", [](json& p) { p["metadata"]["ownerReferences"][0]["name"] = "n2"; },
       pods + "node \"n1\" can only create pods with an owner reference set to itself"},
      {"not the controller",
       [](json& p) { p["metadata"]["ownerReferences"][0].erase("controller"); },
       pods + "node \"n1\" can only create pods with a controller owner reference set to itself"},
      {"blockOwnerDeletion",
       [](json& p) { p["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = true; },
       pods + "node \"n1\" must not set blockOwnerDeletion on an owner reference"},
      {"another node uid", [](json& p) { p["metadata"]["ownerReferences"][0]["uid"] = "old"; },
       pods + "node n1 UID mismatch: expected old got uid-n1"},
      {"a service account", [](json& p) { p["spec"]["serviceAccountName"] = "default"; },
       pods + "node \"n1\" can not create pods that reference a service account"},
      {"a secret volume",
       [](json& p) {
         p["spec"]["volumes"] = {{{"name", "s"}, {"secret", {{"secretName", "x"}}}}};
       },
       pods + "node \"n1\" can not create pods that reference secrets"},
      {"an env config map",
       [](json& p) {
         p["spec"]["containers"][0]["envFrom"] = {{{"configMapRef", {{"name", "cm"}}}}};
       },
       pods + "node \"n1\" can not create pods that reference configmaps"},
      {"a claim",
       [](json& p) {
         p["spec"]["volumes"] = {
             {{"name", "d"}, {"persistentVolumeClaim", {{"claimName", "data"}}}}};
       },
       pods + "node \"n1\" can not create pods that reference persistentvolumeclaims"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    json pod = mirrorPod();
    c.change(pod);
    CHECK(verdict(write(Op::kCreate, "pods", "", "kube-system", "static-n1", &pod)) == c.refusal);
  }
  json pod = mirrorPod();
  auto no_node = admitNodeRestriction(
      "system:node:n1", "n1", write(Op::kCreate, "pods", "", "kube-system", "static-n1", &pod),
      nullptr);
  CHECK(no_node.code() == StatusCode::kNotFound);
  CHECK(no_node.message() == "node \"n1\" not found");
}

TEST_CASE("node restriction: pods bound to the node are deleted and their status written",
          "[unit][apiserver]") {
  using Op = AdmissionOperation;
  json own = mirrorPod();
  json other = mirrorPod();
  other["spec"]["nodeName"] = "n2";
  json relabeled = own;
  relabeled["metadata"]["labels"] = {{"app", "x"}};
  CHECK(verdict(write(Op::kDelete, "pods", "", "kube-system", "static-n1", nullptr, &own)) == "");
  CHECK(verdict(write(Op::kDelete, "pods", "", "kube-system", "static-n1", nullptr, &other)) ==
        "pods \"static-n1\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set "
        "to itself");
  CHECK(verdict(write(Op::kUpdate, "pods", "status", "kube-system", "static-n1", &own, &own)) ==
        "");
  CHECK(verdict(write(Op::kUpdate, "pods", "status", "kube-system", "static-n1", &other, &other)) ==
        "pods \"static-n1\" is forbidden: node \"n1\" can only update pod status for pods with "
        "spec.nodeName set to itself");
  CHECK(
      verdict(write(Op::kUpdate, "pods", "status", "kube-system", "static-n1", &relabeled, &own)) ==
      "pods \"static-n1\" is forbidden: node \"n1\" cannot update labels through pod status");
  CHECK(verdict(write(Op::kUpdate, "pods", "", "kube-system", "static-n1", &own, &own)) ==
        "pods \"static-n1\" is forbidden: unexpected operation \"UPDATE\", node \"n1\" can only "
        "create and delete mirror pods");
  CHECK(verdict(write(Op::kCreate, "pods", "eviction", "kube-system", "static-n1", &own, &other)) ==
        "pods \"static-n1\" is forbidden: node n1 can only evict pods with spec.nodeName set to "
        "itself");
  CHECK(verdict(write(Op::kCreate, "pods", "eviction", "kube-system", "static-n1", &own, &own)) ==
        "");
  CHECK(
      verdict(write(Op::kCreate, "pods", "binding", "kube-system", "static-n1", &own)) ==
      "pods \"static-n1\" is forbidden: unexpected pod subresource \"binding\", only 'status' and "
      "'eviction' are allowed");
}

TEST_CASE("node restriction: a node writes only its own Node without forbidden labels or taints",
          "[unit][apiserver]") {
  using Op = AdmissionOperation;
  const json own = nodeObject("n1", {{"kubernetes.io/hostname", "n1"}});
  const json other = nodeObject("n2");
  CHECK(verdict(write(Op::kCreate, "nodes", "", "", "n1", &own)) == "");
  CHECK(verdict(write(Op::kCreate, "nodes", "", "", "n2", &other)) ==
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"");
  CHECK(verdict(write(Op::kUpdate, "nodes", "status", "", "n2", &other, &other)) ==
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"");
  CHECK(verdict(write(Op::kDelete, "nodes", "", "", "n2", nullptr, &other)) ==
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"");
  const json role = nodeObject("n1", {{"node-role.kubernetes.io/master", ""},
                                      {"node-restriction.kubernetes.io/pool", "a"},
                                      {"example.com/free", "yes"}});
  CHECK(verdict(write(Op::kCreate, "nodes", "", "", "n1", &role)) ==
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to set the following labels: "
        "node-restriction.kubernetes.io/pool, node-role.kubernetes.io/master");
  CHECK(verdict(write(Op::kUpdate, "nodes", "", "", "n1", &role, &own)) ==
        "nodes \"n1\" is forbidden: is not allowed to modify labels: "
        "node-restriction.kubernetes.io/pool, node-role.kubernetes.io/master");
  const json tainted = nodeObject("n1", {{"kubernetes.io/hostname", "n1"}},
                                  {{{"key", "k"}, {"effect", "NoSchedule"}}});
  CHECK(verdict(write(Op::kUpdate, "nodes", "", "", "n1", &own, &tainted)) ==
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints");
  const json no_taints = nodeObject("n1", {{"kubernetes.io/hostname", "n1"}}, json::array());
  CHECK(verdict(write(Op::kUpdate, "nodes", "status", "", "n1", &no_taints, &own)) == "");
  json configured = own;
  configured["spec"]["configSource"] = {{"configMap", {{"name", "c"}}}};
  CHECK(verdict(write(Op::kCreate, "nodes", "", "", "n1", &configured)) ==
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to create pods with a non-nil "
        "configSource");
  CHECK(verdict(write(Op::kUpdate, "nodes", "", "", "n1", &configured, &own)) ==
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to update configSource to a new "
        "non-nil configSource");
}

TEST_CASE("node restriction: kubelet's own label keys are free and kubernetes.io ones are not",
          "[unit][apiserver]") {
  const json none = json::object();
  for (const char* key :
       {"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
        "kubelet.kubernetes.io/anything", "x.kubelet.kubernetes.io/a", "node.kubernetes.io/pool",
        "a.node.kubernetes.io/b", "example.com/team", "plain"}) {
    INFO(key);
    CHECK(forbiddenNodeLabels({{key, "v"}}, none).empty());
  }
  for (const char* key :
       {"node-role.kubernetes.io/worker", "kubernetes.io/role", "topology.kubernetes.io/rack",
        "k8s.io/x", "x.k8s.io/y", "node-restriction.kubernetes.io/a",
        "foo.node-restriction.kubernetes.io/b", "beta.kubernetes.io/fluentd"}) {
    INFO(key);
    CHECK(forbiddenNodeLabels({{key, "v"}}, none) == std::vector<std::string>{key});
  }
  // An unchanged forbidden label is no change.
  const json kept = {{"node-role.kubernetes.io/worker", ""}};
  CHECK(forbiddenNodeLabels(kept, kept).empty());
}

TEST_CASE("node restriction: its own lease in kube-node-lease and tokens bound to its pods",
          "[unit][apiserver]") {
  using Op = AdmissionOperation;
  const json lease = {{"metadata", {{"name", "n1"}}}};
  const json other_lease = {{"metadata", {{"name", "n2"}}}};
  CHECK(verdict(write(Op::kCreate, "leases", "", "kube-node-lease", "n1", &lease)) == "");
  CHECK(verdict(write(Op::kCreate, "leases", "", "kube-node-lease", "n2", &other_lease)) ==
        "leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same "
        "name as the requesting node");
  CHECK(verdict(write(Op::kUpdate, "leases", "", "default", "n1", &lease, &lease)) ==
        "leases.coordination.k8s.io \"n1\" is forbidden: can only access leases in the "
        "\"kube-node-lease\" system namespace");
  CHECK(verdict(write(Op::kCreate, "pods", "", "default", "", nullptr), "") ==
        "pods \"Unknown\" is forbidden: could not determine node from user \"system:node:\"");

  json pod = mirrorPod();
  pod["metadata"]["uid"] = "pod-uid";
  const json bound = {
      {"spec",
       {{"boundObjectRef",
         {{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", "static-n1"}, {"uid", "pod-uid"}}}}}};
  CHECK(admitNodeTokenRequest("n1", "kube-system", "sa", bound, &pod).ok());
  CHECK(admitNodeTokenRequest("n2", "kube-system", "sa", bound, &pod).message() ==
        "serviceaccounts \"sa\" is forbidden: node requested token bound to a pod scheduled on a "
        "different node");
  CHECK(admitNodeTokenRequest("n1", "kube-system", "sa", json::object(), &pod).message() ==
        "serviceaccounts \"sa\" is forbidden: node requested token not bound to a pod");
  json stale = bound;
  stale["spec"]["boundObjectRef"]["uid"] = "old";
  CHECK(admitNodeTokenRequest("n1", "kube-system", "sa", stale, &pod).message() ==
        "serviceaccounts \"sa\" is forbidden: the UID in the bound object reference (old) does not "
        "match the UID in record. The object might have been deleted and then recreated");
}

TEST_CASE("store: an admission check sees each write and its refusal stores nothing",
          "[unit][apiserver]") {
  nodeagent::testing::FakeClock clock;
  Store store(clock);
  std::vector<std::string> seen;
  const AdmissionCheck refuse_n2 = [&seen](const AdmissionAttributes& a) {
    seen.push_back(std::string(admissionOperationName(a.operation)) + " " + a.resource + "/" +
                   a.subresource + " " + a.name + (a.old_object ? " old" : "") +
                   (a.object ? " new" : ""));
    const json* obj = a.object ? a.object : a.old_object;
    if ((*obj)["metadata"].value("labels", json::object()).contains("deny")) {
      return nodeagent::base::permissionDeniedError("refused");
    }
    return nodeagent::base::okStatus();
  };
  REQUIRE(store.create("nodes", "", nodeObject("n1"), {}, refuse_n2).ok());
  auto denied = store.create("nodes", "", nodeObject("n2", {{"deny", "1"}}), {}, refuse_n2);
  CHECK(denied.status().code() == StatusCode::kPermissionDenied);
  CHECK(store.get("nodes", "", "n2").status().code() == StatusCode::kNotFound);
  auto patched = store.patch("nodes", "", "n1", PatchType::kMergePatch,
                             {{"metadata", {{"labels", {{"deny", "1"}}}}}}, "", {}, refuse_n2);
  CHECK(patched.status().code() == StatusCode::kPermissionDenied);
  CHECK_FALSE(store.get("nodes", "", "n1").value()["metadata"]["labels"].contains("deny"));
  REQUIRE(store
              .patch("nodes", "", "n1", PatchType::kMergePatch, {{"status", {{"phase", "x"}}}},
                     "status", {}, refuse_n2)
              .ok());
  REQUIRE(store.remove("nodes", "", "n1", {}, refuse_n2).ok());
  CHECK(seen == std::vector<std::string>{"CREATE nodes/ n1 new", "CREATE nodes/ n2 new",
                                         "UPDATE nodes/ n1 old new",
                                         "UPDATE nodes/status n1 old new", "DELETE nodes/ n1 old"});
}
