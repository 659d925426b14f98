// ImageGcManager (kubelet's image garbage collection) against the FakeRuntime on the fake clock:
// the thresholds, the order images are removed in, what is never removed (used, pinned, too
// young), failed removals, the node events, the periodic passes, and the policy's validation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/images/image_gc_manager.h"
#include "agent/runtime/fake_runtime.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"
#include "test/support/run_awaitable.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using agent::images::ImageGcManager;
using agent::images::ImageGcOptions;
using agent::images::ImageGcPolicy;

namespace {

struct Warning {
  std::string reason, message;
};

struct Harness {
  asio::io_context ioc;
  testing::FakeClock clock;
  runtime::FakeRuntime runtime{ioc.get_executor(), clock};
  std::vector<Warning> warnings;
  std::shared_ptr<ImageGcManager> gc;

  explicit Harness(ImageGcPolicy policy = {}) {
    runtime.setRunsImages(true);
    ImageGcOptions options;
    options.policy = policy;
    options.record_node_warning = [this](const std::string& reason, const std::string& message) {
      warnings.push_back({reason, message});
    };
    gc = std::make_shared<ImageGcManager>(ioc.get_executor(), clock, runtime, options);
  }

  // Runs `aw` to completion (runAwaitable's completion needs a default-constructible result).
  template <typename T>
  T run(asio::awaitable<T> aw) {
    auto wrapped = [](asio::awaitable<T> a) -> asio::awaitable<std::optional<T>> {
      co_return co_await std::move(a);
    };
    return std::move(*testing::runAwaitable(ioc, wrapped(std::move(aw))));
  }

  // An image of `size` bytes with ID "sha256:<name>".
  void addImage(const std::string& name, uint64_t size, bool pinned = false) {
    runtime::ImageInfo info;
    info.id = "sha256:" + name;
    info.size = size;
    info.pinned = pinned;
    runtime.addImage(name, info);
  }
  // Capacity 1000 bytes, `available` of them free.
  void setAvailable(uint64_t available) {
    runtime.setImageFs({"/var/lib/images", 1000 - available, 1000, available});
  }
  // A container "c" of pod `uid` created from the image `name`.
  runtime::ContainerId runContainer(const std::string& uid, const std::string& name) {
    auto pod = testing::PodBuilder().name(uid).uid(uid).container("c", {"sleep"}, name).build();
    auto id = run(runtime.startContainer(pod, pod->spec->containers[0], 0, {}));
    REQUIRE(id.ok());
    return *id;
  }
  // The container exits and is removed (container GC).
  void removeContainer(const std::string& uid, const runtime::ContainerId& id) {
    REQUIRE(runtime.exitContainer(uid, "c", 0));
    REQUIRE(run(runtime.removeContainer(id)).ok());
  }

  base::Status collect() { return run(gc->garbageCollect()); }
  base::StatusOr<uint64_t> deleteUnused() { return run(gc->deleteUnusedImages()); }
  // Starts the manager and runs its first pass.
  void start() {
    gc->start();
    ioc.restart();
    ioc.poll();
  }
  void advance(base::Duration d) {
    clock.advance(d);
    ioc.restart();
    ioc.poll();
  }
  std::vector<std::string> reasons() const {
    std::vector<std::string> out;
    for (const auto& w : warnings) out.push_back(w.reason);
    return out;
  }
};

}  // namespace

TEST_CASE("image gc: below the high threshold nothing is removed", "[unit][images]") {
  Harness h;
  h.addImage("a", 100);
  h.setAvailable(160);  // 84 % used
  CHECK_FALSE(h.gc->imageFs().has_value());
  h.start();
  REQUIRE(h.gc->imageFs().has_value());
  CHECK(h.gc->imageFs()->mountpoint == "/var/lib/images");
  CHECK(h.gc->imageFs()->available_bytes == 160);
  CHECK(h.runtime.removedImages().empty());
  CHECK(h.collect().ok());
  CHECK(h.runtime.removedImages().empty());
  CHECK(h.warnings.empty());
}

TEST_CASE(
    "image gc: at the high threshold unused images go least recently used first until the low "
    "threshold is reached",
    "[unit][images]") {
  Harness h;
  h.addImage("old", 60);
  h.addImage("newer", 60);
  h.addImage("third", 60);
  h.addImage("used", 500);
  h.start();  // all four seen long ago
  // "newer" and "third" were used by containers since removed; "newer" more recently.
  auto third = h.runContainer("p3", "third");
  h.advance(5min);  // a refresh records the use
  h.removeContainer("p3", third);
  auto newer = h.runContainer("p2", "newer");
  h.advance(5min);
  h.removeContainer("p2", newer);
  h.runContainer("p1", "used");
  h.warnings.clear();
  h.clock.advance(1s);  // a use recorded at the very time of a pass counts as current

  // 85 % used: free 1000 * 20 % - 150 = 50 bytes; the first image is enough.
  h.setAvailable(150);
  REQUIRE(h.collect().ok());
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:old"});

  // 88 % used: free 80 bytes; two more images, in their order of last use.
  h.setAvailable(120);
  REQUIRE(h.collect().ok());
  CHECK(h.runtime.removedImages() ==
        std::vector<std::string>{"sha256:old", "sha256:third", "sha256:newer"});
  CHECK(h.runtime.hasImage("used"));
  CHECK(h.warnings.empty());
}

