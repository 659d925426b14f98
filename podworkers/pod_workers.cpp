#include "podworkers/pod_workers.h"

#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <stop_token>

#include "base/backoff.h"
#include "base/log.h"

namespace nodeagent::podworkers {
namespace {

using Strand = asio::strand<asio::any_io_executor>;

// The three phases of a pod's life as the worker runs them.
enum class WorkType { kSync, kTerminating, kTerminated };

std::string_view workTypeName(WorkType type) {
  switch (type) {
    case WorkType::kSync:
      return "sync";
    case WorkType::kTerminating:
      return "terminating";
    case WorkType::kTerminated:
      return "terminated";
  }
  return "unknown";
}

struct PodWork {
  WorkType type = WorkType::kSync;
  UpdatePodOptions options;
};

// Per-UID state (kubelet's podSyncStatus). Every field is guarded by Impl::mu_; `strand` and `uid`
// never change.
struct SyncStatus {
  SyncStatus(std::string uid_in, Strand strand_in)
      : uid(std::move(uid_in)), strand(std::move(strand_in)) {}

  const std::string uid;
  const Strand strand;
  std::string full_name;
  bool is_static = false;
  // The worker was created by a kill of a pod known only to the runtime.
  bool runtime_pod = false;
  // Re-arms a failed terminating/terminated step. Armed, cancelled and destroyed on `strand` only.
  base::TimerPtr retry_timer;

  // A coroutine owns this UID: it runs (or is about to run) a sync method and will pick up
  // `pending` when done. False with `pending` set only for a static pod waiting for its turn.
  bool working = false;
  // Static pods: passed the full-name gate (kubelet's podStarted).
  bool started = false;
  // The newest undelivered work (kubelet's lastUndeliveredWorkUpdate).
  std::optional<PodWork> pending;
  // Cancels the work in flight (kubelet's ctx/cancelFn); replaced for each delivery.
  std::stop_source stop;
  // The newest options seen (without kill callbacks): what retries run with.
  UpdatePodOptions last;

  base::MonotonicTime synced_at{};
  std::optional<base::MonotonicTime> terminating_at;  // termination requested
  std::optional<base::MonotonicTime> terminated_at;   // syncTerminatingPod succeeded
  bool started_terminating = false;  // the worker has observed the termination request
  bool deleted = false;              // deletionTimestamp set, or an orphan
  bool evicted = false;
  bool finished = false;  // syncTerminatedPod succeeded (or the pod never started)
  // Effective grace period once terminating; nullopt for a pod that finished on its own.
  std::optional<int64_t> grace_period;
  std::vector<std::function<void()>> notify_post_terminating;
  std::vector<PodStatusFn> status_post_terminating;
  // Config created this UID again while it was terminating: run these options once finished.
  std::optional<UpdatePodOptions> restart;

