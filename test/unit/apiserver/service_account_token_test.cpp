#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/jwt.h"
#include "cmd/test-apiserver/resources.h"
#include "cmd/test-apiserver/service_account_token.h"
#include "cmd/test-apiserver/util.h"
#include "test/support/fake_clock.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using nodeagent::testing::FakeClock;
using namespace std::chrono_literals;

namespace {

constexpr char kIssuer[] = "https://kubernetes.default.svc.cluster.local";
// 2026-01-02T03:04:05Z
constexpr int64_t kStart = 1767323045;

std::unique_ptr<JwtKey> generatedKey() {
  auto key = JwtKey::generate();
  REQUIRE(key.ok());
  return std::move(*key);
}

// `key` (freed) as a PEM PKCS#8 private key.
std::string privateKeyPem(EVP_PKEY* key) {
  REQUIRE(key != nullptr);
  BIO* bio = BIO_new(BIO_s_mem());
  REQUIRE(PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string pem(data, static_cast<size_t>(n));
  BIO_free(bio);
  EVP_PKEY_free(key);
  return pem;
}

struct Fixture {
  Fixture(ServiceAccountTokenOptions options = {}) {
    at(kStart);
    auto key = generatedKey();
    key_id = key->keyId();
    tokens = std::make_unique<ServiceAccountTokens>(store, std::move(key), std::move(options));
  }

  // Sets the wall clock to `unix_seconds`.
  void at(int64_t unix_seconds) {
    clock.setWallTime(nodeagent::base::SystemTime(std::chrono::seconds(unix_seconds)));
  }

  // Checks that `token` is refused with `error`.
  void checkRefused(const std::string& token, const std::string& error) {
    const TokenVerdict v = verdict(token);
    CHECK_FALSE(v.authenticated);
    CHECK(v.error == error);
  }

  std::string uidOf(const std::string& resource, const std::string& ns, const std::string& name) {
    auto obj = store.get(resource, ns, name);
    REQUIRE(obj.ok());
    return (*obj)["metadata"]["uid"].get<std::string>();
  }

  json createPod(const std::string& name, const std::string& node = "",
                 const std::string& account = "") {
    json pod = {{"metadata", {{"name", name}}},
                {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
    if (!node.empty()) pod["spec"]["nodeName"] = node;
    if (!account.empty()) pod["spec"]["serviceAccountName"] = account;
    auto created = store.create("pods", "default", pod);
    REQUIRE(created.ok());
    return *created;
  }

  // A 201 answer's token.
  std::string token(const json& spec = json::object(), const std::string& name = "default") {
    auto [code, answer] = tokens->requestToken("default", name, {{"spec", spec}});
    INFO(answer.dump());
    REQUIRE(code == 201);
    return answer["status"]["token"].get<std::string>();
  }

  json claims(const std::string& token) {
    auto c = tokens->key().verify(token);
    REQUIRE(c.ok());
    return *c;
  }

  TokenVerdict verdict(const std::string& token, std::vector<std::string> audiences = {kIssuer}) {
    auto v = tokens->authenticate(token, audiences);
    REQUIRE(v.has_value());
    return *v;
  }

  FakeClock clock;
  Store store{clock};
  std::string key_id;
  std::unique_ptr<ServiceAccountTokens> tokens;
};

json jwtHeader(const std::string& token) {
  auto header = base64UrlDecode(token.substr(0, token.find('.')));
  REQUIRE(header.has_value());
  return json::parse(*header);
}

}  // namespace

TEST_CASE("TokenRequest: a token with kube-apiserver's claims, an hour and the API audience",
          "[unit][apiserver]") {
  Fixture f;
  auto [code, answer] = f.tokens->requestToken(
      "default", "default",
      {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}, {"spec", {}}});
  REQUIRE(code == 201);
  CHECK(answer["kind"] == "TokenRequest");
  CHECK(answer["apiVersion"] == "authentication.k8s.io/v1");
  CHECK(answer["metadata"] == json{{"name", "default"},
                                   {"namespace", "default"},
                                   {"creationTimestamp", "2026-01-02T03:04:05Z"}});
  CHECK(answer["spec"] ==
        json{{"audiences", {kIssuer}}, {"expirationSeconds", 3600}, {"boundObjectRef", nullptr}});
  CHECK(answer["status"]["expirationTimestamp"] == "2026-01-02T04:04:05Z");

  const std::string token = answer["status"]["token"];
  CHECK(jwtHeader(token) == json{{"alg", "ES256"}, {"kid", f.key_id}});
  json claims = f.claims(token);
  CHECK(claims["iss"] == kIssuer);
  CHECK(claims["sub"] == "system:serviceaccount:default:default");
  CHECK(claims["aud"] == kIssuer);  // one audience: a string, as go-jose writes it
  CHECK(claims["iat"] == kStart);
  CHECK(claims["nbf"] == kStart);
  CHECK(claims["exp"] == kStart + 3600);
  CHECK(claims["jti"].get<std::string>().size() == 36);
  CHECK(claims["kubernetes.io"] ==
        json{{"namespace", "default"},
             {"serviceaccount",
              {{"name", "default"}, {"uid", f.uidOf("serviceaccounts", "default", "default")}}}});
  // Every token is new.
  CHECK(f.claims(f.token())["jti"] != claims["jti"]);
}

TEST_CASE("TokenRequest: requested audiences and expiry, a custom issuer and API audiences",
          "[unit][apiserver]") {
  ServiceAccountTokenOptions options;
  options.issuer = "https://issuer.example";
  options.api_audiences = {"api-a", "api-b"};
  Fixture f(options);
  auto [code, answer] = f.tokens->requestToken(
      "default", "default",
      {{"spec", {{"audiences", {"vault", "x"}}, {"expirationSeconds", 600}}}});
  REQUIRE(code == 201);
  CHECK(answer["spec"]["audiences"] == json{"vault", "x"});
  CHECK(answer["status"]["expirationTimestamp"] == "2026-01-02T03:14:05Z");
  json claims = f.claims(answer["status"]["token"]);
  CHECK(claims["iss"] == "https://issuer.example");
  CHECK(claims["aud"] == json{"vault", "x"});
  CHECK(claims["exp"] == kStart + 600);

  CHECK(f.claims(f.token())["aud"] == json{"api-a", "api-b"});
}

TEST_CASE(
    "TokenRequest: kube-apiserver's 422 for an expiry under ten minutes or over 2^32 s and "
    "for another name or namespace",
    "[unit][apiserver]") {
  Fixture f;
  auto [short_code, short_answer] =
      f.tokens->requestToken("default", "default", {{"spec", {{"expirationSeconds", 599}}}});
  CHECK(short_code == 422);
  CHECK(short_answer["reason"] == "Invalid");
  CHECK(short_answer["message"] ==
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid "
        "value: 599: may not specify a duration less than 10 minutes");
  CHECK(short_answer["details"]["causes"][0]["field"] == "spec.expirationSeconds");
  CHECK(short_answer["details"]["group"] == "authentication.k8s.io");

  auto [long_code, long_answer] = f.tokens->requestToken(
      "default", "default", {{"spec", {{"expirationSeconds", (int64_t{1} << 32) + 1}}}});
  CHECK(long_code == 422);
  CHECK(long_answer["message"].get<std::string>().ends_with(
      "may not specify a duration larger than 2^32 seconds"));

  auto [name_code, name_answer] =
      f.tokens->requestToken("default", "default", {{"metadata", {{"name", "other"}}}});
  CHECK(name_code == 422);
  CHECK(name_answer["message"] ==
        "TokenRequest.authentication.k8s.io \"default\" is invalid: metadata.name: Invalid "
        "value: \"other\": must match the service account name if specified");
  auto [ns_code, ns_answer] =
      f.tokens->requestToken("default", "default", {{"metadata", {{"namespace", "kube-system"}}}});
  CHECK(ns_code == 422);

  auto [type_code, type_answer] =
      f.tokens->requestToken("default", "default", {{"spec", {{"expirationSeconds", "1h"}}}});
  CHECK(type_code == 400);
}

TEST_CASE(
    "TokenRequest: 404 for a missing service account or bound object, 400 for another "
    "kind or a pod of another service account, 409 for another UID",
    "[unit][apiserver]") {
  Fixture f;
  auto [missing_code, missing] = f.tokens->requestToken("default", "x", json::object());
  CHECK(missing_code == 404);
  CHECK(missing["reason"] == "NotFound");
  CHECK(missing["message"] == "serviceaccounts \"x\" not found");
  CHECK(f.tokens->requestToken("nope", "default", json::object()).first == 404);

  auto bound = [&](json ref, const std::string& account = "default") {
    return f.tokens->requestToken("default", account, {{"spec", {{"boundObjectRef", ref}}}});
  };
  auto [no_pod_code, no_pod] = bound({{"kind", "Pod"}, {"apiVersion", "v1"}, {"name", "web"}});
  CHECK(no_pod_code == 404);
  CHECK(no_pod["message"] == "pods \"web\" not found");
  CHECK(bound({{"kind", "Secret"}, {"apiVersion", "v1"}, {"name", "s"}}).second["message"] ==
        "secrets \"s\" not found");

  auto [kind_code, kind] = bound({{"kind", "ConfigMap"}, {"apiVersion", "v1"}, {"name", "c"}});
  CHECK(kind_code == 400);
  CHECK(kind["message"] ==
        "cannot bind token for serviceaccount \"default\" to object of type /v1, Kind=ConfigMap.");
  CHECK(bound({{"kind", "Pod"}, {"apiVersion", "apps/v1"}, {"name", "web"}}).first == 400);

  const json pod = f.createPod("web");
  auto [uid_code, uid] =
      bound({{"kind", "Pod"}, {"apiVersion", "v1"}, {"name", "web"}, {"uid", "not-the-uid"}});
  CHECK(uid_code == 409);
  CHECK(uid["reason"] == "Conflict");
  CHECK(uid["message"] ==
        "Operation cannot be fulfilled on Pod \"web\": the UID in the bound object reference "
        "(not-the-uid) does not match the UID in record. The object might have been deleted "
        "and then recreated");

  REQUIRE(f.store.create("serviceaccounts", "default", {{"metadata", {{"name", "robot"}}}}).ok());
  auto [account_code, account] = bound({{"kind", "Pod"}, {"name", "web"}}, "robot");
  CHECK(account_code == 400);
  CHECK(account["message"] ==
        "cannot bind token for serviceaccount \"robot\" to pod running with different "
        "serviceaccount name.");
}

TEST_CASE(
    "TokenRequest bound to a pod: the pod's and its node's claims, and the year-long "
    "token for kubelet's 3607 s",
    "[unit][apiserver]") {
  Fixture f;
  REQUIRE(f.store.create("nodes", "", {{"metadata", {{"name", "node1"}}}}).ok());
  const json pod = f.createPod("web", "node1");
  const std::string pod_uid = pod["metadata"]["uid"];
  const json ref = {{"kind", "Pod"}, {"apiVersion", "v1"}, {"name", "web"}, {"uid", pod_uid}};
  auto [code, answer] =
      f.tokens->requestToken("default", "default", {{"spec", {{"boundObjectRef", ref}}}});
  REQUIRE(code == 201);
  CHECK(answer["spec"]["boundObjectRef"] == ref);
  json k8s = f.claims(answer["status"]["token"])["kubernetes.io"];
  CHECK(k8s["pod"] == json{{"name", "web"}, {"uid", pod_uid}});
  CHECK(k8s["node"] == json{{"name", "node1"}, {"uid", f.uidOf("nodes", "", "node1")}});
  CHECK_FALSE(k8s.contains("warnafter"));

  // A pod on a node the server does not know: the node by name.
  f.createPod("elsewhere", "node9");
  json elsewhere =
      f.claims(f.token({{"boundObjectRef", {{"kind", "Pod"}, {"name", "elsewhere"}}}}));
  CHECK(elsewhere["kubernetes.io"]["node"] == json{{"name", "node9"}});

  auto [ext_code, extended] = f.tokens->requestToken(
      "default", "default", {{"spec", {{"boundObjectRef", ref}, {"expirationSeconds", 3607}}}});
  REQUIRE(ext_code == 201);
  CHECK(extended["status"]["expirationTimestamp"] == "2026-01-02T04:04:12Z");
  json ext_claims = f.claims(extended["status"]["token"]);
  CHECK(ext_claims["exp"] == kStart + 365 * 24 * 3600);
  CHECK(ext_claims["kubernetes.io"]["warnafter"] == kStart + 3607);
  // Not for other audiences, and not when turned off.
  CHECK(f.claims(f.token({{"boundObjectRef", ref},
                          {"expirationSeconds", 3607},
                          {"audiences", {"vault"}}}))["exp"] == kStart + 3607);
  ServiceAccountTokenOptions off;
  off.extend_expiration = false;
  Fixture g(off);
  g.createPod("web");
  CHECK(g.claims(g.token({{"boundObjectRef", {{"kind", "Pod"}, {"name", "web"}}},
                          {"expirationSeconds", 3607}}))["exp"] == kStart + 3607);
}

TEST_CASE(
    "service account tokens authenticate as the service account with kube-apiserver's "
    "groups and extra, until they expire",
    "[unit][apiserver]") {
  Fixture f;
  const json pod = f.createPod("web");
  const std::string pod_uid = pod["metadata"]["uid"];
  const std::string token = f.token({{"boundObjectRef", {{"kind", "Pod"}, {"name", "web"}}}});
  const std::string jti = f.claims(token)["jti"];
  TokenVerdict v = f.verdict(token);
  CHECK(v.authenticated);
  CHECK(v.error.empty());
  CHECK(v.audiences == std::vector<std::string>{kIssuer});
  CHECK(v.user.username == "system:serviceaccount:default:default");
  CHECK(v.user.uid == f.uidOf("serviceaccounts", "default", "default"));
  CHECK(v.user.groups ==
        std::vector<std::string>{"system:serviceaccounts", "system:serviceaccounts:default"});
  using Extra = std::map<std::string, std::vector<std::string>>;
  CHECK(v.user.extra == Extra{{"authentication.kubernetes.io/credential-id", {"JTI=" + jti}},
                              {"authentication.kubernetes.io/pod-name", {"web"}},
                              {"authentication.kubernetes.io/pod-uid", {pod_uid}}});

  // A token of no pod has no pod extra.
  CHECK(f.verdict(f.token()).user.extra.size() == 1);

  // Expired: an hour and go-jose's minute of leeway later.
  f.at(kStart + 3600 + 60);
  CHECK(f.verdict(token).authenticated);
  f.at(kStart + 3600 + 61);
  f.checkRefused(token, "service account token has expired");
  // Not valid yet (a clock behind the issuer's by more than the leeway).
  f.at(kStart - 61);
  CHECK_FALSE(f.verdict(token).authenticated);
}

TEST_CASE("service account tokens: audiences, other issuers, bad signatures and keys",
          "[unit][apiserver]") {
  Fixture f;
  const std::string vault = f.token({{"audiences", {"vault", "db"}}});
  TokenVerdict v = f.verdict(vault);
  CHECK_FALSE(v.authenticated);
  CHECK(v.error ==
        "token audiences [\"vault\" \"db\"] is invalid for the target audiences "
        "[\"https://kubernetes.default.svc.cluster.local\"]");
  v = f.verdict(vault, {"db", "other"});
  CHECK(v.authenticated);
  CHECK(v.audiences == std::vector<std::string>{"db"});

  // Not a JWT, or another issuer's: not this authenticator's to judge.
  CHECK_FALSE(f.tokens->authenticate("s3cret", {kIssuer}).has_value());
  ServiceAccountTokenOptions other_issuer;
  other_issuer.issuer = "https://other.example";
  Fixture other(other_issuer);
  CHECK_FALSE(f.tokens->authenticate(other.token(), {kIssuer}).has_value());

  // Same issuer, another key: the signature does not verify.
  Fixture other_key;
  v = f.verdict(other_key.token());
  CHECK_FALSE(v.authenticated);
  CHECK(v.error == "go-jose/go-jose: error in cryptographic primitive");

  // A payload changed after signing.
  const std::string token = f.token();
  const size_t first = token.find('.');
  const size_t second = token.find('.', first + 1);
  json claims = f.claims(token);
  claims["sub"] = "system:serviceaccount:default:admin";
  const std::string forged =
      token.substr(0, first + 1) + base64UrlEncode(claims.dump()) + token.substr(second);
  CHECK_FALSE(f.verdict(forged).authenticated);
  // alg "none" with no signature.
  const std::string none =
      base64UrlEncode(R"({"alg":"none"})") + "." + base64UrlEncode(claims.dump()) + ".";
  CHECK_FALSE(f.verdict(none).authenticated);
  CHECK(f.verdict(token).authenticated);
}

TEST_CASE(
    "service account tokens: refused once the service account or bound pod is gone or "
    "recreated",
    "[unit][apiserver]") {
  Fixture f;
  REQUIRE(f.store.create("nodes", "", {{"metadata", {{"name", "node1"}}}}).ok());
  f.createPod("web", "node1");
  f.createPod("gone");
  const std::string web = f.token({{"boundObjectRef", {{"kind", "Pod"}, {"name", "web"}}}});
  const std::string gone = f.token({{"boundObjectRef", {{"kind", "Pod"}, {"name", "gone"}}}});
  REQUIRE(f.verdict(web).authenticated);
  REQUIRE(f.verdict(gone).authenticated);

  // A pod without a node is removed at once; recreated, it has another UID.
  REQUIRE(f.store.remove("pods", "default", "gone").ok());
  f.checkRefused(gone, "service account token has been invalidated");
  const std::string new_uid = f.createPod("gone")["metadata"]["uid"];
  TokenVerdict v = f.verdict(gone);
  CHECK_FALSE(v.authenticated);
  CHECK(v.error.starts_with("pod UID (" + new_uid + ") does not match service account pod ref"));

  // A pod on a node is deleted gracefully: its deletionTimestamp is the end of its 30 s grace
  // period, and its token holds for a minute after that.
  REQUIRE(f.store.remove("pods", "default", "web").ok());
  f.at(kStart + 30 + 60);
  CHECK(f.verdict(web).authenticated);
  f.at(kStart + 30 + 61);
  f.checkRefused(web, "service account token has been invalidated");

  // A secret-bound token, and the service account recreated under its name.
  REQUIRE(f.store.create("secrets", "default", {{"metadata", {{"name", "s"}}}}).ok());
  const std::string secret = f.token({{"boundObjectRef", {{"kind", "Secret"}, {"name", "s"}}}});
  CHECK(f.verdict(secret).authenticated);
  REQUIRE(f.store.remove("secrets", "default", "s").ok());
  CHECK_FALSE(f.verdict(secret).authenticated);
  REQUIRE(f.store.create("serviceaccounts", "default", {{"metadata", {{"name", "robot"}}}}).ok());
  const std::string robot = f.token({}, "robot");
  REQUIRE(f.verdict(robot).authenticated);
  REQUIRE(f.store.remove("serviceaccounts", "default", "robot").ok());
  f.checkRefused(robot, "serviceaccounts \"robot\" not found");
  REQUIRE(f.store.create("serviceaccounts", "default", {{"metadata", {{"name", "robot"}}}}).ok());
  v = f.verdict(robot);
  CHECK_FALSE(v.authenticated);
  CHECK(v.error.starts_with("service account UID ("));
}

TEST_CASE("JwtKey: RS256 from a PEM RSA key, ES256 generated, and keys it refuses",
          "[unit][apiserver]") {
  auto rsa =
      JwtKey::fromPem(privateKeyPem(EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{2048})));
  REQUIRE(rsa.ok());
  CHECK((*rsa)->algorithm() == "RS256");
  auto signed_token = (*rsa)->sign({{"sub", "x"}});
  REQUIRE(signed_token.ok());
  CHECK(jwtHeader(*signed_token) == json{{"alg", "RS256"}, {"kid", (*rsa)->keyId()}});
  auto verified = (*rsa)->verify(*signed_token);
  REQUIRE(verified.ok());
  CHECK(*verified == json{{"sub", "x"}});
  CHECK((*rsa)->keyId().size() == 43);  // 32 bytes of SHA-256, unpadded base64url

  auto ec = generatedKey();
  CHECK(ec->algorithm() == "ES256");
  CHECK(ec->keyId() != (*rsa)->keyId());
  // An ES256 signature is r || s, 64 bytes.
  auto es_token = ec->sign({{"sub", "x"}});
  REQUIRE(es_token.ok());
  auto sig = base64UrlDecode(es_token->substr(es_token->rfind('.') + 1));
  REQUIRE(sig.has_value());
  CHECK(sig->size() == 64);
  CHECK(ec->verify(*es_token).ok());
  // One key's tokens are not the other's.
  CHECK_FALSE(ec->verify(*signed_token).ok());
  CHECK_FALSE((*rsa)->verify(*es_token).ok());
  CHECK_FALSE(ec->verify("a.b").ok());

  CHECK_FALSE(JwtKey::fromPem("not a key").ok());
  auto refused = JwtKey::fromPem(privateKeyPem(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519")));
  CHECK_FALSE(refused.ok());
  auto missing = JwtKey::fromPemFile("/nonexistent/sa.key");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("/nonexistent/sa.key") != std::string::npos);
}

TEST_CASE("TokenReview of a service account token, and discovery of serviceaccounts/token",
          "[unit][apiserver]") {
  Fixture f;
  f.createPod("web");
  const std::string token = f.token({{"boundObjectRef", {{"kind", "Pod"}, {"name", "web"}}}});
  TokenAuthenticator authenticate = [&](const std::string& t,
                                        const std::vector<std::string>& audiences) {
    return f.tokens->authenticate(t, audiences).value_or(TokenVerdict{});
  };
  auto [code, review] =
      reviewToken({{"spec", {{"token", token}}}}, authenticate, f.tokens->apiAudiences());
  CHECK(code == 201);
  const json status = review["status"];
  CHECK(status["authenticated"] == true);
  CHECK(status["audiences"] == json{kIssuer});
  CHECK(status["user"]["username"] == "system:serviceaccount:default:default");
  CHECK(status["user"]["groups"] ==
        json{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"});
  CHECK(status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == json{"web"});

  auto [vault_code, vault] = reviewToken({{"spec", {{"token", token}, {"audiences", {"vault"}}}}},
                                         authenticate, f.tokens->apiAudiences());
  CHECK(vault["status"]["authenticated"] == false);
  CHECK(vault["status"]["error"].get<std::string>().starts_with("token audiences"));

  const json discovery = apiResourceListDocument("", "v1");
  json entry;
  for (const json& r : discovery["resources"]) {
    if (r["name"] == "serviceaccounts/token") entry = r;
  }
  CHECK(entry == json{{"name", "serviceaccounts/token"},
                      {"singularName", ""},
                      {"namespaced", true},
                      {"group", "authentication.k8s.io"},
                      {"version", "v1"},
                      {"kind", "TokenRequest"},
                      {"verbs", {"create"}}});
}
