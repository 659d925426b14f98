#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "agent/admission.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

using namespace nodeagent;

namespace {

api::PodPtr podWith(const std::string& name, const std::string& cpu, const std::string& memory,
                    int host_port = 0) {
  return testing::PodBuilder()
      .name(name)
      .uid(name)
      .container("c", {"sleep", "1"})
      .edit([&](nlohmann::json& j) {
        auto& c = j["spec"]["containers"][0];
        if (!cpu.empty()) c["resources"]["requests"]["cpu"] = cpu;
        if (!memory.empty()) c["resources"]["requests"]["memory"] = memory;
        if (host_port > 0) c["ports"] = {{{"containerPort", 80}, {"hostPort", host_port}}};
      })
      .build();
}

const agent::NodeAllocatable kNode{"node1", 2000, int64_t{4} << 30, 3};

}  // namespace

TEST_CASE("admission: CPU and memory requests must fit the node's allocatable", "[unit][agent]") {
  auto big = podWith("big", "1500m", "");
  CHECK(agent::canAdmitPod(*big, {}, kNode).admit);
  auto r = agent::canAdmitPod(*podWith("more", "600m", ""), {big}, kNode);
  CHECK_FALSE(r.admit);
  CHECK(r.reason == "OutOfcpu");
  CHECK(r.message ==
        "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000");
  r = agent::canAdmitPod(*podWith("mem", "", "5Gi"), {}, kNode);
  CHECK(r.reason == "OutOfmemory");
  CHECK(agent::canAdmitPod(*podWith("besteffort", "", ""), {big}, kNode).admit);
}

TEST_CASE("admission: --max-pods, host ports and the node name", "[unit][agent]") {
  auto a = podWith("a", "", "");
  auto b = podWith("b", "", "");
  auto c = podWith("c", "", "");
  CHECK(agent::canAdmitPod(*c, {a, b}, kNode).admit);
  CHECK(agent::canAdmitPod(*podWith("d", "", ""), {a, b, c}, kNode).reason == "OutOfpods");

  auto web = podWith("web", "", "", 8080);
  auto r = agent::canAdmitPod(*podWith("web2", "", "", 8080), {web}, kNode);
  CHECK(r.reason == "PodFitsHostPorts");
  CHECK(agent::canAdmitPod(*podWith("web3", "", "", 8081), {web}, kNode).admit);

  auto elsewhere =
      testing::PodBuilder().name("x").uid("x").nodeName("node2").container("c").build();
  CHECK(agent::canAdmitPod(*elsewhere, {}, kNode).reason == "HostName");
}

TEST_CASE("admission: allocatable is the host's capacity minus --system-reserved",
          "[unit][agent]") {
  testing::TempDir proc;
  testing::writeFile(proc / "meminfo", "MemTotal:        8000000 kB\nMemFree: 1 kB\n");
  auto cap = agent::readHostCapacity(proc.path().string());
  REQUIRE(cap.ok());
  CHECK(cap->memory_bytes == int64_t{8000000} * 1024);
  CHECK(cap->cpu_milli >= 1000);
  auto alloc = agent::computeAllocatable({4000, int64_t{8} << 30},
                                         agent::AllocatableConfig{"cpu=500m,memory=1Gi", "", {}},
                                         110, "n");
  REQUIRE(alloc.ok());
  CHECK(alloc->cpu_milli == 3500);
  CHECK(alloc->memory_bytes == int64_t{7} << 30);
  CHECK(alloc->pods == 110);
  auto bad = agent::computeAllocatable({4000, 1}, agent::AllocatableConfig{"gpu=1", "", {}}, 110, "n");
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().message() == "--system-reserved: unknown resource \"gpu\"");
  CHECK_FALSE(
      agent::computeAllocatable({4000, 1}, agent::AllocatableConfig{"cpu", "", {}}, 110, "n").ok());
}

