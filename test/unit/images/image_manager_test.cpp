// ImageManager (kubelet's EnsureImageExists) against the FakeRuntime on the fake clock: each pull
// policy with the image present and missing, pull failures and their backoff, the events and
// messages, and the default tag and policy of a reference.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/images/image_manager.h"
#include "agent/runtime/fake_runtime.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"
#include "test/support/run_awaitable.h"
#include "test/unit/images/image_events.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using agent::images::EnsureImageResult;

namespace {

using Event = testing::ImageEvent;

struct Harness {
  asio::io_context ioc;
  testing::FakeClock clock;
  runtime::FakeRuntime runtime{ioc.get_executor(), clock};
  std::vector<Event> events;
  agent::images::ImageManager images{clock, runtime, testing::recordInto(events)};

  Harness() { runtime.setRunsImages(true); }

  EnsureImageResult ensure(const api::PodPtr& pod, size_t index = 0) {
    events.clear();
    return testing::runAwaitable(ioc, images.ensureImageExists(pod, pod->spec->containers[index]));
  }
  std::vector<std::string> reasons() const { return testing::reasonsOf(events); }
};

api::PodPtr podWith(const std::string& image, const std::string& policy,
                    const std::string& uid = "uid-1") {
  return testing::PodBuilder()
      .name("web")
      .uid(uid)
      .container("main", {"sleep", "100"}, image)
      .edit([&](nlohmann::json& j) {
        if (!policy.empty()) j["spec"]["containers"][0]["imagePullPolicy"] = policy;
      })
      .build();
}

constexpr const char* kField = "spec.containers{main}";

}  // namespace

TEST_CASE("images: IfNotPresent uses a present image and pulls a missing one", "[unit][images]") {
  Harness h;
  SECTION("present: no pull, a Pulled event that says so") {
    h.runtime.addImage("busybox:1", runtime::ImageInfo{"sha256:abc", {}, {}, 0, 1000, ""});
    auto r = h.ensure(podWith("busybox:1", "IfNotPresent"));
    CHECK(r.ok());
    CHECK(r.image_ref == "sha256:abc");
    // What ImageStatus said, for the start: the runtime need not ask again.
    REQUIRE(r.image.has_value());
    CHECK(r.image->id == "sha256:abc");
    CHECK(r.image->uid == 1000);
    CHECK(h.runtime.pulls().empty());
    CHECK(h.events ==
          std::vector<Event>{{"Normal", "Pulled",
                              "Container image \"busybox:1\" already present on machine", kField}});
  }
  SECTION("missing: pulled, Pulling then Pulled with the pull's duration") {
    h.runtime.setPullDelay(1500ms);
    auto pod = podWith("busybox:1", "IfNotPresent");
    std::optional<EnsureImageResult> result;
    asio::co_spawn(h.ioc, h.images.ensureImageExists(pod, pod->spec->containers[0]),
                   [&](std::exception_ptr, EnsureImageResult r) { result = std::move(r); });
    h.ioc.poll();
    CHECK_FALSE(result.has_value());
    h.clock.advance(1500ms);
    h.ioc.poll();
    REQUIRE(result.has_value());
    CHECK(result->ok());
    CHECK(result->image_ref == "sha256:fake-busybox:1");
    CHECK_FALSE(result->image.has_value());  // the runtime looks the pulled image up itself
    CHECK(h.runtime.pulls() == std::vector<std::string>{"busybox:1"});
    CHECK(h.runtime.pullsWithAuth() == 0);  // anonymous
    CHECK(h.events ==
          std::vector<Event>{
              {"Normal", "Pulling", "Pulling image \"busybox:1\"", kField},
              {"Normal", "Pulled", "Successfully pulled image \"busybox:1\" in 1.5s", kField}});
  }
}

TEST_CASE("images: Always pulls even a present image", "[unit][images]") {
  Harness h;
  h.runtime.addImage("busybox:1");
  for (int i = 1; i <= 2; ++i) {
    auto r = h.ensure(podWith("busybox:1", "Always"));
    CHECK(r.ok());
    CHECK(h.runtime.pulls().size() == static_cast<size_t>(i));
    CHECK(h.reasons() == std::vector<std::string>{"Pulling", "Pulled"});
    CHECK(h.events[1].message == "Successfully pulled image \"busybox:1\" in 0s");
  }
}

