#include "agent/status/status_syncer.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "api/async_rest_client.h"

#include "api/api_errors.h"
#include "api/canonical_json.h"
#include "api/pod_json.h"
#include "api/pod_update.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("status")

}  // namespace

nlohmann::json podStatusPatch(const nlohmann::json& old_status, const nlohmann::json& new_status) {
  nlohmann::json patch = nlohmann::json::object();
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const auto& old_s = old_status.is_object() ? old_status : kEmpty;
  const auto& new_s = new_status.is_object() ? new_status : kEmpty;
  for (const auto& [key, value] : new_s.items()) {
    if (key == "conditions") continue;
    auto it = old_s.find(key);
    if (it == old_s.end() || *it != value) patch[key] = value;
  }
  // Fields the agent owns and may clear; anything else another writer set is left alone.
  for (const char* key : {"message", "reason", "podIP", "podIPs", "hostIP"}) {
    if (old_s.contains(key) && !new_s.contains(key)) patch[key] = nullptr;
  }
  auto new_conds = new_s.find("conditions");
  if (new_conds != new_s.end() && new_conds->is_array()) {
    std::map<std::string, const nlohmann::json*> old_by_type;
    if (auto oc = old_s.find("conditions"); oc != old_s.end() && oc->is_array()) {
      for (const auto& c : *oc) {
        if (c.is_object()) old_by_type[c.value("type", "")] = &c;
      }
    }
    nlohmann::json changed = nlohmann::json::array();
    for (const auto& c : *new_conds) {
      if (!c.is_object()) continue;
      auto it = old_by_type.find(c.value("type", ""));
      if (it == old_by_type.end()) {
        changed.push_back(c);
      } else if (*it->second != c) {
        // The apiserver merges a condition into the one of its type field by field, so a field
        // the new condition lost (Ready's reason and message once it is True) goes with null.
        nlohmann::json item = c;
        for (const auto& [key, value] : it->second->items()) {
          if (!c.contains(key)) item[key] = nullptr;
        }
        changed.push_back(std::move(item));
      }
    }
    if (!changed.empty()) patch["conditions"] = std::move(changed);
  }
  return patch;
}

namespace {

class RestPodStatusWriter final : public PodStatusWriter {
 public:
  explicit RestPodStatusWriter(api::AsyncRestClient api) : async_(std::move(api)) {}

  asio::awaitable<base::StatusOr<nlohmann::json>> patchStatus(std::string path,
                                                              nlohmann::json body) override {
    auto call = [path = std::move(path), body = std::move(body)](api::RestClient& c) {
      return c.patchJson(path, body, api::PatchType::kStrategicMerge);
    };
    auto r = co_await api::runOnPool(async_, call);
    co_return r;
  }

  asio::awaitable<base::StatusOr<nlohmann::json>> deletePod(std::string path,
                                                            nlohmann::json options) override {
    auto call = [path = std::move(path), options = std::move(options)](api::RestClient& c) {
      return c.deleteJson(path, &options);
    };
    auto r = co_await api::runOnPool(async_, call);
    co_return r;
  }

 private:
  api::AsyncRestClient async_;
};

}  // namespace

std::shared_ptr<PodStatusWriter> restPodStatusWriter(api::AsyncRestClient api) {
  return std::make_shared<RestPodStatusWriter>(std::move(api));
}

size_t statusRequestsInFlight(double qps, size_t pool_threads) {
  const size_t most = std::max<size_t>(pool_threads > 0 ? pool_threads - 1 : 0, 2);
  if (qps <= 0) return most;
  // The requests the limit lets go during one round trip of 2 ms, plus one.
  const double round_trips = std::ceil(qps * 0.002) + 1;
  if (round_trips >= static_cast<double>(most)) return most;
  return std::max<size_t>(2, static_cast<size_t>(round_trips));
}

size_t apiPoolThreadsFor(double qps) {
  return qps > 0 && qps <= 1000 ? kApiPoolThreads : kLargeApiPoolThreads;
}

StatusSyncer::StatusSyncer(asio::any_io_executor executor, base::Clock& clock,
                           api::AsyncRestClient api, StatusManager& status_manager,
                           podmanager::PodManager& pod_manager, StatusSyncerOptions options)
    : StatusSyncer(std::move(executor), clock, restPodStatusWriter(std::move(api)), status_manager,
                   pod_manager, std::move(options)) {}