  bool terminationRequested() const { return terminating_at.has_value(); }
  bool terminated() const { return terminated_at.has_value(); }
  PodWorkerState state() const {
    if (terminated()) return PodWorkerState::kTerminatedPod;
    if (terminationRequested()) return PodWorkerState::kTerminatingPod;
    return PodWorkerState::kSyncPod;
  }
};
using StatusPtr = std::shared_ptr<SyncStatus>;

// Work collected under the lock and run after it is released: stop callbacks and kill callbacks
// are foreign code and may call back into the workers.
struct Deferred {
  std::vector<std::stop_source> stops;
  std::vector<std::function<void()>> callbacks;
  void run() {
    for (auto& s : stops) s.request_stop();
    for (auto& cb : callbacks) {
      if (cb) cb();
    }
  }
};

struct SyncResult {
  base::Status status;
  bool terminal = false;
};

bool isTerminalPhase(const api::Pod& pod) {
  return pod.status.phase == "Failed" || pod.status.phase == "Succeeded";
}

// The grace period only shrinks: the smallest of the current one, the apiserver's
// deletionGracePeriodSeconds and the kill's override; the pod's spec when none is set; never < 1.
std::pair<int64_t, bool> effectiveGracePeriod(std::optional<int64_t> current, const api::Pod& pod,
                                              const std::optional<KillPodOptions>& kill) {
  std::optional<int64_t> grace = current;
  auto lower = [&grace](std::optional<int64_t> v) {
    if (v && (!grace || *v < *grace)) grace = v;
  };
  lower(pod.metadata.deletion_grace_period_seconds);
  if (kill) lower(kill->grace_period_seconds_override);
  if (!grace) grace = pod.spec.termination_grace_period_seconds;
  const int64_t value = std::max<int64_t>(grace.value_or(1), 1);
  return {value, current && value < *current};
}

// A create that is replaced before it ran stays a create, so syncPod still sees the first sync.
void keepCreate(const std::optional<PodWork>& older, PodWork& newer) {
  if (older && older->type == WorkType::kSync && newer.type == WorkType::kSync &&
      older->options.update_type == api::SyncPodType::kCreate) {
    newer.options.update_type = api::SyncPodType::kCreate;
  }
}

UpdatePodOptions withoutKillOptions(const UpdatePodOptions& options) {
  UpdatePodOptions out = options;
  out.kill_pod_options.reset();
  return out;
}

}  // namespace

class BasicPodWorkers::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::any_io_executor executor, base::Clock& clock, base::Random& random, PodSyncer& syncer,
       PodWorkersOptions options)
      : executor_(std::move(executor)),
        clock_(clock),
        random_(random),
        syncer_(syncer),
        options_(options),
        log_(base::logger("podworkers")) {}

  void updatePod(UpdatePodOptions options) {
    Deferred deferred;
    {
      std::lock_guard lock(mu_);
      updatePodLocked(std::move(options), deferred, std::nullopt);
    }
    deferred.run();
  }

  std::map<std::string, PodWorkerSync> syncKnownPods(const std::vector<api::PodPtr>& desired) {
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
      out[uid] = PodWorkerSync{st->state(), orphan, !st->runtime_pod, st->is_static};
    }
    for (const auto& st : forget) {
      log_->debug("forgetting finished pod worker uid={}", st->uid);
      retireLocked(st);
    }
    return out;
  }

  void forgetWorker(const std::string& uid) {
    std::lock_guard lock(mu_);
    auto it = statuses_.find(uid);
    if (it == statuses_.end()) return;
    log_->debug("forgetting pod worker uid={}", uid);
    retireLocked(it->second);
  }

  std::vector<std::string> getWorkToSync() {
    std::lock_guard lock(mu_);
    const auto now = clock_.now();
    std::vector<std::string> out;
    while (!due_.empty() && due_.begin()->first <= now) {
      auto node = due_.extract(due_.begin());
      queue_.erase(node.value().second);
      out.push_back(std::move(node.value().second));
    }
    return out;
  }

  uint64_t generation() const {
    std::lock_guard lock(mu_);
    return generation_;
  }

  void queueLocked(const std::string& uid, base::MonotonicTime at) {
    auto [it, inserted] = queue_.try_emplace(uid, at);
    if (!inserted) {
      due_.erase({it->second, uid});
      it->second = at;
    }
    due_.emplace(at, uid);
  }

  void unqueueLocked(const std::string& uid) {
    auto it = queue_.find(uid);
    if (it == queue_.end()) return;
    due_.erase({it->second, uid});
    queue_.erase(it);
  }

  std::set<std::string> knownTerminatedUIDs() const {
    std::lock_guard lock(mu_);
    std::set<std::string> out;
    for (const auto& [uid, st] : statuses_) {
      if (st->terminated()) out.insert(uid);
    }
    return out;
  }

  template <typename Pred>
  bool query(const std::string& uid, Pred pred, bool unknown_before_sync,
             bool unknown_after_sync) const {
    std::lock_guard lock(mu_);
    auto it = statuses_.find(uid);
    if (it != statuses_.end()) return pred(*it->second);
    return pods_synced_ ? unknown_after_sync : unknown_before_sync;
  }

  bool isPodForMirrorPodTerminatingByFullName(const std::string& full_name) const {
    std::lock_guard lock(mu_);
    auto started = started_static_.find(full_name);
    if (started == started_static_.end()) return false;
    auto it = statuses_.find(started->second);
    if (it == statuses_.end()) return false;
    return it->second->terminationRequested() && !it->second->terminated();
  }

  void shutdown(std::function<void()> on_idle) {
    std::lock_guard lock(mu_);
    if (!closed_) {
      closed_ = true;
      log_->info("pod workers shutting down in_flight={}", in_flight_);
      queue_.clear();
      due_.clear();
      for (const auto& [uid, st] : statuses_) {
        st->pending.reset();
        st->restart.reset();
        st->notify_post_terminating.clear();
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

  size_t inFlight() const {
    std::lock_guard lock(mu_);
    return in_flight_;
  }

  std::optional<PodWorkerState> podWorkerState(const std::string& uid) const {
    std::lock_guard lock(mu_);
    auto it = statuses_.find(uid);
    if (it == statuses_.end()) return std::nullopt;
    return it->second->state();
  }

 private:
  enum class Gate { kRun, kStop };

  bool isCurrent(const StatusPtr& st) const {
    auto it = statuses_.find(st->uid);
    return it != statuses_.end() && it->second == st;
  }

  StatusPtr statusForLocked(const UpdatePodOptions& options, std::optional<Strand> strand) {
    const auto& pod = *options.pod;
    auto& slot = statuses_[pod.metadata.uid];
    if (slot) return slot;
    slot = std::make_shared<SyncStatus>(pod.metadata.uid,
                                        strand ? *strand : asio::make_strand(executor_));
    slot->full_name = pod.fullName();
    slot->is_static = !options.runtime_pod && api::isStaticPod(pod);
    slot->runtime_pod = options.runtime_pod;
    slot->synced_at = clock_.now();
    // Static pods start in the order their workers were created.
    if (slot->is_static) waiting_static_[slot->full_name].push_back(slot->uid);
    log_->debug("pod worker created pod={} uid={}", api::podRef(pod), slot->uid);
    return slot;
  }

  void updatePodLocked(UpdatePodOptions options, Deferred& deferred, std::optional<Strand> strand) {
    auto callKiller = [&deferred](std::optional<KillPodOptions>& kill) {
      if (kill && kill->on_completed) deferred.callbacks.push_back(std::move(kill->on_completed));
      kill.reset();
    };
    if (closed_) return;
    if (!options.pod) {
      log_->warn("pod update without a pod ignored");
      return;
    }
    if (options.runtime_pod && options.update_type != api::SyncPodType::kKill) {
      log_->info("pod update ignored, runtime pods can only be killed pod={} uid={}",
                 api::podRef(*options.pod), options.pod->metadata.uid);
      return;
    }
    const std::string uid = options.pod->metadata.uid;  // a copy: options.pod may be replaced
    auto existing = statuses_.find(uid);
    if (options.runtime_pod && existing != statuses_.end() && !existing->second->runtime_pod) {
      // Config still knows this pod: kill the config pod rather than a runtime-only copy.
      if (existing->second->terminated()) return;
      options.runtime_pod = false;
      options.pod = existing->second->last.pod;
      options.mirror_pod = existing->second->last.mirror_pod;
    }
    StatusPtr st = statusForLocked(options, strand);
    const auto& pod = *options.pod;
    const auto now = clock_.now();

    if (st->terminationRequested()) {
      if (options.update_type == api::SyncPodType::kCreate && !options.runtime_pod) {
        // The same UID was created again (a static manifest removed and re-added).
        log_->info(
            "pod is terminating and was created again, it restarts once terminated "
            "pod={} uid={}",
            api::podRef(pod), uid);
        callKiller(options.kill_pod_options);
        st->restart = std::move(options);
        if (st->finished && !st->working) restartLocked(st, deferred);
        return;
      }
      if (st->restart) {
        if (options.update_type == api::SyncPodType::kKill) {
          log_->info("restart of pod cancelled by a kill pod={} uid={}", api::podRef(pod), uid);
          st->restart.reset();
        } else {
          // Newer config for the next life; the terminating one needs no more updates.
          st->restart->pod = options.pod;
          st->restart->mirror_pod = options.mirror_pod;
          callKiller(options.kill_pod_options);
          return;
        }
      }
    }
    if (st->finished) {
      log_->debug("pod is finished, update ignored pod={} uid={}", api::podRef(pod), uid);
      callKiller(options.kill_pod_options);
      return;
    }

    bool became_terminating = false;
    if (!st->terminationRequested()) {
      if (options.runtime_pod) {
        log_->info("orphaned pod must be torn down pod={} uid={}", api::podRef(pod), uid);
        st->deleted = true;
        became_terminating = true;
      } else if (pod.metadata.deletion_timestamp) {
        log_->info("pod is marked for deletion, begin teardown pod={} uid={}", api::podRef(pod),
                   uid);
        st->deleted = true;
        became_terminating = true;
      } else if (isTerminalPhase(pod)) {
        log_->info("pod is in a terminal phase, begin teardown pod={} uid={} phase={}",
                   api::podRef(pod), uid, pod.status.phase);
        became_terminating = true;
      } else if (options.update_type == api::SyncPodType::kKill) {
        st->evicted = options.kill_pod_options && options.kill_pod_options->evict;
        log_->info("pod is being {}, begin teardown pod={} uid={}",
                   st->evicted ? "evicted" : "killed", api::podRef(pod), uid);
        became_terminating = true;
      }
      if (became_terminating) {
        st->terminating_at = now;
        ++generation_;
        unqueueLocked(uid);
      }
    }

    PodWork work;
    bool grace_shortened = false;
    if (st->terminated()) {
      work.type = WorkType::kTerminated;
      callKiller(options.kill_pod_options);
    } else if (st->terminationRequested()) {
      work.type = WorkType::kTerminating;
      if (auto& kill = options.kill_pod_options) {
        if (kill->on_completed)
          st->notify_post_terminating.push_back(std::move(kill->on_completed));
        if (kill->pod_status_fn) st->status_post_terminating.push_back(kill->pod_status_fn);
      }
      auto [grace, shortened] =
          effectiveGracePeriod(st->grace_period, pod, options.kill_pod_options);
      if (shortened) {
        log_->info("grace period shortened pod={} uid={} grace={}s", api::podRef(pod), uid, grace);
      }
      st->grace_period = grace;
      grace_shortened = shortened;
      options.kill_pod_options.reset();
    } else {
      work.type = WorkType::kSync;
      callKiller(options.kill_pod_options);
    }
    st->last = withoutKillOptions(options);
    work.options = std::move(options);

    if (!st->working) {
      // Idle (or a static pod parked at the gate): the newest work goes out at once.
      keepCreate(st->pending, work);
      st->pending.reset();
      deliverLocked(st, std::move(work));
      return;
    }
    keepCreate(st->pending, work);
    st->pending = std::move(work);
    if (became_terminating || grace_shortened) {
      log_->debug("cancelling the current sync pod={} uid={}", api::podRef(pod), uid);
      deferred.stops.push_back(st->stop);
    }
  }

  void deliverLocked(const StatusPtr& st, PodWork work) {
    if (closed_) return;
    st->working = true;
    st->stop = std::stop_source();
    ++in_flight_;
    asio::co_spawn(st->strand,
                   runWorker(shared_from_this(), st, std::move(work), st->stop.get_token()),
                   [log = log_, uid = st->uid](std::exception_ptr e) {
                     if (!e) return;
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& ex) {
                       log->error("pod worker failed uid={} error={}", uid, ex.what());
                     } catch (...) {
                       log->error("pod worker failed uid={}", uid);
                     }
                   });
  }

  // The coroutine that owns a UID while it has work. `self` and `st` are parameters so the frame
  // owns them from creation.
  static asio::awaitable<void> runWorker(std::shared_ptr<Impl> self, StatusPtr st, PodWork work,
                                         std::stop_token token) {
    for (;;) {
      std::optional<int64_t> grace;
      PodStatusFn status_fn;
      {
        Deferred deferred;
        std::unique_lock lock(self->mu_);
        if (self->gateLocked(st, work, deferred, grace, status_fn) == Gate::kStop) {
          self->workerExitLocked();
          lock.unlock();
          deferred.run();
          co_return;
        }
      }
      SyncResult result = co_await self->execute(work, grace, std::move(status_fn), token);
      {
        Deferred deferred;
        std::unique_lock lock(self->mu_);
        auto next = self->completeLocked(st, work, result, token, deferred);
        if (!next) {
          self->workerExitLocked();
          lock.unlock();
          deferred.run();
          co_return;
        }
        work = std::move(*next);
        st->stop = std::stop_source();
        token = st->stop.get_token();
        lock.unlock();
        deferred.run();
      }
    }
  }

  // Decides whether `work` may run now (kubelet's allowPodStart and acknowledgeTerminating).
  Gate gateLocked(const StatusPtr& st, PodWork& work, Deferred& deferred,
                  std::optional<int64_t>& grace, PodStatusFn& status_fn) {
    if (closed_ || !isCurrent(st)) {
      st->working = false;
      return Gate::kStop;
    }
    if (!st->started && st->is_static) {
      if (st->terminationRequested()) {
        // Killed before it was allowed to start: nothing can be running.
        completeUnstartedTerminatedLocked(st, deferred);
        return Gate::kStop;
      }
      if (!allowStaticPodStartLocked(*st)) {
        log_->info(
            "static pod waits for the pod with the same full name to terminate pod={} "
            "uid={}",
            st->full_name, st->uid);
        if (st->pending) {
          keepCreate(work, *st->pending);
        } else {
          st->pending = std::move(work);
        }
        st->working = false;
        return Gate::kStop;
      }
    }
    st->started = true;
    if (work.type == WorkType::kTerminating) {
      st->started_terminating = true;
      grace = st->grace_period;
      if (!st->status_post_terminating.empty()) status_fn = st->status_post_terminating.back();
    }
    log_->debug("processing pod work pod={} uid={} work={} type={}", api::podRef(*work.options.pod),
                st->uid, workTypeName(work.type), api::syncPodTypeName(work.options.update_type));
    return Gate::kRun;
  }

  // kubelet's allowStaticPodStart: no other started static pod holds the full name, and this UID
  // is the first live one waiting for it.
  bool allowStaticPodStartLocked(const SyncStatus& st) {
    if (auto it = started_static_.find(st.full_name); it != started_static_.end()) {
      return it->second == st.uid;
    }
    auto wit = waiting_static_.find(st.full_name);
    if (wit != waiting_static_.end()) {
      auto& waiting = wit->second;
      while (!waiting.empty()) {
        auto s = statuses_.find(waiting.front());
        if (s == statuses_.end() || s->second->terminationRequested()) {
          waiting.pop_front();
          continue;
        }
        if (waiting.front() != st.uid) return false;
        waiting.pop_front();
        break;
      }
      if (waiting.empty()) waiting_static_.erase(wit);
    }
    started_static_[st.full_name] = st.uid;
    log_->info("static pod starts pod={} uid={}", st.full_name, st.uid);
    return true;
  }

  asio::awaitable<SyncResult> execute(const PodWork& work, std::optional<int64_t> grace,
                                      PodStatusFn status_fn, std::stop_token token) {
    const auto& o = work.options;
    // NOTE: every co_await result goes into a named local first; GCC 12 miscompiles co_await
    // inside braced initializers of non-trivial aggregates.
    SyncResult result;
    try {
      switch (work.type) {
        case WorkType::kSync: {
          base::StatusOr<bool> r =
              co_await syncer_.syncPod(o.update_type, o.pod, o.mirror_pod, token);
          if (r.ok()) {
            result.terminal = *r;
          } else {
            result.status = r.status();
          }
          break;
        }
        case WorkType::kTerminating:
          if (o.runtime_pod) {
            base::Status s = co_await syncer_.syncTerminatingRuntimePod(o.pod, token);
            result.status = std::move(s);
          } else {
            base::Status s =
                co_await syncer_.syncTerminatingPod(o.pod, grace, std::move(status_fn), token);
            result.status = std::move(s);
          }
          break;
        case WorkType::kTerminated: {
          base::Status s = co_await syncer_.syncTerminatedPod(o.pod);
          result.status = std::move(s);
          break;
        }
      }
      co_return result;
    } catch (const std::exception& e) {
      co_return SyncResult{base::internalError(std::string("pod sync threw: ") + e.what())};
    } catch (...) {
      co_return SyncResult{base::internalError("pod sync threw an unknown exception")};
    }
  }

  // Applies a sync method's result (kubelet's completeSync/completeTerminating/completeTerminated
  // and completeWork) and returns the next work to run on this coroutine, if any.
  std::optional<PodWork> completeLocked(const StatusPtr& st, const PodWork& work,
                                        const SyncResult& result, const std::stop_token& token,
                                        Deferred& deferred) {
    if (!isCurrent(st)) return std::nullopt;  // forgotten while syncing
    if (closed_) {
      st->working = false;
      return std::nullopt;
    }
    const auto& pod = *work.options.pod;
    const bool ok = result.status.ok();
    const bool cancelled =
        !ok && (result.status.code() == base::StatusCode::kCancelled || token.stop_requested());
    if (!ok && !cancelled) {
      log_->warn("error syncing pod, will retry pod={} uid={} work={} error={}", api::podRef(pod),
                 st->uid, workTypeName(work.type), result.status.toString());
    } else if (cancelled) {
      log_->debug("pod sync cancelled pod={} uid={} work={}", api::podRef(pod), st->uid,
                  workTypeName(work.type));
    }
    switch (work.type) {
      case WorkType::kSync:
        if (ok && result.terminal) {
          log_->info("pod reached a terminal phase, begin teardown pod={} uid={}", api::podRef(pod),
                     st->uid);
          if (!st->terminating_at) st->terminating_at = clock_.now();
          st->started_terminating = true;
          ++generation_;
          unqueueLocked(st->uid);
          st->pending = PodWork{WorkType::kTerminating, st->last};
        } else if (!st->terminationRequested()) {
          base::Duration delay = options_.resync_interval;
          if (!ok) {
            delay = result.status.message().find(kNetworkNotReadyErrorMsg) != std::string::npos
                        ? options_.transient_backoff_period
                        : options_.backoff_period;
          }
          queueLocked(st->uid, clock_.now() + base::jitter(delay, options_.jitter_factor, random_));
        }
        break;
      case WorkType::kTerminating:
        if (ok) {
          if (work.options.runtime_pod) {
            log_->info("orphaned pod terminated pod={} uid={}", api::podRef(pod), st->uid);
            st->terminated_at = clock_.now();
            ++generation_;
            notifyTerminatedLocked(*st, deferred);
            finishLocked(st, deferred);
            return std::nullopt;
          }
          log_->info("pod terminated all containers pod={} uid={}", api::podRef(pod), st->uid);
          st->terminated_at = clock_.now();
          ++generation_;
          notifyTerminatedLocked(*st, deferred);
          releaseStaticLocked(*st);
          st->pending = PodWork{WorkType::kTerminated, st->last};
        } else if (!st->pending) {
          armRetryLocked(st);
        }
        break;
      case WorkType::kTerminated:
        if (ok) {
          log_->info("pod is finished pod={} uid={}", api::podRef(pod), st->uid);
          finishLocked(st, deferred);
          return std::nullopt;
        }
        if (!st->pending) armRetryLocked(st);
        break;
    }
    if (st->pending) {
      PodWork next = std::move(*st->pending);
      st->pending.reset();
      return next;
    }
    st->working = false;
    return std::nullopt;
  }

  void notifyTerminatedLocked(SyncStatus& st, Deferred& deferred) {
    for (auto& cb : st.notify_post_terminating) deferred.callbacks.push_back(std::move(cb));
    st.notify_post_terminating.clear();
    st.status_post_terminating.clear();
  }

  void finishLocked(const StatusPtr& st, Deferred& deferred) {
    st->finished = true;
    ++generation_;
    st->working = false;
    st->pending.reset();
    releaseStaticLocked(*st);
    if (st->restart) restartLocked(st, deferred);
  }

  void completeUnstartedTerminatedLocked(const StatusPtr& st, Deferred& deferred) {
    log_->info("static pod terminated before it started pod={} uid={}", st->full_name, st->uid);
    st->started_terminating = true;
    st->terminated_at = clock_.now();
    notifyTerminatedLocked(*st, deferred);
    finishLocked(st, deferred);  // bumps the generation
  }

  // The old life of a re-created UID has finished: forget it and start the new one, on the
  // same strand, as if the create arrived now.
  void restartLocked(const StatusPtr& old, Deferred& deferred) {
    UpdatePodOptions options = std::move(*old->restart);
    old->restart.reset();
    log_->info("restarting pod with the same UID pod={} uid={}", api::podRef(*options.pod),
               old->uid);
    Strand strand = old->strand;
    retireLocked(old);
    updatePodLocked(std::move(options), deferred, strand);
  }

  // Static pods: once a pod has no running containers its full name is free for the next one.
  // Also kicks the next waiting pod: a waiting pod that will never start no longer blocks others.
  void releaseStaticLocked(const SyncStatus& st) {
    if (!st.is_static) return;
    auto it = started_static_.find(st.full_name);
    if (it != started_static_.end() && it->second == st.uid) started_static_.erase(it);
    kickStaticLocked(st.full_name);
  }

  // Starts the first live static pod waiting for `full_name`, if it is parked.
  void kickStaticLocked(const std::string& full_name) {
    if (started_static_.contains(full_name)) return;
    auto wit = waiting_static_.find(full_name);
    if (wit == waiting_static_.end()) return;
    for (const auto& uid : wit->second) {
      auto s = statuses_.find(uid);
      if (s == statuses_.end() || s->second->terminationRequested()) continue;
      const StatusPtr& next = s->second;
      if (!next->working && next->pending) {
        PodWork work = std::move(*next->pending);
        next->pending.reset();
        deliverLocked(next, std::move(work));
      }
      return;
    }
  }

  void armRetryLocked(const StatusPtr& st) {
    // Runs on st's strand (called from its coroutine), the only place the timer is touched.
    if (!st->retry_timer) st->retry_timer = clock_.makeTimer(st->strand);
    const auto delay = base::jitter(options_.backoff_period, options_.jitter_factor, random_);
    st->retry_timer->asyncWaitFor(
        delay, [weak_self = weak_from_this(), weak_st = std::weak_ptr<SyncStatus>(st)]() {
          auto self = weak_self.lock();
          auto status = weak_st.lock();
          if (self && status) self->onRetry(status);
        });
  }

  void onRetry(const StatusPtr& st) {
    std::lock_guard lock(mu_);
    if (closed_ || !isCurrent(st) || st->working || st->finished || !st->terminationRequested()) {
      return;
    }
    PodWork work{st->terminated() ? WorkType::kTerminated : WorkType::kTerminating, st->last};
    deliverLocked(st, std::move(work));
  }

  // Drops a status from every index; an in-flight coroutine notices through isCurrent().
  void retireLocked(StatusPtr st) {  // by value: erasing the map entry must not free it
    if (isCurrent(st)) statuses_.erase(st->uid);
    ++generation_;
    unqueueLocked(st->uid);
    st->pending.reset();
    retireTimerLocked(*st);
    if (st->is_static) {
      if (auto wit = waiting_static_.find(st->full_name); wit != waiting_static_.end()) {
        std::erase(wit->second, st->uid);
        if (wit->second.empty()) waiting_static_.erase(wit);
      }
      releaseStaticLocked(*st);
    }
  }

  // Timers are not thread-safe: cancel and destroy them on their strand.
  void retireTimerLocked(SyncStatus& st) {
    if (!st.retry_timer) return;
    std::shared_ptr<base::Timer> timer(std::move(st.retry_timer));
    asio::post(st.strand, [timer]() mutable {
      timer->cancel();
      timer.reset();
    });
  }

  void workerExitLocked() {
    --in_flight_;
    if (closed_ && in_flight_ == 0) {
      for (auto& cb : on_idle_) asio::post(executor_, std::move(cb));
      on_idle_.clear();
    }
  }

  asio::any_io_executor executor_;
  base::Clock& clock_;
  base::Random& random_;
  PodSyncer& syncer_;
  const PodWorkersOptions options_;
  std::shared_ptr<spdlog::logger> log_;

  mutable std::mutex mu_;
  bool closed_ = false;
  // syncKnownPods ran once: every pod config has was given to updatePod (kubelet's podsSynced).
  bool pods_synced_ = false;
  size_t in_flight_ = 0;
  std::vector<std::function<void()>> on_idle_;
  std::map<std::string, StatusPtr, std::less<>> statuses_;
  // Static pods: the UID that holds each full name, and the UIDs waiting for it in order.
  std::map<std::string, std::string, std::less<>> started_static_;
  std::map<std::string, std::deque<std::string>, std::less<>> waiting_static_;
  // Sync-phase requeues (kubelet's workQueue; a new deadline replaces the old): UID -> due time,
  // and the same entries ordered by due time so that a tick looks only at what is due.
  std::map<std::string, base::MonotonicTime, std::less<>> queue_;
  std::set<std::pair<base::MonotonicTime, std::string>> due_;
  uint64_t generation_ = 0;
};

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
