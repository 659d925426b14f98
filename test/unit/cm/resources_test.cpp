#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/cm/resources.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using cm::QosClass;

namespace {

// One container's requests and limits ("" leaves a resource out), as kubelet's tests'
// getResourceRequirements(getResourceList(cpu, memory), ...).
struct Res {
  std::string req_cpu, req_mem, lim_cpu, lim_mem;
};

nlohmann::json resourcesJson(const Res& r) {
  nlohmann::json j = nlohmann::json::object();
  if (!r.req_cpu.empty()) j["requests"]["cpu"] = r.req_cpu;
  if (!r.req_mem.empty()) j["requests"]["memory"] = r.req_mem;
  if (!r.lim_cpu.empty()) j["limits"]["cpu"] = r.lim_cpu;
  if (!r.lim_mem.empty()) j["limits"]["memory"] = r.lim_mem;
  return j;
}

api::PodPtr podWith(const std::vector<Res>& containers, const std::vector<Res>& inits = {}) {
  testing::PodBuilder b;
  b.name("p").uid("u1");
  for (size_t i = 0; i < containers.size(); ++i) b.container("c" + std::to_string(i), {"true"});
  for (size_t i = 0; i < inits.size(); ++i) b.initContainer("i" + std::to_string(i), {"true"});
  b.edit([&](nlohmann::json& j) {
    for (size_t i = 0; i < containers.size(); ++i) {
      j["spec"]["containers"][i]["resources"] = resourcesJson(containers[i]);
    }
    for (size_t i = 0; i < inits.size(); ++i) {
      j["spec"]["initContainers"][i]["resources"] = resourcesJson(inits[i]);
    }
  });
  return b.build();
}

}  // namespace

TEST_CASE("milliCpuToShares: kubelet's conversion with its clamp", "[unit][cm]") {
  struct Case {
    int64_t milli;
    int64_t shares;
  };
  const Case cases[] = {{0, 2},       {1, 2},           {2, 2},          {5, 5},
                        {100, 102},   {500, 512},       {1000, 1024},    {1500, 1536},
                        {2000, 2048}, {256000, 262144}, {300000, 262144}};
  for (const auto& c : cases) {
    INFO("milli " << c.milli);
    CHECK(cm::milliCpuToShares(c.milli) == c.shares);
  }
}

TEST_CASE("milliCpuToQuota: helpers_linux_test.go TestMilliCPUToQuota", "[unit][cm]") {
  struct Case {
    int64_t milli;
    int64_t quota;
    int64_t period;
  };
  const Case cases[] = {{0, 0, 0},
                        {5, 1000, 100000},
                        {9, 1000, 100000},
                        {10, 1000, 100000},
                        {200, 20000, 100000},
                        {500, 50000, 100000},
                        {1000, 100000, 100000},
                        {1500, 150000, 100000}};
  for (const auto& c : cases) {
    INFO("milli " << c.milli);
    CHECK(cm::milliCpuToQuota(c.milli, c.period) == c.quota);
  }
  // A shorter period scales the quota (the CPUCFSQuotaPeriod tuning).
  CHECK(cm::milliCpuToQuota(100, 5000) == 1000);
  CHECK(cm::milliCpuToQuota(2000, 5000) == 10000);
}

TEST_CASE("cpuSharesToWeight: runc's v1 shares to v2 weight", "[unit][cm]") {
  CHECK(cm::cpuSharesToWeight(0) == 0);
  CHECK(cm::cpuSharesToWeight(2) == 1);
  CHECK(cm::cpuSharesToWeight(1024) == 39);
  CHECK(cm::cpuSharesToWeight(102) == 4);
  CHECK(cm::cpuSharesToWeight(262144) == 10000);
  CHECK(cm::cpuSharesToWeight(1) == 1);  // below the minimum: the lowest weight, no wrap-around
}