namespace {

constexpr int64_t kMi = int64_t{1} << 20;
constexpr int64_t kGi = int64_t{1} << 30;

eviction::Threshold memoryThreshold(eviction::ThresholdValue v) {
  return eviction::Threshold{eviction::Signal::kMemoryAvailable, v, base::Duration(0), std::nullopt};
}
eviction::Threshold nodefsThreshold(eviction::ThresholdValue v) {
  return eviction::Threshold{eviction::Signal::kNodeFsAvailable, v, base::Duration(0), std::nullopt};
}

}  // namespace

TEST_CASE("allocatable: kubelet's TestNodeAllocatableReservationForScheduling", "[unit][agent]") {
  const agent::NodeCapacity cap{10000, 10 * kGi, 0, 0};
  struct Case {
    std::string kube, system;
    std::optional<eviction::ThresholdValue> hard;
    agent::NodeCapacity capacity;
    int64_t cpu_milli, memory;
  };
  const eviction::ThresholdValue mem100{100 * kMi, 0};
  const eviction::ThresholdValue pct5{std::nullopt, 0.05f};
  std::vector<Case> cases = {
      {"cpu=100m,memory=100Mi", "cpu=50m,memory=50Mi", std::nullopt, cap, 150, 150 * kMi},
      {"cpu=100m,memory=100Mi", "cpu=50m,memory=50Mi", mem100, cap, 150, 250 * kMi},
      {"cpu=100m,memory=100Mi", "cpu=50m,memory=50Mi", pct5, cap, 150, 694157320},
      {"", "", std::nullopt, cap, 0, 0},
      {"memory=100Mi", "cpu=50m,memory=50Mi", std::nullopt, cap, 50, 150 * kMi},
      {"cpu=50m,memory=100Mi", "memory=50Mi", std::nullopt, cap, 50, 150 * kMi},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i + 1);
    agent::AllocatableConfig config{cases[i].system, cases[i].kube, {}};
    if (cases[i].hard) config.hard_eviction_thresholds.push_back(memoryThreshold(*cases[i].hard));
    auto r = agent::nodeAllocatableReservation(cases[i].capacity, config);
    REQUIRE(r.ok());
    CHECK(r->cpu_milli == cases[i].cpu_milli);
    CHECK(r->memory_bytes == cases[i].memory);
  }
  // Ephemeral storage: nodefs.available reserves a quantity or a percentage of the fs.
  const agent::NodeCapacity disk{10000, 10 * kGi, 10 * kGi, 0};
  struct DiskCase {
    std::string kube;
    std::optional<eviction::ThresholdValue> hard;
    int64_t expected;
  };
  std::vector<DiskCase> disk_cases = {{"ephemeral-storage=100Mi", std::nullopt, 100 * kMi},
                                      {"ephemeral-storage=100Mi", mem100, 200 * kMi},
                                      {"ephemeral-storage=150Mi", pct5, 694157320},
                                      {"", std::nullopt, 0}};
  for (const auto& c : disk_cases) {
    agent::AllocatableConfig config{"", c.kube, {}};
    if (c.hard) config.hard_eviction_thresholds.push_back(nodefsThreshold(*c.hard));
    auto r = agent::nodeAllocatableReservation(disk, config);
    REQUIRE(r.ok());
    CHECK(r->ephemeral_storage_bytes == c.expected);
  }
}

TEST_CASE("allocatable: kubelet's TestNodeAllocatableForEnforcement and the kubepods limits",
          "[unit][agent]") {
  const agent::NodeCapacity cap{10000, 10 * kGi, 100 * kGi, 4194304};
  agent::AllocatableConfig config{"cpu=50m,memory=50Mi", "cpu=100m,memory=100Mi",
                                  {memoryThreshold({100 * kMi, 0})}};
  auto abs = agent::nodeAllocatableAbsolute(cap, config);
  REQUIRE(abs.ok());
  CHECK(abs->cpu_milli == 9850);
  CHECK(abs->memory_bytes == 10090 * kMi);  // the eviction threshold is not subtracted
  auto alloc = agent::computeAllocatable(cap, config, 110, "n");
  REQUIRE(alloc.ok());
  CHECK(alloc->cpu_milli == 9850);
  CHECK(alloc->memory_bytes == 9990 * kMi);  // it is for scheduling
  CHECK(alloc->ephemeral_storage_bytes == 100 * kGi);

  auto rc = agent::kubepodsResourceConfig(cap, config);
  REQUIRE(rc.ok());
  CHECK(rc->memory_limit == 10090 * kMi);
  CHECK(rc->cpu_shares == uint64_t{9850} * 1024 / 1000);
  CHECK_FALSE(rc->pids_limit.has_value());
  config.kube_reserved += ",pid=1000";
  rc = agent::kubepodsResourceConfig(cap, config);
  REQUIRE(rc.ok());
  CHECK(rc->pids_limit == 4194304 - 1000);
}

