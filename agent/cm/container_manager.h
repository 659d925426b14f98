// kubelet's container manager for pods (pkg/kubelet/cm: the QoS container manager, the pod
// container manager and node allocatable enforcement), on the cgroupfs driver:
//
//   <cgroup-root>/kubepods                      node allocatable limits (--enforce-node-allocatable=pods)
//   <cgroup-root>/kubepods/pod<uid>             Guaranteed pods
//   <cgroup-root>/kubepods/burstable            cpu.shares from the Burstable pods' CPU requests
//   <cgroup-root>/kubepods/burstable/pod<uid>
//   <cgroup-root>/kubepods/besteffort           cpu.shares 2
//   <cgroup-root>/kubepods/besteffort/pod<uid>
//   .../pod<uid>/<container-id>                 one per container, made by the runtime
//
// With cgroups_per_qos false there are no QoS or pod cgroups: the runtime puts containers
// directly under <cgroup-root>.
//
// Threading: every method does cgroupfs IO and may block: call from a blocking pool. Methods
// may run concurrently for different pods.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cm/cgroup_manager.h"
#include "agent/cm/resources.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::cm {

struct ContainerManagerOptions {
  // --cgroup-root: the parent of kubepods ("/" is the root of each hierarchy).
  std::string cgroup_root = "/";
  // --cgroups-per-qos.
  bool cgroups_per_qos = true;
  // --pod-max-pids: pids.max of each pod cgroup; <= 0 leaves it unlimited.
  int64_t pod_pids_limit = -1;
  // The limits of kubepods when --enforce-node-allocatable has "pods": memory = allocatable
  // memory (capacity - system-reserved - kube-reserved), cpu shares = milliCpuToShares of the
  // allocatable CPU, pids when pid is reserved. Unset fields are not enforced.
  ResourceConfig node_allocatable;
};

class ContainerManager {
 public:
  // Makes kubepods (with the node allocatable limits) and the burstable and besteffort cgroups.
  // An error names the cgroup and file, and its code tells why (CgroupManager's, from errno):
  //   PermissionDenied  the cgroupfs cannot be written at all (EACCES, EPERM: an unprivileged
  //                     agent or a container without cgroup delegation; EROFS: a read-only
  //                     cgroupfs). Running without cgroups is then the only way to run.
  //   anything else     the cgroupfs is writable but this configuration failed: Unavailable
  //                     (EBUSY, e.g. kubepods' memory limit below what its pods use now),
  //                     InvalidArgument (EINVAL, a value the kernel refuses), NotFound (ENOENT,
  //                     a controller missing), FailedPrecondition (no hierarchy), Internal.
  //                     Limits were not all applied; silently running without them would hide
  //                     a misconfiguration.
  static base::StatusOr<std::unique_ptr<ContainerManager>> start(CgroupManager cgroups,
                                                                 ContainerManagerOptions options);

  CgroupManager& cgroups() { return cgroups_; }
  const CgroupManager& cgroups() const { return cgroups_; }
  const ContainerManagerOptions& options() const { return options_; }

  // <cgroup-root>/kubepods (with cgroups_per_qos false: <cgroup-root>).
  CgroupName kubepods() const;
  // kubepods for Guaranteed, kubepods/burstable, kubepods/besteffort.
  CgroupName qosCgroup(QosClass qos) const;
  // The pod's cgroup: qosCgroup(podQos(pod)) + "pod<uid>" (cgroups_per_qos false: cgroup-root).
  CgroupName podCgroupName(const api::Pod& pod) const;
  // The pod cgroup as a cgroupfs path, for the runtime (CRI LinuxPodSandboxConfig.cgroup_parent).
  std::string podCgroupParent(const api::Pod& pod) const;
  bool podCgroupExists(const api::Pod& pod) const;
  // PodContainerManager.EnsureExists: makes the pod's cgroup with resourceConfigForPod, or
  // brings an existing one's limits up to date. InvalidArgument for a UID that is not a valid
  // path component. A no-op with cgroups_per_qos false.
  base::Status ensurePodCgroup(const api::Pod& pod);
  // UpdateQOSCgroups: burstable's cpu.shares from the CPU requests of `active_pods`' Burstable
  // pods, besteffort's kMinShares.
  base::Status updateQosCgroups(const std::vector<api::PodPtr>& active_pods);
  // GetAllPodsFromCgroups: every pod cgroup found under kubepods and the QoS cgroups, by UID.
  std::map<std::string, CgroupName> podCgroups() const;
  // Kills what runs in the pod's cgroup and removes it with its container cgroups (Destroy).
  // InvalidArgument for a name that is not pod<uid> directly under kubepods or a QoS cgroup.
  base::Status destroyPodCgroup(const CgroupName& name);

 private:
  ContainerManager(CgroupManager cgroups, ContainerManagerOptions options);

  CgroupManager cgroups_;
  ContainerManagerOptions options_;
};

}  // namespace nodeagent::cm