TEST_CASE("podQos: kubelet's GetPodQOS", "[unit][cm]") {
  CHECK(cm::podQos(*podWith({{}})) == QosClass::kBestEffort);
  CHECK(cm::podQos(*podWith({{}, {}})) == QosClass::kBestEffort);
  // Zero quantities do not count.
  CHECK(cm::podQos(*podWith({{"0", "0", "", ""}})) == QosClass::kBestEffort);
  CHECK(cm::podQos(*podWith({{"100m", "100Mi", "100m", "100Mi"}})) == QosClass::kGuaranteed);
  CHECK(cm::podQos(*podWith({{"100m", "100Mi", "100m", "100Mi"}, {"1", "1Gi", "1", "1Gi"}})) ==
        QosClass::kGuaranteed);
  // "1" and "1000m" are the same quantity.
  CHECK(cm::podQos(*podWith({{"1", "1Gi", "1000m", "1024Mi"}})) == QosClass::kGuaranteed);
  CHECK(cm::podQos(*podWith({{"100m", "100Mi", "200m", "200Mi"}})) == QosClass::kBurstable);
  CHECK(cm::podQos(*podWith({{"100m", "", "", ""}})) == QosClass::kBurstable);
  CHECK(cm::podQos(*podWith({{"", "", "", "100Mi"}})) == QosClass::kBurstable);
  // One container without limits makes the pod Burstable.
  CHECK(cm::podQos(*podWith({{"100m", "100Mi", "100m", "100Mi"}, {}})) == QosClass::kBurstable);
  CHECK(cm::podQos(*podWith({{"100m", "100Mi", "100m", "100Mi"}, {"1", "", "", ""}})) ==
        QosClass::kBurstable);
  // Init containers count as well.
  CHECK(cm::podQos(*podWith({{"100m", "100Mi", "100m", "100Mi"}}, {{"1", "", "", ""}})) ==
        QosClass::kBurstable);
  CHECK(cm::podQos(*podWith({{}}, {{"1", "", "", ""}})) == QosClass::kBurstable);
  CHECK(cm::qosClassName(QosClass::kGuaranteed) == "Guaranteed");
  CHECK(cm::qosClassName(QosClass::kBurstable) == "Burstable");
  CHECK(cm::qosClassName(QosClass::kBestEffort) == "BestEffort");
}

TEST_CASE("resourceConfigForPod: kubelet's TestResourceConfigForPod", "[unit][cm]") {
  const uint64_t min_shares = 2;
  const uint64_t period = 100000;
  const int64_t mi = 1024 * 1024;

  SECTION("besteffort") {
    cm::ResourceConfig want;
    want.cpu_shares = min_shares;
    CHECK(cm::resourceConfigForPod(*podWith({{}}), 0) == want);
  }
  SECTION("burstable-no-limits") {
    cm::ResourceConfig want;
    want.cpu_shares = 102;  // MilliCPUToShares(100)
    CHECK(cm::resourceConfigForPod(*podWith({{"100m", "100Mi", "", ""}}), 0) == want);
  }
  SECTION("burstable-with-limits") {
    cm::ResourceConfig want;
    want.cpu_shares = 102;
    want.cpu_quota = 20000;  // MilliCPUToQuota(200)
    want.cpu_period = period;
    want.memory_limit = 200 * mi;
    CHECK(cm::resourceConfigForPod(*podWith({{"100m", "100Mi", "200m", "200Mi"}}), 0) == want);
  }
  SECTION("burstable-partial-limits") {
    cm::ResourceConfig want;
    want.cpu_shares = 204;  // MilliCPUToShares(200): both requests
    CHECK(cm::resourceConfigForPod(
              *podWith({{"100m", "100Mi", "200m", "200Mi"}, {"100m", "100Mi", "", ""}}), 0) ==
          want);
  }
  SECTION("burstable with only a memory limit everywhere") {
    cm::ResourceConfig want;
    want.cpu_shares = 102;
    want.memory_limit = 300 * mi;
    CHECK(cm::resourceConfigForPod(
              *podWith({{"100m", "100Mi", "", "200Mi"}, {"", "", "", "100Mi"}}), 0) == want);
  }
  SECTION("guaranteed") {
    cm::ResourceConfig want;
    want.cpu_shares = 102;
    want.cpu_quota = 10000;  // MilliCPUToQuota(100)
    want.cpu_period = period;
    want.memory_limit = 100 * mi;
    CHECK(cm::resourceConfigForPod(*podWith({{"100m", "100Mi", "100m", "100Mi"}}), 0) == want);
  }
  SECTION("init containers: the largest wins when bigger than the sum of the app containers") {
    cm::ResourceConfig want;
    want.cpu_shares = 1024;
    want.cpu_quota = 100000;
    want.cpu_period = period;
    want.memory_limit = 1024 * mi;
    auto pod = podWith({{"100m", "100Mi", "100m", "100Mi"}, {"100m", "100Mi", "100m", "100Mi"}},
                       {{"1", "1Gi", "1", "1Gi"}, {"50m", "10Mi", "50m", "10Mi"}});
    CHECK(cm::resourceConfigForPod(*pod, 0) == want);
  }
  SECTION("the pod pids limit") {
    cm::ResourceConfig want;
    want.cpu_shares = min_shares;
    want.pids_limit = 1024;
    CHECK(cm::resourceConfigForPod(*podWith({{}}), 1024) == want);
    want.pids_limit.reset();
    CHECK(cm::resourceConfigForPod(*podWith({{}}), -1) == want);
  }
}

