// kube-apiserver's Node authorizer as the test apiserver decides it (node_authorizer.h): the
// decision and reason for each kind of request a kubelet sends, from the HTTP request as the
// server derives its attributes (request_info.h), against a graph of two pods.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/authz.h"
#include "cmd/test-apiserver/node_authorizer.h"
#include "cmd/test-apiserver/request_info.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;

namespace {

// default/web on n1 refers to secrets, config maps, a claim and a service account in every way a
// pod can; default/db on n2 to the secret db-pass.
std::vector<std::shared_ptr<const json>> podsOn(const std::string& node, const std::string& ns) {
  static const json web = json::parse(R"({
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {"nodeName": "n1", "serviceAccountName": "web-sa",
      "imagePullSecrets": [{"name": "regcred"}],
      "initContainers": [{"name": "init", "image": "i",
        "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "init-secret", "key": "k"}}}]}],
      "containers": [{"name": "c", "image": "i",
        "envFrom": [{"configMapRef": {"name": "env-cm"}}, {"secretRef": {"name": "env-secret"}}],
        "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "key-cm", "key": "k"}}}]}],
      "volumes": [{"name": "tls", "secret": {"secretName": "web-tls"}},
        {"name": "conf", "configMap": {"name": "web-config"}},
        {"name": "proj", "projected": {"sources": [{"secret": {"name": "proj-secret"}},
          {"configMap": {"name": "proj-cm"}}]}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}}]}})");
  static const json db = json::parse(R"({
    "metadata": {"name": "db", "namespace": "default"},
    "spec": {"nodeName": "n2", "containers": [{"name": "c", "image": "i",
      "env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "db-pass", "key": "k"}}}]}]}})");
  std::vector<std::shared_ptr<const json>> pods;
  for (const json* pod : {&web, &db}) {
    if ((*pod)["spec"]["nodeName"] == node &&
        (ns.empty() || (*pod)["metadata"]["namespace"] == ns)) {
      pods.push_back(std::make_shared<const json>(*pod));
    }
  }
  return pods;
}

struct Case {
  const char* method;
  const char* path;
  const char* field_selector;
  bool allowed;
  const char* reason;
};

AccessRequest asUser(AccessRequest r, const std::string& user, std::vector<std::string> groups) {
  r.user = user;
  r.groups = std::move(groups);
  return r;
}

AccessRequest asNode(const Case& c, const std::string& node = "n1") {
  return asUser(requestAttributes(c.method, c.path, false, c.field_selector), "system:node:" + node,
                {"system:nodes", "system:authenticated"});
}

// Each case as n1 asks it: the decision and the reason.
void checkDecisions(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    INFO(c.method << " " << c.path << " ?" << c.field_selector);
    const AccessDecision d = authorizeNode(asNode(c), podsOn);
    CHECK(d.allowed == c.allowed);
    CHECK(d.reason == c.reason);
  }
}

}  // namespace

TEST_CASE("node authorizer: a node reads and writes its own Node and lease only",
          "[unit][apiserver]") {
  const std::string other_read = "node 'n1' cannot read 'n2', only its own Node object";
  const std::string lease_name =
      "can only access node lease with the same name as the requesting node";
  const std::vector<Case> cases = {
      {"GET", "/api/v1/nodes/n1", "", true, ""},
      {"GET", "/api/v1/nodes", "metadata.name=n1", true, ""},
      {"GET", "/api/v1/watch/nodes", "metadata.name=n1", true, ""},
      {"GET", "/api/v1/nodes/n2", "", false, other_read.c_str()},
      {"GET", "/api/v1/nodes", "", false,
       "node 'n1' cannot read all nodes, only its own Node object"},
      {"GET", "/api/v1/nodes", "metadata.name=n2", false, other_read.c_str()},
      {"POST", "/api/v1/nodes", "", true, ""},
      // Another node's update is the authorizer's to allow: NodeRestriction refuses it.
      {"PATCH", "/api/v1/nodes/n2/status", "", true, ""},
      {"PUT", "/api/v1/nodes/n1", "", true, ""},
      {"DELETE", "/api/v1/nodes/n1", "", false, ""},
      {"GET", "/api/v1/nodes/n1/status", "", false, ""},
      {"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", "", true, ""},
      {"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", "", true, ""},
      {"POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", "", true, ""},
      {"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2", "", false,
       lease_name.c_str()},
      {"GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/n1", "", false,
       "can only access leases in the \"kube-node-lease\" system namespace"},
      {"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", "", false,
       "can only get, create, update, patch, or delete a node lease"},
  };
  checkDecisions(cases);
}

TEST_CASE("node authorizer: pods bound to the node and what they refer to", "[unit][apiserver]") {
  const char* none = "no relationship found between node 'n1' and this object";
  const std::vector<Case> cases = {
      {"GET", "/api/v1/pods", "spec.nodeName=n1", true, ""},
      {"GET", "/api/v1/watch/pods", "spec.nodeName=n1", true, ""},
      {"GET", "/api/v1/pods", "spec.nodeName=n2", false,
       "can only list/watch pods with spec.nodeName field selector"},
      {"GET", "/api/v1/pods", "", false,
       "can only list/watch pods with spec.nodeName field selector"},
      {"GET", "/api/v1/namespaces/default/pods", "metadata.name=web", true, ""},
      {"GET", "/api/v1/namespaces/default/pods/web", "", true, ""},
      {"GET", "/api/v1/namespaces/default/pods/db", "", false, none},
      {"POST", "/api/v1/namespaces/default/pods", "", true, ""},
      {"DELETE", "/api/v1/namespaces/default/pods/db", "", true, ""},
      {"PATCH", "/api/v1/namespaces/default/pods/web/status", "", true, ""},
      {"PATCH", "/api/v1/namespaces/default/pods/web", "", false, ""},
      {"POST", "/api/v1/namespaces/default/pods/web/eviction", "", true, ""},
      {"GET", "/api/v1/namespaces/default/secrets/web-tls", "", true, ""},
      {"GET", "/api/v1/namespaces/default/secrets/regcred", "", true, ""},
      {"GET", "/api/v1/namespaces/default/secrets/init-secret", "", true, ""},
      {"GET", "/api/v1/namespaces/default/secrets/env-secret", "", true, ""},
      {"GET", "/api/v1/namespaces/default/secrets/proj-secret", "", true, ""},
      {"GET", "/api/v1/namespaces/default/secrets/csi-secret", "", true, ""},
      {"GET", "/api/v1/watch/namespaces/default/secrets", "metadata.name=web-tls", true, ""},
      {"GET", "/api/v1/namespaces/default/secrets/db-pass", "", false, none},
      {"GET", "/api/v1/namespaces/kube-system/secrets/web-tls", "", false, none},
      {"GET", "/api/v1/namespaces/default/secrets", "", false, "No Object name found"},
      {"PUT", "/api/v1/namespaces/default/secrets/web-tls", "", false,
       "can only read resources of this type"},
      {"GET", "/api/v1/namespaces/default/configmaps/web-config", "", true, ""},
      {"GET", "/api/v1/namespaces/default/configmaps/env-cm", "", true, ""},
      {"GET", "/api/v1/namespaces/default/configmaps/key-cm", "", true, ""},
      {"GET", "/api/v1/namespaces/default/configmaps/proj-cm", "", true, ""},
      {"GET", "/api/v1/namespaces/default/configmaps/kube-root-ca.crt", "", false, none},
      {"GET", "/api/v1/secrets", "metadata.name=web-tls", false,
       "can only read namespaced object of this type"},
      {"GET", "/api/v1/namespaces/default/persistentvolumeclaims/data", "", true, ""},
      {"GET", "/api/v1/namespaces/default/persistentvolumeclaims/web-scratch", "", true, ""},
      {"GET", "/api/v1/namespaces/default/persistentvolumeclaims/other", "", false, none},
      {"GET", "/api/v1/namespaces/default/persistentvolumeclaims", "", false,
       "can only get individual resources of this type"},
      {"POST", "/api/v1/namespaces/default/serviceaccounts/web-sa/token", "", true, ""},
      {"GET", "/api/v1/namespaces/default/serviceaccounts/web-sa", "", true, ""},
      {"POST", "/api/v1/namespaces/default/serviceaccounts/default/token", "", false, none},
      {"DELETE", "/api/v1/namespaces/default/serviceaccounts/web-sa", "", false,
       "can only create tokens for individual service accounts"},
  };
  checkDecisions(cases);
}

TEST_CASE("node authorizer: events reviews and certificate requests by its static rules",
          "[unit][apiserver]") {
  const std::vector<Case> cases = {
      {"POST", "/api/v1/namespaces/kube-system/events", "", true, ""},
      {"PATCH", "/api/v1/namespaces/default/events/e1", "", true, ""},
      {"GET", "/api/v1/namespaces/default/events", "", false, ""},
      {"POST", "/apis/authentication.k8s.io/v1/tokenreviews", "", true, ""},
      {"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "", true, ""},
      {"POST", "/apis/certificates.k8s.io/v1/certificatesigningrequests", "", true, ""},
      {"GET", "/apis/certificates.k8s.io/v1/certificatesigningrequests", "", true, ""},
      {"DELETE", "/apis/certificates.k8s.io/v1/certificatesigningrequests/c1", "", false, ""},
      {"GET", "/api/v1/namespaces/default/services", "", true, ""},
      {"GET", "/api/v1/namespaces", "", false, ""},
      {"GET", "/metrics", "", false, ""},
  };
  checkDecisions(cases);
  AccessRequest renew;
  renew.resource_request = true;
  renew.verb = "create";
  renew.api_group = "certificates.k8s.io";
  renew.resource = "certificatesigningrequests";
  renew.subresource = "selfnodeclient";
  CHECK(authorizeNode(asUser(renew, "system:node:n1", {"system:nodes"}), podsOn).allowed);
  renew.subresource = "nodeclient";
  CHECK_FALSE(authorizeNode(asUser(renew, "system:node:n1", {"system:nodes"}), podsOn).allowed);
}

TEST_CASE("node authorizer: only system:node users in system:nodes are nodes",
          "[unit][apiserver]") {
  CHECK(nodeIdentity("system:node:n1", {"system:nodes"}) == "n1");
  CHECK(nodeIdentity("system:node:", {"system:nodes"}) == "");
  CHECK_FALSE(nodeIdentity("system:node:n1", {"system:authenticated"}));
  CHECK_FALSE(nodeIdentity("n1", {"system:nodes"}));
  const Case own{"GET", "/api/v1/nodes/n1", "", true, ""};
  AccessRequest no_group = asUser(asNode(own), "system:node:n1", {"system:authenticated"});
  CHECK(authorizeNode(no_group, podsOn).allowed == false);
  CHECK(authorizeNode(no_group, podsOn).reason.empty());
  AccessRequest nameless = asUser(asNode(own), "system:node:", {"system:nodes"});
  CHECK(authorizeNode(nameless, podsOn).reason == "unknown node for user \"system:node:\"");
}

TEST_CASE("authorization modes in order: the first that allows wins and refusals carry the reasons",
          "[unit][apiserver]") {
  auto abac = parseAbacPolicy(
      R"({"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy",)"
      R"("spec":{"group":"system:nodes","namespace":"*","resource":"secrets","apiGroup":"*"}})");
  REQUIRE(abac.ok());
  const Authorizer node_abac({AuthorizationMode::kNode, AuthorizationMode::kAbac}, {*abac}, podsOn);
  const Authorizer node_only({AuthorizationMode::kNode}, {}, podsOn);
  const Case unrelated{"GET", "/api/v1/namespaces/default/secrets/db-pass", "", false, ""};
  CHECK(node_abac.authorize(asNode(unrelated)).allowed);  // ABAC allows what Node does not
  const AccessDecision refused = node_only.authorize(asNode(unrelated));
  CHECK_FALSE(refused.allowed);
  CHECK(refused.reason == "no relationship found between node 'n1' and this object");
  CHECK(forbiddenStatus(asNode(unrelated), refused.reason)["message"] ==
        "secrets \"db-pass\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" "
        "in API group \"\" in the namespace \"default\": no relationship found between node 'n1' "
        "and this object");
  const Case namespaces{"GET", "/api/v1/namespaces", "", false, ""};
  const Authorizer node_abac_none({AuthorizationMode::kNode, AuthorizationMode::kAbac}, {}, podsOn);
  CHECK(node_abac_none.authorize(asNode(unrelated)).reason ==
        "no relationship found between node 'n1' and this object\nNo policy matched.");
  CHECK(node_abac_none.authorize(asNode(namespaces)).reason == "No policy matched.");
  AccessRequest admin = asUser(asNode(unrelated), "admin", {"system:masters"});
  CHECK(node_only.authorize(admin).allowed);
  CHECK(Authorizer({AuthorizationMode::kNode, AuthorizationMode::kAlwaysAllow}, {}, podsOn)
            .authorize(asNode(namespaces))
            .allowed);
  const ReviewUser n1{"system:node:n1", "", {"system:nodes"}, {}};
  CHECK(node_only.rulesFor(n1, "default")["incomplete"] == true);
}
