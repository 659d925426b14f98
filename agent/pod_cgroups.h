// The agent's use of pod cgroups (kubelet's pod container manager as syncPod, syncTerminatedPod
// and housekeeping use it): each pod's cgroup is made before its containers start and brought up
// to date, the Burstable QoS cgroup's CPU shares follow the pods that have cgroups, a terminated
// pod's cgroup is killed and removed, and pod cgroups this agent made for pods nothing knows any
// more (a pod removed while no agent ran) are removed. What a runtime needs to make a
// container's cgroup under its pod's (CRI cgroup_parent and LinuxContainerResources) comes from
// here too.
//
// Only pod cgroups this agent made are ever removed as orphans: each one is recorded as a file
// `<record-dir>/<uid>` before it is made and forgotten once it is removed, so pod cgroups of
// another node agent under the same kubepods (a kubelet with the cgroupfs driver uses
// /kubepods too) are never touched.
//
// Without a container manager (cgroups not writable, or a fake runtime) nothing is enforced:
// every method is a no-op and containers get no cgroup of their own.
//
// Threading: parent(), resources() and made() from any thread, without waiting for cgroupfs IO.
// ensure(), destroy() and removeOrphans() do cgroupfs and file IO: call them on the blocking
// pool, never on a strand. For one UID they never overlap: an orphan's removal and a new
// ensure() of the same UID wait for each other. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/cm/container_manager.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

class PodCgroups {
 public:
  // `memory_capacity` (bytes) is the node's, for the containers' OOM score adjustment;
  // `record_dir` holds the records of the pod cgroups made (<root-dir>/pod-cgroups).
  PodCgroups(std::shared_ptr<cm::ContainerManager> manager, int64_t memory_capacity,
             std::filesystem::path record_dir)
      : manager_(std::move(manager)),
        memory_capacity_(memory_capacity),
        record_dir_(std::move(record_dir)) {}

  bool enabled() const { return manager_ != nullptr; }

  // Records and makes the pod's cgroup with its limits (PodContainerManager.EnsureExists) the
  // first time it is asked for the pod; later calls cost a map lookup. A new Burstable pod also
  // updates the Burstable QoS cgroup's shares. The error names the pod and the cgroup. Blocking.
  base::Status ensure(const api::PodPtr& pod);
  // Whether ensure() made the pod's cgroup (and destroy() has not been called since); always
  // true when cgroups are not enforced.
  bool made(const std::string& uid) const;
  // Changes whenever made() turns false for a pod (before it does). Any thread.
  uint64_t removals() const { return removals_.load(); }
  // Kills what still runs in the pod's cgroup and removes it (kubelet's Destroy), wherever it is
  // (a cgroup a previous agent made is found by its UID), then forgets its record. Blocking.
  base::Status destroy(const std::string& uid);
  // Destroys every recorded pod cgroup whose UID is not in `keep` and that ensure() is not
  // making; the number destroyed. Blocking.
  size_t removeOrphans(const std::set<std::string>& keep);

  // The pod's cgroup as the runtime's cgroup_parent; "" when cgroups are not enforced.
  std::string parent(const api::Pod& pod) const;
  // The container's CRI resources (shares, quota, memory limit, OOM score adjustment).
  cm::LinuxContainerResources resources(const api::Pod& pod, const api::Container& container) const;

 private:
  bool podCgroupsOn() const { return manager_ && manager_->options().cgroups_per_qos; }
  // Claims the UID for cgroup IO (waits while another call works on it); false when `skip_made`
  // and the pod's cgroup is made already. Releases with release().
  bool claim(std::unique_lock<std::mutex>& lock, const std::string& uid, bool skip_made);
  void release(const std::string& uid);
  // Kills and removes the claimed UID's cgroup (`pod`: the pod it was made for, if known).
  base::Status destroyClaimed(const std::string& uid, const api::PodPtr& pod);
  std::optional<cm::CgroupName> findPodCgroup(const std::string& uid) const;
  base::Status writeRecord(const std::string& uid) const;
  void removeRecord(const std::string& uid) const;
  std::vector<std::string> recordedUids() const;
  // Writes the Burstable QoS cgroup's shares from burstable_milli_.
  void updateQos();

  std::shared_ptr<cm::ContainerManager> manager_;
  const int64_t memory_capacity_;
  const std::filesystem::path record_dir_;

  mutable std::mutex mu_;  // never held during IO
  std::condition_variable released_;
  std::map<std::string, api::PodPtr> made_;  // by UID: the pods whose cgroups ensure() made
  std::atomic<uint64_t> removals_{0};
  std::set<std::string> busy_;               // UIDs with cgroup IO in flight
  int64_t burstable_milli_ = 0;              // the CPU requests of made_'s Burstable pods
  std::mutex qos_mu_;                        // one QoS write at a time
};

}  // namespace nodeagent::agent
