// The ConfigMap/Secret cache (kubelet's Cache and Get change detection strategies).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/volume/api_objects.h"
#include "api/api_errors.h"
#include "api/time.h"
#include "test/support/fake_clock.h"

using namespace nodeagent;
using agent::ApiObjectKind;

namespace {

struct Apiserver {
  std::vector<std::string> paths;
  nlohmann::json object = {{"data", {{"k", "v1"}}}};
  base::Status error;
  agent::CachingApiObjectSource::Fetch fetch() {
    return [this](const std::string& path) -> base::StatusOr<nlohmann::json> {
      paths.push_back(path);
      if (!error.ok()) return error;
      return object;
    };
  }
};

}  // namespace

TEST_CASE("api objects: a cached object is served until its ttl, then read again",
          "[unit][volume]") {
  testing::FakeClock clock;
  Apiserver server;
  agent::CachingApiObjectSource source(clock, server.fetch(), std::chrono::minutes(1));
  auto first = source.get(ApiObjectKind::kConfigMap, "ns", "app", "pod-1");
  REQUIRE(first.ok());
  CHECK((**first)["data"]["k"] == "v1");
  REQUIRE(server.paths == std::vector<std::string>{"/api/v1/namespaces/ns/configmaps/app"});

  server.object["data"]["k"] = "v2";
  clock.advance(std::chrono::seconds(59));
  auto cached = source.get(ApiObjectKind::kConfigMap, "ns", "app", "pod-1");
  REQUIRE(cached.ok());
  CHECK((**cached)["data"]["k"] == "v1");
  CHECK(server.paths.size() == 1);

  clock.advance(std::chrono::seconds(1));
  auto fresh = source.get(ApiObjectKind::kConfigMap, "ns", "app", "pod-1");
  REQUIRE(fresh.ok());
  CHECK((**fresh)["data"]["k"] == "v2");
  CHECK(server.paths.size() == 2);
  CHECK(source.fetches() == 2);
}

TEST_CASE("api objects: a pod that has not seen the cached copy gets it fresh", "[unit][volume]") {
  testing::FakeClock clock;
  Apiserver server;
  agent::CachingApiObjectSource source(clock, server.fetch(), std::chrono::minutes(1));
  REQUIRE(source.get(ApiObjectKind::kSecret, "ns", "creds", "pod-1").ok());
  server.object["data"]["k"] = "v2";
  auto other = source.get(ApiObjectKind::kSecret, "ns", "creds", "pod-2");
  REQUIRE(other.ok());
  CHECK((**other)["data"]["k"] == "v2");
  REQUIRE(server.paths.size() == 2);
  CHECK(server.paths[1] == "/api/v1/namespaces/ns/secrets/creds");
  // Both have now seen the newest copy: neither reads again within the ttl.
  REQUIRE(source.get(ApiObjectKind::kSecret, "ns", "creds", "pod-1").ok());
  REQUIRE(source.get(ApiObjectKind::kSecret, "ns", "creds", "pod-2").ok());
  CHECK(server.paths.size() == 2);
}

TEST_CASE("api objects: the Get strategy (ttl 0) reads every time and keeps nothing",
          "[unit][volume]") {
  testing::FakeClock clock;
  Apiserver server;
  agent::CachingApiObjectSource source(clock, server.fetch(), base::Duration::zero());
  for (int i = 0; i < 3; ++i) REQUIRE(source.get(ApiObjectKind::kConfigMap, "ns", "a", "p").ok());
  CHECK(server.paths.size() == 3);
  REQUIRE(source.get(ApiObjectKind::kConfigMap, "ns", "b", "p").ok());
  CHECK(source.size() <= 1);
}

TEST_CASE("api objects: NotFound is worded as kubelet's, other errors name the object",
          "[unit][volume]") {
  testing::FakeClock clock;
  Apiserver server;
  agent::CachingApiObjectSource source(clock, server.fetch(), std::chrono::minutes(1));
  server.error = api::makeApiErrorStatus("GET /api/v1/namespaces/ns/configmaps/app",
                                         {404, "NotFound", "configmaps \"app\" not found", {}});
  REQUIRE(api::isNotFound(server.error));
  auto missing = source.get(ApiObjectKind::kConfigMap, "ns", "app", "p");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == base::StatusCode::kNotFound);
  CHECK(missing.status().message() == "configmap \"app\" not found");

  server.error = base::unavailableError("connection refused");
  auto down = source.get(ApiObjectKind::kSecret, "ns", "creds", "p");
  REQUIRE_FALSE(down.ok());
  CHECK_THAT(down.status().message(), Catch::Contains("secret \"creds\"") &&
                                          Catch::Contains("ns") &&
                                          Catch::Contains("connection refused"));
  // A failure is not cached: the next read goes to the apiserver again.
  server.error = base::okStatus();
  CHECK(source.get(ApiObjectKind::kSecret, "ns", "creds", "p").ok());
}