StatusSyncer::StatusSyncer(asio::any_io_executor executor, base::Clock& clock,
                           std::shared_ptr<PodStatusWriter> writer, StatusManager& status_manager,
                           podmanager::PodManager& pod_manager, StatusSyncerOptions options)
    : strand_(asio::make_strand(executor)),
      clock_(clock),
      writer_(std::move(writer)),
      status_manager_(status_manager),
      pod_manager_(pod_manager),
      options_(std::move(options)) {
  options_.coalesce_window =
      std::clamp(options_.coalesce_window, base::Duration::zero(), kMaxStatusCoalesceWindow);
  options_.max_in_flight = std::max<size_t>(options_.max_in_flight, 1);
  options_.first_status_hold =
      options_.coalesce_window <= base::Duration::zero()
          ? base::Duration::zero()
          : std::clamp(options_.first_status_hold, base::Duration::zero(), options_.batch_period);
}

StatusSyncer::~StatusSyncer() = default;

void StatusSyncer::start() {
  std::weak_ptr<StatusSyncer> weak = weak_from_this();
  status_manager_.setOnChange([weak](const std::string& uid) {
    if (auto self = weak.lock()) self->notify(uid);
  });
  asio::post(strand_, [self = shared_from_this()] {
    self->batch_timer_ = self->clock_.makeTimer(self->strand_);
    self->delete_timer_ = self->clock_.makeTimer(self->strand_);
    self->window_timer_ = self->clock_.makeTimer(self->strand_);
    self->batch();
    self->armWindowTimer();  // for pods held before the timer existed
  });
}

void StatusSyncer::stop() {
  stopped_ = true;
  status_manager_.setOnChange(nullptr);
  asio::post(strand_, [self = shared_from_this()] {
    if (self->batch_timer_) self->batch_timer_->cancel();
    if (self->delete_timer_) self->delete_timer_->cancel();
    if (self->window_timer_) self->window_timer_->cancel();
    self->held_.clear();
    self->starting_.clear();
    self->queue_.clear();
    self->queued_.clear();
    self->again_.clear();
  });
}

void StatusSyncer::notify(const std::string& uid) {
  if (stopped_) return;
  asio::post(strand_, [self = shared_from_this(), uid] { self->hold(uid); });
}

void StatusSyncer::resyncAll() {
  if (stopped_) return;
  asio::post(strand_, [self = shared_from_this()] {
    for (const auto& [uid, vs] : self->status_manager_.snapshot()) self->enqueue(uid);
  });
}

void StatusSyncer::hold(const std::string& raw_uid) {
  if (stopped_) return;
  std::string uid = pod_manager_.translatePodUID(raw_uid);
  if (uid.empty()) return;
  if (options_.coalesce_window <= base::Duration::zero()) {
    enqueueTranslated(uid);
    return;
  }
  // Already queued: its sync reads the newest status when it comes.
  if (queued_.count(uid)) return;
  const auto window_end = clock_.now() + options_.coalesce_window;
  if (held_.contains(uid)) {
    // Waiting already, and its sync reads the newest status. A pod held for its first starting
    // status that moved on waits no longer than the window from now.
    if (!starting_.count(uid) || isFirstStartingStatus(uid)) return;
    starting_.erase(uid);
    if (held_.dueAt(uid) > window_end) held_.schedule(uid, window_end);
  } else if (options_.first_status_hold > base::Duration::zero() && isFirstStartingStatus(uid)) {
    starting_.insert(uid);
    held_.schedule(uid, clock_.now() + options_.first_status_hold);
  } else {
    held_.schedule(uid, window_end);
  }
  armWindowTimer();
}

bool StatusSyncer::isFirstStartingStatus(const std::string& uid) {
  // Sent before, or being sent: this syncer reported on the pod.
  if (in_flight_.count(uid)) return false;
  if (auto it = state_.find(uid); it != state_.end() && it->second.synced_version > 0) {
    return false;
  }
  if (status_manager_.getPodPhase(uid) != "Pending") return false;
  auto status = status_manager_.getPodStatus(uid);
  if (!status || status->phase != "Pending" ||
      status->init_container_statuses.size() + status->container_statuses.size() == 0) {
    return false;
  }
  for (const auto* list : {&status->init_container_statuses, &status->container_statuses}) {
    for (const auto& cs : *list) {
      if (!cs.state.waiting || (cs.state.waiting->reason != "ContainerCreating" &&
                                cs.state.waiting->reason != "PodInitializing")) {
        return false;
      }
    }
  }
  // The apiserver's copy (a static pod's mirror): a pod some agent reported on before (this one
  // before a restart) is not new.
  auto pod = pod_manager_.getPodByUID(uid);
  if (!pod) return false;
  api::PodPtr target = api::isStaticPod(*pod) ? pod_manager_.getMirrorPodByPod(*pod) : pod;
  return target && target->status->container_statuses.empty() &&
         target->status->init_container_statuses.empty();
}