TEST_CASE("images: Never uses a present image and refuses a missing one", "[unit][images]") {
  Harness h;
  SECTION("present") {
    h.runtime.addImage("busybox:1");
    auto r = h.ensure(podWith("busybox:1", "Never"));
    CHECK(r.ok());
    CHECK(h.reasons() == std::vector<std::string>{"Pulled"});
  }
  SECTION("missing: ErrImageNeverPull, no pull and no backoff") {
    for (int i = 0; i < 2; ++i) {
      auto r = h.ensure(podWith("busybox:1", "Never"));
      CHECK(r.reason == "ErrImageNeverPull");
      CHECK(r.message == "Container image \"busybox:1\" is not present with pull policy of Never");
      CHECK_FALSE(r.retry_in.has_value());
      CHECK(h.events == std::vector<Event>{{"Warning", "ErrImageNeverPull", r.message, kField}});
    }
    CHECK(h.runtime.pulls().empty());
  }
}

TEST_CASE("images: a failed pull is ErrImagePull, then ImagePullBackOff for 10s doubling to 300s",
          "[unit][images]") {
  Harness h;
  const auto pod = podWith("registry.test/app:2", "IfNotPresent");
  h.runtime.setPullResult("registry.test/app:2", base::unknownError("connection refused"));

  auto r = h.ensure(pod);
  CHECK(r.reason == "ErrImagePull");
  CHECK(r.message == "connection refused");
  CHECK(r.retry_in == base::Duration(10s));
  CHECK(h.events ==
        std::vector<Event>{
            {"Normal", "Pulling", "Pulling image \"registry.test/app:2\"", kField},
            {"Warning", "Failed",
             "Failed to pull image \"registry.test/app:2\": connection refused", kField}});

  h.clock.advance(4s);
  r = h.ensure(pod);
  CHECK(r.reason == "ImagePullBackOff");
  CHECK(r.message == "Back-off pulling image \"registry.test/app:2\"");
  CHECK(r.retry_in == base::Duration(6s));
  CHECK(h.events == std::vector<Event>{{"Normal", "BackOff", r.message, kField}});
  CHECK(h.runtime.pulls().size() == 1);

  h.clock.advance(6s);  // 10 s after the failure: pulled again, fails, backs off 20 s
  r = h.ensure(pod);
  CHECK(r.reason == "ErrImagePull");
  CHECK(r.retry_in == base::Duration(20s));
  CHECK(h.runtime.pulls().size() == 2);
  h.clock.advance(19s);
  CHECK(h.ensure(pod).reason == "ImagePullBackOff");
  h.clock.advance(1s);
  CHECK(h.ensure(pod).retry_in == base::Duration(40s));
  CHECK(h.runtime.pulls().size() == 3);

  SECTION("the backoff stops at 300s") {
    for (auto wait : {40s, 80s, 160s, 300s}) {
      h.clock.advance(wait);
      h.ensure(pod);
    }
    h.clock.advance(300s);
    CHECK(h.ensure(pod).retry_in == base::Duration(300s));
  }
  SECTION("a backoff untouched for twice its maximum starts over at 10s") {
    h.clock.advance(601s);
    CHECK(h.ensure(pod).retry_in == base::Duration(10s));
  }
  SECTION("a pull that succeeds after the backoff ends it") {
    h.runtime.setPullResult("registry.test/app:2", base::okStatus());
    h.clock.advance(40s);
    CHECK(h.ensure(pod).ok());
    CHECK(h.reasons() == std::vector<std::string>{"Pulling", "Pulled"});
  }
  SECTION("the backoff is per pod: another pod pulls at once") {
    auto other = h.ensure(podWith("registry.test/app:2", "IfNotPresent", "uid-2"));
    CHECK(other.reason == "ErrImagePull");
    CHECK(h.runtime.pulls().size() == 4);
  }
}

