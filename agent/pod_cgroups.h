// The agent's use of pod cgroups (kubelet's pod container manager as syncPod, syncTerminatedPod
// and housekeeping use it): each pod's cgroup is made before its containers start and brought up
// to date, the Burstable QoS cgroup's CPU shares follow the pods that have cgroups, a terminated
// pod's cgroup is killed and removed, and pod cgroups nothing knows (left by a previous agent)
// are found and removed. What a runtime needs to make a container's cgroup under its pod's
// (CRI cgroup_parent and LinuxContainerResources) comes from here too.
//
// Without a container manager (cgroups not writable, or a fake runtime) nothing is enforced:
// every method is a no-op and containers get no cgroup of their own.
//
// Threading: parent(), resources() and made() from any thread; ensure(), destroy() and
// removeOrphans() do cgroupfs IO: call them on the blocking pool, never on a strand. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "agent/cm/container_manager.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

class PodCgroups {
 public:
  // `memory_capacity` (bytes) is the node's, for the containers' OOM score adjustment.
  PodCgroups(std::shared_ptr<cm::ContainerManager> manager, int64_t memory_capacity)
      : manager_(std::move(manager)), memory_capacity_(memory_capacity) {}

  bool enabled() const { return manager_ != nullptr; }

  // Makes the pod's cgroup with its limits (PodContainerManager.EnsureExists) the first time it
  // is asked for the pod; later calls cost a map lookup. A new Burstable pod also updates the
  // Burstable QoS cgroup's shares. The error names the pod and the cgroup. Blocking.
  base::Status ensure(const api::PodPtr& pod);
  // Whether ensure() made the pod's cgroup (and destroy() has not been called since); always
  // true when cgroups are not enforced.
  bool made(const std::string& uid) const;
  // Kills what still runs in the pod's cgroup and removes it (kubelet's Destroy), wherever it is
  // (a cgroup a previous agent made is found by its UID). Blocking.
  base::Status destroy(const std::string& uid);
  // Destroys every pod cgroup whose UID is neither in `keep` nor made by ensure(); the number
  // destroyed. Blocking.
  size_t removeOrphans(const std::set<std::string>& keep);

  // The pod's cgroup as the runtime's cgroup_parent; "" when cgroups are not enforced.
  std::string parent(const api::Pod& pod) const;
  // The container's CRI resources (shares, quota, memory limit, OOM score adjustment).
  cm::LinuxContainerResources resources(const api::Pod& pod,
                                        const api::Container& container) const;

 private:
  void updateQosLocked();

  std::shared_ptr<cm::ContainerManager> manager_;
  const int64_t memory_capacity_;
  mutable std::mutex mu_;
  std::map<std::string, api::PodPtr> made_;  // by UID: the pods whose cgroups ensure() made
};

}  // namespace nodeagent::agent
