// The test apiserver's TokenReview and SubjectAccessReview answers and its ABAC policy file.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/authz.h"
#include "test/support/test_util.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;

namespace {

AbacPolicy policy(const std::string& line) {
  auto p = parseAbacPolicy(line);
  INFO(line);
  REQUIRE(p.ok());
  return *p;
}

std::string policyLine(const std::string& spec) {
  return R"({"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":)" +
         spec + "}";
}

AccessRequest resourceRequest(const std::string& user, const std::string& verb,
                              const std::string& ns, const std::string& resource,
                              const std::string& subresource = "") {
  AccessRequest r;
  r.user = user;
  r.resource_request = true;
  r.verb = verb;
  r.ns = ns;
  r.resource = resource;
  r.subresource = subresource;
  return r;
}

AccessRequest pathRequest(const std::string& user, const std::string& verb,
                          const std::string& path) {
  AccessRequest r;
  r.user = user;
  r.verb = verb;
  r.path = path;
  return r;
}

}  // namespace

TEST_CASE("abac: a policy line reads the supported spec fields", "[unit][apiserver]") {
  const AbacPolicy p = policy(policyLine(
      R"({"user":"alice","group":"ops","namespace":"*","resource":"nodes","apiGroup":"*",)"
      R"("readonly":true,"nonResourcePath":"/healthz"})"));
  CHECK(p.user == "alice");
  CHECK(p.group == "ops");
  CHECK(p.ns == "*");
  CHECK(p.resource == "nodes");
  CHECK(p.api_group == "*");
  CHECK(p.readonly);
  CHECK(p.non_resource_path == "/healthz");
}

TEST_CASE("abac: bad policy lines are errors naming the field", "[unit][apiserver]") {
  struct Row {
    std::string line;
    std::string message;
  };
  auto row = GENERATE(
      Row{"{", "not a JSON object"},
      Row{R"({"apiVersion":"v1","kind":"Policy","spec":{"user":"a"}})", "apiVersion must be"},
      Row{R"({"apiVersion":"abac.authorization.kubernetes.io/v1beta1","spec":{"user":"a"}})",
          "kind must be Policy"},
      Row{policyLine(R"({"user":"a","verb":"get"})"), "spec.verb is not supported"},
      Row{policyLine(R"({"user":"a","readonly":"yes"})"), "spec.readonly must be a bool"},
      Row{policyLine(R"({"user":7})"), "spec.user must be a string"},
      Row{policyLine(R"({"resource":"pods"})"), "spec.user or spec.group must be set"});
  auto p = parseAbacPolicy(row.line);
  INFO(row.line);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.status().message(), Catch::Contains(row.message));
}

TEST_CASE("abac: the policy file skips comments and names the file and line of a bad one",
          "[unit][apiserver]") {
  nodeagent::testing::TempDir dir;
  const auto good = dir / "good.jsonl";
  nodeagent::testing::writeFile(
      good, "# kubelet API access\n\n  " + policyLine(R"({"user":"alice","resource":"*"})") + "\n" +
                policyLine(R"({"group":"ops","nonResourcePath":"*"})") + "\n");
  auto policies = parseAbacPolicyFile(good);
  REQUIRE(policies.ok());
  REQUIRE(policies->size() == 2);
  CHECK((*policies)[1].group == "ops");

  const auto bad = dir / "bad.jsonl";
  nodeagent::testing::writeFile(
      bad, "# x\n" + policyLine(R"({"user":"a"})") + "\n" + policyLine(R"({"users":"a"})") + "\n");
  auto failed = parseAbacPolicyFile(bad);
  REQUIRE_FALSE(failed.ok());
  CHECK_THAT(failed.status().message(), Catch::Contains(bad.string() + " line 3: spec.users"));
  CHECK_FALSE(parseAbacPolicyFile(dir / "missing").ok());
}