TEST_CASE("image gc: pinned and too young images are kept and the shortfall is reported",
          "[unit][images]") {
  Harness h;
  h.addImage("pause", 50, /*pinned=*/true);
  h.start();
  h.addImage("fresh", 50);  // first seen now: younger than the 2 minute min age
  h.setAvailable(100);      // 90 % used: free 100 bytes

  auto collected = h.collect();
  CHECK_FALSE(collected.ok());
  CHECK_THAT(collected.message(), Catch::Contains("Wanted to free 100 bytes, but freed 0 bytes"));
  CHECK(h.runtime.removedImages().empty());
  CHECK(h.reasons() == std::vector<std::string>{"FreeDiskSpaceFailed"});

  // Once the min age has passed the fresh image may go; the pinned one never.
  h.clock.advance(2min);
  h.warnings.clear();
  CHECK_FALSE(h.collect().ok());
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:fresh"});
  CHECK(h.runtime.hasImage("pause"));
}

TEST_CASE("image gc: a failed removal is reported and the next image is tried", "[unit][images]") {
  Harness h;
  h.addImage("a", 100);
  h.addImage("b", 100);
  h.start();
  h.runtime.setRemoveImageError("sha256:a", base::unknownError("image is in use by a task"));
  h.setAvailable(100);  // free 100 bytes

  auto collected = h.collect();
  CHECK_FALSE(collected.ok());
  CHECK_THAT(collected.message(), Catch::Contains("sha256:a") &&
                                      Catch::Contains("image is in use by a task") &&
                                      Catch::Contains("freed 100 bytes"));
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:b"});
}

TEST_CASE("image gc: deleteUnusedImages removes every unused image whatever the usage",
          "[unit][images]") {
  Harness h(ImageGcPolicy{100, 80, 2min});  // periodic collection off
  h.addImage("a", 10);
  h.addImage("b", 20);
  h.addImage("used", 30);
  h.addImage("pause", 40, /*pinned=*/true);
  h.setAvailable(1);  // 99.9 % used: a periodic pass would collect
  h.start();
  // Without periodic passes the image filesystem is still found, for the eviction manager.
  REQUIRE(h.gc->imageFs().has_value());
  CHECK(h.gc->imageFs()->mountpoint == "/var/lib/images");
  h.advance(10min);
  CHECK(h.runtime.removedImages().empty());

  h.runContainer("p1", "used");
  auto freed = h.deleteUnused();
  REQUIRE(freed.ok());
  CHECK(*freed == 30);
  CHECK(h.runtime.hasImage("used"));
  CHECK(h.runtime.hasImage("pause"));
  CHECK_FALSE(h.runtime.hasImage("a"));
  CHECK_FALSE(h.runtime.hasImage("b"));
}

TEST_CASE("image gc: passes repeat every five minutes and only a repeated failure is an event",
          "[unit][images]") {
  Harness h;
  h.addImage("a", 100);
  h.start();  // no image filesystem yet: the first pass fails, without an event
  CHECK(h.warnings.empty());
  h.advance(5min);
  CHECK(h.reasons() == std::vector<std::string>{"ImageGCFailed"});
  CHECK_THAT(h.warnings[0].message, Catch::Contains("image filesystem"));

  // The next pass finds the filesystem 90 % full and removes the image, which is enough.
  h.setAvailable(100);
  h.advance(5min);
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:a"});
  CHECK(h.warnings.size() == 1);

  // A failure after a success: its own event only.
  h.runtime.setImageFs({"/var/lib/images", 0, 0, 0});
  h.advance(5min);
  CHECK(h.reasons() == std::vector<std::string>{"ImageGCFailed", "InvalidDiskCapacity"});

  h.gc->stop();
  h.advance(5min);
  CHECK(h.reasons().size() == 2);
}

