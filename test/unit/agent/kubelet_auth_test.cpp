#include "agent/server/kubelet_auth.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "api/async_rest_client.h"
#include "api/rest_client.h"
#include "test/support/fake_clock.h"
#include "test/support/run_awaitable.h"

namespace nodeagent::agent {
namespace {

using testing::runAwaitable;
using Groups = std::vector<std::string>;

TEST_CASE("kubelet auth: request attributes follow kubelet's path and verb rules",
          "[unit][kubelet_auth]") {
  struct Row {
    const char* method;
    const char* path;
    const char* verb;
    const char* subresource;
  };
  const Row rows[] = {
      {"GET", "/stats/summary", "get", "stats"},
      {"GET", "/stats", "get", "stats"},
      {"GET", "/stats/", "get", "stats"},
      {"GET", "/statsfoo", "get", "proxy"},
      {"GET", "/metrics", "get", "metrics"},
      {"GET", "/metrics/cadvisor", "get", "metrics"},
      {"GET", "/metricsx", "get", "proxy"},
      {"GET", "/logs/", "get", "log"},
      {"GET", "/logs", "get", "log"},
      {"GET", "/logs/syslog", "get", "log"},
      {"GET", "/spec/", "get", "spec"},
      {"GET", "/spec", "get", "spec"},
      {"GET", "/pods", "get", "proxy"},
      {"GET", "/containerLogs/ns/pod/c", "get", "proxy"},
      {"GET", "/", "get", "proxy"},
      {"POST", "/exec/ns/pod/c", "create", "proxy"},
      {"PUT", "/run/ns/pod/c", "update", "proxy"},
      {"PATCH", "/pods", "patch", "proxy"},
      {"DELETE", "/pods", "delete", "proxy"},
      {"HEAD", "/healthz", "", "proxy"},
      {"OPTIONS", "/stats/summary", "", "stats"},
      {"get", "/pods", "", "proxy"},  // methods are case-sensitive
  };
  for (const Row& row : rows) {
    INFO(row.method << " " << row.path);
    RequestAttributes a =
        requestAttributes(UserInfo{"alice", "u1", {"g"}}, row.method, row.path, "node-1");
    CHECK(a.verb == row.verb);
    CHECK(a.subresource == row.subresource);
    CHECK(a.resource == "nodes");
    CHECK(a.name == "node-1");
    CHECK(a.path == row.path);
    CHECK(a.user.name == "alice");
    CHECK(a.user.groups == Groups{"g"});
  }
  RequestAttributes q =
      requestAttributes(UserInfo{}, "GET", "/stats/summary?only_cpu_and_memory=true", "n");
  CHECK(q.subresource == "stats");
  CHECK(q.path == "/stats/summary");
}

TEST_CASE("kubelet auth: 401, 403 and 500 bodies are Status objects with kubelet's messages",
          "[unit][kubelet_auth]") {
  CHECK(unauthorizedBody() ==
        R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)"
        R"("message":"Unauthorized","reason":"Unauthorized","code":401})");
  RequestAttributes a =
      requestAttributes(UserInfo{"system:anonymous", "", {}}, "GET", "/stats/summary", "node-1");
  auto forbidden = nlohmann::json::parse(forbiddenBody(a, "no RBAC policy matched"));
  CHECK(forbidden == nlohmann::json{{"kind", "Status"},
                                    {"apiVersion", "v1"},
                                    {"metadata", nlohmann::json::object()},
                                    {"status", "Failure"},
                                    {"message",
                                     "Forbidden (user=system:anonymous, verb=get, "
                                     "resource=nodes, subresource=stats)"},
                                    {"reason", "Forbidden"},
                                    {"code", 403}});
  auto error = nlohmann::json::parse(authorizationErrorBody(a));
  CHECK(error["code"] == 500);
  CHECK(error["reason"] == "InternalError");
  CHECK(error["message"] ==
        "Authorization error (user=system:anonymous, verb=get, "
        "resource=nodes, subresource=stats)");
}

struct Fixture {
  testing::FakeClock clock;
  asio::io_context ioc;

