// The payloads of configMap, secret, downwardAPI and projected volumes, and the volume preparer
// writing them under the pod's directory.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "agent/pod_directories.h"
#include "agent/volume/volume_sources.h"
#include "agent/volumes.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"
#include "test/unit/volume/fake_api_objects.h"

using namespace nodeagent;
using agent::ApiObjectKind;
using nlohmann::json;

namespace {

api::PodPtr pod() {
  return testing::PodBuilder()
      .name("web")
      .ns("ns")
      .uid("uid-1")
      .label("app", "web")
      .label("tier", "front \"end\"")
      .annotation("kubernetes.io/config.source", "api")
      .container("c", {"sleep", "1"})
      .build();
}

testing::FakeApiObjects objects() {
  testing::FakeApiObjects o;
  o.put(ApiObjectKind::kConfigMap, "ns", "app",
        {{"data", {{"a.conf", "A"}, {"b.conf", "B"}}}, {"binaryData", {{"bin", "AAE="}}}});
  o.put(ApiObjectKind::kSecret, "ns", "creds", {{"data", {{"password", "czNjcjN0"}}}});
  return o;
}

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("volume sources: a configMap gives every key, or the items listed", "[unit][volume]") {
  auto o = objects();
  auto all = agent::apiDataVolumePayload(*pod(), "configMap", {{"name", "app"}}, &o);
  REQUIRE(all.ok());
  CHECK(all->size() == 3);
  CHECK(all->at("a.conf") == agent::FileProjection{"A", 0644});
  CHECK(all->at("bin").data == std::string("\0\1", 2));

  auto items = agent::apiDataVolumePayload(*pod(), "configMap",
                                           {{"name", "app"},
                                            {"defaultMode", 0600},
                                            {"items",
                                             {{{"key", "a.conf"}, {"path", "etc/a"}},
                                              {{"key", "b.conf"}, {"path", "b"}, {"mode", 0400}}}}},
                                           &o);
  REQUIRE(items.ok());
  CHECK(items->size() == 2);
  CHECK(items->at("etc/a") == agent::FileProjection{"A", 0600});
  CHECK(items->at("b") == agent::FileProjection{"B", 0400});
}

TEST_CASE("volume sources: missing objects and keys fail as kubelet's unless optional",
          "[unit][volume]") {
  auto o = objects();
  auto missing = agent::apiDataVolumePayload(*pod(), "configMap", {{"name", "nope"}}, &o);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message() == "configmap \"nope\" not found");
  auto optional =
      agent::apiDataVolumePayload(*pod(), "configMap", {{"name", "nope"}, {"optional", true}}, &o);
  REQUIRE(optional.ok());
  CHECK(optional->empty());

  auto no_key = agent::apiDataVolumePayload(
      *pod(), "secret", {{"secretName", "creds"}, {"items", {{{"key", "user"}, {"path", "u"}}}}},
      &o);
  REQUIRE_FALSE(no_key.ok());
  CHECK(no_key.status().message() == "secret references non-existent secret key: user");

  auto no_apiserver =
      agent::apiDataVolumePayload(*pod(), "secret", {{"secretName", "creds"}}, nullptr);
  REQUIRE_FALSE(no_apiserver.ok());
  CHECK_THAT(no_apiserver.status().message(), Catch::Contains("--kubeconfig"));

  auto bad_mode = agent::apiDataVolumePayload(*pod(), "configMap",
                                              {{"name", "app"}, {"defaultMode", 01777}}, &o);
  REQUIRE_FALSE(bad_mode.ok());
  CHECK_THAT(bad_mode.status().message(), Catch::Contains("0777"));

  auto escaping = agent::apiDataVolumePayload(
      *pod(), "configMap", {{"name", "app"}, {"items", {{{"key", "a.conf"}, {"path", "../x"}}}}},
      &o);
  REQUIRE_FALSE(escaping.ok());

  auto malformed = agent::apiDataVolumePayload(*pod(), "configMap",
                                               {{"name", "app"}, {"items", "not a list"}}, &o);
  REQUIRE_FALSE(malformed.ok());
  CHECK(malformed.status().code() == base::StatusCode::kInvalidArgument);
}

TEST_CASE("volume sources: a secret's data is decoded", "[unit][volume]") {
  auto o = objects();
  auto secret = agent::apiDataVolumePayload(*pod(), "secret", {{"secretName", "creds"}}, &o);
  REQUIRE(secret.ok());
  CHECK(secret->at("password").data == "s3cr3t");
}

TEST_CASE("volume sources: downwardAPI writes the pod's metadata as kubelet formats it",
          "[unit][volume]") {
  auto payload = agent::apiDataVolumePayload(
      *pod(), "downwardAPI",
      {{"items",
        {{{"path", "labels"}, {"fieldRef", {{"fieldPath", "metadata.labels"}}}},
         {{"path", "name"}, {"fieldRef", {{"fieldPath", "metadata.name"}}}},
         {{"path", "app"}, {"fieldRef", {{"fieldPath", "metadata.labels['app']"}}}}}}},
      nullptr);
  REQUIRE(payload.ok());
  CHECK(payload->at("labels").data == "app=\"web\"\ntier=\"front \\\"end\\\"\"");
  CHECK(payload->at("name").data == "web");
  CHECK(payload->at("app").data == "web");

  // A limit the container does not set reads as the node's allocatable; a volume's item names
  // its container.
  auto resource = agent::apiDataVolumePayload(
      *pod(), "downwardAPI",
      {{"items",
        {{{"path", "cpu"},
          {"resourceFieldRef",
           {{"containerName", "c"}, {"resource", "limits.cpu"}, {"divisor", "1m"}}}},
         {{"path", "mem"},
          {"resourceFieldRef",
           {{"containerName", "c"}, {"resource", "limits.memory"}, {"divisor", "1Mi"}}}}}}},
      nullptr, {2000, int64_t{512} << 20, 0});
  REQUIRE(resource.ok());
  CHECK(resource->at("cpu").data == "2000");
  CHECK(resource->at("mem").data == "512");
  auto unnamed = agent::apiDataVolumePayload(
      *pod(), "downwardAPI",
      {{"items", {{{"path", "cpu"}, {"resourceFieldRef", {{"resource", "limits.cpu"}}}}}}},
      nullptr);
  REQUIRE_FALSE(unnamed.ok());
  CHECK(unnamed.status().message() ==
        "item \"cpu\": resourceFieldRef.containerName: Required value");
}