TEST_CASE("image gc: the policy is checked as kubelet checks it", "[unit][images]") {
  using agent::images::validateImageGcPolicy;
  CHECK(validateImageGcPolicy({85, 80, 2min}).ok());
  CHECK(validateImageGcPolicy({100, 0, 0s}).ok());
  CHECK_THAT(validateImageGcPolicy({101, 80, 2min}).message(),
             Catch::Contains("--image-gc-high-threshold 101 must be between 0 and 100"));
  CHECK_THAT(validateImageGcPolicy({85, -1, 2min}).message(),
             Catch::Contains("--image-gc-low-threshold -1 must be between 0 and 100"));
  CHECK_THAT(validateImageGcPolicy({80, 80, 2min}).message(),
             Catch::Contains("--image-gc-low-threshold 80 must be less than "
                             "--image-gc-high-threshold 80"));
  CHECK_THAT(validateImageGcPolicy({85, 80, -1s}).message(),
             Catch::Contains("--minimum-image-ttl-duration must not be negative"));
  CHECK(validateImageGcPolicy({85, 80, 2min, 0s}).ok());
  CHECK(validateImageGcPolicy({85, 80, 2min, 121s}).ok());
  CHECK_THAT(validateImageGcPolicy({85, 80, 2min, -1s}).message(),
             Catch::Contains("--image-maximum-gc-age (imageMaximumGCAge) must not be negative"));
  CHECK_THAT(validateImageGcPolicy({85, 80, 2min, 2min}).message(),
             Catch::Contains("--image-maximum-gc-age (imageMaximumGCAge) 2m0s must be greater "
                             "than --minimum-image-ttl-duration (imageMinimumGCAge) 2m0s"));
}

TEST_CASE(
    "image gc: with a max age unused images go once unused for longer than it whatever the usage",
    "[unit][images]") {
  ImageGcPolicy policy;
  policy.max_age = 10min;
  SECTION("with the thresholds") {}
  SECTION("with the usage-based collection off") { policy.high_threshold_percent = 100; }
  Harness h(policy);
  h.setAvailable(900);  // 10 % used: the thresholds never ask for anything
  h.addImage("old", 10);
  h.addImage("used", 10);
  h.addImage("failing", 10);
  h.start();  // t0; the three count as unused since t0
  h.runContainer("p", "used");
  h.advance(5min);         // t0+5m
  h.addImage("late", 10);  // first seen at the next refresh, t0+10m, and never used
  h.advance(5min);         // t0+10m: the agent has not run for longer than the max age yet
  CHECK(h.runtime.removedImages().empty());

  h.runtime.setRemoveImageError("sha256:failing", base::unknownError("device busy"));
  h.advance(5min);  // t0+15m: unused for 15 minutes
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:old"});
  CHECK(h.runtime.hasImage("used"));
  CHECK(h.runtime.hasImage("late"));
  // The failed removal fails the pass (an event only when it happens twice in a row).
  CHECK(h.warnings.empty());
  h.advance(5min);  // t0+20m: "late" unused for 10 minutes, not longer
  CHECK(h.runtime.hasImage("late"));
  REQUIRE(h.reasons() == std::vector<std::string>{"ImageGCFailed"});
  CHECK_THAT(h.warnings[0].message, Catch::Contains("wanted to free images older than 10m") &&
                                        Catch::Contains("sha256:failing"));
  h.advance(5min);  // t0+25m
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:old", "sha256:late"});
  CHECK(h.runtime.hasImage("used"));
}

TEST_CASE("image gc: without a max age unused images stay while the disk has room",
          "[unit][images]") {
  Harness h;
  h.setAvailable(900);
  h.addImage("old", 10);
  h.start();
  h.advance(60min);
  CHECK(h.runtime.removedImages().empty());
}

TEST_CASE("image gc: the images of wanted pods are kept before any container runs them",
          "[unit][images]") {
  Harness h;
  std::vector<std::string> wanted;
  ImageGcOptions options;
  options.wanted_images = [&] { return wanted; };
  h.gc = std::make_shared<ImageGcManager>(h.ioc.get_executor(), h.clock, h.runtime, options);
  h.addImage("docker.io/library/busybox:latest", 10);
  h.addImage("registry.test/app:1", 10);
  h.addImage("docker.io/team/tool:2", 10);
  h.addImage("unwanted", 10);
  wanted = {"busybox", "registry.test/app:1", "team/tool:2"};
  h.setAvailable(0);
  h.start();
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:unwanted"});

  // Once no pod wants them, they may go.
  wanted.clear();
  h.clock.advance(1s);
  CHECK(*h.deleteUnused() == 30);
}

