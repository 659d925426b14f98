// kubelet's TestParseThresholdConfig (pkg/kubelet/eviction/helpers_test.go) and the flag errors.
#include <catch2/catch.hpp>

#include "agent/eviction/thresholds.h"

using namespace nodeagent;
using eviction::Signal;
using eviction::Threshold;
using eviction::ThresholdValue;

namespace {

constexpr int64_t kMi = int64_t{1} << 20;
constexpr int64_t kGi = int64_t{1} << 30;

ThresholdValue qty(int64_t v) { return ThresholdValue{v, 0}; }
ThresholdValue pct(float p) { return ThresholdValue{std::nullopt, p}; }

Threshold hard(Signal s, ThresholdValue v, std::optional<ThresholdValue> min = std::nullopt) {
  return Threshold{s, v, base::Duration(0), min};
}
Threshold soft(Signal s, ThresholdValue v, base::Duration grace,
               std::optional<ThresholdValue> min = std::nullopt) {
  return Threshold{s, v, grace, min};
}

eviction::ThresholdFlags flags(std::string hard_text, std::string soft_text = "",
                               std::string grace = "", std::string reclaim = "") {
  eviction::ThresholdFlags f;
  f.eviction_hard = std::move(hard_text);
  f.eviction_soft = std::move(soft_text);
  f.eviction_soft_grace_period = std::move(grace);
  f.eviction_minimum_reclaim = std::move(reclaim);
  f.has_image_fs = true;
  return f;
}

// Order-insensitive, as kubelet's thresholdsEqual.
void checkSame(const std::vector<Threshold>& got, const std::vector<Threshold>& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& w : want) {
    INFO(eviction::formatThreshold(w));
    CHECK(std::find(got.begin(), got.end(), w) != got.end());
  }
}

}  // namespace

TEST_CASE("thresholds: kubelet's TestParseThresholdConfig", "[unit][eviction]") {
  using std::chrono::seconds;
  SECTION("no values") {
    auto r = eviction::parseThresholdConfig(flags(""));
    REQUIRE(r.ok());
    CHECK(r->empty());
  }
  SECTION("all memory eviction values") {
    auto f = flags("memory.available<150Mi", "memory.available<300Mi", "memory.available=30s",
                   "memory.available=0");
    f.enforce_pods_allocatable = true;
    auto r = eviction::parseThresholdConfig(f);
    REQUIRE(r.ok());
    checkSame(*r, {hard(Signal::kMemoryAvailable, qty(150 * kMi), qty(0)),
                   hard(Signal::kAllocatableMemoryAvailable, qty(150 * kMi), qty(0)),
                   soft(Signal::kMemoryAvailable, qty(300 * kMi), seconds(30), qty(0))});
  }
  SECTION("all memory eviction values in percentages") {
    auto f = flags("memory.available<10%", "memory.available<30%", "memory.available=30s",
                   "memory.available=5%");
    f.enforce_pods_allocatable = true;
    auto r = eviction::parseThresholdConfig(f);
    REQUIRE(r.ok());
    checkSame(*r, {hard(Signal::kMemoryAvailable, pct(0.1f), pct(0.05f)),
                   hard(Signal::kAllocatableMemoryAvailable, pct(0.1f), pct(0.05f)),
                   soft(Signal::kMemoryAvailable, pct(0.3f), seconds(30), pct(0.05f))});
  }
  SECTION("disk eviction values") {
    auto r = eviction::parseThresholdConfig(
        flags("imagefs.available<150Mi,nodefs.available<100Mi",
              "imagefs.available<300Mi,nodefs.available<200Mi",
              "imagefs.available=30s,nodefs.available=30s",
              "imagefs.available=2Gi,nodefs.available=1Gi"));
    REQUIRE(r.ok());
    checkSame(*r, {hard(Signal::kImageFsAvailable, qty(150 * kMi), qty(2 * kGi)),
                   hard(Signal::kNodeFsAvailable, qty(100 * kMi), qty(kGi)),
                   soft(Signal::kImageFsAvailable, qty(300 * kMi), seconds(30), qty(2 * kGi)),
                   soft(Signal::kNodeFsAvailable, qty(200 * kMi), seconds(30), qty(kGi))});
  }
  SECTION("disk eviction values in percentages") {
    auto r = eviction::parseThresholdConfig(
        flags("imagefs.available<15%,nodefs.available<10.5%",
              "imagefs.available<30%,nodefs.available<20.5%",
              "imagefs.available=30s,nodefs.available=30s",
              "imagefs.available=10%,nodefs.available=5%"));
    REQUIRE(r.ok());
    checkSame(*r, {hard(Signal::kImageFsAvailable, pct(0.15f), pct(0.1f)),
                   hard(Signal::kNodeFsAvailable, pct(0.105f), pct(0.05f)),
                   soft(Signal::kImageFsAvailable, pct(0.3f), seconds(30), pct(0.1f)),
                   soft(Signal::kNodeFsAvailable, pct(0.205f), seconds(30), pct(0.05f))});
  }
  SECTION("inode eviction values") {
    auto r = eviction::parseThresholdConfig(
        flags("imagefs.inodesFree<150Mi,nodefs.inodesFree<100Mi",
              "imagefs.inodesFree<300Mi,nodefs.inodesFree<200Mi",
              "imagefs.inodesFree=30s,nodefs.inodesFree=30s",
              "imagefs.inodesFree=2Gi,nodefs.inodesFree=1Gi"));
    REQUIRE(r.ok());
    checkSame(*r, {hard(Signal::kImageFsInodesFree, qty(150 * kMi), qty(2 * kGi)),
                   hard(Signal::kNodeFsInodesFree, qty(100 * kMi), qty(kGi)),
                   soft(Signal::kImageFsInodesFree, qty(300 * kMi), seconds(30), qty(2 * kGi)),
                   soft(Signal::kNodeFsInodesFree, qty(200 * kMi), seconds(30), qty(kGi))});
  }
  SECTION("disable via 0% and 100%") {
    for (std::string v : {"0%", "100%"}) {
      auto r = eviction::parseThresholdConfig(flags("memory.available<" + v,
                                                    "memory.available<" + v,
                                                    "memory.available=30s"));
      REQUIRE(r.ok());
      CHECK(r->empty());
    }
  }
  SECTION("pid.available") {
    auto r = eviction::parseThresholdConfig(flags("pid.available<1000"));
    REQUIRE(r.ok());
    checkSame(*r, {hard(Signal::kPidAvailable, qty(1000))});
  }
}

