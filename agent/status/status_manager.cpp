#include "agent/status/status_manager.h"

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>

#include "agent/status/container_statuses.h"
#include "agent/status/pod_status.h"
#include "api/list_interner.h"
#include "api/pod_update.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

std::optional<api::Timestamp> truncate(const std::optional<api::Timestamp>& t) {
  if (!t) return t;
  return std::chrono::floor<std::chrono::seconds>(*t);
}

// kubelet's MaxPodTerminationMessageLogLength: termination messages share 12 KiB per pod.
constexpr size_t kMaxPodTerminationMessageLogLength = 12 * 1024;

void normalizeContainer(api::ContainerStatus& s, size_t bytes_per_status) {
  for (auto* state : {&s.state, &s.last_state}) {
    if (state->running) state->running->started_at = truncate(state->running->started_at);
    if (state->terminated) {
      state->terminated->started_at = truncate(state->terminated->started_at);
      state->terminated->finished_at = truncate(state->terminated->finished_at);
      if (state->terminated->message.size() > bytes_per_status) {
        state->terminated->message.resize(bytes_per_status);
      }
    }
  }
}

}  // namespace

bool checkContainerStateTransition(const std::vector<api::ContainerStatus>& old_statuses,
                                   const std::vector<api::ContainerStatus>& new_statuses,
                                   const std::string& restart_policy, std::string* why) {
  if (restart_policy == "Always") return true;
  for (const auto& old : old_statuses) {
    if (!old.state.terminated) continue;
    // Under OnFailure only a successful exit is final.
    if (old.state.terminated->exit_code != 0 && restart_policy == "OnFailure") continue;
    for (const auto& now : new_statuses) {
      if (now.name == old.name && !now.state.terminated) {
        if (why != nullptr) {
          *why = "terminated container " + now.name +
                 " attempted illegal transition to non-terminated state";
        }
        return false;
      }
    }
  }
  return true;
}

bool isPodStatusByKubeletEqual(const api::PodStatus& old_status, const api::PodStatus& status) {
  auto strip = [](api::PodStatus s) {
    auto foreign = [](const api::PodCondition& c) { return !podConditionByKubelet(c.type); };
    // Written only when needed: the conditions may be shared (a write copies them).
    const auto& conditions = std::as_const(s).conditions;
    if (std::any_of(conditions.begin(), conditions.end(), foreign)) {
      std::erase_if(s.conditions.mutableItems(), foreign);
    }
    return s;
  };
  auto a = strip(old_status);
  auto b = strip(status);
  // Kubelet-owned conditions compare by type, status, reason and message only.
  if (a.conditions.size() != b.conditions.size()) return false;
  for (const auto& c : std::as_const(b).conditions) {
    const auto* o = findCondition(a.conditions, c.type);
    if (o == nullptr || o->status != c.status || o->reason != c.reason || o->message != c.message) {
      return false;
    }
  }
  a.conditions.clear();
  b.conditions.clear();
  return a == b;
}

void normalizeStatus(const api::Pod& pod, api::PodStatus& status) {
  status.start_time = truncate(status.start_time);
  for (auto& c : status.conditions) {
    c.last_probe_time = truncate(c.last_probe_time);
    c.last_transition_time = truncate(c.last_transition_time);
  }
  size_t bytes_per_status = kMaxPodTerminationMessageLogLength;
  if (size_t n = pod.spec->containers.size() + pod.spec->init_containers.size(); n > 0) {
    bytes_per_status /= n;
  }
  for (auto& s : status.container_statuses) normalizeContainer(s, bytes_per_status);
  for (auto& s : status.init_container_statuses) normalizeContainer(s, bytes_per_status);
  std::sort(status.container_statuses.begin(), status.container_statuses.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<api::ContainerStatus> init_sorted;
  for (const auto& c : pod.spec->init_containers) {
    for (auto& s : status.init_container_statuses) {
      if (s.name == c.name) init_sorted.push_back(std::move(s));
    }
  }
  for (auto& s : status.init_container_statuses) {
    if (!s.name.empty() &&
        std::none_of(pod.spec->init_containers.begin(), pod.spec->init_containers.end(),
                     [&](const auto& c) { return c.name == s.name; })) {
      init_sorted.push_back(std::move(s));
    }
  }
  status.init_container_statuses = std::move(init_sorted);
}

StatusManager::StatusManager(base::Clock& clock, podmanager::PodManager& pod_manager)
    : clock_(clock), pod_manager_(pod_manager) {}

std::optional<api::PodStatus> StatusManager::getPodStatus(const std::string& uid) const {
  auto v = getVersionedPodStatus(uid);
  if (!v) return std::nullopt;
  return std::move(v->status);
}

std::optional<uint64_t> StatusManager::statusStamp(const std::string& uid) const {
  {
    // Statuses are stored under non-mirror UIDs only: one found needs no translation.
    std::lock_guard lock(mu_);
    if (auto it = statuses_.find(uid); it != statuses_.end()) return it->second.stamp;
  }
  auto key = pod_manager_.translatePodUID(uid);
  if (key == uid) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = statuses_.find(key);
  if (it == statuses_.end()) return std::nullopt;
  return it->second.stamp;
}

std::vector<std::optional<uint64_t>> StatusManager::statusStamps(
    const std::vector<api::PodPtr>& pods) const {
  std::vector<std::optional<uint64_t>> out(pods.size());
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < pods.size(); ++i) {
    if (auto it = statuses_.find(pods[i]->metadata.uid); it != statuses_.end()) {
      out[i] = it->second.stamp;
    }
  }
  return out;
}

