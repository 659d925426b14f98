// The test apiserver's authorization of its own requests: the attributes of a request
// (request_info.h), the authorization modes, kube-apiserver's Forbidden Status and the self
// reviews kubectl auth sends.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/authz.h"
#include "cmd/test-apiserver/request_info.h"
#include "cmd/test-apiserver/util.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;

namespace {

AbacPolicy policy(const std::string& spec) {
  auto p = parseAbacPolicy(
      R"({"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":)" + spec +
      "}");
  REQUIRE(p.ok());
  return *p;
}

// bob (group dev) may read pods in default and POST to /metrics paths.
Authorizer abac() {
  return Authorizer(AuthorizationMode::kAbac,
                    {policy(R"({"user":"bob","namespace":"default","resource":"pods",)"
                            R"("apiGroup":"*","readonly":true})"),
                     policy(R"({"group":"dev","nonResourcePath":"/metrics*"})")});
}

const ReviewUser kBob{"bob", "2", {"dev", "system:authenticated"}, {}};
const ReviewUser kAdmin{"admin", "1", {"system:masters", "system:authenticated"}, {}};

std::string describe(const AccessRequest& r) {
  return std::string(r.resource_request ? "resource " : "path ") + r.verb + " ns=" + r.ns +
         " group=" + r.api_group + " resource=" + r.resource + " name=" + r.name +
         " sub=" + r.subresource + " path=" + r.path;
}

}  // namespace

TEST_CASE("request attributes as kube-apiserver's RequestInfoFactory derives them",
          "[unit][apiserver]") {
  struct Case {
    const char* method;
    const char* path;
    bool watch_param;
    const char* want;
  };
  const Case cases[] = {
      {"GET", "/api/v1/namespaces/default/pods", false,
       "resource list ns=default group= resource=pods name= sub= "
       "path=/api/v1/namespaces/default/pods"},
      {"GET", "/api/v1/namespaces/default/pods", true,
       "resource watch ns=default group= resource=pods name= sub= "
       "path=/api/v1/namespaces/default/pods"},
      {"GET", "/api/v1/namespaces/default/pods/web", true,
       "resource get ns=default group= resource=pods name=web sub= "
       "path=/api/v1/namespaces/default/pods/web"},
      {"GET", "/api/v1/watch/namespaces/default/pods/web", false,
       "resource watch ns=default group= resource=pods name=web sub= "
       "path=/api/v1/watch/namespaces/default/pods/web"},
      {"POST", "/api/v1/namespaces/default/pods/web/exec", false,
       "resource create ns=default group= resource=pods name=web sub=exec "
       "path=/api/v1/namespaces/default/pods/web/exec"},
      {"PATCH", "/api/v1/namespaces/kube-system/pods/web/status", false,
       "resource patch ns=kube-system group= resource=pods name=web sub=status "
       "path=/api/v1/namespaces/kube-system/pods/web/status"},
      {"DELETE", "/api/v1/namespaces/default/configmaps", false,
       "resource deletecollection ns=default group= resource=configmaps name= sub= "
       "path=/api/v1/namespaces/default/configmaps"},
      {"GET", "/api/v1/namespaces/team-a", false,
       "resource get ns=team-a group= resource=namespaces name=team-a sub= "
       "path=/api/v1/namespaces/team-a"},
      {"PUT", "/api/v1/namespaces/team-a/status", false,
       "resource update ns=team-a group= resource=namespaces name=team-a sub=status "
       "path=/api/v1/namespaces/team-a/status"},
      {"GET", "/api/v1/nodes/n1/proxy/metrics", false,
       "resource get ns= group= resource=nodes name=n1 sub=proxy "
       "path=/api/v1/nodes/n1/proxy/metrics"},
      {"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", false,
       "resource update ns=kube-node-lease group=coordination.k8s.io resource=leases name=n1 "
       "sub= path=/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"},
      {"GET", "/apis/coordination.k8s.io/v1", false,
       "path get ns= group= resource= name= sub= path=/apis/coordination.k8s.io/v1"},
      {"GET", "/version", false, "path get ns= group= resource= name= sub= path=/version"},
      {"POST", "/metrics", false, "path post ns= group= resource= name= sub= path=/metrics"},
  };
  for (const Case& c : cases) {
    INFO(c.method << " " << c.path);
    CHECK(describe(requestAttributes(c.method, c.path, c.watch_param)) == c.want);
  }
}

