// The pull-secret keyring (kubelet's credentialprovider): docker config parsing (auth vs
// username/password, dockerconfigjson vs dockercfg), the repository an image pulls from, registry
// matching (ports, paths, wildcards) and lookups in kubelet's order.
#include <catch2/catch.hpp>

#include <string>

#include "agent/images/keyring.h"

using namespace nodeagent::agent::images;

namespace {

DockerConfig config(const std::string& text, bool json_config = true) {
  auto parsed = parseDockerConfig(text, json_config);
  REQUIRE(parsed.ok());
  return *parsed;
}

RegistryCredential cred(std::string user, std::string password) {
  return RegistryCredential{std::move(user), std::move(password)};
}

}  // namespace

TEST_CASE("keyring: a dockerconfigjson's auth field is base64 user:password and wins",
          "[unit][images]") {
  // "alice:s3cr:et" padded, and "bob:pw" unpadded.
  auto parsed = config(R"({"auths": {
      "reg.example.com": {"auth": "YWxpY2U6czNjcjpldA==", "username": "x", "password": "y"},
      "other.example.com:5000": {"auth": "Ym9iOnB3"},
      "plain.example.com": {"username": "carol", "password": "pw", "email": "c@example.com"}}})");
  CHECK(parsed.at("reg.example.com") == cred("alice", "s3cr:et"));
  CHECK(parsed.at("other.example.com:5000") == cred("bob", "pw"));
  CHECK(parsed.at("plain.example.com") == cred("carol", "pw"));
  CHECK(config(R"({})").empty());
}

TEST_CASE("keyring: a dockercfg is the registry map itself", "[unit][images]") {
  auto parsed = config(R"({"https://index.docker.io/v1/": {"auth": "dTpw"}})", false);
  CHECK(parsed.at("https://index.docker.io/v1/") == cred("u", "p"));
}

TEST_CASE("keyring: a malformed docker config is an error that does not quote it",
          "[unit][images]") {
  auto not_json = parseDockerConfig("{\"auths\": topsecret", true);
  REQUIRE_FALSE(not_json.ok());
  CHECK(not_json.status().message().find("topsecret") == std::string::npos);

  auto bad_auth = parseDockerConfig(R"({"auths": {"r.io": {"auth": "bm9jb2xvbg=="}}})", true);
  REQUIRE_FALSE(bad_auth.ok());  // "nocolon"
  CHECK(bad_auth.status().message().find("must be formatted as base64(username:password)") !=
        std::string::npos);
  CHECK_FALSE(parseDockerConfig(R"({"auths": {"r.io": {"username": 5}}})", true).ok());
  CHECK_FALSE(parseDockerConfig(R"({"auths": []})", true).ok());
}

TEST_CASE("keyring: only the docker secret types with their key give credentials",
          "[unit][images]") {
  const std::string json = R"({"auths": {"r.io": {"username": "u", "password": "p"}}})";
  auto from = [](std::string_view type, std::map<std::string, std::string> data) {
    auto parsed = dockerConfigFromSecret(type, data);
    REQUIRE(parsed.ok());
    return *parsed;
  };
  CHECK(from(kSecretTypeDockerConfigJson, {{".dockerconfigjson", json}}).size() == 1);
  CHECK(from(kSecretTypeDockercfg, {{".dockercfg", R"({"r.io": {"auth": "dTpw"}})"}}).size() == 1);
  CHECK(from("Opaque", {{".dockerconfigjson", json}}).empty());
  CHECK(from(kSecretTypeDockerConfigJson, {{".dockercfg", json}}).empty());
  CHECK(from(kSecretTypeDockerConfigJson, {{".dockerconfigjson", ""}}).empty());
}

TEST_CASE("keyring: the repository an image pulls from is docker's normalized name",
          "[unit][images]") {
  CHECK(repositoryToPull("busybox") == "docker.io/library/busybox");
  CHECK(repositoryToPull("busybox:1.36") == "docker.io/library/busybox");
  CHECK(repositoryToPull("me/app:v1") == "docker.io/me/app");
  CHECK(repositoryToPull("index.docker.io/me/app") == "docker.io/me/app");
  CHECK(repositoryToPull("docker.io/busybox") == "docker.io/library/busybox");
  CHECK(repositoryToPull("127.0.0.1:5000/test/busybox:1") == "127.0.0.1:5000/test/busybox");
  CHECK(repositoryToPull("localhost/app@sha256:abcd") == "localhost/app");
  CHECK(repositoryToPull("quay.io/coreos/etcd:v3@sha256:abcd") == "quay.io/coreos/etcd");
}

TEST_CASE("keyring: registries match by host parts with wildcards and by port and path prefix",
          "[unit][images]") {
  CHECK(registryMatches("quay.io", "quay.io/coreos/etcd"));
  CHECK(registryMatches("quay.io/coreos", "quay.io/coreos/etcd"));
  CHECK_FALSE(registryMatches("quay.io/other", "quay.io/coreos/etcd"));
  CHECK(registryMatches("*.example.com", "reg.example.com/app"));
  CHECK_FALSE(registryMatches("*.example.com", "example.com/app"));
  CHECK_FALSE(registryMatches("*.example.com", "a.reg.example.com/app"));
  CHECK(registryMatches("*.*.example.com", "a.reg.example.com/app"));
  CHECK(registryMatches("127.0.0.1:5000", "127.0.0.1:5000/test/busybox"));
  CHECK_FALSE(registryMatches("127.0.0.1:5000", "127.0.0.1:5001/test/busybox"));
  CHECK_FALSE(registryMatches("127.0.0.1", "127.0.0.1:5000/test/busybox"));
  CHECK_FALSE(registryMatches("127.0.0.1:5000", "127.0.0.1/test/busybox"));
}

TEST_CASE("keyring: lookup answers every match most specific first and then the default registry",
          "[unit][images]") {
  Keyring keyring;
  keyring.add(config(R"({"auths": {
      "https://quay.io": {"username": "host", "password": "1"},
      "quay.io/coreos": {"username": "path", "password": "2"},
      "http://127.0.0.1:5000/v2/": {"username": "local", "password": "3"},
      "*.example.com": {"username": "wild", "password": "4"}}})"));
  keyring.add(config(R"({"auths": {"quay.io": {"username": "second", "password": "5"}}})"));

  CHECK(keyring.lookup("quay.io/coreos/etcd") ==
        std::vector{cred("path", "2"), cred("host", "1"), cred("second", "5")});
  CHECK(keyring.lookup("quay.io/other/app") == std::vector{cred("host", "1"), cred("second", "5")});
  CHECK(keyring.lookup("127.0.0.1:5000/test/busybox") == std::vector{cred("local", "3")});
  CHECK(keyring.lookup("reg.example.com/app") == std::vector{cred("wild", "4")});
  CHECK(keyring.lookup("127.0.0.1:5001/test/busybox").empty());
  CHECK(keyring.lookup("docker.io/library/busybox").empty());

  Keyring hub;
  hub.add(config(R"({"https://index.docker.io/v1/": {"auth": "dTpw"}})", false));
  CHECK(hub.lookup(repositoryToPull("busybox")) == std::vector{cred("u", "p")});
  CHECK(hub.lookup(repositoryToPull("me/app")) == std::vector{cred("u", "p")});
  CHECK(hub.lookup(repositoryToPull("quay.io/me/app")).empty());
  CHECK(Keyring().lookup("docker.io/library/busybox").empty());
}
