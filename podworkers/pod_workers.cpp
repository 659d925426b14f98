#include "podworkers/pod_workers.h"

#include "api/pod_phase.h"
#include "base/backoff.h"
#include "podworkers/pod_workers_impl.h"

namespace nodeagent::podworkers {
namespace {

NODEAGENT_LOGGER("podworkers")

// The grace period only shrinks: the smallest of the current one, the apiserver's
// deletionGracePeriodSeconds and the kill's override; the pod's spec when none is set; never < 1.
std::pair<int64_t, bool> effectiveGracePeriod(std::optional<int64_t> current, const api::Pod& pod,
                                              const api::Boxed<KillPodOptions>& kill) {
  std::optional<int64_t> grace = current;
  auto lower = [&grace](std::optional<int64_t> v) {
    if (v && (!grace || *v < *grace)) grace = v;
  };
  lower(pod.metadata.deletion_grace_period_seconds);
  if (kill) lower(kill->grace_period_seconds_override);
  if (!grace) grace = pod.spec->termination_grace_period_seconds;
  const int64_t value = std::max<int64_t>(grace.value_or(1), 1);
  return {value, current && value < *current};
}

// A kill that needs no waiting: its completion callback runs once the lock is released.
void takeKillCallback(api::Boxed<KillPodOptions>& kill, Deferred& deferred) {
  if (kill && kill->on_completed) deferred.callbacks.push_back(std::move(kill->on_completed));
  kill.reset();
}

}  // namespace

void BasicPodWorkers::Impl::updatePod(UpdatePodOptions options) {
  Deferred deferred;
  {
    std::lock_guard lock(mu_);
    if (settledSyncLocked(options)) return;
    updatePodLocked(std::move(options), deferred, std::nullopt);
  }
  deferred.run();
}

bool BasicPodWorkers::Impl::settledSyncLocked(const UpdatePodOptions& options) {
  // Only a plain sync of an idle, running worker with the objects its last sync had: anything
  // else goes through the worker.
  if (closed_ || options.update_type != api::SyncPodType::kSync || options.runtime_pod ||
      options.kill_pod_options || !options.pod) {
    return false;
  }
  auto it = statuses_.find(options.pod->metadata.uid);
  if (it == statuses_.end()) return false;
  SyncStatus& st = *it->second;
  if (st.working || st.pending || !st.started || st.finished || st.restart ||
      st.terminationRequested() || st.last.pod != options.pod ||
      st.last.mirror_pod != options.mirror_pod) {
    return false;
  }
  if (!syncer_.trySettledSync(options.pod, options.mirror_pod)) return false;
  // As a completed sync: the next periodic one is a resync interval away.
  queueAfterLocked(st, options_.resync_interval);
  return true;
}

std::map<std::string, PodWorkerSync> BasicPodWorkers::Impl::syncKnownPods(
    const std::vector<api::PodPtr>& desired) {
  std::set<std::string, std::less<>> known;
  for (const auto& pod : desired) {
    if (pod) known.insert(pod->metadata.uid);
  }
  std::map<std::string, PodWorkerSync> out;
  std::lock_guard lock(mu_);
  pods_synced_ = true;
  std::vector<StatusPtr> forget;
  for (const auto& [uid, st] : statuses_) {
    const bool orphan = !known.contains(uid);
    // Only finished workers are forgotten: anything else may still have running containers.
    if (orphan && st->finished && !st->working) {
      forget.push_back(st);
      continue;
    }
    out[st->uid] = PodWorkerSync{st->state(), orphan, !st->runtime_pod, st->is_static};
  }
  for (const auto& st : forget) {
    log()->debug("forgetting finished pod worker uid={}", st->uid);
    retireLocked(st);
  }
  return out;
}

void BasicPodWorkers::Impl::forgetWorker(const std::string& uid) {
  std::lock_guard lock(mu_);
  auto it = statuses_.find(uid);
  if (it == statuses_.end()) return;
  log()->debug("forgetting pod worker uid={}", uid);
  retireLocked(it->second);
}

std::vector<std::string> BasicPodWorkers::Impl::getWorkToSync() {
  std::lock_guard lock(mu_);
  const auto due = queue_.takeDue(clock_.now());
  std::vector<std::string> uids;
  uids.reserve(due.size());
  for (const SyncStatus* st : due) uids.push_back(st->uid);
  return uids;
}

uint64_t BasicPodWorkers::Impl::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

void BasicPodWorkers::Impl::queueLocked(SyncStatus& st, base::MonotonicTime at) {
  queue_.schedule(st, at);
}

void BasicPodWorkers::Impl::queueAfterLocked(SyncStatus& st, base::Duration delay) {
  queueLocked(st, clock_.now() + base::jitter(delay, options_.jitter_factor, random_));
}

void BasicPodWorkers::Impl::unqueueLocked(SyncStatus& st) { queue_.erase(st); }

std::set<std::string> BasicPodWorkers::Impl::knownTerminatedUIDs() const {
  std::lock_guard lock(mu_);
  std::set<std::string> out;
  for (const auto& [uid, st] : statuses_) {
    if (st->terminated()) out.insert(st->uid);
  }
  return out;
}

bool BasicPodWorkers::Impl::isPodForMirrorPodTerminatingByFullName(
    const std::string& full_name) const {
  std::lock_guard lock(mu_);
  auto started = started_static_.find(full_name);
  if (started == started_static_.end()) return false;
  const SyncStatus& st = *started->second;
  return st.terminationRequested() && !st.terminated();
}

void BasicPodWorkers::Impl::shutdown(std::function<void()> on_idle) {
  std::lock_guard lock(mu_);
  if (!closed_) {
    closed_ = true;
    log()->info("pod workers shutting down in_flight={}", in_flight_);
    queue_.clear();
    for (const auto& [uid, st] : statuses_) {
      st->pending.reset();
      st->restart.reset();
      if (st->termination) st->termination->notify_post_terminating.clear();
      retireTimerLocked(*st);
    }
  }
  if (on_idle) {
    if (in_flight_ == 0) {
      asio::post(executor_, std::move(on_idle));
    } else {
      on_idle_.push_back(std::move(on_idle));
    }
  }
}

size_t BasicPodWorkers::Impl::inFlight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

std::optional<PodWorkerState> BasicPodWorkers::Impl::podWorkerState(const std::string& uid) const {
  std::lock_guard lock(mu_);
  auto it = statuses_.find(uid);
  if (it == statuses_.end()) return std::nullopt;
  return it->second->state();
}

StatusPtr BasicPodWorkers::Impl::statusForLocked(const UpdatePodOptions& options,
                                                 std::optional<Strand> strand) {
  const auto& pod = *options.pod;
  if (auto it = statuses_.find(pod.metadata.uid); it != statuses_.end()) return it->second;
  auto slot = std::make_shared<SyncStatus>(pod.metadata.uid,
                                           strand ? *strand : asio::make_strand(executor_));
  // Keyed by a view of the status's own UID: the entry holds the status, so its key lives as long.
  statuses_.emplace(slot->uid, slot);
  slot->full_name = pod.fullName();
  slot->is_static = !options.runtime_pod && api::isStaticPod(pod);
  slot->runtime_pod = options.runtime_pod;
  // Static pods start in the order their workers were created.
  if (slot->is_static) waiting_static_[slot->full_name].push_back(slot.get());
  log()->debug("pod worker created pod={} uid={}", api::podRef(pod), slot->uid);
  return slot;
}

void BasicPodWorkers::Impl::updatePodLocked(UpdatePodOptions options, Deferred& deferred,
                                            std::optional<Strand> strand) {
  if (!acceptUpdateLocked(options)) return;
  StatusPtr st = statusForLocked(options, strand);
  if (st->terminationRequested() && absorbedByRestartLocked(st, options, deferred)) return;
  if (st->finished) {
    log()->debug("pod is finished, update ignored pod={} uid={}", api::podRef(*options.pod),
                 st->uid);
    takeKillCallback(options.kill_pod_options, deferred);
    return;
  }
  const bool became_terminating =
      !st->terminationRequested() && beginTerminationLocked(st, options);
  bool grace_shortened = false;
  PodWork work = workForLocked(st, std::move(options), deferred, grace_shortened);
  dispatchLocked(st, std::move(work), became_terminating || grace_shortened, deferred);
}

bool BasicPodWorkers::Impl::acceptUpdateLocked(UpdatePodOptions& options) {
  if (closed_) return false;
  if (!options.pod) {
    log()->warn("pod update without a pod ignored");
    return false;
  }
  if (options.runtime_pod && options.update_type != api::SyncPodType::kKill) {
    log()->info("pod update ignored, runtime pods can only be killed pod={} uid={}",
                api::podRef(*options.pod), options.pod->metadata.uid);
    return false;
  }
  auto existing = statuses_.find(options.pod->metadata.uid);
  if (options.runtime_pod && existing != statuses_.end() && !existing->second->runtime_pod) {
    // Config still knows this pod: kill the config pod rather than a runtime-only copy.
    if (existing->second->terminated()) return false;
    options.runtime_pod = false;
    options.pod = existing->second->last.pod;
    options.mirror_pod = existing->second->last.mirror_pod;
  }
  return true;
}

bool BasicPodWorkers::Impl::absorbedByRestartLocked(const StatusPtr& st, UpdatePodOptions& options,
                                                    Deferred& deferred) {
  const api::Pod& pod = *options.pod;
  if (options.update_type == api::SyncPodType::kCreate && !options.runtime_pod) {
    // The same UID was created again (a static manifest removed and re-added).
    log()->info(
        "pod is terminating and was created again, it restarts once terminated "
        "pod={} uid={}",
        api::podRef(pod), st->uid);
    takeKillCallback(options.kill_pod_options, deferred);
    st->restart = std::move(options);
    if (st->finished && !st->working) restartLocked(st, deferred);
    return true;
  }
  if (!st->restart) return false;
  if (options.update_type == api::SyncPodType::kKill) {
    log()->info("restart of pod cancelled by a kill pod={} uid={}", api::podRef(pod), st->uid);
    st->restart.reset();
    return false;
  }
  // Newer config for the next life; the terminating one needs no more updates.
  st->restart->pod = options.pod;
  st->restart->mirror_pod = options.mirror_pod;
  takeKillCallback(options.kill_pod_options, deferred);
  return true;
}

bool BasicPodWorkers::Impl::beginTerminationLocked(const StatusPtr& st,
                                                   const UpdatePodOptions& options) {
  const api::Pod& pod = *options.pod;
  const std::string& uid = st->uid;
  if (options.runtime_pod) {
    log()->info("orphaned pod must be torn down pod={} uid={}", api::podRef(pod), uid);
    st->deleted = true;
  } else if (pod.metadata.deletion_timestamp) {
    log()->info("pod is marked for deletion, begin teardown pod={} uid={}", api::podRef(pod), uid);
    st->deleted = true;
  } else if (api::isTerminalPhase(pod.status->phase)) {
    log()->info("pod is in a terminal phase, begin teardown pod={} uid={} phase={}",
                api::podRef(pod), uid, pod.status->phase);
  } else if (options.update_type == api::SyncPodType::kKill) {
    st->evicted = options.kill_pod_options && options.kill_pod_options->evict;
    log()->info("pod is being {}, begin teardown pod={} uid={}", st->evicted ? "evicted" : "killed",
                api::podRef(pod), uid);
  } else {
    return false;
  }
  st->term().terminating_at = clock_.now();
  ++generation_;
  unqueueLocked(*st);
  return true;
}

PodWork BasicPodWorkers::Impl::workForLocked(const StatusPtr& st, UpdatePodOptions options,
                                             Deferred& deferred, bool& grace_shortened) {
  PodWork work;
  if (st->terminated()) {
    work.type = WorkType::kTerminated;
    takeKillCallback(options.kill_pod_options, deferred);
  } else if (st->terminationRequested()) {
    work.type = WorkType::kTerminating;
    // The kill's callbacks wait for the termination to complete.
    if (auto& kill = options.kill_pod_options) {
      auto& term = st->term();
      if (kill->on_completed) term.notify_post_terminating.push_back(std::move(kill->on_completed));
      if (kill->pod_status_fn) term.status_post_terminating.push_back(kill->pod_status_fn);
    }
    auto [grace, shortened] =
        effectiveGracePeriod(st->gracePeriod(), *options.pod, options.kill_pod_options);
    if (shortened) {
      log()->info("grace period shortened pod={} uid={} grace={}s", api::podRef(*options.pod),
                  st->uid, grace);
    }
    st->term().grace_period = grace;
    grace_shortened = shortened;
    options.kill_pod_options.reset();
  } else {
    work.type = WorkType::kSync;
    takeKillCallback(options.kill_pod_options, deferred);
  }
  st->last = options;  // every branch above took its kill options: none are kept
  work.options = std::move(options);
  return work;
}

void BasicPodWorkers::Impl::dispatchLocked(const StatusPtr& st, PodWork work, bool cancel_current,
                                           Deferred& deferred) {
  if (st->pending) keepCreate(*st->pending, work);
  if (!st->working) {
    st->pending.reset();
    deliverLocked(st, std::move(work));
    return;
  }
  st->pending = std::move(work);
  if (cancel_current) {
    log()->debug("cancelling the current sync pod={} uid={}",
                 api::podRef(*st->pending->options.pod), st->uid);
    deferred.stops.push_back(st->stop);
  }
}

std::string_view podWorkerStateName(PodWorkerState state) {
  switch (state) {
    case PodWorkerState::kSyncPod:
      return "SyncPod";
    case PodWorkerState::kTerminatingPod:
      return "TerminatingPod";
    case PodWorkerState::kTerminatedPod:
      return "TerminatedPod";
  }
  return "Unknown";
}

BasicPodWorkers::BasicPodWorkers(asio::any_io_executor executor, base::Clock& clock,
                                 base::Random& random, PodSyncer& syncer, PodWorkersOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), clock, random, syncer, options)) {}