TEST_CASE("what every user may do whatever the mode: discovery, health and the self reviews",
          "[unit][apiserver]") {
  CHECK(alwaysAllowed(requestAttributes("GET", "/api", false)));
  CHECK(alwaysAllowed(requestAttributes("GET", "/apis/authorization.k8s.io/v1", false)));
  CHECK(alwaysAllowed(requestAttributes("GET", "/openapi/v3/api/v1", false)));
  CHECK(alwaysAllowed(requestAttributes("GET", "/version", false)));
  CHECK(alwaysAllowed(
      requestAttributes("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", false)));
  CHECK(alwaysAllowed(
      requestAttributes("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", false)));
  CHECK_FALSE(alwaysAllowed(requestAttributes("GET", "/api/v1/pods", false)));
  CHECK_FALSE(alwaysAllowed(requestAttributes("POST", "/api", false)));
  CHECK_FALSE(alwaysAllowed(requestAttributes("GET", "/apiextra", false)));
  CHECK_FALSE(alwaysAllowed(
      requestAttributes("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", false)));
  CHECK_FALSE(alwaysAllowed(
      requestAttributes("POST", "/apis/authentication.k8s.io/v1/tokenreviews", false)));
}

TEST_CASE("authorization modes: AlwaysAllow allows all, ABAC masters and the policies",
          "[unit][apiserver]") {
  using Modes = std::vector<AuthorizationMode>;
  CHECK(parseAuthorizationModes("AlwaysAllow").value() == Modes{AuthorizationMode::kAlwaysAllow});
  CHECK(parseAuthorizationModes("ABAC").value() == Modes{AuthorizationMode::kAbac});
  CHECK(parseAuthorizationModes("Node,ABAC").value() ==
        Modes{AuthorizationMode::kNode, AuthorizationMode::kAbac});
  auto bad = parseAuthorizationModes("Node,RBAC");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() ==
        "--authorization-mode: unknown mode \"RBAC\" (supported: AlwaysAllow, ABAC, Node)");
  auto twice = parseAuthorizationModes("Node,ABAC,Node");
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().message() == "--authorization-mode: mode \"Node\" is given more than once");
  CHECK_FALSE(parseAuthorizationModes("").ok());

  AccessRequest list_nodes = requestAttributes("GET", "/api/v1/nodes", false);
  list_nodes.user = "bob";
  list_nodes.groups = kBob.groups;
  CHECK(Authorizer().authorize(list_nodes).allowed);
  const AccessDecision denied = abac().authorize(list_nodes);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.reason == "No policy matched.");
  AccessRequest get_pod = requestAttributes("GET", "/api/v1/namespaces/default/pods/web", false);
  get_pod.user = "bob";
  CHECK(abac().authorize(get_pod).allowed);
  AccessRequest as_admin = list_nodes;
  as_admin.user = "admin";
  as_admin.groups = kAdmin.groups;
  CHECK(Authorizer(AuthorizationMode::kAbac, {}).authorize(as_admin).allowed);
}

TEST_CASE("kube-apiserver's Forbidden Status names the user, verb, resource and scope",
          "[unit][apiserver]") {
  AccessRequest r = requestAttributes("GET", "/api/v1/namespaces/kube-system/pods/web", false);
  r.user = "bob";
  json status = forbiddenStatus(r, "No policy matched.");
  CHECK(status["code"] == 403);
  CHECK(status["reason"] == "Forbidden");
  CHECK(status["message"] ==
        "pods \"web\" is forbidden: User \"bob\" cannot get resource \"pods\" in API group \"\" "
        "in the namespace \"kube-system\": No policy matched.");
  CHECK(status["details"] == json{{"name", "web"}, {"kind", "pods"}});

  r = requestAttributes("POST", "/api/v1/namespaces/default/pods/web/exec", false);
  r.user = "bob";
  CHECK(forbiddenStatus(r, "")["message"] ==
        "pods \"web\" is forbidden: User \"bob\" cannot create resource \"pods/exec\" in API "
        "group \"\" in the namespace \"default\"");

  r = requestAttributes("GET", "/apis/coordination.k8s.io/v1/leases", false);
  r.user = "bob";
  status = forbiddenStatus(r, "");
  CHECK(status["message"] ==
        "leases.coordination.k8s.io is forbidden: User \"bob\" cannot list resource \"leases\" in "
        "API group \"coordination.k8s.io\" at the cluster scope");
  CHECK(status["details"] == json{{"group", "coordination.k8s.io"}, {"kind", "leases"}});

  r = requestAttributes("GET", "/logs", false);
  r.user = "bob";
  status = forbiddenStatus(r, "");
  CHECK(status["message"] == "forbidden: User \"bob\" cannot get path \"/logs\"");
  CHECK_FALSE(status.contains("details"));
}

