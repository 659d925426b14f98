#include <catch2/catch.hpp>

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
  auto alloc = agent::computeAllocatable({4000, int64_t{8} << 30}, "cpu=500m,memory=1Gi", 110, "n");
  REQUIRE(alloc.ok());
  CHECK(alloc->cpu_milli == 3500);
  CHECK(alloc->memory_bytes == int64_t{7} << 30);
  CHECK(alloc->pods == 110);
  auto bad = agent::computeAllocatable({4000, 1}, "gpu=1", 110, "n");
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().message() == "--system-reserved: unknown resource \"gpu\"");
  CHECK_FALSE(agent::computeAllocatable({4000, 1}, "cpu", 110, "n").ok());
}
