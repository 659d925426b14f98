// The test apiserver's bootstrap token authentication (kube-apiserver's
// --enable-bootstrap-token-auth).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/bootstrap_tokens.h"
#include "cmd/test-apiserver/util.h"
#include "test/support/fake_clock.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using nodeagent::testing::FakeClock;

namespace {

json tokenSecret(const std::string& id, const std::string& secret, json data) {
  json encoded = json::object();
  data["token-id"] = id;
  data["token-secret"] = secret;
  for (const auto& [key, value] : data.items()) {
    encoded[key] = base64Encode(value.get<std::string>());
  }
  return {{"metadata", {{"name", "bootstrap-token-" + id}}},
          {"type", "bootstrap.kubernetes.io/token"},
          {"data", encoded}};
}

}  // namespace

TEST_CASE("bootstrap tokens authenticate as system:bootstrap:<id> while their Secret allows it",
          "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock);
  const std::string expiry = formatTime(clock.wallNow() + std::chrono::hours(1));
  REQUIRE(store
              .create("secrets", "kube-system",
                      tokenSecret(
                          "abcdef", "0123456789abcdef",
                          {{"usage-bootstrap-authentication", "true"},
                           {"auth-extra-groups", "system:bootstrappers:kubeadm:default-node-token"},
                           {"expiration", expiry}}))
              .ok());
  auto user = authenticateBootstrapToken(store, "abcdef.0123456789abcdef", clock.wallNow());
  REQUIRE(user);
  CHECK(user->username == "system:bootstrap:abcdef");
  CHECK(user->groups ==
        std::vector<std::string>{"system:bootstrappers",
                                 "system:bootstrappers:kubeadm:default-node-token"});
  // A wrong secret, a malformed token, an unknown id.
  CHECK_FALSE(authenticateBootstrapToken(store, "abcdef.0123456789abcdee", clock.wallNow()));
  CHECK_FALSE(authenticateBootstrapToken(store, "abcdef.0123456789ABCDEF", clock.wallNow()));
  CHECK_FALSE(authenticateBootstrapToken(store, "abcdef0123456789abcdef", clock.wallNow()));
  CHECK_FALSE(authenticateBootstrapToken(store, "zzzzzz.0123456789abcdef", clock.wallNow()));
  // Past its expiration.
  clock.advance(std::chrono::hours(2));
  CHECK_FALSE(authenticateBootstrapToken(store, "abcdef.0123456789abcdef", clock.wallNow()));
}

TEST_CASE(
    "bootstrap tokens fail without the authentication usage, with a foreign extra group "
    "or another Secret type",
    "[unit][apiserver]") {
  FakeClock clock;
  Store store(clock);
  REQUIRE(
      store
          .create("secrets", "kube-system",
                  tokenSecret("aaaaaa", "0123456789abcdef", {{"usage-bootstrap-signing", "true"}}))
          .ok());
  REQUIRE(store
              .create("secrets", "kube-system",
                      tokenSecret("bbbbbb", "0123456789abcdef",
                                  {{"usage-bootstrap-authentication", "true"},
                                   {"auth-extra-groups", "system:masters"}}))
              .ok());
  json opaque =
      tokenSecret("cccccc", "0123456789abcdef", {{"usage-bootstrap-authentication", "true"}});
  opaque["type"] = "Opaque";
  REQUIRE(store.create("secrets", "kube-system", opaque).ok());
  for (const char* token :
       {"aaaaaa.0123456789abcdef", "bbbbbb.0123456789abcdef", "cccccc.0123456789abcdef"}) {
    INFO(token);
    CHECK_FALSE(authenticateBootstrapToken(store, token, clock.wallNow()));
  }
}
