#include "agent/pod_cgroups.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/admission.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

// The CPU a Burstable pod adds to the Burstable QoS cgroup's shares (its requests as the
// scheduler counts them); 0 for the other classes.
int64_t burstableMilli(const api::Pod& pod) {
  return cm::podQos(pod) == cm::QosClass::kBurstable ? podRequests(pod).cpu_milli : 0;
}

}  // namespace

bool PodCgroups::claim(std::unique_lock<std::mutex>& lock, const std::string& uid, bool skip_made) {
  released_.wait(lock, [&] { return busy_.count(uid) == 0; });
  if (skip_made && made_.count(uid) > 0) return false;
  busy_.insert(uid);
  return true;
}

void PodCgroups::release(const std::string& uid) {
  {
    std::lock_guard lock(mu_);
    busy_.erase(uid);
  }
  released_.notify_all();
}

base::Status PodCgroups::ensure(const api::PodPtr& pod) {
  if (!manager_) return base::okStatus();
  const auto& uid = pod->metadata.uid;
  {
    std::unique_lock lock(mu_);
    if (made_.count(uid) > 0 || !claim(lock, uid, /*skip_made=*/true)) return base::okStatus();
  }
  base::Status made = podCgroupsOn() ? writeRecord(uid) : base::okStatus();
  if (made.ok()) made = manager_->ensurePodCgroup(*pod);
  int64_t burstable = 0;
  if (made.ok()) {
    burstable = burstableMilli(*pod);
    std::lock_guard lock(mu_);
    made_.emplace(uid, pod);
    burstable_milli_ += burstable;
  }
  release(uid);
  if (!made.ok()) {
    return made.withContext("pod " + api::podRef(*pod) + ": cgroup " +
                            manager_->podCgroupParent(*pod));
  }
  if (burstable > 0) updateQos();
  return base::okStatus();
}

bool PodCgroups::made(const std::string& uid) const {
  if (!manager_) return true;
  std::lock_guard lock(mu_);
  return made_.count(uid) > 0;
}

void PodCgroups::updateQos() {
  std::lock_guard io(qos_mu_);
  int64_t milli = 0;
  {
    std::lock_guard lock(mu_);
    milli = burstable_milli_;
  }
  cm::ResourceConfig burstable;
  burstable.cpu_shares = static_cast<uint64_t>(cm::milliCpuToShares(milli));
  auto s = manager_->cgroups().update(manager_->qosCgroup(cm::QosClass::kBurstable), burstable);
  if (!s.ok()) log()->warn("Cannot update the Burstable QoS cgroup err={}", s.toString());
}

base::Status PodCgroups::destroy(const std::string& uid) {
  if (!manager_) return base::okStatus();
  api::PodPtr pod;
  {
    std::unique_lock lock(mu_);
    claim(lock, uid, /*skip_made=*/false);
    if (auto it = made_.find(uid); it != made_.end()) {
      pod = it->second;
      burstable_milli_ -= burstableMilli(*pod);
      ++removals_;
      made_.erase(it);
    }
  }
  auto destroyed = podCgroupsOn() ? destroyClaimed(uid, pod) : base::okStatus();
  release(uid);
  if (pod && burstableMilli(*pod) > 0) updateQos();
  return destroyed;
}

base::Status PodCgroups::destroyClaimed(const std::string& uid, const api::PodPtr& pod) {
  auto name = pod ? std::optional(manager_->podCgroupName(*pod)) : findPodCgroup(uid);
  if (name) {
    auto destroyed = manager_->destroyPodCgroup(*name);
    if (!destroyed.ok()) {
      return destroyed.withContext("pod cgroup " + cm::cgroupNameToPath(*name));
    }
    log()->info("Removed pod cgroup uid={} cgroup={}", uid, cm::cgroupNameToPath(*name));
  }
  removeRecord(uid);
  return base::okStatus();
}

size_t PodCgroups::removeOrphans(const std::set<std::string>& keep) {
  if (!podCgroupsOn()) return 0;
  size_t removed = 0;
  for (const auto& uid : recordedUids()) {
    if (keep.count(uid) > 0) continue;
    {
      // Skipped when ensure() made it meanwhile (a pod added after `keep` was read) or works on
      // it now; claimed otherwise, so that no ensure() of it runs until it is gone.
      std::unique_lock lock(mu_);
      if (made_.count(uid) > 0 || busy_.count(uid) > 0) continue;
      busy_.insert(uid);
    }
    log()->info("Removing orphaned pod cgroup uid={}", uid);
    auto destroyed = destroyClaimed(uid, nullptr);
    release(uid);
    if (!destroyed.ok()) {
      log()->warn("Cannot remove orphaned pod cgroup uid={} err={}", uid, destroyed.toString());
      continue;
    }
    ++removed;
  }
  return removed;
}

std::optional<cm::CgroupName> PodCgroups::findPodCgroup(const std::string& uid) const {
  for (auto qos :
       {cm::QosClass::kGuaranteed, cm::QosClass::kBurstable, cm::QosClass::kBestEffort}) {
    cm::CgroupName name = manager_->qosCgroup(qos);
    name.push_back("pod" + uid);
    if (manager_->cgroups().exists(name)) return name;
  }
  return std::nullopt;
}

base::Status PodCgroups::writeRecord(const std::string& uid) const {
  // Durable enough: a record lost in a machine crash is a pod cgroup gone with the boot too.
  std::error_code ec;
  std::filesystem::create_directories(record_dir_, ec);
  const auto path = record_dir_ / uid;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return base::internalError("cannot record the pod cgroup in " + path.string() + ": " +
                               std::strerror(errno));
  }
  ::close(fd);
  return base::okStatus();
}

void PodCgroups::removeRecord(const std::string& uid) const {
  std::error_code ec;
  std::filesystem::remove(record_dir_ / uid, ec);
}

std::vector<std::string> PodCgroups::recordedUids() const {
  std::vector<std::string> uids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(record_dir_, ec)) {
    uids.push_back(entry.path().filename().string());
  }
  return uids;
}

std::string PodCgroups::parent(const api::Pod& pod) const {
  return manager_ ? manager_->podCgroupParent(pod) : std::string();
}

cm::LinuxContainerResources PodCgroups::resources(const api::Pod& pod,
                                                  const api::Container& container) const {
  return cm::containerResources(pod, container, memory_capacity_);
}

}  // namespace nodeagent::agent
