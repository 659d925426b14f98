// Pod admission (kubelet's canAdmitPod with the GeneralPredicates the agent can judge on its own):
// the pod's node name, the node's pod capacity (--max-pods), host-port conflicts, and CPU/memory
// requests against the node's allocatable. Pure functions: the caller passes the active pods.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

// What the node offers to pods.
struct NodeAllocatable {
  std::string node_name;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t pods = 110;
};

struct AdmitResult {
  bool admit = true;
  std::string reason;   // "OutOfcpu", "OutOfmemory", "OutOfpods", "HostName", "PodFitsHostPorts"
  std::string message;  // kubelet's wording, e.g. "Node didn't have enough resource: cpu, ..."
};

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

// The effective requests of a pod as the scheduler counts them: the sum over app containers, or
// the largest init container request when that is bigger (milli-CPU and bytes).
struct PodRequests {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
};
PodRequests podRequests(const api::Pod& pod);

// The host's capacity from /proc (CPUs this process may run on, MemTotal), and allocatable =
// capacity minus `system_reserved` ("cpu=500m,memory=1Gi"; an empty string reserves nothing).
struct NodeCapacity {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
};
base::StatusOr<NodeCapacity> readHostCapacity(const std::string& proc_root = "/proc");
base::StatusOr<NodeAllocatable> computeAllocatable(const NodeCapacity& capacity,
                                                   const std::string& system_reserved,
                                                   int64_t max_pods, std::string node_name);

}  // namespace nodeagent::agent
