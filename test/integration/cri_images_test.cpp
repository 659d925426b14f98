// CriRuntime's images against a containerd of the test's own (test/support/containerd.h), and the
// agent's ImageManager on top of it: the status of an imported test image and of a missing one, a
// pull that fails, and the pull policies. The only registry named is on the loopback address
// (127.0.0.1:1, where nothing listens): no test reaches beyond the machine.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/images/image_manager.h"
#include "agent/runtime/cri/cri_runtime.h"
#include "test/support/containerd.h"
#include "test/support/cri_runtime_fixture.h"
#include "test/support/pod_builder.h"
#include "test/support/run_awaitable.h"

using namespace nodeagent;
using namespace nodeagent::runtime;

namespace {

// A registry on the loopback address where nothing listens: its pulls are refused at once.
constexpr const char* kUnreachableImage = "127.0.0.1:1/nodeagent/missing:1";

struct Event {
  std::string type, reason, message;
};

struct Fixture : testing::CriRuntimeFixture {
  std::vector<Event> events;
  std::unique_ptr<agent::images::ImageManager> images;

  Fixture() {
    images = std::make_unique<agent::images::ImageManager>(
        base::realClock(), *runtime,
        [this](const api::Pod&, const std::string& type, const std::string& reason,
               const std::string& message, const std::string&) {
          events.push_back({type, reason, message});
        });
  }

  std::optional<ImageInfo> status(const std::string& image) {
    auto s = run(runtime->imageStatus(image));
    INFO(s.status().message());
    REQUIRE(s.ok());
    return *s;
  }
  agent::images::EnsureImageResult ensure(const std::string& image, const std::string& policy) {
    auto pod = testing::PodBuilder()
                   .name("web")
                   .uid("uid-images")
                   .container("main", {"sleep", "100"}, image)
                   .edit([&](nlohmann::json& j) {
                     j["spec"]["containers"][0]["imagePullPolicy"] = policy;
                   })
                   .build();
    events.clear();
    return testing::runAwaitable(ioc, images->ensureImageExists(pod, pod->spec->containers[0]));
  }
};

}  // namespace

TEST_CASE("cri images: the status of a held image, nullopt for a missing one",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  CHECK(f.runtime->runsImages());

  auto busybox = f.status("nodeagent.test/busybox:1");
  REQUIRE(busybox.has_value());
  CHECK(busybox->id.starts_with("sha256:"));
  CHECK(std::find(busybox->repo_tags.begin(), busybox->repo_tags.end(),
                  "nodeagent.test/busybox:1") != busybox->repo_tags.end());
  CHECK(busybox->size > 0);
  CHECK(busybox->uid.value_or(0) == 0);  // no User: root

  auto nonroot = f.status("nodeagent.test/busybox-nonroot:1");
  REQUIRE(nonroot.has_value());
  CHECK(nonroot->uid == int64_t{1000});
  CHECK(nonroot->id != busybox->id);

  // The ID names the image too.
  auto by_id = f.status(busybox->id);
  REQUIRE(by_id.has_value());
  CHECK(by_id->id == busybox->id);

  CHECK_FALSE(f.status("nodeagent.test/missing:1").has_value());
  CHECK_FALSE(f.status(kUnreachableImage).has_value());
}

TEST_CASE("cri images: pulling from an unreachable registry fails", "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  auto pulled = f.run(f.runtime->pullImage(kUnreachableImage, std::nullopt));
  REQUIRE_FALSE(pulled.ok());
  INFO(pulled.status().message());
  CHECK(pulled.status().message().find("127.0.0.1:1") != std::string::npos);
  CHECK_FALSE(f.status(kUnreachableImage).has_value());
}

TEST_CASE("cri images: the image manager's pull policies on containerd", "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  Fixture f;
  SECTION("Never with a missing image: ErrImageNeverPull") {
    auto r = f.ensure("nodeagent.test/missing:1", "Never");
    CHECK(r.reason == "ErrImageNeverPull");
    CHECK(r.message ==
          "Container image \"nodeagent.test/missing:1\" is not present with pull policy of Never");
    REQUIRE(f.events.size() == 1);
    CHECK(f.events[0].reason == "ErrImageNeverPull");
  }
  SECTION("IfNotPresent with a held image: its ID, no pull") {
    auto held = f.status("nodeagent.test/busybox:1");
    REQUIRE(held.has_value());
    auto r = f.ensure("nodeagent.test/busybox:1", "IfNotPresent");
    CHECK(r.ok());
    CHECK(r.image_ref == held->id);
    REQUIRE(f.events.size() == 1);
    CHECK(f.events[0].message ==
          "Container image \"nodeagent.test/busybox:1\" already present on machine");
  }
  SECTION("IfNotPresent with an unreachable image: ErrImagePull, then ImagePullBackOff") {
    auto r = f.ensure(kUnreachableImage, "IfNotPresent");
    INFO(r.message);
    CHECK(r.reason == "ErrImagePull");
    CHECK(r.message.find("127.0.0.1:1") != std::string::npos);
    REQUIRE(f.events.size() == 2);
    CHECK(f.events[0].reason == "Pulling");
    CHECK(f.events[1].reason == "Failed");
    CHECK(f.ensure(kUnreachableImage, "IfNotPresent").reason == "ImagePullBackOff");
  }
}
