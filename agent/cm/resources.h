// kubelet's resource arithmetic for cgroups (pkg/kubelet/cm/helpers_linux.go, qos/policy.go,
// kuberuntime_container_linux.go): CPU shares and quota from milli-CPU, the cgroup v1 -> v2
// weight conversion, a pod's QoS class, the pod cgroup's ResourceConfig, and the container's
// LinuxContainerResources (what kubelet hands a CRI runtime). Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api/pod.h"

namespace nodeagent::cm {

// helpers_linux.go constants.
inline constexpr int64_t kMinShares = 2;
inline constexpr int64_t kMaxShares = 262144;
inline constexpr int64_t kSharesPerCpu = 1024;
inline constexpr int64_t kMilliCpuToCpu = 1000;
inline constexpr int64_t kQuotaPeriod = 100000;  // microseconds (100 ms)
inline constexpr int64_t kMinQuotaPeriod = 1000;

// MilliCPUToShares: 0 -> kMinShares, else milli * 1024 / 1000 clamped to [2, 262144].
int64_t milliCpuToShares(int64_t milli_cpu);
// MilliCPUToQuota: 0 -> 0 (no limit), else milli * period / 1000, at least kMinQuotaPeriod.
int64_t milliCpuToQuota(int64_t milli_cpu, int64_t period);
// cgroup v2 cpu.weight for v1 shares (runc's ConvertCPUSharesToCgroupV2Value):
// 0 -> 0 (unset), else 1 + ((shares - 2) * 9999) / 262142.
uint64_t cpuSharesToWeight(uint64_t shares);

// v1qos.GetPodQOS.
enum class QosClass { kGuaranteed, kBurstable, kBestEffort };
QosClass podQos(const api::Pod& pod);
std::string_view qosClassName(QosClass qos);  // "Guaranteed", "Burstable", "BestEffort"

// kubelet's ResourceConfig: unset fields are left as the cgroup has them.
struct ResourceConfig {
  std::optional<int64_t> memory_limit;  // bytes; -1: no limit
  std::optional<uint64_t> cpu_shares;   // v1 shares (converted to cpu.weight on v2)
  std::optional<int64_t> cpu_quota;     // microseconds per period; -1: no limit
  std::optional<uint64_t> cpu_period;   // microseconds
  std::optional<int64_t> pids_limit;    // -1: no limit
  bool operator==(const ResourceConfig&) const = default;
};

// ResourceConfigForPod (enforceCPULimits = true, period = kQuotaPeriod) plus the pod pids limit
// (`pod_pids_limit` > 0, as PodContainerManager.EnsureExists): requests and limits summed over
// app containers, or the largest init container's when bigger; Guaranteed: shares, quota,
// memory; Burstable: shares, quota only when every container declares a CPU limit, memory only
// when every container declares a memory limit; BestEffort: kMinShares only.
ResourceConfig resourceConfigForPod(const api::Pod& pod, int64_t pod_pids_limit);

// CRI LinuxContainerResources, the fields kubelet sets (generateLinuxContainerConfig).
struct LinuxContainerResources {
  int64_t cpu_period = 0;  // 0: unset
  int64_t cpu_quota = 0;   // 0: no limit
  int64_t cpu_shares = 0;
  int64_t memory_limit_in_bytes = 0;  // 0: no limit
  int64_t oom_score_adj = 0;
  bool operator==(const LinuxContainerResources&) const = default;
};

// qos.GetContainerOOMScoreAdjust (policy.go, v1.18): critical pods and Guaranteed -998,
// BestEffort 1000, Burstable 1000 - 1000 * memoryRequest / memoryCapacity, kept within
// [1000 - 998 = 2, 999] as policy.go does (later kubelets use -997 and so [3, 999]).
// `memory_capacity` is the node's memory in bytes.
int64_t containerOomScoreAdjust(const api::Pod& pod, const api::Container& container,
                                int64_t memory_capacity);

// generateLinuxContainerConfig's resources (cpuCFSQuota on): shares from the CPU request (the
// limit when only a limit is given), cpu_period kQuotaPeriod always, quota from the CPU limit
// over it (0 without a limit), the memory limit, the OOM score.
LinuxContainerResources containerResources(const api::Pod& pod, const api::Container& container,
                                           int64_t memory_capacity);

// The same as a ResourceConfig for the container's own cgroup (shares, quota + period when
// limited, memory when limited).
ResourceConfig toResourceConfig(const LinuxContainerResources& resources);

// kubelet's IsCriticalPod: a static or mirror pod, or priority >= 2000000000
// (SystemCriticalPriority).
bool isCriticalPod(const api::Pod& pod);
inline constexpr int32_t kSystemCriticalPriority = 2000000000;

// The effective requests of a pod as the scheduler counts them: the sum over app containers, or
// the largest init container request when that is bigger (milli-CPU and bytes); a limit without
// a request counts as the request (API defaulting).
struct PodRequests {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t ephemeral_storage_bytes = 0;
};
PodRequests podRequests(const api::Pod& pod);

// kubelet's PodAdmitResult: whether a pod may run on the node, and why not.
struct AdmitResult {
  bool admit = true;
  // "OutOfcpu", "OutOfmemory", "OutOfephemeral-storage", "OutOfpods", "HostName",
  // "PodFitsHostPorts"; the eviction manager's "Evicted".
  std::string reason;
  std::string message;  // kubelet's wording, e.g. "Node didn't have enough resource: cpu, ..."
};

}  // namespace nodeagent::cm