TEST_CASE("self reviews answer for the requesting user from the server's authorizer",
          "[unit][apiserver]") {
  const json can_list = {{"apiVersion", "authorization.k8s.io/v1"},
                         {"kind", "SelfSubjectAccessReview"},
                         {"spec",
                          {{"resourceAttributes",
                            {{"namespace", "default"}, {"verb", "list"}, {"resource", "pods"}}}}}};
  auto [code, answer] = reviewSelfAccess(can_list, kBob, abac());
  CHECK(code == 201);
  CHECK(answer["status"] == json{{"allowed", true}});
  CHECK(answer["spec"] == can_list["spec"]);  // the user is not written into the answer
  json can_create = can_list;
  can_create["spec"]["resourceAttributes"]["verb"] = "create";
  CHECK(reviewSelfAccess(can_create, kBob, abac()).second["status"] ==
        json{{"allowed", false}, {"reason", "No policy matched."}});
  CHECK(reviewSelfAccess(can_create, kBob, Authorizer()).second["status"]["allowed"] == true);
  const json both = {{"spec",
                      {{"resourceAttributes", {{"verb", "get"}}},
                       {"nonResourceAttributes", {{"path", "/x"}, {"verb", "get"}}}}}};
  CHECK(reviewSelfAccess(both, kBob, abac()).first == 422);

  auto [rules_code, rules] = reviewSelfRules({{"spec", {{"namespace", "default"}}}}, kBob, abac());
  CHECK(rules_code == 201);
  CHECK(rules["kind"] == "SelfSubjectRulesReview");
  CHECK(
      rules["status"] ==
      json{{"resourceRules",
            {{{"verbs", {"get", "list", "watch"}}, {"apiGroups", {"*"}}, {"resources", {"pods"}}}}},
           {"nonResourceRules", {{{"verbs", {"*"}}, {"nonResourceURLs", {"/metrics*"}}}}},
           {"incomplete", false}});
  // Another namespace: only the path rule, which holds in every namespace.
  CHECK(reviewSelfRules({{"spec", {{"namespace", "other"}}}}, kBob, abac())
            .second["status"]["resourceRules"] == json::array());
  const json everything = {
      {"resourceRules", {{{"verbs", {"*"}}, {"apiGroups", {"*"}}, {"resources", {"*"}}}}},
      {"nonResourceRules", {{{"verbs", {"*"}}, {"nonResourceURLs", {"*"}}}}},
      {"incomplete", false}};
  CHECK(reviewSelfRules({{"spec", {{"namespace", "default"}}}}, kAdmin, abac()).second["status"] ==
        everything);
  CHECK(reviewSelfRules({{"spec", {{"namespace", "x"}}}}, kBob, Authorizer()).second["status"] ==
        everything);
  CHECK(reviewSelfRules({{"spec", json::object()}}, kBob, abac()).first == 400);

  CHECK(
      reviewSelf(kBob) ==
      json{{"apiVersion", "authentication.k8s.io/v1"},
           {"kind", "SelfSubjectReview"},
           {"metadata", {{"creationTimestamp", nullptr}}},
           {"status",
            {{"userInfo",
              {{"username", "bob"}, {"uid", "2"}, {"groups", {"dev", "system:authenticated"}}}}}}});
}

TEST_CASE("bodies nested too deep are recognized before parsing", "[unit][apiserver]") {
  CHECK_FALSE(nestedDeeperThan(R"({"a":[{"b":[1,2]}]})", 4));
  CHECK(nestedDeeperThan(R"({"a":[{"b":[1,2]}]})", 3));
  // Brackets inside strings, escaped quotes included, do not count.
  CHECK_FALSE(nestedDeeperThan(R"({"a":"[[[[\"[[[["})", 1));
  CHECK(nestedDeeperThan(std::string(1001, '[') + std::string(1001, ']'), kMaxBodyNesting));
  CHECK_FALSE(nestedDeeperThan(std::string(1000, '[') + std::string(1000, ']'), kMaxBodyNesting));
}