TEST_CASE("volume sources: projected merges its sources under one defaultMode", "[unit][volume]") {
  auto o = objects();
  auto payload = agent::apiDataVolumePayload(
      *pod(), "projected",
      {{"defaultMode", 0440},
       {"sources",
        {{{"configMap", {{"name", "app"}, {"items", {{{"key", "a.conf"}, {"path", "a"}}}}}}},
         {{"secret", {{"name", "creds"}}}},
         {{"downwardAPI",
           {{"items",
             {{{"path", "ns"}, {"fieldRef", {{"fieldPath", "metadata.namespace"}}}}}}}}}}}},
      &o);
  REQUIRE(payload.ok());
  CHECK(payload->size() == 3);
  CHECK(payload->at("a") == agent::FileProjection{"A", 0440});
  CHECK(payload->at("password").data == "s3cr3t");
  CHECK(payload->at("ns").data == "ns");

  // kube-api-access as a real cluster's admission adds it: token, CA bundle, namespace.
  o.put(ApiObjectKind::kConfigMap, "ns", "kube-root-ca.crt", {{"data", {{"ca.crt", "PEM"}}}});
  auto access = agent::apiDataVolumePayload(
      *pod(), "projected",
      {{"defaultMode", 0644},
       {"sources",
        {{{"serviceAccountToken", {{"path", "token"}, {"expirationSeconds", 3607}}}},
         {{"configMap",
           {{"name", "kube-root-ca.crt"}, {"items", {{{"key", "ca.crt"}, {"path", "ca.crt"}}}}}}},
         {{"downwardAPI",
           {{"items",
             {{{"path", "namespace"}, {"fieldRef", {{"fieldPath", "metadata.namespace"}}}}}}}}}}}},
      &o);
  REQUIRE(access.ok());
  CHECK(access->at("token") == agent::FileProjection{"token:default::uid-1", 0644});
  CHECK(access->at("ca.crt").data == "PEM");
  CHECK(access->at("namespace").data == "ns");
  auto no_apiserver = agent::apiDataVolumePayload(
      *pod(), "projected", {{"sources", {{{"serviceAccountToken", {{"path", "t"}}}}}}}, nullptr);
  REQUIRE_FALSE(no_apiserver.ok());
}

TEST_CASE("volume preparer: a configMap volume is written under the pod and mounted read-only",
          "[unit][volume]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  auto o = std::make_shared<testing::FakeApiObjects>(objects());
  agent::VolumePreparer volumes(dirs, false, o);
  auto p = testing::PodBuilder()
               .name("web")
               .ns("ns")
               .uid("uid-1")
               .annotation("kubernetes.io/config.source", "api")
               .container("c", {"sleep", "1"})
               .edit([](json& j) {
                 j["spec"]["volumes"] = {{{"name", "cfg"}, {"configMap", {{"name", "app"}}}}};
                 j["spec"]["containers"][0]["volumeMounts"] = {
                     {{"name", "cfg"}, {"mountPath", "/etc/app"}}};
               })
               .build();
  REQUIRE(dirs.ensure("uid-1").ok());
  auto prepared = volumes.prepare(*p);
  REQUIRE(prepared.ok());
  REQUIRE(prepared->size() == 1);
  const auto dir = root.path() / "pods" / "uid-1" / "volumes" / "kubernetes.io~configmap" / "cfg";
  CHECK((*prepared)[0].host_path == dir);
  CHECK(readFile(dir / "a.conf") == "A");

  auto mounts = agent::VolumePreparer::mountsFor(*p, p->spec->containers[0], *prepared);
  REQUIRE(mounts.ok());
  REQUIRE(mounts->size() == 1);
  CHECK((*mounts)[0].read_only);

  // An update reaches the file on the next prepare (the pod's next sync).
  o->put(ApiObjectKind::kConfigMap, "ns", "app", {{"data", {{"a.conf", "A2"}}}});
  REQUIRE(volumes.prepare(*p).ok());
  CHECK(readFile(dir / "a.conf") == "A2");
  CHECK_FALSE(std::filesystem::exists(std::filesystem::symlink_status(dir / "b.conf")));

  // A missing ConfigMap names the volume as kubelet's FailedMount event does.
  auto missing = testing::PodBuilder()
                     .name("other")
                     .ns("ns")
                     .uid("uid-2")
                     .annotation("kubernetes.io/config.source", "api")
                     .container("c", {"sleep", "1"})
                     .edit([](json& j) {
                       j["spec"]["volumes"] = {{{"name", "cfg"}, {"configMap", {{"name", "x"}}}}};
                     })
                     .build();
  REQUIRE(dirs.ensure("uid-2").ok());
  auto failed = volumes.prepare(*missing);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == base::StatusCode::kUnavailable);  // the next sync tries again
  CHECK(failed.status().message() ==
        "MountVolume.SetUp failed for volume \"cfg\" : configmap \"x\" not found");
}
