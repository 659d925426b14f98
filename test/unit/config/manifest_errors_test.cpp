// ManifestErrors' listener: told once per new content problem, never for a repeat or a read
// failure.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/manifest_errors.h"

using namespace nodeagent;

namespace {

struct Heard {
  std::vector<config::ManifestError> errors;
  config::ManifestErrors::Listener listener() {
    return [this](const config::ManifestError& e) { errors.push_back(e); };
  }
};

config::ManifestErrorDetail invalid(std::string text, std::string pod = "") {
  return config::ManifestErrorDetail{std::move(text), {"default", std::move(pod), "uid-1"}};
}

}  // namespace

TEST_CASE("manifest errors: the listener hears each new or changed content problem once",
          "[unit][config]") {
  config::ManifestErrors errors;
  Heard heard;
  errors.setListener(heard.listener());
  const base::SystemTime t0{};

  errors.set("file", "/m/a.yaml", "spec.containers[0].name: Invalid value", t0,
             invalid("spec.containers[0].name: Invalid value", "web-node1"));
  REQUIRE(heard.errors.size() == 1);
  CHECK(heard.errors[0].source == "file");
  CHECK(heard.errors[0].location == "/m/a.yaml");
  CHECK(heard.errors[0].invalid == "spec.containers[0].name: Invalid value");
  CHECK(heard.errors[0].pod.name == "web-node1");

  SECTION("a repeat (a relist of the unchanged file) is not heard") {
    errors.set("file", "/m/a.yaml", "spec.containers[0].name: Invalid value", t0,
               invalid("spec.containers[0].name: Invalid value", "web-node1"));
    CHECK(heard.errors.size() == 1);
  }
  SECTION("a different problem in the same file is heard") {
    errors.set("file", "/m/a.yaml", "metadata: expected a mapping", t0,
               invalid("metadata: expected a mapping"));
    REQUIRE(heard.errors.size() == 2);
    CHECK(heard.errors[1].pod.name.empty());
  }
  SECTION("a read failure added to the same problem is not heard again") {
    errors.set("http", "http://h/pods", "HTTP status 500", t0, {});
    errors.set("http", "http://h/pods", "connection refused\nbad", t0, invalid("bad"));
    REQUIRE(heard.errors.size() == 2);
    errors.set("http", "http://h/pods", "HTTP status 503\nbad", t0, invalid("bad"));
    errors.set("http", "http://h/pods", "bad", t0, invalid("bad"));
    CHECK(heard.errors.size() == 2);
  }
  SECTION("a problem cleared and back is heard again") {
    errors.clear("file", "/m/a.yaml");
    errors.set("file", "/m/a.yaml", "spec.containers[0].name: Invalid value", t0,
               invalid("spec.containers[0].name: Invalid value", "web-node1"));
    CHECK(heard.errors.size() == 2);
  }
}

TEST_CASE("manifest errors: a read failure alone is recorded but not heard", "[unit][config]") {
  config::ManifestErrors errors;
  Heard heard;
  errors.setListener(heard.listener());
  errors.set("file", "/m/a.yaml", "cannot open: Permission denied", base::SystemTime{});
  CHECK(errors.size() == 1);
  CHECK(heard.errors.empty());
}
