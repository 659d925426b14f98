#include "agent/cm/container_manager.h"

#include <algorithm>

#include "base/path_component.h"

namespace nodeagent::cm {
namespace {

constexpr std::string_view kKubepods = "kubepods";
constexpr std::string_view kBurstable = "burstable";
constexpr std::string_view kBestEffort = "besteffort";
constexpr std::string_view kPodPrefix = "pod";

// Makes the cgroup with `config`, or brings an existing one's limits to it (kubelet's QoS
// container manager does the same at start: Create when missing, else Update).
base::Status ensure(CgroupManager& cgroups, const CgroupName& name, const ResourceConfig& config) {
  if (cgroups.exists(name)) return cgroups.update(name, config);
  return cgroups.create(name, config);
}

}  // namespace

ContainerManager::ContainerManager(CgroupManager cgroups, ContainerManagerOptions options)
    : cgroups_(std::move(cgroups)), options_(std::move(options)) {}

base::StatusOr<std::unique_ptr<ContainerManager>> ContainerManager::start(
    CgroupManager cgroups, ContainerManagerOptions options) {
  std::unique_ptr<ContainerManager> cm(
      new ContainerManager(std::move(cgroups), std::move(options)));
  const CgroupName root = parseCgroupPath(cm->options_.cgroup_root);
  if (!cm->options_.cgroups_per_qos) {
    // Containers go straight under the cgroup root, which gets no limits of its own (the root
    // of a hierarchy takes none).
    if (!root.empty()) RETURN_IF_ERROR(ensure(cm->cgroups_, root, ResourceConfig{}));
    return cm;
  }
  // Node allocatable is enforced on kubepods (--enforce-node-allocatable=pods).
  RETURN_IF_ERROR(ensure(cm->cgroups_, cm->kubepods(), cm->options_.node_allocatable));
  RETURN_IF_ERROR(ensure(cm->cgroups_, cm->qosCgroup(QosClass::kBurstable), ResourceConfig{}));
  ResourceConfig best_effort;
  best_effort.cpu_shares = static_cast<uint64_t>(kMinShares);
  RETURN_IF_ERROR(ensure(cm->cgroups_, cm->qosCgroup(QosClass::kBestEffort), best_effort));
  return cm;
}

CgroupName ContainerManager::kubepods() const {
  CgroupName name = parseCgroupPath(options_.cgroup_root);
  if (options_.cgroups_per_qos) name.emplace_back(kKubepods);
  return name;
}

CgroupName ContainerManager::qosCgroup(QosClass qos) const {
  CgroupName name = kubepods();
  if (!options_.cgroups_per_qos) return name;
  switch (qos) {
    case QosClass::kGuaranteed:
      break;
    case QosClass::kBurstable:
      name.emplace_back(kBurstable);
      break;
    case QosClass::kBestEffort:
      name.emplace_back(kBestEffort);
      break;
  }
  return name;
}

CgroupName ContainerManager::podCgroupName(const api::Pod& pod) const {
  if (!options_.cgroups_per_qos) return parseCgroupPath(options_.cgroup_root);
  CgroupName name = qosCgroup(podQos(pod));
  name.push_back(std::string(kPodPrefix) + pod.metadata.uid);
  return name;
}

std::string ContainerManager::podCgroupParent(const api::Pod& pod) const {
  return cgroupNameToPath(podCgroupName(pod));
}

bool ContainerManager::podCgroupExists(const api::Pod& pod) const {
  return cgroups_.exists(podCgroupName(pod));
}

base::Status ContainerManager::ensurePodCgroup(const api::Pod& pod) {
  if (!options_.cgroups_per_qos) return base::okStatus();
  // The UID becomes a directory name.
  RETURN_IF_ERROR(base::checkPathComponent("pod UID", pod.metadata.uid));
  const CgroupName name = podCgroupName(pod);
  return ensure(cgroups_, name, resourceConfigForPod(pod, options_.pod_pids_limit));
}

base::Status ContainerManager::updateQosCgroups(const std::vector<api::PodPtr>& active_pods) {
  if (!options_.cgroups_per_qos) return base::okStatus();
  // Burstable's shares follow the CPU its pods requested; BestEffort always has the minimum.
  int64_t burstable_milli = 0;
  for (const auto& pod : active_pods) {
    if (pod == nullptr || podQos(*pod) != QosClass::kBurstable) continue;
    // A pod's requests as PodRequestsAndLimits counts them: app containers summed, an init
    // container's when bigger.
    int64_t app = 0;
    for (const auto& c : pod->spec->containers) {
      auto it = c.resources.requests.find("cpu");
      if (it != c.resources.requests.end()) app += it->second.milliValue();
    }
    for (const auto& c : pod->spec->init_containers) {
      auto it = c.resources.requests.find("cpu");
      if (it != c.resources.requests.end()) app = std::max(app, it->second.milliValue());
    }
    burstable_milli += app;
  }
  ResourceConfig burstable;
  burstable.cpu_shares = static_cast<uint64_t>(milliCpuToShares(burstable_milli));
  RETURN_IF_ERROR(cgroups_.update(qosCgroup(QosClass::kBurstable), burstable));
  ResourceConfig best_effort;
  best_effort.cpu_shares = static_cast<uint64_t>(kMinShares);
  return cgroups_.update(qosCgroup(QosClass::kBestEffort), best_effort);
}

std::map<std::string, CgroupName> ContainerManager::podCgroups() const {
  std::map<std::string, CgroupName> pods;
  if (!options_.cgroups_per_qos) return pods;
  for (QosClass qos : {QosClass::kGuaranteed, QosClass::kBurstable, QosClass::kBestEffort}) {
    const CgroupName parent = qosCgroup(qos);
    for (const auto& child : cgroups_.children(parent)) {
      if (child.size() <= kPodPrefix.size() || !child.starts_with(kPodPrefix)) continue;
      CgroupName name = parent;
      name.push_back(child);
      pods.emplace(child.substr(kPodPrefix.size()), std::move(name));
    }
  }
  return pods;
}

base::Status ContainerManager::destroyPodCgroup(const CgroupName& name) {
  // Only a pod cgroup below one of ours: a bad name must never remove kubepods or the QoS
  // cgroups themselves.
  bool pod_cgroup = options_.cgroups_per_qos && !name.empty() &&
                    name.back().size() > kPodPrefix.size() && name.back().starts_with(kPodPrefix);
  if (pod_cgroup) {
    const CgroupName parent(name.begin(), name.end() - 1);
    pod_cgroup = parent == qosCgroup(QosClass::kGuaranteed) ||
                 parent == qosCgroup(QosClass::kBurstable) ||
                 parent == qosCgroup(QosClass::kBestEffort);
  }
  if (!pod_cgroup) {
    return base::invalidArgumentError("not a pod cgroup: " + cgroupNameToPath(name));
  }
  return cgroups_.destroy(name);
}

}  // namespace nodeagent::cm
