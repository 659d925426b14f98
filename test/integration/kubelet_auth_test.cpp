// The kubelet API's webhooks (TokenReview, SubjectAccessReview) against a small loopback HTTP
// server that plays the apiserver: what is sent, what is cached and for how long (fake clock),
// and what a failing apiserver does.
#include <httplib.h>
#include <catch2/catch.hpp>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "agent/server/kubelet_auth.h"
#include "api/async_rest_client.h"
#include "api/rest_client.h"
#include "base/clock.h"
#include "test/support/api_test_client.h"
#include "test/support/fake_clock.h"
#include "test/support/run_awaitable.h"
#include "test/support/test_util.h"

namespace nodeagent::agent {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Groups = std::vector<std::string>;

// The apiserver's review endpoints. Tokens: "good" (alice), "bad" (rejected), "broken" (rejected
// with status.error), "fail" (HTTP 500). SAR: alice may get, everyone else is denied; user
// "both" is allowed and denied at once; user "fail" gets HTTP 500.
class ReviewServer {
 public:
  ReviewServer() {
    server_.Post(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        [this](const httplib::Request& req, httplib::Response& res) { tokenReview(req, res); });
    server_.Post(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        [this](const httplib::Request& req, httplib::Response& res) { accessReview(req, res); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    REQUIRE(testing::eventually([&] { return server_.is_running(); }));
  }
  ~ReviewServer() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }
  int port() const { return port_; }

  int calls(const std::string& key) {
    std::lock_guard lock(mu_);
    return calls_[key];
  }
  json lastReview() {
    std::lock_guard lock(mu_);
    return last_;
  }

 private:
  json record(const httplib::Request& req, const std::string& key) {
    json review = json::parse(req.body);
    std::lock_guard lock(mu_);
    ++calls_[key];
    last_ = review;
    return review;
  }

  void tokenReview(const httplib::Request& req, httplib::Response& res) {
    json review = json::parse(req.body);
    std::string token = review["spec"]["token"];
    record(req, "token:" + token);
    json status = {{"authenticated", false}};
    if (token == "good") {
      status = {{"authenticated", true},
                {"user", {{"username", "alice"}, {"uid", "u-1"}, {"groups", {"dev"}}}}};
    } else if (token == "broken") {
      status["error"] = "the token backend is down";
    } else if (token == "fail") {
      res.status = 500;
      return;
    }
    review["status"] = status;
    res.status = 201;
    res.set_content(review.dump(), "application/json");
  }

  void accessReview(const httplib::Request& req, httplib::Response& res) {
    json review = json::parse(req.body);
    std::string user = review["spec"].value("user", "");
    record(req, "sar:" + user + ":" + review["spec"]["resourceAttributes"].value("verb", ""));
    if (user == "fail") {
      res.status = 500;
      return;
    }
    bool allowed = user == "both" ||
                   (user == "alice" && review["spec"]["resourceAttributes"]["verb"] == "get");
    review["status"] = {{"allowed", allowed}, {"reason", allowed ? "rbac says yes" : "nope"}};
    if (user == "both") review["status"]["denied"] = true;
    res.status = 201;
    res.set_content(review.dump(), "application/json");
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::map<std::string, int> calls_;
  json last_;
};

struct Fixture {
  ReviewServer apiserver;
  std::unique_ptr<api::RestClient> client;
  std::unique_ptr<testing::ApiPool> pool;
  std::unique_ptr<api::AsyncRestClient> async;
  testing::FakeClock clock;
  asio::io_context ioc;
  std::unique_ptr<KubeletAuth> auth;

  explicit Fixture(AuthOptions options) {
    api::RestConfig cfg;
    cfg.server = "http://127.0.0.1:" + std::to_string(apiserver.port());
    api::RestClientOptions o;
    o.request_timeout = 5s;
    o.connect_timeout = 2s;
    o.max_retries = 0;
    auto made = api::RestClient::create(cfg, o, base::realClock());
    REQUIRE(made.ok());
    client = std::move(*made);
    pool = std::make_unique<testing::ApiPool>(*client);
    async = std::make_unique<api::AsyncRestClient>(pool->async());
    options.node_name = "node-1";
    auth = std::make_unique<KubeletAuth>(options, async.get(), clock);
  }
  ~Fixture() {
    auth.reset();
    pool.reset();
  }

  AuthnResult token(const std::string& token) {
    return testing::runAwaitable(ioc, auth->authenticate(std::nullopt, "Bearer " + token));
  }
  AuthzResult authorize(const std::string& user, const std::string& method,
                        const std::string& path) {
    RequestAttributes a = requestAttributes(UserInfo{user, "", {"g"}}, method, path, "node-1");
    return testing::runAwaitable(ioc, auth->authorize(a));
  }
};

AuthOptions tokenOptions() {
  AuthOptions o;
  o.token_webhook = true;
  o.anonymous = true;  // a rejected token must still not become anonymous
  return o;
}

TEST_CASE("kubelet auth webhook: a TokenReview names the user, cached for the TTL",
          "[integration][kubelet_auth]") {
  Fixture f(tokenOptions());
  AuthnResult r = f.token("good");
  REQUIRE(r.user.has_value());
  CHECK(r.error.empty());
  CHECK(r.user->name == "alice");
  CHECK(r.user->uid == "u-1");
  CHECK(r.user->groups == Groups{"dev", "system:authenticated"});
  // What kubelet sends: a v1 TokenReview with the token and no audiences.
  CHECK(f.apiserver.lastReview() == json{{"apiVersion", "authentication.k8s.io/v1"},
                                         {"kind", "TokenReview"},
                                         {"spec", {{"token", "good"}}}});

  CHECK(f.token("good").user->name == "alice");
  CHECK(f.apiserver.calls("token:good") == 1);
  f.clock.advance(2min - 1s);
  CHECK(f.token("good").user.has_value());
  CHECK(f.apiserver.calls("token:good") == 1);
  f.clock.advance(2s);
  CHECK(f.token("good").user.has_value());
  CHECK(f.apiserver.calls("token:good") == 2);
}

TEST_CASE("kubelet auth webhook: a rejected token is unauthenticated and cached, errors are not",
          "[integration][kubelet_auth]") {
  Fixture f(tokenOptions());
  SECTION("rejected") {
    AuthnResult r = f.token("bad");
    CHECK_FALSE(r.user.has_value());
    CHECK(r.error == "invalid bearer token");
    CHECK_FALSE(f.token("bad").user.has_value());
    CHECK(f.apiserver.calls("token:bad") == 1);
    f.clock.advance(2min + 1s);
    CHECK_FALSE(f.token("bad").user.has_value());
    CHECK(f.apiserver.calls("token:bad") == 2);
  }
  SECTION("rejected with status.error") {
    AuthnResult r = f.token("broken");
    CHECK_FALSE(r.user.has_value());
    CHECK_THAT(r.error, Catch::Contains("the token backend is down"));
    CHECK_FALSE(f.token("broken").user.has_value());
    CHECK(f.apiserver.calls("token:broken") == 2);
  }
  SECTION("HTTP 500") {
    AuthnResult r = f.token("fail");
    CHECK_FALSE(r.user.has_value());
    CHECK_THAT(r.error, Catch::Contains("token review failed"));
    f.token("fail");
    CHECK(f.apiserver.calls("token:fail") == 2);
  }
  SECTION("apiserver unreachable") {
    f.apiserver.stop();
    AuthnResult r = f.token("good");
    CHECK_FALSE(r.user.has_value());
    CHECK_THAT(r.error, Catch::Contains("token review failed"));
  }
}

TEST_CASE("kubelet auth webhook: a TTL of zero caches nothing", "[integration][kubelet_auth]") {
  AuthOptions o = tokenOptions();
  o.token_cache_ttl = base::Duration::zero();
  o.authorize_webhook = true;
  o.authorized_ttl = base::Duration::zero();
  Fixture f(o);
  f.token("good");
  f.token("good");
  CHECK(f.apiserver.calls("token:good") == 2);
  f.authorize("alice", "GET", "/pods");
  f.authorize("alice", "GET", "/pods");
  CHECK(f.apiserver.calls("sar:alice:get") == 2);
}

AuthOptions authzOptions() {
  AuthOptions o;
  o.authorize_webhook = true;
  return o;
}

TEST_CASE("kubelet auth webhook: a SubjectAccessReview carries kubelet's attributes",
          "[integration][kubelet_auth]") {
  Fixture f(authzOptions());
  RequestAttributes a = requestAttributes(UserInfo{"alice", "u-1", {"dev", "system:authenticated"}},
                                          "GET", "/stats/summary", "node-1");
  AuthzResult r = testing::runAwaitable(f.ioc, f.auth->authorize(a));
  CHECK(r.allowed);
  CHECK(r.error.empty());
  CHECK(r.reason == "rbac says yes");
  CHECK(f.apiserver.lastReview() == json{{"apiVersion", "authorization.k8s.io/v1"},
                                         {"kind", "SubjectAccessReview"},
                                         {"spec",
                                          {{"resourceAttributes",
                                            {{"verb", "get"},
                                             {"version", "v1"},
                                             {"resource", "nodes"},
                                             {"subresource", "stats"},
                                             {"name", "node-1"}}},
                                           {"user", "alice"},
                                           {"uid", "u-1"},
                                           {"groups", {"dev", "system:authenticated"}}}}});

  AuthzResult denied = f.authorize("mallory", "POST", "/exec/ns/pod/c");
  CHECK_FALSE(denied.allowed);
  CHECK(denied.error.empty());
  CHECK(denied.reason == "nope");
}

TEST_CASE("kubelet auth webhook: allowed answers cached 5 min, denied 30 s",
          "[integration][kubelet_auth]") {
  Fixture f(authzOptions());
  CHECK(f.authorize("alice", "GET", "/pods").allowed);
  CHECK_FALSE(f.authorize("bob", "GET", "/pods").allowed);
  CHECK(f.authorize("alice", "GET", "/pods").allowed);
  CHECK_FALSE(f.authorize("bob", "GET", "/pods").allowed);
  CHECK(f.apiserver.calls("sar:alice:get") == 1);
  CHECK(f.apiserver.calls("sar:bob:get") == 1);
  // Another subresource is another question.
  CHECK(f.authorize("alice", "GET", "/stats/summary").allowed);
  CHECK(f.apiserver.calls("sar:alice:get") == 2);

  f.clock.advance(31s);
  CHECK(f.authorize("alice", "GET", "/pods").allowed);
  CHECK_FALSE(f.authorize("bob", "GET", "/pods").allowed);
  CHECK(f.apiserver.calls("sar:alice:get") == 2);
  CHECK(f.apiserver.calls("sar:bob:get") == 2);

  f.clock.advance(5min);
  CHECK(f.authorize("alice", "GET", "/pods").allowed);
  CHECK(f.apiserver.calls("sar:alice:get") == 3);
}

TEST_CASE("kubelet auth webhook: an authorizer that fails decides nothing and is not cached",
          "[integration][kubelet_auth]") {
  Fixture f(authzOptions());
  SECTION("HTTP 500") {
    AuthzResult r = f.authorize("fail", "GET", "/pods");
    CHECK_FALSE(r.allowed);
    CHECK_THAT(r.error, Catch::Contains("subject access review failed"));
    f.authorize("fail", "GET", "/pods");
    CHECK(f.apiserver.calls("sar:fail:get") == 2);
  }
  SECTION("allowed and denied at once") {
    AuthzResult r = f.authorize("both", "GET", "/pods");
    CHECK_FALSE(r.allowed);
    CHECK_THAT(r.error, Catch::Contains("both allow and deny"));
  }
  SECTION("apiserver unreachable") {
    f.apiserver.stop();
    AuthzResult r = f.authorize("alice", "GET", "/pods");
    CHECK_FALSE(r.allowed);
    CHECK_FALSE(r.error.empty());
  }
}

}  // namespace
}  // namespace nodeagent::agent
