// Decoding manifests: document shape, kind/apiVersion, PodLists, decoder errors, hostile input.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <random>

#include "api/yaml.h"
#include "config/static_pod.h"
#include "test/support/test_util.h"
#include "test/unit/config/static_pod_test_util.h"

namespace nodeagent::config {
namespace {

using nlohmann::json;
using test::decodeFile;
using test::decodeHttp;
using test::errorLines;
using test::manifest;
using test::rawOf;

using Lines = std::vector<std::string>;

TEST_CASE("YAML and JSON manifests decode to the same pod", "[unit][config]") {
  auto yaml = decodeFile(manifest("web", "    ports:\n    - containerPort: 80\n"));
  auto json_result = decodeFile(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},
      "spec":{"containers":[{"name":"main","image":"nginx:1.25","ports":[{"containerPort":80}]}]}})");
  REQUIRE(yaml.ok());
  REQUIRE(json_result.ok());
  CHECK(*yaml.pods[0]->raw == *json_result.pods[0]->raw);
  CHECK(yaml.pods[0]->content_hash == json_result.pods[0]->content_hash);
}

TEST_CASE("empty manifests are errors", "[unit][config]") {
  CHECK(errorLines(decodeFile("")) == Lines{"empty manifest"});
  CHECK(errorLines(decodeFile(" \n\t\n")) == Lines{"empty manifest"});
  CHECK(errorLines(decodeFile("# only a comment\n")) == Lines{"empty manifest"});
  CHECK(errorLines(decodeFile("---\n")) == Lines{"empty manifest"});
}

TEST_CASE("a manifest must be a v1 Pod", "[unit][config]") {
  CHECK(errorLines(decodeFile("apiVersion: v1\nkind: Service\n")) ==
        Lines{R"(kind: Unsupported value: "Service": supported values: "Pod")"});
  CHECK(errorLines(decodeFile("apiVersion: v1\nkind: PodList\nitems: []\n")) ==
        Lines{R"(kind: Unsupported value: "PodList": supported values: "Pod")"});
  CHECK(errorLines(decodeHttp("apiVersion: v1\nkind: Service\n")) ==
        Lines{R"(kind: Unsupported value: "Service": supported values: "Pod", "PodList")"});
  CHECK(errorLines(decodeFile("apiVersion: v2\nkind: Pod\n")) ==
        Lines{R"(apiVersion: Unsupported value: "v2": supported values: "v1")"});
  CHECK(errorLines(decodeFile("kind: Pod\napiVersion: true\n")) ==
        Lines{R"(apiVersion: Unsupported value: true: supported values: "v1")"});
  CHECK(errorLines(decodeFile("metadata: {name: x}\n")) ==
        Lines{"kind: Required value", "apiVersion: Required value"});
  CHECK(errorLines(decodeFile("[1, 2]")) == Lines{"expected a Pod object, got an array"});
  CHECK(errorLines(decodeFile("42")) == Lines{"expected a Pod object, got a number"});
}

TEST_CASE("a PodList is decoded item by item for the HTTP source", "[unit][config]") {
  auto result = decodeHttp(R"({"apiVersion":"v1","kind":"PodList","items":[
      {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}},
      {"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","namespace":"ns"},
       "spec":{"containers":[{"name":"c","image":"x"}]}}]})");
  REQUIRE(result.ok());
  REQUIRE(result.pods.size() == 2);
  CHECK(result.pods[0]->metadata.name == "a-node1");
  CHECK(result.pods[0]->metadata.namespace_ == "default");
  CHECK(result.pods[1]->metadata.name == "b-node1");
  CHECK(result.pods[1]->metadata.namespace_ == "ns");
  for (const auto& pod : result.pods) CHECK(pod->spec->tolerations.empty());
  CHECK(rawOf(result, 0)["apiVersion"] == "v1");
  CHECK(rawOf(result, 0)["kind"] == "Pod");
}

