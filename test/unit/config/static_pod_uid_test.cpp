// Static pod UIDs: a versioned content hash of the API-defaulted manifest + node + source.
// The golden values pin the hash input layout: if one of them changes, every static pod on every
// upgraded node restarts. Change them only together with kStaticPodUidHashPrefix.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "config/pod_defaults.h"
#include "config/static_pod.h"
#include "test/unit/config/static_pod_test_util.h"

namespace nodeagent::config {
namespace {

using nlohmann::json;
using test::decodeFile;
using test::decodeHttp;
using test::manifest;

std::string uidOf(const DecodeResult& result) {
  REQUIRE(result.ok());
  REQUIRE(result.pods.size() == 1);
  return result.pods[0]->metadata.uid;
}

const char* const kYaml =
    "apiVersion: v1\n"
    "kind: Pod\n"
    "metadata:\n"
    "  name: web\n"
    "  labels:\n"
    "    app: web\n"
    "spec:\n"
    "  containers:\n"
    "  - name: main\n"
    "    image: nginx:1.25\n"
    "    ports:\n"
    "    - containerPort: 80\n";

TEST_CASE("static pod UIDs match their golden values", "[unit][config]") {
  // hash128("nodeagent/static-pod-uid/v1\n" + canonicalJson(pod) + "\nhost:node1\nsource:/x");
  // the values were checked against an independent MurmurHash3_x64_128 implementation.
  CHECK(staticPodUid(json::parse(R"({"apiVersion":"v1","kind":"Pod"})"), "node1", "/x") ==
        "64ad7b670fd9c56df9fae44a7c0187ea");
  CHECK(uidOf(decodeFile(kYaml, "node1", "/etc/nodeagent/manifests/web.yaml")) ==
        "57160d769cbd050ecd97c3597fe09df9");
  CHECK(uidOf(decodeHttp(kYaml, "http://10.0.0.1/pods")) == "ee649e57f763f5bfcb48925fd873410f");
}

TEST_CASE("the UID hashes the API-defaulted manifest before the static defaults",
          "[unit][config]") {
  json pod = json::parse(
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},
      "spec":{"containers":[{"name":"main","image":"nginx:1.25","ports":[{"containerPort":80}]}]}})");
  applyApiDefaults(pod);
  CHECK(uidOf(decodeFile(kYaml)) == staticPodUid(pod, "node1", test::kSource));
}

TEST_CASE("a source's seen time adds config.source and config.seen, and changes no UID or hash",
          "[unit][config]") {
  const bool is_file = GENERATE(true, false);
  auto decode = [&](std::string seen) {
    std::string yaml = kYaml;
    yaml.insert(yaml.find("  labels:"),
                "  annotations:\n    kubernetes.io/config.seen: from-the-author\n");
    return decodeManifest(yaml, ManifestSource{"node1", "/x", is_file, std::move(seen)}, false);
  };
  auto plain = decode("");
  auto stamped = decode("2026-11-29T10:00:00.5Z");
  REQUIRE(stamped.ok());
  const auto& ann = stamped.pods[0]->metadata.annotations;
  CHECK(ann.at("kubernetes.io/config.source") == (is_file ? "file" : "http"));
  CHECK(ann.at("kubernetes.io/config.seen") == "2026-11-29T10:00:00.5Z");
  CHECK(uidOf(stamped) == uidOf(plain));
  CHECK(ann.at("kubernetes.io/config.hash") ==
        plain.pods[0]->metadata.annotations.at("kubernetes.io/config.hash"));
  CHECK(plain.pods[0]->metadata.annotations.at("kubernetes.io/config.seen") == "from-the-author");
  CHECK(plain.pods[0]->metadata.annotations.count("kubernetes.io/config.source") == 0);
}

TEST_CASE("identical content gives an identical UID", "[unit][config]") {
  const std::string base = uidOf(decodeFile(kYaml));
  CHECK(uidOf(decodeFile(kYaml)) == base);

  SECTION("other formatting and key order") {
    CHECK(uidOf(decodeFile("kind: Pod\napiVersion: v1\nspec:\n  containers:\n"
                           "    - ports: [{containerPort: 80}]\n      image: 'nginx:1.25'\n"
                           "      name: main\nmetadata: {labels: {app: web}, name: web}\n"
                           "# trailing comment\n")) == base);
  }
  SECTION("JSON instead of YAML") {
    CHECK(uidOf(decodeFile(R"({"metadata":{"labels":{"app":"web"},"name":"web"},"apiVersion":"v1",
        "kind":"Pod","spec":{"containers":[{"image":"nginx:1.25","name":"main",
        "ports":[{"containerPort":80}]}]}})")) == base);
  }
  SECTION("defaults spelled out") {
    std::string explicit_defaults = std::string(kYaml) +
                                    "      protocol: TCP\n"
                                    "    imagePullPolicy: IfNotPresent\n"
                                    "  restartPolicy: Always\n"
                                    "  terminationGracePeriodSeconds: 30\n"
                                    "  dnsPolicy: ClusterFirst\n";
    CHECK(uidOf(decodeFile(explicit_defaults)) == base);
  }
  SECTION("the node name's case") { CHECK(uidOf(decodeFile(kYaml, "NODE1")) == base); }
}

TEST_CASE("any semantic change gives a different UID", "[unit][config]") {
  const std::string base = uidOf(decodeFile(kYaml));
  auto changed = [&](std::string_view from, std::string_view to) {
    std::string text = kYaml;
    auto pos = text.find(from);
    REQUIRE(pos != std::string::npos);
    text.replace(pos, from.size(), to);
    return uidOf(decodeFile(text));
  };
  CHECK(changed("nginx:1.25", "nginx:1.26") != base);
  CHECK(changed("app: web", "app: web2") != base);
  CHECK(changed("  labels:\n", "  annotations:\n    a: b\n  labels:\n") != base);
  CHECK(changed("containerPort: 80", "containerPort: 81") != base);
  CHECK(changed("name: main", "name: main2") != base);
  CHECK(changed("spec:\n", "spec:\n  restartPolicy: Never\n") != base);
  CHECK(changed("name: web", "name: web2") != base);
}

TEST_CASE("UIDs are unique per node and per source", "[unit][config]") {
  const std::string base = uidOf(decodeFile(kYaml, "node1", "/etc/nodeagent/manifests/a.yaml"));
  CHECK(uidOf(decodeFile(kYaml, "node2", "/etc/nodeagent/manifests/a.yaml")) != base);
  CHECK(uidOf(decodeFile(kYaml, "node1", "/etc/nodeagent/manifests/b.yaml")) != base);
  CHECK(uidOf(decodeHttp(kYaml, "http://10.0.0.1/pods")) != base);
}

TEST_CASE("PodList items get distinct UIDs from the same URL", "[unit][config]") {
  auto result = decodeHttp(R"({"apiVersion":"v1","kind":"PodList","items":[
      {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}},
      {"metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x"}]}}]})");
  REQUIRE(result.ok());
  REQUIRE(result.pods.size() == 2);
  CHECK(result.pods[0]->metadata.uid != result.pods[1]->metadata.uid);
}

}  // namespace
}  // namespace nodeagent::config
