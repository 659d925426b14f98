// The real SignalSource and summary on this machine: the figures must be plausible (within the
// machine's capacity, agreeing with each other) — no pressure is created.
#include <catch2/catch.hpp>

#include <sys/sysinfo.h>

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/admission.h"
#include "agent/eviction/signal_source.h"
#include "agent/stats/summary.h"
#include "base/clock.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using eviction::Signal;

TEST_CASE("eviction signals: this machine's memory, nodefs and pids are plausible",
          "[integration][eviction]") {
  testing::TempDir root;
  eviction::RealSignalSourceOptions o;
  o.root_dir = root.path().string();
  o.pod_log_dir = root.path().string();
  eviction::RealSignalSource source(o);
  auto obs = source.observe();

  auto cap = agent::readHostCapacity("/proc", root.path().string());
  REQUIRE(cap.ok());
  REQUIRE(obs.count(Signal::kMemoryAvailable) == 1);
  const auto mem = obs.at(Signal::kMemoryAvailable);
  CHECK(mem.capacity == cap->memory_bytes);
  CHECK(mem.available > 0);
  CHECK(mem.available <= mem.capacity);
  // Not far from the kernel's own estimate of available memory (MemAvailable counts reclaimable
  // caches that the working set keeps): within the capacity either way.
  struct sysinfo si {};
  REQUIRE(::sysinfo(&si) == 0);
  CHECK(mem.available >= static_cast<int64_t>(si.freeram) * si.mem_unit / 2);

  REQUIRE(obs.count(Signal::kNodeFsAvailable) == 1);
  const auto fs = obs.at(Signal::kNodeFsAvailable);
  CHECK(fs.capacity == cap->ephemeral_storage_bytes);
  CHECK(fs.available > 0);
  CHECK(fs.available <= fs.capacity);
  if (obs.count(Signal::kNodeFsInodesFree)) {
    CHECK(obs.at(Signal::kNodeFsInodesFree).available <=
          obs.at(Signal::kNodeFsInodesFree).capacity);
  }

  REQUIRE(obs.count(Signal::kPidAvailable) == 1);
  const auto pids = obs.at(Signal::kPidAvailable);
  CHECK(pids.capacity == cap->pid_max);
  CHECK(pids.available > 0);
  CHECK(pids.available < pids.capacity);  // this test process is running
  CHECK(pids.capacity - pids.available >= static_cast<int64_t>(si.procs) / 2);

  // No image filesystem: no imagefs signals.
  CHECK(obs.count(Signal::kImageFsAvailable) == 0);
  CHECK(obs.count(Signal::kImageFsInodesFree) == 0);
}

TEST_CASE("eviction signals: imagefs is the runtime's image filesystem once it is known",
          "[integration][eviction]") {
  testing::TempDir root;
  testing::TempDir images;
  std::optional<std::string> image_fs;
  eviction::RealSignalSourceOptions o;
  o.root_dir = root.path().string();
  o.pod_log_dir = root.path().string();
  o.image_fs_path = [&] { return image_fs; };
  eviction::RealSignalSource source(o);
  CHECK(source.observe().count(Signal::kImageFsAvailable) == 0);

  image_fs = images.path().string();
  auto obs = source.observe();
  auto fs = eviction::statFs(images.path().string());
  REQUIRE(fs.has_value());
  REQUIRE(obs.count(Signal::kImageFsAvailable) == 1);
  CHECK(obs.at(Signal::kImageFsAvailable).capacity == fs->capacity_bytes);
  CHECK(obs.at(Signal::kImageFsAvailable).available > 0);
  CHECK(obs.at(Signal::kImageFsAvailable).available <= fs->capacity_bytes);
  if (fs->inodes > 0) {
    REQUIRE(obs.count(Signal::kImageFsInodesFree) == 1);
    CHECK(obs.at(Signal::kImageFsInodesFree).capacity == fs->inodes);
  }

  // A path that cannot be read gives no signal rather than a made-up one.
  image_fs = (images.path() / "missing").string();
  CHECK(source.observe().count(Signal::kImageFsAvailable) == 0);
}

TEST_CASE("stats summary: this machine's node figures", "[integration][eviction]") {
  testing::TempDir root;
  asio::io_context ioc;
  stats::SummaryOptions o;
  o.node_name = "n";
  o.root_dir = root.path().string();
  o.pod_log_dir = root.path().string();
  auto provider =
      std::make_shared<stats::SummaryProvider>(ioc.get_executor(), base::realClock(), o);
  auto s = provider->collect();
  const auto& node = s["node"];
  CHECK(node["cpu"]["usageCoreNanoSeconds"].get<uint64_t>() > 0);
  CHECK(node["memory"]["workingSetBytes"].get<int64_t>() > 0);
  CHECK(node["memory"]["availableBytes"].get<int64_t>() > 0);
  CHECK(node["fs"]["capacityBytes"].get<int64_t>() >= node["fs"]["availableBytes"].get<int64_t>());
  CHECK(node["rlimit"]["curproc"].get<int64_t>() > 0);
  CHECK(s["pods"].empty());
  CHECK_FALSE(node.contains("runtime"));  // no image filesystem
}

TEST_CASE("stats summary: the runtime's image filesystem", "[integration][eviction]") {
  testing::TempDir root;
  testing::TempDir images;
  asio::io_context ioc;
  stats::SummaryOptions o;
  o.node_name = "n";
  o.root_dir = root.path().string();
  o.pod_log_dir = root.path().string();
  o.image_fs = [&] { return std::optional(stats::ImageFsUsage{images.path().string(), 1234, 56}); };
  auto provider =
      std::make_shared<stats::SummaryProvider>(ioc.get_executor(), base::realClock(), o);
  const auto s = provider->collect();
  const auto& fs = s["node"]["runtime"]["imageFs"];
  auto expected = eviction::statFs(images.path().string());
  REQUIRE(expected.has_value());
  CHECK(fs["capacityBytes"].get<int64_t>() == expected->capacity_bytes);
  CHECK(fs["availableBytes"].get<int64_t>() > 0);
  CHECK(fs["usedBytes"] == 1234);
  CHECK(fs["inodesUsed"] == 56);
  CHECK(fs["time"] == s["node"]["fs"]["time"]);
}