TEST_CASE("a PodList with one bad item is rejected whole", "[unit][config]") {
  auto result = decodeHttp(R"({"apiVersion":"v1","kind":"PodList","items":[
      {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"x"}]}},
      {"metadata":{"name":"b"},"spec":{"containers":[{"name":"c"}]}},
      {"kind":"Service","metadata":{"name":"s"}},
      7]})");
  CHECK(result.pods.empty());
  CHECK(errorLines(result) ==
        Lines{"items[1].spec.containers[0].image: Required value",
              R"(items[2].kind: Unsupported value: "Service": supported values: "Pod")",
              "items[3]: expected a Pod object, got a number"});
}

TEST_CASE("an empty PodList gives no pods and no errors", "[unit][config]") {
  auto result = decodeHttp("apiVersion: v1\nkind: PodList\nitems: []\n");
  CHECK(result.ok());
  CHECK(result.pods.empty());
  auto no_items = decodeHttp("apiVersion: v1\nkind: PodList\n");
  CHECK(no_items.ok());
  CHECK(errorLines(decodeHttp("apiVersion: v1\nkind: PodList\nitems: {}\n")) ==
        Lines{"items: expected an array, got an object"});
}

TEST_CASE("decoder errors become field errors", "[unit][config]") {
  auto result = decodeFile(manifest("web", "    ports:\n    - containerPort: eighty\n"));
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].field == "spec.containers[0].ports[0].containerPort");
  CHECK_FALSE(result.errors[0].message.empty());
  CHECK(result.pods.empty());
}

TEST_CASE("errorText joins the errors as field: message lines", "[unit][config]") {
  DecodeResult result;
  result.errors = {{"spec.containers[1].name", "Required value"}, {"", "empty manifest"}};
  CHECK(result.errorText() == "spec.containers[1].name: Required value\nempty manifest");
  CHECK_FALSE(result.ok());
  CHECK(FieldError{"a.b", "Required value"}.toString() == "a.b: Required value");
}

TEST_CASE("manifests larger than 10 MiB are rejected before parsing", "[unit][config]") {
  std::string big = manifest("web") + "# " + std::string(api::kMaxConfigLength, 'x') + "\n";
  auto result = decodeFile(big);
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].message.find("10485760") != std::string::npos);
}