void StatusSyncer::armWindowTimer() {
  const auto next = held_.next();
  if (stopped_ || !window_timer_ || !next) return;
  // Armed for this time or sooner already. A pod held for its first status puts the timer far
  // out, and one queued behind it may be due sooner (re-arming replaces the callback).
  if (window_timer_->armed() && window_due_ <= *next) return;
  window_due_ = *next;
  const auto wait = std::max(*next - clock_.now(), base::Duration::zero());
  window_timer_->asyncWaitFor(wait, [self = shared_from_this()] { self->releaseDue(); });
}

void StatusSyncer::releaseDue() {
  if (stopped_) return;
  const auto now = clock_.now();
  // In window order: the pod whose change came first is sent first.
  for (const auto& uid : held_.takeDue(now)) enqueueTranslated(uid);
  armWindowTimer();
}

void StatusSyncer::enqueue(const std::string& raw_uid) {
  if (stopped_) return;
  std::string uid = pod_manager_.translatePodUID(raw_uid);
  if (!uid.empty()) enqueueTranslated(uid);
}

void StatusSyncer::enqueueTranslated(const std::string& uid) {
  if (stopped_) return;
  held_.erase(uid);
  starting_.erase(uid);
  if (in_flight_.count(uid)) {
    // Sent again once the request in flight is done: a pod's requests never overtake each other.
    again_.insert(uid);
    return;
  }
  if (!queued_.insert(uid).second) return;
  queue_.push_back(uid);
  runQueue();
}

void StatusSyncer::runQueue() {
  while (!stopped_ && !queue_.empty() && in_flight_.size() < options_.max_in_flight) {
    std::string uid = std::move(queue_.front());
    queue_.pop_front();
    queued_.erase(uid);
    in_flight_.insert(uid);
    asio::co_spawn(
        strand_,
        [](std::shared_ptr<StatusSyncer> self, std::string id) -> asio::awaitable<void> {
          // Named: GCC 12 destroys temporaries of a co_await expression twice.
          auto sync = self->syncQueued(std::move(id));
          co_await std::move(sync);
        }(shared_from_this(), std::move(uid)),
        asio::detached);
  }
}

asio::awaitable<void> StatusSyncer::syncQueued(std::string uid) {
  if (!stopped_) {
    try {
      // Named: GCC 12 destroys temporaries of a co_await expression twice.
      auto sync = syncPod(uid);
      co_await std::move(sync);
    } catch (const std::exception& e) {
      log()->error("Status sync failed uid={} err={}", uid, e.what());
    }
  }
  in_flight_.erase(uid);
  if (again_.erase(uid) > 0) enqueueTranslated(uid);
  runQueue();
}

// As kubelet's status manager syncPod: PATCHes the apiserver's copy of the pod (a static pod's
// mirror) with what differs from the cached status, then sends the final DELETE once a deleted
// pod is done.
asio::awaitable<void> StatusSyncer::syncPod(std::string uid) {
  auto vs = status_manager_.getVersionedPodStatus(uid);
  if (!vs) {
    state_.erase(uid);
    co_return;
  }
  auto pod = pod_manager_.getPodByUID(uid);
  if (!pod) co_return;  // not (yet) in the pod manager: nothing to report to
  api::PodPtr target = statusTarget(uid, pod);
  if (!target) co_return;
  auto patch = podStatusPatch(apiserverStatus(uid, target), api::encodePodStatus(vs->status));
  if (patch.empty()) {
    metrics_.unchanged.fetch_add(1);
    state_[uid].synced_version = std::max(state_[uid].synced_version, vs->version);
  } else {
    // Named awaitables: GCC 12 destroys temporaries of a co_await expression twice.
    auto patching = patchStatus(uid, pod, target, vs->version, std::move(patch));
    const bool patched = co_await std::move(patching);
    if (!patched) co_return;
  }
  auto deleting = maybeDelete(pod, uid);
  co_await std::move(deleting);
}

api::PodPtr StatusSyncer::statusTarget(const std::string& uid, const api::PodPtr& pod) {
  api::PodPtr target = pod;
  if (api::isStaticPod(*pod)) {
    target = pod_manager_.getMirrorPodByPod(*pod);
    // No current mirror yet: the status goes out once the mirror pod shows up.
    if (!target || target->metadata.uid.empty() ||
        !podmanager::PodManager::isMirrorPodOf(*target, *pod) ||
        target == state_[uid].gone_mirror) {
      waiting_for_mirror_.insert(uid);
      armRetry();
      return nullptr;
    }
  }
  if (target->metadata.uid.empty()) return nullptr;
  return target;
}

nlohmann::json StatusSyncer::apiserverStatus(const std::string& uid, const api::PodPtr& target) {
  auto& st = state_[uid];
  if (st.answered_status && st.base_pod == target) return *st.answered_status;
  // The watch delivered something since: the pod manager's copy is the newer truth.
  st.base_pod.reset();
  st.answered_status.reset();
  return api::encodePodStatus(*target->status);
}

