#include "agent/cm/resources.h"

#include <algorithm>
#include <map>
#include <set>

#include "api/pod_update.h"

namespace nodeagent::cm {
namespace {

constexpr std::string_view kCpu = "cpu";
constexpr std::string_view kMemory = "memory";

// kubelet's guaranteedOOMScoreAdj / besteffortOOMScoreAdj (policy.go, v1.18).
constexpr int64_t kGuaranteedOomScoreAdj = -998;
constexpr int64_t kBestEffortOomScoreAdj = 1000;

constexpr __int128 kNanosPerUnit = 1000000000;
constexpr __int128 kNanosPerMilli = 1000000;

// A ResourceList with exact sums (nano-units), rounded up only when read, as resource.Quantity.
using ResourceSums = std::map<std::string, __int128, std::less<>>;

int64_t roundUp(__int128 nanos, __int128 unit) {
  __int128 q = nanos / unit;
  if (nanos % unit > 0) ++q;
  return static_cast<int64_t>(q);
}

int64_t milliOf(const ResourceSums& list, std::string_view name) {
  auto it = list.find(name);
  return it == list.end() ? 0 : roundUp(it->second, kNanosPerMilli);
}

int64_t valueOf(const ResourceSums& list, std::string_view name) {
  auto it = list.find(name);
  return it == list.end() ? 0 : roundUp(it->second, kNanosPerUnit);
}

bool isZero(const std::map<std::string, api::Quantity>& list, std::string_view name) {
  auto it = list.find(std::string(name));
  return it == list.end() || it->second.isZero();
}

// resource.PodRequestsAndLimits: app containers summed; each init container raises a resource to
// its own value when bigger (init containers run one at a time).
void podRequestsAndLimits(const api::Pod& pod, ResourceSums& reqs, ResourceSums& limits) {
  for (const auto& c : pod.spec->containers) {
    for (const auto& [name, q] : c.resources.requests) reqs[name] += q.nanoValue();
    for (const auto& [name, q] : c.resources.limits) limits[name] += q.nanoValue();
  }
  auto raise = [](ResourceSums& list, const std::map<std::string, api::Quantity>& from) {
    for (const auto& [name, q] : from) {
      auto it = list.find(name);
      if (it == list.end()) {
        list.emplace(name, q.nanoValue());
      } else if (q.nanoValue() > it->second) {
        it->second = q.nanoValue();
      }
    }
  };
  for (const auto& c : pod.spec->init_containers) {
    raise(reqs, c.resources.requests);
    raise(limits, c.resources.limits);
  }
}

bool isSupportedQosResource(std::string_view name) {
  return name == kCpu || name == kMemory || name.starts_with("hugepages-");
}

}  // namespace

int64_t milliCpuToShares(int64_t milli_cpu) {
  if (milli_cpu == 0) return kMinShares;
  // (milli / 1000) * 1024, factored to round better.
  int64_t shares = (milli_cpu * kSharesPerCpu) / kMilliCpuToCpu;
  return std::clamp(shares, kMinShares, kMaxShares);
}

int64_t milliCpuToQuota(int64_t milli_cpu, int64_t period) {
  if (milli_cpu == 0) return 0;
  int64_t quota = (milli_cpu * period) / kMilliCpuToCpu;
  return std::max(quota, kMinQuotaPeriod);
}

uint64_t cpuSharesToWeight(uint64_t shares) {
  if (shares == 0) return 0;
  // Shares below the kernel's minimum map to the lowest weight instead of wrapping around.
  uint64_t s = std::max<uint64_t>(shares, kMinShares);
  return 1 + ((s - 2) * 9999) / 262142;
}

QosClass podQos(const api::Pod& pod) {
  ResourceSums requests;
  ResourceSums limits;
  bool guaranteed = true;
  auto account = [&](const api::Container& c) {
    for (const auto& [name, q] : c.resources.requests) {
      if (!isSupportedQosResource(name) || q.nanoValue() <= 0) continue;
      requests[name] += q.nanoValue();
    }
    std::set<std::string_view> limits_found;
    for (const auto& [name, q] : c.resources.limits) {
      if (!isSupportedQosResource(name) || q.nanoValue() <= 0) continue;
      limits_found.insert(name);
      limits[name] += q.nanoValue();
    }
    if (!limits_found.contains(kMemory) || !limits_found.contains(kCpu)) guaranteed = false;
  };
  for (const auto& c : pod.spec->containers) account(c);
  for (const auto& c : pod.spec->init_containers) account(c);

  if (requests.empty() && limits.empty()) return QosClass::kBestEffort;
  if (guaranteed) {
    for (const auto& [name, req] : requests) {
      auto it = limits.find(name);
      if (it == limits.end() || it->second != req) {
        guaranteed = false;
        break;
      }
    }
  }
  if (guaranteed && requests.size() == limits.size()) return QosClass::kGuaranteed;
  return QosClass::kBurstable;
}

std::string_view qosClassName(QosClass qos) {
  switch (qos) {
    case QosClass::kGuaranteed:
      return "Guaranteed";
    case QosClass::kBurstable:
      return "Burstable";
    case QosClass::kBestEffort:
      return "BestEffort";
  }
  return "Unknown";
}

ResourceConfig resourceConfigForPod(const api::Pod& pod, int64_t pod_pids_limit) {
  ResourceSums reqs;
  ResourceSums limits;
  podRequestsAndLimits(pod, reqs, limits);

  const uint64_t shares = static_cast<uint64_t>(milliCpuToShares(milliOf(reqs, kCpu)));
  const int64_t quota = milliCpuToQuota(milliOf(limits, kCpu), kQuotaPeriod);
  const int64_t memory = valueOf(limits, kMemory);

  // A limit that is missing from one container leaves the pod unlimited in that resource.
  bool cpu_limits_declared = true;
  bool memory_limits_declared = true;
  for (const auto& c : pod.spec->containers) {
    if (isZero(c.resources.limits, kCpu)) cpu_limits_declared = false;
    if (isZero(c.resources.limits, kMemory)) memory_limits_declared = false;
  }

  ResourceConfig config;
  switch (podQos(pod)) {
    case QosClass::kGuaranteed:
      config.cpu_shares = shares;
      config.cpu_quota = quota;
      config.cpu_period = static_cast<uint64_t>(kQuotaPeriod);
      config.memory_limit = memory;
      break;
    case QosClass::kBurstable:
      config.cpu_shares = shares;
      if (cpu_limits_declared) {
        config.cpu_quota = quota;
        config.cpu_period = static_cast<uint64_t>(kQuotaPeriod);
      }
      if (memory_limits_declared) config.memory_limit = memory;
      break;
    case QosClass::kBestEffort:
      config.cpu_shares = static_cast<uint64_t>(kMinShares);
      break;
  }
  if (pod_pids_limit > 0) config.pids_limit = pod_pids_limit;
  return config;
}

int64_t containerOomScoreAdjust(const api::Pod& pod, const api::Container& container,
                                int64_t memory_capacity) {
  if (api::isCriticalPod(pod)) return kGuaranteedOomScoreAdj;
  switch (podQos(pod)) {
    case QosClass::kGuaranteed:
      return kGuaranteedOomScoreAdj;
    case QosClass::kBestEffort:
      return kBestEffortOomScoreAdj;
    case QosClass::kBurstable:
      break;
  }
  // A container requesting 10% of the node's memory gets 900: one using more than it asked for
  // is among the first an OOM kill picks.
  auto it = container.resources.requests.find(std::string(kMemory));
  const int64_t request = it == container.resources.requests.end() ? 0 : it->second.value();
  if (memory_capacity <= 0) return kBestEffortOomScoreAdj - 1;
  const int64_t adjust =
      1000 - static_cast<int64_t>((static_cast<__int128>(1000) * request) / memory_capacity);
  // Above Guaranteed (a Guaranteed container using all of memory scores 2), below BestEffort.
  if (adjust < 1000 + kGuaranteedOomScoreAdj) return 1000 + kGuaranteedOomScoreAdj;
  if (adjust == kBestEffortOomScoreAdj) return adjust - 1;
  return adjust;
}

LinuxContainerResources containerResources(const api::Pod& pod, const api::Container& container,
                                           int64_t memory_capacity) {
  const auto& req = container.resources.requests;
  const auto& lim = container.resources.limits;
  auto milli = [](const std::map<std::string, api::Quantity>& list) -> int64_t {
    auto it = list.find(std::string(kCpu));
    return it == list.end() ? 0 : it->second.milliValue();
  };
  const int64_t cpu_request = milli(req);
  const int64_t cpu_limit = milli(lim);

  LinuxContainerResources r;
  // A limit without a request: the request defaults to the limit (as the API server does for
  // new pods; kubelet repeats it for pods made before that default existed).
  r.cpu_shares = milliCpuToShares(cpu_request == 0 && cpu_limit != 0 ? cpu_limit : cpu_request);
  auto mem = lim.find(std::string(kMemory));
  r.memory_limit_in_bytes = mem == lim.end() ? 0 : mem->second.value();
  r.oom_score_adj = containerOomScoreAdjust(pod, container, memory_capacity);
  r.cpu_period = kQuotaPeriod;
  r.cpu_quota = milliCpuToQuota(cpu_limit, kQuotaPeriod);
  return r;
}

ResourceConfig toResourceConfig(const LinuxContainerResources& resources) {
  ResourceConfig config;
  if (resources.cpu_shares > 0) config.cpu_shares = static_cast<uint64_t>(resources.cpu_shares);
  if (resources.cpu_quota > 0) {
    config.cpu_quota = resources.cpu_quota;
    if (resources.cpu_period > 0) config.cpu_period = static_cast<uint64_t>(resources.cpu_period);
  }
  if (resources.memory_limit_in_bytes > 0) config.memory_limit = resources.memory_limit_in_bytes;
  return config;
}

bool isCriticalPod(const api::Pod& pod) { return api::isCriticalPod(pod); }

namespace {

int64_t requestMilli(const api::Container& c, const std::string& resource) {
  auto it = c.resources.requests.find(resource);
  if (it != c.resources.requests.end()) return it->second.milliValue();
  // A limit without a request defaults the request to the limit (API defaulting).
  auto lim = c.resources.limits.find(resource);
  return lim == c.resources.limits.end() ? 0 : lim->second.milliValue();
}

int64_t requestValue(const api::Container& c, const std::string& resource) {
  auto it = c.resources.requests.find(resource);
  if (it != c.resources.requests.end()) return it->second.value();
  auto lim = c.resources.limits.find(resource);
  return lim == c.resources.limits.end() ? 0 : lim->second.value();
}

}  // namespace

PodRequests podRequests(const api::Pod& pod) {
  PodRequests r;
  for (const auto& c : pod.spec->containers) {
    r.cpu_milli += requestMilli(c, "cpu");
    r.memory_bytes += requestValue(c, "memory");
    r.ephemeral_storage_bytes += requestValue(c, "ephemeral-storage");
  }
  for (const auto& c : pod.spec->init_containers) {
    r.cpu_milli = std::max(r.cpu_milli, requestMilli(c, "cpu"));
    r.memory_bytes = std::max(r.memory_bytes, requestValue(c, "memory"));
    r.ephemeral_storage_bytes =
        std::max(r.ephemeral_storage_bytes, requestValue(c, "ephemeral-storage"));
  }
  return r;
}

}  // namespace nodeagent::cm