TEST_CASE("containerOomScoreAdjust: kubelet's policy_test.go (v1.18 values)", "[unit][cm]") {
  const int64_t standard = 8000000000;
  // cpuLimit (Burstable, no memory request): 999.
  CHECK(cm::containerOomScoreAdjust(*podWith({{"", "", "10", ""}}),
                                    podWith({{"", "", "10", ""}})->spec->containers[0],
                                    4000000000) == 999);
  auto memory_limit_cpu_request = podWith({{"0", "", "", "10G"}});
  CHECK(cm::containerOomScoreAdjust(*memory_limit_cpu_request,
                                    memory_limit_cpu_request->spec->containers[0],
                                    standard) == 999);
  auto zero_memory_limit = podWith({{"", "", "", "0"}});
  CHECK(cm::containerOomScoreAdjust(*zero_memory_limit, zero_memory_limit->spec->containers[0],
                                    7230457451) == 1000);
  auto no_request_limit = podWith({{}});
  CHECK(cm::containerOomScoreAdjust(*no_request_limit, no_request_limit->spec->containers[0],
                                    4000000000) == 1000);
  auto equal = podWith({{"5m", "10G", "5m", "10G"}});
  CHECK(cm::containerOomScoreAdjust(*equal, equal->spec->containers[0], 123456789) == -998);
  auto half = podWith({{"5m", std::to_string(standard / 2), "", "10G"}});
  int64_t adj = cm::containerOomScoreAdjust(*half, half->spec->containers[0], standard);
  CHECK(adj >= 495);
  CHECK(adj <= 505);
  auto request_no_limit = podWith({{"5m", std::to_string(standard - 1), "", ""}});
  CHECK(cm::containerOomScoreAdjust(*request_no_limit, request_no_limit->spec->containers[0],
                                    standard) == 2);
  auto critical = testing::PodBuilder()
                      .name("crit")
                      .uid("c1")
                      .container("c", {"true"})
                      .priority(cm::kSystemCriticalPriority)
                      .build();
  CHECK(cm::isCriticalPod(*critical));
  CHECK(cm::containerOomScoreAdjust(*critical, critical->spec->containers[0], 4000000000) == -998);
  auto static_pod = testing::PodBuilder()
                        .name("static")
                        .uid("s1")
                        .annotation("kubernetes.io/config.source", "file")
                        .container("c", {"true"})
                        .build();
  CHECK(cm::isCriticalPod(*static_pod));
  CHECK_FALSE(cm::isCriticalPod(*no_request_limit));
}

TEST_CASE("containerResources: generateLinuxContainerConfig's resources", "[unit][cm]") {
  const int64_t capacity = int64_t{8} << 30;
  SECTION("requests and limits") {
    auto pod = podWith({{"250m", "1Gi", "500m", "2Gi"}});
    auto r = cm::containerResources(*pod, pod->spec->containers[0], capacity);
    CHECK(r.cpu_shares == 256);
    CHECK(r.cpu_period == 100000);
    CHECK(r.cpu_quota == 50000);
    CHECK(r.memory_limit_in_bytes == int64_t{2} << 30);
    CHECK(r.oom_score_adj == 1000 - 1000 / 8);
    cm::ResourceConfig want;
    want.cpu_shares = 256;
    want.cpu_quota = 50000;
    want.cpu_period = 100000;
    want.memory_limit = int64_t{2} << 30;
    CHECK(cm::toResourceConfig(r) == want);
  }
  SECTION("a CPU limit without a request gives the shares of the limit") {
    auto pod = podWith({{"", "", "2", ""}});
    auto r = cm::containerResources(*pod, pod->spec->containers[0], capacity);
    CHECK(r.cpu_shares == 2048);
    CHECK(r.cpu_quota == 200000);
    CHECK(r.memory_limit_in_bytes == 0);
  }
  SECTION("nothing declared") {
    auto pod = podWith({{}});
    auto r = cm::containerResources(*pod, pod->spec->containers[0], capacity);
    CHECK(r.cpu_shares == 2);
    CHECK(r.cpu_quota == 0);
    CHECK(r.cpu_period == 100000);
    CHECK(r.memory_limit_in_bytes == 0);
    CHECK(r.oom_score_adj == 1000);
    cm::ResourceConfig want;
    want.cpu_shares = 2;
    CHECK(cm::toResourceConfig(r) == want);
  }
}
