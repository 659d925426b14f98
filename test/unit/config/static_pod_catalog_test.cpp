// The manifest catalog under test/data/manifests: every bad manifest gives exactly the errors in
// its sibling NAME.expected file, every good manifest decodes to one valid pod.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "config/static_pod.h"
#include "test/support/test_util.h"
#include "test/unit/config/static_pod_test_util.h"

namespace nodeagent::config {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> manifestsIn(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(testing::testDataPath("manifests/" + dir))) {
    if (entry.path().extension() != ".expected") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> readLines(const fs::path& path) {
  std::vector<std::string> lines;
  std::istringstream in(testing::readFile(path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

ManifestSource sourceFor(const fs::path& file) {
  return ManifestSource{"node1", "/etc/nodeagent/manifests/" + file.filename().string(), true};
}

TEST_CASE("every bad manifest in the catalog gives exactly its expected errors", "[unit][config]") {
  auto files = manifestsIn("bad");
  REQUIRE(files.size() >= 40);
  for (const auto& file : files) {
    CAPTURE(file.filename().string());
    fs::path expected_file = file;
    expected_file.replace_extension(".expected");
    REQUIRE(fs::exists(expected_file));
    auto expected = readLines(expected_file);
    REQUIRE_FALSE(expected.empty());
    auto result = decodeManifest(testing::readFile(file), sourceFor(file), false);
    CHECK(test::errorLines(result) == expected);
    CHECK(result.pods.empty());
  }
}

TEST_CASE("every good manifest in the catalog decodes to one valid pod", "[unit][config]") {
  auto files = manifestsIn("good");
  REQUIRE(files.size() >= 5);
  for (const auto& file : files) {
    CAPTURE(file.filename().string());
    auto result = decodeManifest(testing::readFile(file), sourceFor(file), false);
    CHECK(test::errorLines(result) == std::vector<std::string>{});
    REQUIRE(result.pods.size() == 1);
    const auto& pod = *result.pods[0];
    CHECK(pod.metadata.name.ends_with("-node1"));
    CHECK(pod.spec->node_name == "node1");
    CHECK(pod.status->phase == "Pending");
    // What a valid pod looks like after defaulting is valid too (defaulting is idempotent).
    CHECK(validatePod(pod).empty());
  }
}

}  // namespace
}  // namespace nodeagent::config