TEST_CASE("readManifestFile reads a manifest and names what is wrong with a path",
          "[unit][config]") {
  testing::TempDir dir;
  const std::string good = (dir.path() / "web.yaml").string();
  testing::writeFile(good, manifest("web"));
  auto content = readManifestFile(good, 1024);
  REQUIRE(content.ok());
  CHECK(*content == manifest("web"));

  auto missing = readManifestFile((dir.path() / "nope.yaml").string(), 1024);
  CHECK(missing.status().code() == base::StatusCode::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("cannot open"));

  auto directory = readManifestFile(dir.path().string(), 1024);
  CHECK(directory.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(directory.status().message() == "is a directory, not a manifest file");

  const std::string big = (dir.path() / "big.yaml").string();
  testing::writeFile(big, std::string(100 * 1024, 'x'));
  auto too_big = readManifestFile(big, 1000);
  CHECK(too_big.status().code() == base::StatusCode::kResourceExhausted);
  CHECK(too_big.status().message() == "manifest is larger than 1000 bytes");
  CHECK(readManifestFile(big, 100 * 1024).ok());  // exactly the limit

  // A FIFO (no writer) is refused at once, never waited on.
  const std::string fifo = (dir.path() / "fifo.yaml").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto pipe = readManifestFile(fifo, 1024);
  CHECK(pipe.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(pipe.status().message() == "is not a regular file");
}

TEST_CASE("annotations may total at most 256 KiB", "[unit][config]") {
  std::string fits(256 * 1024 - 200, 'a');
  auto ok = decodeFile(manifest("web", "", "", "  annotations:\n    big: " + fits + "\n"));
  CHECK(ok.ok());
  std::string too_big(256 * 1024, 'a');
  auto result = decodeFile(manifest("web", "", "", "  annotations:\n    big: " + too_big + "\n"));
  CHECK(errorLines(result) ==
        Lines{"metadata.annotations: Too long: may not be more than 262144 bytes"});
}

TEST_CASE("many containers decode and validate in one pass", "[unit][config]") {
  std::string text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\nspec:\n  containers:\n";
  for (int i = 0; i < 2000; ++i) text += "  - name: c" + std::to_string(i) + "\n    image: x\n";
  text += "  - name: c7\n";
  auto result = decodeFile(text);
  CHECK(errorLines(result) == Lines{"spec.containers[2000].name: Duplicate value: \"c7\"",
                                    "spec.containers[2000].image: Required value"});
}

TEST_CASE("hostile input is an error, never a crash", "[unit][config]") {
  std::vector<std::string> inputs = {
      std::string("\x01\x02\x03", 3),
      std::string("apiVersion: v1\0kind: Pod\n", 25),
      "\xff\xfe\xfd",
      std::string(200000, '['),
      std::string(200000, '{'),
      "a: &a [*a]\n",
      "a: &a\n  b: *a\n",
      "apiVersion: v1\nkind: Pod\nmetadata: !!binary aGVsbG8=\n",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"\\ud800\"\n",
      "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: x\n    image: x\n    ports:\n"
      "    - containerPort: 99999999999999999999999\n",
      "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: x\n    image: x\n    ports:\n"
      "    - containerPort: 1.5\n",
      "apiVersion: v1\nkind: Pod\nspec:\n  containers: [null]\n",
      "apiVersion: v1\nkind: Pod\nmetadata: []\nspec: 3\nstatus: x\n",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  uid: {}\n  annotations: 1\n",
      "apiVersion: v1\nkind: Pod\nspec:\n  tolerations: 5\n  containers:\n  - {}\n",
      "apiVersion: v1\nkind: PodList\nitems: [[], null, {kind: Pod, apiVersion: v1}]\n",
  };
  // A billion-laughs alias bomb.
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'k'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 10; ++i) bomb += std::string(i ? ", *" : "*") + prev;
    bomb += "]\n";
    prev = c;
  }
  inputs.push_back(bomb);
  for (const auto& input : inputs) {
    CAPTURE(input.substr(0, 80));
    auto file = decodeFile(input);
    CHECK_FALSE(file.ok());
    CHECK(file.pods.empty());
    auto http = decodeHttp(input);
    CHECK_FALSE(http.ok());
  }
}

TEST_CASE("random corruptions of a manifest never crash the decoder", "[unit][config]") {
  const std::string base = manifest("web",
                                    "    ports:\n    - name: http\n      containerPort: 80\n"
                                    "    env:\n    - name: A\n      value: b\n"
                                    "    resources:\n      limits:\n        cpu: 100m\n"
                                    "    livenessProbe:\n      httpGet:\n        port: http\n",
                                    "  volumes:\n  - name: v\n    hostPath:\n      path: /tmp\n");
  REQUIRE(decodeFile(base).ok());
  std::mt19937 rng(12345);  // fixed seed: the same corruptions on every run
  const std::string alphabet = " \n\t:-[]{}&*!|>'\"#%@`,?0123456789abcdefxyzABC\\";
  int decoded = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:
          text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 1:
          if (pos < text.size()) text.erase(pos, 1 + rng() % 8);
          break;
        default:
          if (pos < text.size()) text[pos] = static_cast<char>(rng() % 256);
      }
    }
    auto result = decodeFile(text);
    CHECK(result.ok() == result.errors.empty());
    CHECK(result.ok() != result.pods.empty());
    if (result.ok()) ++decoded;
  }
  CHECK(decoded > 0);
}

}  // namespace
}  // namespace nodeagent::config