TEST_CASE("api objects: data and binaryData are read, secrets decoded, bad base64 named",
          "[unit][volume]") {
  auto cm = agent::apiObjectData(ApiObjectKind::kConfigMap,
                                 {{"data", {{"a", "1"}}}, {"binaryData", {{"b", "aGk="}}}});
  REQUIRE(cm.ok());
  CHECK(*cm == std::map<std::string, std::string>{{"a", "1"}, {"b", "hi"}});
  auto secret = agent::apiObjectData(ApiObjectKind::kSecret, {{"data", {{"k", "dg=="}}}});
  REQUIRE(secret.ok());
  CHECK(secret->at("k") == "v");
  auto bad = agent::apiObjectData(ApiObjectKind::kSecret, {{"data", {{"k", "!!"}}}});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("data[k]"));
}

TEST_CASE("api objects: service account tokens are requested bound to the pod and renewed at 80%",
          "[unit][volume]") {
  testing::FakeClock clock;
  std::vector<nlohmann::json> requests;
  std::vector<std::string> paths;
  bool fail = false;
  int issued = 0;
  auto create = [&](const std::string& path,
                    const nlohmann::json& body) -> base::StatusOr<nlohmann::json> {
    paths.push_back(path);
    requests.push_back(body);
    if (fail) return base::unavailableError("connection refused");
    const int64_t seconds = body["spec"]["expirationSeconds"].get<int64_t>();
    auto expires = std::chrono::time_point_cast<std::chrono::nanoseconds>(
        clock.wallNow() + std::chrono::seconds(seconds));
    return nlohmann::json{{"status",
                           {{"token", "token-" + std::to_string(++issued)},
                            {"expirationTimestamp", api::formatTime(expires)}}}};
  };
  agent::CachingApiObjectSource source(
      clock, [](const std::string&) -> base::StatusOr<nlohmann::json> { return nlohmann::json(); },
      std::chrono::minutes(1), create);
  agent::ServiceAccountTokenRequest request{"ns", "builder", "vault", 3600, "web", "uid-1"};
  auto token = source.serviceAccountToken(request);
  REQUIRE(token.ok());
  CHECK(*token == "token-1");
  REQUIRE(paths == std::vector<std::string>{"/api/v1/namespaces/ns/serviceaccounts/builder/token"});
  CHECK(requests[0]["kind"] == "TokenRequest");
  CHECK(requests[0]["spec"]["audiences"] == nlohmann::json::array({"vault"}));
  CHECK(requests[0]["spec"]["boundObjectRef"] ==
        nlohmann::json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", "web"}, {"uid", "uid-1"}});

  // Served from memory until 80% of its hour has passed.
  clock.advance(std::chrono::minutes(47));
  CHECK(source.serviceAccountToken(request).value() == "token-1");
  CHECK(paths.size() == 1);
  clock.advance(std::chrono::minutes(2));
  CHECK(source.serviceAccountToken(request).value() == "token-2");
  CHECK(paths.size() == 2);

  // A failed renewal keeps the old token while it is valid; an expired one is an error.
  clock.advance(std::chrono::minutes(49));
  fail = true;
  CHECK(source.serviceAccountToken(request).value() == "token-2");
  clock.advance(std::chrono::minutes(12));
  auto expired = source.serviceAccountToken(request);
  REQUIRE_FALSE(expired.ok());
  CHECK_THAT(expired.status().message(),
             Catch::Contains("ns/builder") && Catch::Contains("connection refused"));

  // Another pod or audience is another token.
  fail = false;
  auto other = request;
  other.pod_uid = "uid-2";
  CHECK(source.serviceAccountToken(other).value() != source.serviceAccountToken(request).value());
}
