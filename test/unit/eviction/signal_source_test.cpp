// RealSignalSource over a fake /proc and a real directory: kubelet's memory.available,
// nodefs.*, pid.available.
#include <catch2/catch.hpp>

#include <filesystem>

#include "agent/eviction/signal_source.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using eviction::Signal;

TEST_CASE("signals: memory.available is MemTotal minus the meminfo working set",
          "[unit][eviction]") {
  auto m = eviction::parseMemInfo(
      "MemTotal:       16000000 kB\nMemFree:         4000000 kB\nMemAvailable:    9000000 kB\n"
      "Buffers:          100000 kB\nInactive(file):  3000000 kB\n");
  REQUIRE(m);
  CHECK(m->total == int64_t{16000000} * 1024);
  CHECK(eviction::memInfoWorkingSet(*m) == int64_t{9000000} * 1024);
  CHECK_FALSE(eviction::parseMemInfo("MemFree: 1 kB\n"));

  testing::TempDir proc;
  testing::TempDir root;
  testing::writeFile(proc / "meminfo",
                     "MemTotal: 16000000 kB\nMemFree: 4000000 kB\nInactive(file): 3000000 kB\n");
  testing::writeFile(proc / "loadavg", "0.00 0.01 0.05 1/234 5678\n");
  std::filesystem::create_directories(proc / "sys" / "kernel");
  testing::writeFile(proc / "sys" / "kernel" / "pid_max", "4194304\n");
  eviction::RealSignalSourceOptions o;
  o.proc_root = proc.path().string();
  o.root_dir = root.path().string();
  o.pod_log_dir = root.path().string();
  eviction::RealSignalSource source(o);
  auto obs = source.observe();
  CHECK(obs.at(Signal::kMemoryAvailable) ==
        eviction::Observation{int64_t{7000000} * 1024, int64_t{16000000} * 1024});
  CHECK(obs.at(Signal::kPidAvailable) == eviction::Observation{4194304 - 234, 4194304});
  REQUIRE(obs.count(Signal::kNodeFsAvailable) == 1);
  CHECK(obs.at(Signal::kNodeFsAvailable).capacity > 0);
  CHECK(obs.at(Signal::kNodeFsAvailable).available <= obs.at(Signal::kNodeFsAvailable).capacity);
  CHECK(obs.count(Signal::kAllocatableMemoryAvailable) == 0);

  // The root cgroup's working set, when given, replaces meminfo's; kubepods gives
  // allocatableMemory.available.
  o.root_working_set = [] { return std::optional<int64_t>(int64_t{10000000} * 1024); };
  o.kubepods_working_set = [] { return std::optional<int64_t>(int64_t{1} << 30); };
  o.allocatable_memory_bytes = int64_t{4} << 30;
  eviction::RealSignalSource with_cgroups(o);
  obs = with_cgroups.observe();
  CHECK(obs.at(Signal::kMemoryAvailable).available == int64_t{6000000} * 1024);
  CHECK(obs.at(Signal::kAllocatableMemoryAvailable) ==
        eviction::Observation{int64_t{3} << 30, int64_t{4} << 30});
}