asio::awaitable<bool> StatusSyncer::patchStatus(std::string uid, api::PodPtr pod,
                                                api::PodPtr target, uint64_t version,
                                                nlohmann::json patch) {
  nlohmann::json body = {{"metadata", {{"uid", target->metadata.uid}}},
                         {"status", std::move(patch)}};
  std::string path = api::podStatusPath(target->metadata.namespace_, target->metadata.name);
  log()->debug("Patching pod status pod={} uid={} version={} patch={}", api::podRef(*target),
               target->metadata.uid, version, api::canonicalJson(body));
  // Named: GCC 12 destroys temporaries of a co_await expression twice.
  auto patching = writer_->patchStatus(std::move(path), std::move(body));
  auto r = co_await std::move(patching);
  if (!r.ok()) {
    metrics_.patch_errors.fetch_add(1);
    if (api::isNotFound(r.status()) || api::isConflict(r.status())) {
      log()->debug("Pod is gone or replaced, status not sent pod={} err={}", api::podRef(*target),
                   r.status().toString());
      if (target != pod) {
        // A static pod's mirror: the agent recreates it, and the status goes to the new one.
        state_[uid].gone_mirror = target;
        waiting_for_mirror_.insert(uid);
        armRetry();
      }
    } else {
      log()->warn("Failed to update pod status pod={} err={}", api::podRef(*target),
                  r.status().toString());
    }
    co_return false;
  }
  metrics_.patches.fetch_add(1);
  auto& st = state_[uid];
  st.synced_version = std::max(st.synced_version, version);
  st.base_pod = target;
  st.answered_status = std::make_shared<const nlohmann::json>(
      r->is_object() ? r->value("status", nlohmann::json::object()) : nlohmann::json::object());
  co_return true;
}

asio::awaitable<void> StatusSyncer::maybeDelete(api::PodPtr pod, std::string uid) {
  if (!pod->metadata.deletion_timestamp || api::isStaticPod(*pod) || api::isMirrorPod(*pod)) {
    co_return;
  }
  auto& st = state_[uid];
  if (st.delete_sent) co_return;
  if (options_.pod_resources_reclaimed && !options_.pod_resources_reclaimed(uid)) {
    pending_deletes_.insert(uid);
    armRetry();
    co_return;
  }
  nlohmann::json options = {{"gracePeriodSeconds", 0}, {"preconditions", {{"uid", uid}}}};
  auto deleting = writer_->deletePod(api::podPath(pod->metadata.namespace_, pod->metadata.name),
                                     std::move(options));
  auto r = co_await std::move(deleting);
  if (r.ok() || api::isNotFound(r.status()) || api::isConflict(r.status())) {
    state_[uid].delete_sent = true;
    pending_deletes_.erase(uid);
    if (r.ok()) {
      metrics_.deletes.fetch_add(1);
      log()->info("Pod fully terminated and removed from the apiserver pod={} uid={}",
                  api::podRef(*pod), uid);
    }
    co_return;
  }
  log()->warn("Failed to delete pod pod={} err={}", api::podRef(*pod), r.status().toString());
  pending_deletes_.insert(uid);
  armRetry();
}

void StatusSyncer::armRetry() {
  if (stopped_ || !delete_timer_ || delete_timer_->armed()) return;
  delete_timer_->asyncWaitFor(options_.deletion_check_period,
                              [self = shared_from_this()] { self->checkDeletions(); });
}

void StatusSyncer::checkDeletions() {
  if (stopped_) return;
  auto waiting = std::move(waiting_for_mirror_);
  waiting_for_mirror_.clear();
  for (const auto& uid : waiting) {
    if (pod_manager_.getPodByUID(uid)) enqueue(uid);
  }
  for (auto it = pending_deletes_.begin(); it != pending_deletes_.end();) {
    if (!pod_manager_.getPodByUID(*it)) {
      it = pending_deletes_.erase(it);
      continue;
    }
    if (!options_.pod_resources_reclaimed || options_.pod_resources_reclaimed(*it)) enqueue(*it);
    ++it;
  }
  if (!pending_deletes_.empty()) armRetry();
}

void StatusSyncer::batch() {
  if (stopped_) return;
  auto all = status_manager_.snapshot();
  for (auto it = state_.begin(); it != state_.end();) {
    it = all.count(it->first) ? std::next(it) : state_.erase(it);
  }
  for (const auto& [uid, vs] : all) {
    // A pod held for its first starting status is sent when its wait ends, which is sooner.
    if (!starting_.count(uid)) enqueue(uid);
  }
  batch_timer_->asyncWaitFor(options_.batch_period, [self = shared_from_this()] { self->batch(); });
}

}  // namespace nodeagent::agent