std::optional<VersionedPodStatus> StatusManager::getVersionedPodStatus(
    const std::string& uid) const {
  auto key = pod_manager_.translatePodUID(uid);
  std::lock_guard lock(mu_);
  auto it = statuses_.find(key);
  if (it == statuses_.end()) return std::nullopt;
  return it->second;
}

std::string StatusManager::getPodPhase(const std::string& uid) const {
  auto key = pod_manager_.translatePodUID(uid);
  std::lock_guard lock(mu_);
  auto it = statuses_.find(key);
  return it == statuses_.end() ? std::string() : it->second.status.phase;
}

uint64_t StatusManager::terminalGeneration() const {
  std::lock_guard lock(mu_);
  return terminal_generation_;
}

std::set<std::string> StatusManager::terminalPodUIDs() const {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& [uid, versioned] : statuses_) {
    if (api::isTerminalPhase(versioned.status.phase)) out.insert(uid);
  }
  return out;
}

bool StatusManager::setPodStatus(const api::Pod& pod, api::PodStatus status) {
  return updateStatusInternal(pod, std::move(status), pod.metadata.deletion_timestamp.has_value());
}

bool StatusManager::setPodStatus(const api::Pod& pod, api::PodStatus status, uint64_t& stamp) {
  return updateStatusInternal(pod, std::move(status), pod.metadata.deletion_timestamp.has_value(),
                              &stamp);
}

void StatusManager::terminatePod(const api::Pod& pod) {
  api::PodStatus status = getPodStatus(pod.metadata.uid).value_or(*pod.status);
  auto mark = [](std::vector<api::ContainerStatus>& list) {
    for (auto& s : list) {
      if (s.state.terminated || s.state.waiting) continue;
      s.state = api::ContainerState{};
      api::ContainerStateTerminated t;
      t.reason = "ContainerStatusUnknown";
      t.message = "The container could not be located when the pod was terminated";
      t.exit_code = 137;
      s.state.terminated = t;
    }
  };
  mark(status.container_statuses);
  mark(status.init_container_statuses);
  updateStatusInternal(pod, std::move(status), true);
}