TEST_CASE("image gc: a reference names an image as a CRI runtime lists it", "[unit][images]") {
  using agent::images::imageNamedBy;
  runtime::ImageInfo image;
  image.id = "sha256:abc";
  image.repo_tags = {"docker.io/library/busybox:1.36", "registry.test:5000/app:latest"};
  image.repo_digests = {"docker.io/library/busybox@sha256:def"};
  CHECK(imageNamedBy(image, "sha256:abc"));
  CHECK(imageNamedBy(image, "busybox:1.36"));
  CHECK(imageNamedBy(image, "library/busybox:1.36"));
  CHECK(imageNamedBy(image, "docker.io/library/busybox:1.36"));
  CHECK(imageNamedBy(image, "busybox@sha256:def"));
  CHECK(imageNamedBy(image, "registry.test:5000/app"));
  CHECK_FALSE(imageNamedBy(image, "busybox"));  // :latest
  CHECK_FALSE(imageNamedBy(image, "busybox:1.35"));
  CHECK_FALSE(imageNamedBy(image, "registry.test/app"));
  CHECK_FALSE(imageNamedBy(image, ""));
}

TEST_CASE("image gc: nothing is removed before every pod source was seen", "[unit][images]") {
  Harness h;
  bool ready = false;
  std::vector<std::string> wanted;
  ImageGcOptions options;
  options.ready = [&] { return ready; };
  options.wanted_images = [&] { return wanted; };
  h.gc = std::make_shared<ImageGcManager>(h.ioc.get_executor(), h.clock, h.runtime, options);
  h.addImage("static-pod-image:1", 10);
  h.addImage("unwanted:1", 10);
  h.setAvailable(0);
  h.start();
  CHECK(h.runtime.removedImages().empty());
  CHECK(*h.deleteUnused() == 0);  // the eviction manager's reclaim waits too
  CHECK(h.runtime.removedImages().empty());

  // The file source delivers its static pod: the next try, a second later, collects.
  wanted = {"static-pod-image:1"};
  ready = true;
  h.advance(1s);
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:unwanted:1"});
  CHECK(h.runtime.hasImage("static-pod-image:1"));
}

TEST_CASE("image gc: the image list is kept largest first and refreshed every 30 seconds",
          "[unit][images]") {
  Harness h;
  h.addImage("small", 10);
  h.addImage("large", 30);
  CHECK_FALSE(h.gc->imageList().has_value());
  h.start();
  auto list = *h.gc->imageList();
  REQUIRE(list.size() == 2);
  CHECK(list[0].id == "sha256:large");
  CHECK(list[1].id == "sha256:small");

  h.addImage("medium", 20);
  h.advance(29s);
  CHECK(h.gc->imageList()->size() == 2);
  h.advance(1s);
  list = *h.gc->imageList();
  REQUIRE(list.size() == 3);
  CHECK(list[1].id == "sha256:medium");
}

TEST_CASE("image gc: passes that overlap never remove one image twice nor count it twice",
          "[unit][images]") {
  Harness h;
  h.addImage("a", 10);
  h.addImage("b", 20);
  h.setAvailable(1000);
  h.start();            // nothing to collect yet
  h.addImage("c", 40);  // too young: kept
  h.setAvailable(0);
  h.runtime.setRemoveImageDelay(1s);

  // The eviction manager's reclaim and a collection run at once; each waits in its removals.
  std::optional<base::StatusOr<uint64_t>> deleted;
  std::optional<base::Status> collected;
  asio::co_spawn(
      h.ioc,
      [](std::shared_ptr<ImageGcManager> gc,
         std::optional<base::StatusOr<uint64_t>>* out) -> asio::awaitable<void> {
        out->emplace(co_await gc->deleteUnusedImages());
      }(h.gc, &deleted),
      asio::detached);
  asio::co_spawn(
      h.ioc,
      [](std::shared_ptr<ImageGcManager> gc,
         std::optional<base::Status>* out) -> asio::awaitable<void> {
        out->emplace(co_await gc->garbageCollect());
      }(h.gc, &collected),
      asio::detached);
  for (int i = 0; i < 5 && (!deleted || !collected); ++i) h.advance(1s);
  REQUIRE(deleted.has_value());
  REQUIRE(collected.has_value());
  REQUIRE(deleted->ok());
  // One after the other: the reclaim frees both images, then the collection reads the usage
  // after it and finds nothing more to remove. Each image was removed once.
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:a", "sha256:b"});
  CHECK(**deleted == 30);
  CHECK_THAT(collected->message(), Catch::Contains("but freed 0 bytes"));
  CHECK(h.runtime.hasImage("c"));
}

TEST_CASE("image gc: a pod source never seen holds collection back for five minutes at most",
          "[unit][images]") {
  Harness h;
  ImageGcOptions options;
  options.ready = [] { return false; };  // an apiserver that never answers
  h.gc = std::make_shared<ImageGcManager>(h.ioc.get_executor(), h.clock, h.runtime, options);
  h.addImage("unused:1", 10);
  h.setAvailable(0);
  h.start();
  h.advance(4min);
  CHECK(h.runtime.removedImages().empty());
  h.advance(1min);
  CHECK(h.runtime.removedImages() == std::vector<std::string>{"sha256:unused:1"});
}