TEST_CASE("thresholds: invalid configurations name the flag and the entry", "[unit][eviction]") {
  auto error = [](const eviction::ThresholdFlags& f) {
    auto r = eviction::parseThresholdConfig(f);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(error(flags("mem.available<150Mi")) ==
        "--eviction-hard: \"mem.available<150Mi\": unsupported eviction signal mem.available");
  CHECK(error(flags("memory.available<-150Mi")) ==
        "--eviction-hard: \"memory.available<-150Mi\": eviction threshold memory.available must "
        "be positive: -150Mi");
  CHECK(error(flags("memory.available<-15%")) ==
        "--eviction-hard: \"memory.available<-15%\": eviction percentage threshold "
        "memory.available must be >= 0%: -15%");
  CHECK(error(flags("memory.available<150%")) ==
        "--eviction-hard: \"memory.available<150%\": eviction percentage threshold "
        "memory.available must be <= 100%: 150%");
  CHECK(error(flags("", "memory.available<-150Mi", "memory.available=30s")) ==
        "--eviction-soft: \"memory.available<-150Mi\": eviction threshold memory.available must "
        "be positive: -150Mi");
  CHECK(error(flags("memory.available<150Mi,mem.available<150Mi")).find("mem.available") !=
        std::string::npos);
  CHECK(error(flags("", "memory.available<150Mi")) ==
        "--eviction-soft: \"memory.available\": grace period must be specified for the soft "
        "eviction threshold memory.available (--eviction-soft-grace-period)");
  CHECK(error(flags("", "memory.available<150Mi", "memory.available=-30s")) ==
        "--eviction-soft-grace-period: \"memory.available=-30s\": invalid eviction grace period "
        "specified: -30s, must be a positive value");
  CHECK(error(flags("", "memory.available<150Mi", "memory.available=abc")).rfind(
            "--eviction-soft-grace-period: \"memory.available=abc\": ", 0) == 0);
  CHECK(error(flags("memory.available<150Mi", "", "", "memory.available=-150Mi")) ==
        "--eviction-minimum-reclaim: \"memory.available=-150Mi\": negative eviction minimum "
        "reclaim specified for memory.available");
  CHECK(error(flags("memory.available<150Mi", "", "", "memory.available=-15%")) ==
        "--eviction-minimum-reclaim: \"memory.available=-15%\": eviction percentage minimum "
        "reclaim memory.available must be positive: -15%");
  CHECK(error(flags("memory.available=150Mi")) ==
        "--eviction-hard: \"memory.available=150Mi\": malformed pair, expect string<string");
  CHECK(error(flags("memory.available<1Gb")).rfind("--eviction-hard: \"memory.available<1Gb\": ",
                                                    0) == 0);
}

TEST_CASE("thresholds: kubelet's default --eviction-hard, imagefs dropped without an image fs",
          "[unit][eviction]") {
  eviction::ThresholdFlags f;  // defaults; the process runtime has no image filesystem
  auto r = eviction::parseThresholdConfig(f);
  REQUIRE(r.ok());
  checkSame(*r, {hard(Signal::kMemoryAvailable, qty(100 * kMi)),
                 hard(Signal::kNodeFsAvailable, pct(0.1f)),
                 hard(Signal::kNodeFsInodesFree, pct(0.05f))});
  f.has_image_fs = true;
  r = eviction::parseThresholdConfig(f);
  REQUIRE(r.ok());
  CHECK(r->size() == 4);
  CHECK(eviction::hardThresholds(*r).size() == 4);
}

TEST_CASE("thresholds: quantity of a percentage is kubelet's float arithmetic", "[unit][eviction]") {
  // 5% of 10Gi in float32, as GetThresholdQuantity: 536870920 (kubelet's test expects
  // 694157320 = this + 150Mi).
  CHECK(eviction::thresholdQuantity(pct(0.05f), 10 * kGi) == 536870920);
  CHECK(eviction::thresholdQuantity(qty(42), 10 * kGi) == 42);
  CHECK(eviction::formatThreshold(hard(Signal::kMemoryAvailable, qty(100 * kMi))) ==
        "threshold(signal=memory.available, operator=LessThan, value=100Mi, gracePeriod=0s)");
}

// kubelet's parseThresholdStatement refuses a zero quantity as well as a negative one
// (quantity.Sign() < 0 || quantity.IsZero(): "must be positive"), ignores "0%" and "100%", takes
// any other percentage from 0 to 100; parseMinimumReclaims takes a zero quantity but not a zero
// percentage; parseGracePeriods takes 0s.
TEST_CASE("thresholds: zero values are judged as kubelet's", "[unit][eviction]") {
  using std::chrono::seconds;
  auto error = [](const eviction::ThresholdFlags& f) {
    auto r = eviction::parseThresholdConfig(f);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK(error(flags("memory.available<0")) ==
        "--eviction-hard: \"memory.available<0\": eviction threshold memory.available must be "
        "positive: 0");
  CHECK(error(flags("pid.available<0")) ==
        "--eviction-hard: \"pid.available<0\": eviction threshold pid.available must be "
        "positive: 0");
  CHECK(error(flags("", "memory.available<0Mi", "memory.available=30s")) ==
        "--eviction-soft: \"memory.available<0Mi\": eviction threshold memory.available must be "
        "positive: 0Mi");
  CHECK(error(flags("memory.available<150Mi", "", "", "memory.available=0%")) ==
        "--eviction-minimum-reclaim: \"memory.available=0%\": eviction percentage minimum "
        "reclaim memory.available must be positive: 0%");

  auto r = eviction::parseThresholdConfig(flags("memory.available<0%,nodefs.available<100%"));
  REQUIRE(r.ok());
  CHECK(r->empty());
  r = eviction::parseThresholdConfig(flags("memory.available<0.0%", "nodefs.available<1Gi",
                                           "nodefs.available=0s", "memory.available=0"));
  REQUIRE(r.ok());
  checkSame(*r, {hard(Signal::kMemoryAvailable, pct(0), qty(0)),
                 soft(Signal::kNodeFsAvailable, qty(kGi), seconds(0))});
}