  AuthnResult authn(KubeletAuth& auth, std::optional<UserInfo> cert, std::string header) {
    return runAwaitable(ioc, auth.authenticate(std::move(cert), std::move(header)));
  }
  AuthzResult authz(KubeletAuth& auth, const RequestAttributes& a) {
    return runAwaitable(ioc, auth.authorize(a));
  }
};

TEST_CASE("kubelet auth: anonymous requests only when allowed", "[unit][kubelet_auth]") {
  Fixture f;
  AuthOptions options;
  options.node_name = "node-1";

  SECTION("allowed") {
    options.anonymous = true;
    KubeletAuth auth(options, nullptr, f.clock);
    for (const char* header : {"", "Basic YWxpY2U6cHc=", "Bearer", "Bearer  x", "Bearer tok"}) {
      INFO(header);
      AuthnResult r = f.authn(auth, std::nullopt, header);
      REQUIRE(r.user.has_value());
      CHECK(r.user->name == "system:anonymous");
      CHECK(r.user->groups == Groups{"system:unauthenticated"});
      CHECK(r.error.empty());
    }
  }
  SECTION("not allowed") {
    KubeletAuth auth(options, nullptr, f.clock);
    // With the token webhook off a token proves nothing, as in kubelet.
    for (const char* header : {"", "Bearer tok"}) {
      AuthnResult r = f.authn(auth, std::nullopt, header);
      CHECK_FALSE(r.user.has_value());
      CHECK_FALSE(r.error.empty());
    }
  }
}

TEST_CASE("kubelet auth: a client certificate is the user, with system:authenticated",
          "[unit][kubelet_auth]") {
  Fixture f;
  AuthOptions options;
  options.anonymous = true;
  KubeletAuth plain(options, nullptr, f.clock);
  AuthnResult r = f.authn(plain, UserInfo{"system:admin", "", {"system:masters"}}, "");
  REQUIRE(r.user.has_value());
  CHECK(r.user->name == "system:admin");
  CHECK(r.user->groups == Groups{"system:masters", "system:authenticated"});
  // Not added twice.
  r = f.authn(plain, UserInfo{"bob", "", {"system:authenticated"}}, "");
  CHECK(r.user->groups == Groups{"system:authenticated"});
  // A certificate without a common name is no user (kubelet's CN conversion).
  r = f.authn(plain, UserInfo{"", "", {"team"}}, "");
  CHECK(r.user->name == "system:anonymous");

  SECTION("the certificate wins over a token: the webhook is never asked") {
    // A client for a closed loopback port: asking it would fail the authentication.
    api::RestConfig cfg;
    cfg.server = "http://127.0.0.1:1";
    auto client = api::RestClient::create(cfg, {}, base::realClock());
    REQUIRE(client.ok());
    asio::thread_pool pool(1);
    api::AsyncRestClient async(**client, pool.get_executor());
    options.token_webhook = true;
    KubeletAuth auth(options, &async, f.clock);
    r = f.authn(auth, UserInfo{"carol", "", {}}, "Bearer some-token");
    REQUIRE(r.user.has_value());
    CHECK(r.user->name == "carol");
    CHECK(r.error.empty());
    // The token alone goes to the (unreachable) webhook: an error, not anonymous.
    r = f.authn(auth, std::nullopt, "Bearer some-token");
    CHECK_FALSE(r.user.has_value());
    CHECK_THAT(r.error, Catch::Contains("token review failed"));
    CHECK_THAT(r.error, !Catch::Contains("some-token"));
    pool.join();
  }
}

TEST_CASE("kubelet auth: AlwaysAllow allows everyone", "[unit][kubelet_auth]") {
  Fixture f;
  KubeletAuth auth(AuthOptions{}, nullptr, f.clock);
  for (const char* method : {"GET", "POST", "HEAD"}) {
    AuthzResult r = f.authz(auth, requestAttributes(UserInfo{"system:anonymous", "", {}}, method,
                                                    "/exec/a/b/c", "node-1"));
    CHECK(r.allowed);
    CHECK(r.error.empty());
  }
}

}  // namespace
}  // namespace nodeagent::agent
