#include "agent/pod_cgroups.h"

#include <optional>
#include <vector>

#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

}  // namespace

base::Status PodCgroups::ensure(const api::PodPtr& pod) {
  if (!manager_) return base::okStatus();
  const auto& uid = pod->metadata.uid;
  std::lock_guard lock(mu_);
  if (made_.count(uid) > 0) return base::okStatus();
  auto made = manager_->ensurePodCgroup(*pod);
  if (!made.ok()) {
    return made.withContext("pod " + api::podRef(*pod) + ": cgroup " +
                            manager_->podCgroupParent(*pod));
  }
  made_.emplace(uid, pod);
  if (cm::podQos(*pod) == cm::QosClass::kBurstable) updateQosLocked();
  return base::okStatus();
}

bool PodCgroups::made(const std::string& uid) const {
  if (!manager_) return true;
  std::lock_guard lock(mu_);
  return made_.count(uid) > 0;
}

void PodCgroups::updateQosLocked() {
  std::vector<api::PodPtr> pods;
  pods.reserve(made_.size());
  for (const auto& [uid, pod] : made_) pods.push_back(pod);
  if (auto s = manager_->updateQosCgroups(pods); !s.ok()) {
    log()->warn("Cannot update the QoS cgroups err={}", s.toString());
  }
}

base::Status PodCgroups::destroy(const std::string& uid) {
  if (!manager_) return base::okStatus();
  std::lock_guard lock(mu_);
  std::optional<cm::CgroupName> name;
  bool burstable = false;
  if (auto it = made_.find(uid); it != made_.end()) {
    name = manager_->podCgroupName(*it->second);
    burstable = cm::podQos(*it->second) == cm::QosClass::kBurstable;
    made_.erase(it);
  } else {
    auto all = manager_->podCgroups();
    if (auto found = all.find(uid); found != all.end()) name = found->second;
  }
  if (!name) return base::okStatus();
  auto destroyed = manager_->destroyPodCgroup(*name);
  if (burstable) updateQosLocked();
  if (!destroyed.ok()) return destroyed.withContext("pod cgroup " + cm::cgroupNameToPath(*name));
  log()->info("Removed pod cgroup uid={} cgroup={}", uid, cm::cgroupNameToPath(*name));
  return base::okStatus();
}

size_t PodCgroups::removeOrphans(const std::set<std::string>& keep) {
  if (!manager_) return 0;
  std::map<std::string, cm::CgroupName> all;
  {
    // A pod added after `keep` was read may have its cgroup already: made_ has it then.
    std::lock_guard lock(mu_);
    all = manager_->podCgroups();
    std::erase_if(all, [&](const auto& entry) { return made_.count(entry.first) > 0; });
  }
  size_t removed = 0;
  for (const auto& [uid, name] : all) {
    if (keep.count(uid) > 0) continue;
    log()->info("Removing orphaned pod cgroup uid={} cgroup={}", uid, cm::cgroupNameToPath(name));
    if (auto s = destroy(uid); !s.ok()) {
      log()->warn("Cannot remove orphaned pod cgroup uid={} err={}", uid, s.toString());
      continue;
    }
    ++removed;
  }
  return removed;
}

std::string PodCgroups::parent(const api::Pod& pod) const {
  return manager_ ? manager_->podCgroupParent(pod) : std::string();
}

cm::LinuxContainerResources PodCgroups::resources(const api::Pod& pod,
                                                  const api::Container& container) const {
  return cm::containerResources(pod, container, memory_capacity_);
}

}  // namespace nodeagent::agent
