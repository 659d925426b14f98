// The downward API's resourceFieldRef (env valueFrom and downwardAPI volume items): a container's
// request or limit as kubelet's ExtractResourceValueByContainerNameAndNodeAllocatable reads it.
#pragma once

#include <cstdint>
#include <string>

#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::runtime {

// The node's allocatable resources: what a limit the container does not set reads as (kubelet's
// defaultPodLimitsForDownwardAPI). 0 when unknown.
struct NodeAllocatableResources {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t ephemeral_storage_bytes = 0;
};

// The value of `selector` for the container it names (containerName; `self` when empty, which a
// volume's item, with no container of its own, may not be) of `pod`,
// in units of its divisor (default 1), rounded up as kubelet rounds: CPU as ceil(milli-CPUs /
// divisor's milli-CPUs), memory, ephemeral storage and hugepages as ceil(bytes / divisor). A
// limits.cpu, limits.memory or limits.ephemeral-storage the container does not set is the node's
// allocatable; a request it does not set is its limit as the API defaults it, else 0.
// InvalidArgument for an unsupported resource, a divisor of 0 or a container the pod does not
// have.
base::StatusOr<std::string> resolveResourceFieldRef(const api::Pod& pod, const api::Container* self,
                                                    const api::ResourceFieldSelector& selector,
                                                    const NodeAllocatableResources& node);

}  // namespace nodeagent::runtime