TEST_CASE("allocatable: kubelet's TestNodeAllocatableInputValidation and flag errors",
          "[unit][agent]") {
  const agent::NodeCapacity cap{10000, 11 * kGi, 0, 0};
  agent::AllocatableConfig bad{"cpu=5,memory=10Gi", "cpu=5,memory=10Gi",
                               {memoryThreshold({2 * kGi, 0})}};
  auto r = agent::computeAllocatable(cap, bad, 110, "n");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("Resource \"memory\" has an allocatable of") !=
        std::string::npos);
  const agent::NodeCapacity disk{10000, 11 * kGi, 20 * kGi, 0};
  agent::AllocatableConfig bad_disk{"", "ephemeral-storage=20Gi",
                                    {nodefsThreshold({100 * kMi, 0})}};
  CHECK_FALSE(agent::computeAllocatable(disk, bad_disk, 110, "n").ok());
  agent::AllocatableConfig ok_disk{"", "ephemeral-storage=100Mi", {}};
  CHECK(agent::computeAllocatable(disk, ok_disk, 110, "n").ok());

  auto unknown =
      agent::computeAllocatable(cap, agent::AllocatableConfig{"", "gpu=1", {}}, 110, "n");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() == "--kube-reserved: unknown resource \"gpu\"");
  auto neg = agent::parseReservedResources("--system-reserved", "memory=-1Gi");
  REQUIRE_FALSE(neg.ok());
  CHECK(neg.status().message() ==
        "--system-reserved: resource quantity for \"memory\" cannot be negative: -1Gi");
  auto all = agent::parseReservedResources("--kube-reserved",
                                           "cpu=1,memory=1Gi,ephemeral-storage=2Gi,pid=100");
  REQUIRE(all.ok());
  CHECK(*all == agent::ReservedResources{1000, kGi, 2 * kGi, 100});
}

TEST_CASE("admission: ephemeral-storage requests must fit the node's allocatable",
          "[unit][agent]") {
  agent::NodeAllocatable node{"node1", 2000, 4 * kGi, 10, 10 * kGi};
  auto pod = [](const std::string& name, const std::string& storage) {
    return testing::PodBuilder()
        .name(name)
        .uid(name)
        .container("c", {"sleep", "1"})
        .edit([&](nlohmann::json& j) {
          j["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = storage;
        })
        .build();
  };
  auto a = pod("a", "8Gi");
  CHECK(agent::canAdmitPod(*a, {}, node).admit);
  auto r = agent::canAdmitPod(*pod("b", "4Gi"), {a}, node);
  CHECK_FALSE(r.admit);
  CHECK(r.reason == "OutOfephemeral-storage");
}

TEST_CASE("capacity: ephemeral-storage from the root dir's filesystem, pid_max from /proc",
          "[unit][agent]") {
  testing::TempDir proc;
  testing::writeFile(proc / "meminfo", "MemTotal:        8000000 kB\n");
  std::filesystem::create_directories(proc / "sys" / "kernel");
  testing::writeFile(proc / "sys" / "kernel" / "pid_max", "32768\n");
  auto cap = agent::readHostCapacity(proc.path().string(), proc.path().string());
  REQUIRE(cap.ok());
  CHECK(cap->pid_max == 32768);
  CHECK(cap->ephemeral_storage_bytes > 0);
}