BasicPodWorkers::~BasicPodWorkers() { impl_->shutdown({}); }

void BasicPodWorkers::updatePod(UpdatePodOptions options) { impl_->updatePod(std::move(options)); }

std::map<std::string, PodWorkerSync> BasicPodWorkers::syncKnownPods(
    const std::vector<api::PodPtr>& desired) {
  return impl_->syncKnownPods(desired);
}

void BasicPodWorkers::forgetWorker(const std::string& uid) { impl_->forgetWorker(uid); }

std::vector<std::string> BasicPodWorkers::getWorkToSync() { return impl_->getWorkToSync(); }

uint64_t BasicPodWorkers::generation() const { return impl_->generation(); }

bool BasicPodWorkers::isPodTerminationRequested(const std::string& uid) const {
  return impl_->query(
      uid, [](const SyncStatus& s) { return s.terminationRequested(); }, false, false);
}

std::set<std::string> BasicPodWorkers::knownTerminatedUIDs() const {
  return impl_->knownTerminatedUIDs();
}

bool BasicPodWorkers::isPodKnownTerminated(const std::string& uid) const {
  return impl_->query(
      uid, [](const SyncStatus& s) { return s.terminated(); }, false, false);
}

bool BasicPodWorkers::couldHaveRunningContainers(const std::string& uid) const {
  return impl_->query(
      uid, [](const SyncStatus& s) { return !s.terminated(); }, true, false);
}

bool BasicPodWorkers::shouldPodContainersBeTerminating(const std::string& uid) const {
  return impl_->query(
      uid, [](const SyncStatus& s) { return s.started_terminating; }, false, true);
}

bool BasicPodWorkers::shouldPodRuntimeBeRemoved(const std::string& uid) const {
  return impl_->query(
      uid, [](const SyncStatus& s) { return s.terminated(); }, false, true);
}

bool BasicPodWorkers::shouldPodContentBeRemoved(const std::string& uid) const {
  return impl_->query(
      uid, [](const SyncStatus& s) { return s.evicted || (s.deleted && s.terminated()); }, false,
      true);
}

bool BasicPodWorkers::isPodForMirrorPodTerminatingByFullName(const std::string& full_name) const {
  return impl_->isPodForMirrorPodTerminatingByFullName(full_name);
}

void BasicPodWorkers::shutdown(std::function<void()> on_idle) {
  impl_->shutdown(std::move(on_idle));
}

size_t BasicPodWorkers::inFlight() const { return impl_->inFlight(); }

std::optional<PodWorkerState> BasicPodWorkers::podWorkerState(const std::string& uid) const {
  return impl_->podWorkerState(uid);
}

}  // namespace nodeagent::podworkers