TEST_CASE("images: an image status that fails is ErrImageInspect", "[unit][images]") {
  Harness h;
  h.runtime.setImageStatusError(base::unavailableError("runtime down"));
  auto r = h.ensure(podWith("busybox:1", "IfNotPresent"));
  CHECK(r.reason == "ErrImageInspect");
  CHECK(r.message == "Failed to inspect image \"busybox:1\": runtime down");
  CHECK(h.events == std::vector<Event>{{"Warning", "InspectFailed", r.message, kField}});
  CHECK(h.runtime.pulls().empty());
}

TEST_CASE("images: an untagged image is asked for as :latest and an empty policy defaults by tag",
          "[unit][images]") {
  Harness h;
  SECTION("no tag: Always, pulled as busybox:latest; events name the spec's image") {
    h.runtime.addImage("busybox:latest");
    auto r = h.ensure(podWith("busybox", ""));
    CHECK(r.ok());
    CHECK(h.runtime.pulls() == std::vector<std::string>{"busybox:latest"});
    CHECK(h.events[0].message == "Pulling image \"busybox\"");
  }
  SECTION(":latest: Always") {
    h.runtime.addImage("busybox:latest");
    h.ensure(podWith("busybox:latest", ""));
    CHECK(h.runtime.pulls().size() == 1);
  }
  SECTION("another tag: IfNotPresent") {
    h.runtime.addImage("busybox:1");
    h.ensure(podWith("busybox:1", ""));
    CHECK(h.runtime.pulls().empty());
  }
  SECTION("a registry port is not a tag") {
    h.ensure(podWith("localhost:5000/app", ""));
    CHECK(h.runtime.pulls() == std::vector<std::string>{"localhost:5000/app:latest"});
  }
}

TEST_CASE("images: init containers are named by their own field path", "[unit][images]") {
  Harness h;
  auto pod = testing::PodBuilder()
                 .name("web")
                 .uid("uid-1")
                 .initContainer("setup", {"true"}, "busybox:1")
                 .container("main", {"sleep", "100"}, "busybox:1")
                 .build();
  h.runtime.addImage("busybox:1");
  testing::runAwaitable(h.ioc, h.images.ensureImageExists(pod, pod->spec->init_containers[0]));
  REQUIRE(h.events.size() == 1);
  CHECK(h.events[0].field_path == "spec.initContainers{setup}");
}

TEST_CASE("images: shouldPullImage and applyDefaultImageTag", "[unit][images]") {
  using agent::images::applyDefaultImageTag;
  using agent::images::shouldPullImage;
  api::Container c;
  c.image = "busybox:1";
  struct Case {
    std::string policy;
    bool present, pull;
  };
  for (const auto& k : std::vector<Case>{{"Always", true, true},
                                         {"Always", false, true},
                                         {"IfNotPresent", true, false},
                                         {"IfNotPresent", false, true},
                                         {"Never", true, false},
                                         {"Never", false, false}}) {
    c.image_pull_policy = k.policy;
    CAPTURE(k.policy, k.present);
    CHECK(shouldPullImage(c, k.present) == k.pull);
  }
  CHECK(*applyDefaultImageTag("busybox") == "busybox:latest");
  CHECK(*applyDefaultImageTag("busybox:1") == "busybox:1");
  CHECK(*applyDefaultImageTag("registry.test:5000/a/b") == "registry.test:5000/a/b:latest");
  const std::string digest = "busybox@sha256:" + std::string(64, 'a');
  CHECK(*applyDefaultImageTag(digest) == digest);
  for (const char* bad : {"", " busybox", "busybox:", "a b"}) {
    CAPTURE(bad);
    auto r = applyDefaultImageTag(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          "couldn't parse image reference \"" + std::string(bad) + "\": invalid reference format");
  }
}

TEST_CASE("images: an invalid reference is InvalidImageName", "[unit][images]") {
  Harness h;
  auto r = h.ensure(podWith("busybox:", "IfNotPresent"));
  CHECK(r.reason == "InvalidImageName");
  CHECK(r.message ==
        "Failed to apply default image tag \"busybox:\": couldn't parse image "
        "reference \"busybox:\": invalid reference format");
  CHECK(h.reasons() == std::vector<std::string>{"InspectFailed"});
}
