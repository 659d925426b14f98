// Pod admission (kubelet's canAdmitPod with the GeneralPredicates the agent can judge on its own):
// the pod's node name, the node's pod capacity (--max-pods), host-port conflicts, and CPU, memory
// and ephemeral-storage requests against the node's allocatable. Pure functions: the caller passes
// the active pods. (The eviction manager's admit handler, which kubelet runs first, is
// eviction::EvictionManager::admitPod.)
//
// Node allocatable as kubelet computes it (pkg/kubelet/cm/node_container_manager_linux.go):
//   allocatable (reported, admitted against) = capacity - system-reserved - kube-reserved
//                                              - hard eviction thresholds
//   absolute (the kubepods cgroup's limits)   = capacity - system-reserved - kube-reserved
// where the hard eviction thresholds reserve memory (memory.available) and ephemeral-storage
// (nodefs.available), as a quantity or a percentage of the capacity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/cm/resources.h"
#include "agent/eviction/thresholds.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

// What the node offers to pods.
struct NodeAllocatable {
  std::string node_name;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t pods = 110;
  // 0: unknown (no --root-dir filesystem was measured); then nothing is checked against it.
  int64_t ephemeral_storage_bytes = 0;
};

// kubelet's PodAdmitResult and the scheduler's pod requests live with the resource arithmetic
// (agent/cm/resources.h), where the eviction manager uses them too.
using cm::AdmitResult;
using cm::PodRequests;
using cm::podRequests;

// The pods admission counts as active, kept from one batch of additions to the next while nothing
// that decides it changed (the pod manager's, the pod workers' and the terminal statuses'
// generations): a node with 50,000 pods would otherwise walk all of them for each added manifest.
// Not thread-safe (the sync loop's strand).
class ActivePodsCache {
 public:
  struct Key {
    uint64_t pods = 0;
    uint64_t workers = 0;
    uint64_t terminal = 0;
    bool operator==(const Key&) const = default;
  };
  // The cached pods when they were computed for `key`, else nullopt; the cache is empty after.
  std::optional<std::vector<api::PodPtr>> take(const Key& key) {
    std::optional<std::vector<api::PodPtr>> out;
    if (entry_ && entry_->first == key) out = std::move(entry_->second);
    entry_.reset();
    return out;
  }
  void put(const Key& key, std::vector<api::PodPtr> pods) { entry_.emplace(key, std::move(pods)); }

 private:
  std::optional<std::pair<Key, std::vector<api::PodPtr>>> entry_;
};

// `active_pods` are the admitted, non-terminated pods (the pod itself is not among them).
AdmitResult canAdmitPod(const api::Pod& pod, const std::vector<api::PodPtr>& active_pods,
                        const NodeAllocatable& node);

// The host's capacity: CPUs this process may run on, MemTotal (/proc/meminfo), the size of the
// filesystem holding `root_dir` (statvfs; "" or an unreadable dir leaves it 0) and
// kernel.pid_max (kubelet's internal "pid" capacity; 0 when unreadable).
struct NodeCapacity {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t ephemeral_storage_bytes = 0;
  int64_t pid_max = 0;
};
base::StatusOr<NodeCapacity> readHostCapacity(const std::string& proc_root = "/proc",
                                              const std::string& root_dir = "");

// What --system-reserved or --kube-reserved reserve ("cpu=500m,memory=1Gi,ephemeral-storage=1Gi,
// pid=1000"; "" reserves nothing). InvalidArgument names the flag and the entry.
struct ReservedResources {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t ephemeral_storage_bytes = 0;
  int64_t pids = 0;
  bool operator==(const ReservedResources&) const = default;
};
base::StatusOr<ReservedResources> parseReservedResources(std::string_view flag,
                                                         const std::string& text);

// The node allocatable configuration (kubelet's NodeAllocatableConfig).
struct AllocatableConfig {
  std::string system_reserved;  // --system-reserved
  std::string kube_reserved;    // --kube-reserved
  // The hard eviction thresholds (eviction::hardThresholds of parseThresholdConfig): their
  // memory.available and nodefs.available reserve memory and ephemeral-storage.
  std::vector<eviction::Threshold> hard_eviction_thresholds;
};

// GetNodeAllocatableReservation: system-reserved + kube-reserved + the hard eviction thresholds
// (a percentage is of `capacity`). Resources whose capacity is 0 (unknown) reserve nothing.
base::StatusOr<ReservedResources> nodeAllocatableReservation(const NodeCapacity& capacity,
                                                             const AllocatableConfig& config);
// Node allocatable for scheduling and admission: capacity - nodeAllocatableReservation, each at
// least 0, `max_pods` pods. InvalidArgument when a reservation exceeds the capacity
// (validateNodeAllocatable: kubelet refuses to start).
base::StatusOr<NodeAllocatable> computeAllocatable(const NodeCapacity& capacity,
                                                   const AllocatableConfig& config,
                                                   int64_t max_pods, std::string node_name);

// GetNodeAllocatableAbsolute: capacity - system-reserved - kube-reserved (each at least 0),
// without the eviction thresholds. `pid_max` is the pids left for pods.
base::StatusOr<NodeCapacity> nodeAllocatableAbsolute(const NodeCapacity& capacity,
                                                     const AllocatableConfig& config);
// The kubepods cgroup's limits for --enforce-node-allocatable=pods (getCgroupConfig of the
// absolute allocatable): memory limit, cpu shares = milliCpuToShares(cpu), and a pids limit
// only when pids are reserved. For cm::ContainerManagerOptions::node_allocatable.
base::StatusOr<cm::ResourceConfig> kubepodsResourceConfig(const NodeCapacity& capacity,
                                                          const AllocatableConfig& config);

}  // namespace nodeagent::agent