namespace {

NODEAGENT_LOGGER("status")

// False (logged) when `status` takes a container from terminated back to another state and the
// pod's restart policy forbids it.
bool checkStateTransitions(const api::Pod& pod, const api::PodStatus& old,
                           const api::PodStatus& status) {
  std::string why;
  if (!checkContainerStateTransition(old.container_statuses, status.container_statuses,
                                     pod.spec->restart_policy, &why) ||
      !checkContainerStateTransition(old.init_container_statuses, status.init_container_statuses,
                                     pod.spec->restart_policy, &why)) {
    log()->error("Status update aborted pod={} uid={} reason={}", api::podRef(pod),
                 pod.metadata.uid, why);
    return false;
  }
  return true;
}

// Terminal phases are final.
void keepTerminalPhase(const api::Pod& pod, const api::PodStatus& old, api::PodStatus& status) {
  if (api::isTerminalPhase(old.phase) && status.phase != old.phase) {
    log()->debug("Keeping terminal phase pod={} phase={} wanted={}", api::podRef(pod), old.phase,
                 status.phase);
    status.phase = old.phase;
  }
}

// kubelet's updateLastTransitionTime for its own conditions: the old transition time while the
// condition's status is unchanged, else now (unless the status brings one). startTime is set
// once.
void updateTimes(const api::PodStatus& old, api::PodStatus& status, api::Timestamp now) {
  for (auto& c : status.conditions) {
    if (!podConditionByKubelet(c.type)) continue;
    const auto* o = findCondition(old.conditions, c.type);
    if (o != nullptr && o->status == c.status && o->last_transition_time) {
      c.last_transition_time = o->last_transition_time;
    } else if (!c.last_transition_time) {
      c.last_transition_time = now;
    }
  }
  if (old.start_time) {
    status.start_time = old.start_time;
  } else if (!status.start_time) {
    status.start_time = now;
  }
}

// One copy of each distinct list of conditions among the cached statuses: their times are
// whole seconds, so pods whose conditions changed within the same second share them.
api::SharedList<api::PodCondition> internConditions(
    const api::SharedList<api::PodCondition>& conditions) {
  static auto* lists = new api::ListInterner<api::PodCondition>();  // statuses may outlive it
  if (conditions.empty()) return conditions;
  std::string key;
  auto put = [&key](std::string_view field) {
    const auto n = static_cast<uint32_t>(field.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(field);
  };
  auto putTime = [&key](const std::optional<api::Timestamp>& t) {
    const int64_t n = t ? t->time_since_epoch().count() : INT64_MIN;
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
  };
  for (const api::PodCondition& c : conditions) {
    put(c.type);
    put(c.status);
    put(c.reason);
    put(c.message);
    putTime(c.last_probe_time);
    putTime(c.last_transition_time);
  }
  return lists->intern(conditions, api::hash128(key));
}

}  // namespace

bool StatusManager::updateStatusInternal(const api::Pod& pod, api::PodStatus status, bool force,
                                         uint64_t* stamp) {
  const auto& uid = pod.metadata.uid;
  std::function<void(const std::string&)> notify;
  {
    std::lock_guard lock(mu_);
    auto cached = statuses_.find(uid);
    if (stamp != nullptr) *stamp = cached != statuses_.end() ? cached->second.stamp : 0;
    // Without a cached status, the pod's own is the old one.
    const api::PodStatus& old = cached != statuses_.end() ? cached->second.status : *pod.status;
    if (!checkStateTransitions(pod, old, status)) return false;
    keepTerminalPhase(pod, old, status);
    updateTimes(old, status, toApiTime(clock_.wallNow()));
    normalizeStatus(pod, status);

    if (cached != statuses_.end() && !force &&
        isPodStatusByKubeletEqual(cached->second.status, status)) {
      return false;
    }
    storeLocked(pod, std::move(status), cached != statuses_.end() ? cached->second.version + 1 : 1);
    if (stamp != nullptr) *stamp = next_stamp_;
    notify = on_change_;
  }
  if (notify) notify(uid);
  return true;
}

void StatusManager::storeLocked(const api::Pod& pod, api::PodStatus status, uint64_t version) {
  VersionedPodStatus next;
  next.status = std::move(status);
  next.status.conditions = internConditions(next.status.conditions);
  next.version = version;
  next.stamp = ++next_stamp_;
  next.pod_name = pod.metadata.name;
  next.pod_namespace = pod.metadata.namespace_;
  if (api::isTerminalPhase(next.status.phase)) ++terminal_generation_;
  statuses_[pod.metadata.uid] = std::move(next);
  ++version_;
}

void StatusManager::removeOrphanedStatuses(const std::set<std::string>& keep) {
  std::lock_guard lock(mu_);
  if (std::erase_if(statuses_, [&](const auto& kv) { return keep.count(kv.first) == 0; }) > 0) {
    ++terminal_generation_;
    ++version_;
  }
}

void StatusManager::removeStatus(const std::string& uid) {
  std::lock_guard lock(mu_);
  if (statuses_.erase(uid) > 0) {
    ++terminal_generation_;
    ++version_;
  }
}

void StatusManager::setOnChange(std::function<void(const std::string&)> on_change) {
  std::lock_guard lock(mu_);
  on_change_ = std::move(on_change);
}

std::map<std::string, VersionedPodStatus> StatusManager::snapshot() const {
  std::lock_guard lock(mu_);
  return {statuses_.begin(), statuses_.end()};
}

}  // namespace nodeagent::agent