TEST_CASE("abac: kube-apiserver's matching of subjects, verbs, resources and paths",
          "[unit][apiserver]") {
  const std::vector<AbacPolicy> policies = {
      policy(policyLine(R"({"user":"alice","namespace":"*","resource":"nodes","apiGroup":"*"})")),
      policy(policyLine(
          R"({"user":"bob","namespace":"web","resource":"pods","apiGroup":"","readonly":true})")),
      policy(policyLine(R"({"group":"viewers","nonResourcePath":"/logs/*","readonly":true})"))};
  CHECK(authorize(policies, resourceRequest("alice", "create", "", "nodes", "proxy")).allowed);
  CHECK_FALSE(authorize(policies, resourceRequest("alice", "get", "", "pods")).allowed);
  CHECK(authorize(policies, resourceRequest("bob", "get", "web", "pods", "log")).allowed);
  CHECK_FALSE(authorize(policies, resourceRequest("bob", "create", "web", "pods", "exec")).allowed);
  CHECK_FALSE(authorize(policies, resourceRequest("bob", "get", "db", "pods")).allowed);
  CHECK_FALSE(authorize(policies, pathRequest("alice", "get", "/healthz")).allowed);

  AccessRequest viewer = pathRequest("carol", "get", "/logs/syslog");
  viewer.groups = {"viewers"};
  CHECK(authorize(policies, viewer).allowed);
  viewer.path = "/metrics";
  const AccessDecision denied = authorize(policies, viewer);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.reason == "No policy matched.");

  AccessRequest master = resourceRequest("root", "delete", "any", "secrets");
  master.groups = {"system:masters"};
  CHECK(authorize({}, master).allowed);
  CHECK_FALSE(authorize({}, resourceRequest("root", "get", "", "nodes")).allowed);
}

TEST_CASE("TokenReview: known, unknown and missing tokens, audiences, and no authenticator",
          "[unit][apiserver]") {
  const std::map<std::string, ReviewUser> users = {{"t1", {"alice", "u1", {"ops"}, {}}}};
  std::vector<std::string> asked;
  const TokenAuthenticator authenticate = [&](const std::string& token,
                                              const std::vector<std::string>& audiences) {
    asked = audiences;
    const auto found = users.find(token);
    if (found == users.end()) return TokenVerdict{};
    return TokenVerdict{true, found->second, audiences, ""};
  };
  const std::vector<std::string> api = {"https://api.example"};
  const json review = {{"apiVersion", "authentication.k8s.io/v1"},
                       {"kind", "TokenReview"},
                       {"spec", {{"token", "t1"}}}};
  auto [code, known] = reviewToken(review, authenticate, api);
  CHECK(code == 201);
  CHECK(known["status"]["authenticated"] == true);
  CHECK(known["status"]["user"] ==
        json{{"username", "alice"}, {"uid", "u1"}, {"groups", {"ops", "system:authenticated"}}});
  CHECK(known["status"]["audiences"] == json{"https://api.example"});
  CHECK(known["spec"]["token"] == "t1");

  // The review's audiences are those asked for.
  json with_audiences = review;
  with_audiences["spec"]["audiences"] = {"vault"};
  auto [aud_code, aud] = reviewToken(with_audiences, authenticate, api);
  CHECK(asked == std::vector<std::string>{"vault"});
  CHECK(aud["status"]["audiences"] == json{"vault"});

  json other = review;
  other["spec"]["token"] = "nope";
  auto [unknown_code, unknown] = reviewToken(other, authenticate, api);
  CHECK(unknown_code == 201);
  CHECK(unknown["status"]["authenticated"] == false);
  CHECK_FALSE(unknown["status"].contains("error"));
  CHECK_FALSE(unknown["status"].contains("audiences"));

  const TokenAuthenticator refusing = [](const std::string&, const std::vector<std::string>&) {
    return TokenVerdict{false, {}, {}, "service account token has expired"};
  };
  CHECK(reviewToken(review, refusing, api).second["status"]["error"] ==
        "service account token has expired");

  auto [none_code, none] = reviewToken(review, nullptr, api);
  CHECK(none_code == 201);
  CHECK_FALSE(none["status"].contains("authenticated"));

  json empty = review;
  empty["spec"]["token"] = "";
  CHECK(reviewToken(empty, authenticate, api).first == 400);
  CHECK(reviewToken(json::array(), authenticate, api).first == 400);
}

TEST_CASE("SubjectAccessReview: answers and invalid specs", "[unit][apiserver]") {
  const Authorizer policies(
      AuthorizationMode::kAbac,
      {policy(
          policyLine(R"({"user":"alice","namespace":"*","resource":"nodes","apiGroup":"*"})"))});
  json review = {{"apiVersion", "authorization.k8s.io/v1"},
                 {"kind", "SubjectAccessReview"},
                 {"spec",
                  {{"user", "alice"},
                   {"groups", {"system:authenticated"}},
                   {"resourceAttributes",
                    {{"verb", "get"}, {"resource", "nodes"}, {"subresource", "proxy"}}}}}};
  auto [code, allowed] = reviewAccess(review, policies);
  CHECK(code == 201);
  CHECK(allowed["status"] == json{{"allowed", true}});

  review["spec"]["user"] = "mallory";
  CHECK(reviewAccess(review, policies).second["status"] ==
        json{{"allowed", false}, {"reason", "No policy matched."}});

  review["spec"]["groups"] = {"system:masters"};
  CHECK(reviewAccess(review, policies).second["status"]["allowed"] == true);

  json both = review;
  both["spec"]["nonResourceAttributes"] = {{"path", "/healthz"}, {"verb", "get"}};
  auto [both_code, both_status] = reviewAccess(both, policies);
  CHECK(both_code == 422);
  CHECK_THAT(both_status["message"].get<std::string>(),
             Catch::Contains("cannot be specified in combination with resourceAttributes"));

  json nobody = review;
  nobody["spec"].erase("user");
  nobody["spec"].erase("groups");
  CHECK(reviewAccess(nobody, policies).first == 422);
}
