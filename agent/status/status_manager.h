// The status manager (kubelet's pkg/kubelet/status): the agent's versioned cache of every pod's
// API status. syncPod writes the status it generated; the sync loop, /pods and the pod workers
// read it. Rules kept from kubelet: a terminated container never goes back to running unless the
// restart policy is Always, transition times of the kubelet-owned conditions move only when their
// status changes, startTime is set once, terminal phases never regress, and an unchanged status
// is not a new version.
//
// Every method is thread-safe (one mutex, never held while calling out). Statuses are keyed by the
// static or regular pod's UID; a mirror pod's UID is translated through the pod manager.
// Sending statuses to an apiserver is the job of a StatusSyncer that observes the versions.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/pod.h"
#include "base/clock.h"
#include "base/string_map.h"
#include "podmanager/pod_manager.h"

namespace nodeagent::agent {

struct VersionedPodStatus {
  api::PodStatus status;
  uint64_t version = 0;
  // Unique over the whole manager and every update (versions restart for a re-created UID):
  // what a cache of anything derived from the status can key on.
  uint64_t stamp = 0;
  std::string pod_name;
  std::string pod_namespace;
};

class StatusManager {
 public:
  StatusManager(base::Clock& clock, podmanager::PodManager& pod_manager);

  // The cached status of `uid` (mirror UIDs translated), if any.
  std::optional<api::PodStatus> getPodStatus(const std::string& uid) const;
  std::optional<VersionedPodStatus> getVersionedPodStatus(const std::string& uid) const;
  // The stamp of the cached status of `uid` (see VersionedPodStatus), without copying it.
  std::optional<uint64_t> statusStamp(const std::string& uid) const;
  // statusStamp of each pod (as the pod manager holds them: no mirror pods), under one lock.
  std::vector<std::optional<uint64_t>> statusStamps(const std::vector<api::PodPtr>& pods) const;
  // Only the cached phase ("" when none): cheap enough to ask for every pod of a large node.
  std::string getPodPhase(const std::string& uid) const;
  // UIDs whose cached status has a terminal phase (Succeeded or Failed).
  std::set<std::string> terminalPodUIDs() const;
  // Changes whenever a status is set with a terminal phase or a status is removed: what
  // terminalPodUIDs answers (and which pods count as active) can only differ when this differs.
  uint64_t terminalGeneration() const;
  // Changes whenever a status is stored or removed: what statusStamps answers for a given set of
  // pods can only differ when this differs. Any thread.
  uint64_t version() const { return version_.load(); }

  // Records `status` for `pod`. Returns false when the update was refused (an illegal container
  // state transition) or changed nothing.
  bool setPodStatus(const api::Pod& pod, api::PodStatus status);
  // The same; `stamp` gets the stamp of the status cached for the pod afterwards (the new one, or
  // the one kept when nothing changed; 0 when none is cached), read under the same lock.
  bool setPodStatus(const api::Pod& pod, api::PodStatus status, uint64_t& stamp);

  // Marks every container that is neither terminated nor waiting as terminated with
  // ContainerStatusUnknown (exit 137), as kubelet does when a pod is torn down.
  void terminatePod(const api::Pod& pod);

  // Drops the statuses of UIDs not in `keep`.
  void removeOrphanedStatuses(const std::set<std::string>& keep);
  void removeStatus(const std::string& uid);

  // Called (outside the lock, on the setter's thread) with the UID after each new version.
  void setOnChange(std::function<void(const std::string& uid)> on_change);

  // Snapshot of every cached status by UID.
  std::map<std::string, VersionedPodStatus> snapshot() const;

 private:
  bool updateStatusInternal(const api::Pod& pod, api::PodStatus status, bool force,
                            uint64_t* stamp = nullptr);
  // Stores `status` as the pod's new version.
  void storeLocked(const api::Pod& pod, api::PodStatus status, uint64_t version);

  base::Clock& clock_;
  podmanager::PodManager& pod_manager_;
  mutable std::mutex mu_;
  // By the static or regular pod's UID (never a mirror pod's).
  base::StringHashMap<VersionedPodStatus> statuses_;
  uint64_t terminal_generation_ = 0;
  uint64_t next_stamp_ = 0;
  std::atomic<uint64_t> version_{0};
  std::function<void(const std::string&)> on_change_;
};

// status_manager.go helpers, exposed for tests.
// False (with a reason in `why`) when `new_status` takes a container from terminated back to
// another state and the restart policy forbids it.
bool checkContainerStateTransition(const std::vector<api::ContainerStatus>& old_statuses,
                                   const std::vector<api::ContainerStatus>& new_statuses,
                                   const std::string& restart_policy, std::string* why);
// Equality on what the kubelet owns: everything but non-kubelet conditions, whose presence and
// order do not matter.
bool isPodStatusByKubeletEqual(const api::PodStatus& old_status, const api::PodStatus& status);
// Truncates times to seconds, sorts container statuses by name (init ones by spec order).
void normalizeStatus(const api::Pod& pod, api::PodStatus& status);

}  // namespace nodeagent::agent
