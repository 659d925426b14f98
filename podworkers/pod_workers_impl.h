// BasicPodWorkers::Impl, private to podworkers/. pod_workers.cpp holds the update path
// (kubelet's UpdatePod), the queries and the resync queue; pod_workers_loop.cpp holds the
// per-pod worker coroutine (kubelet's podWorkerLoop: the start gate, the sync methods, completion,
// retries) and the static pod ordering.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <stop_token>
#include <string_view>
#include <unordered_map>

#include "base/intrusive_due_queue.h"
#include "base/log.h"
#include "base/string_map.h"
#include "podworkers/pod_workers.h"

namespace nodeagent::podworkers {
namespace pod_workers_internal {

using Strand = asio::strand<asio::any_io_executor>;

// The three phases of a pod's life as the worker runs them.
enum class WorkType { kSync, kTerminating, kTerminated };

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
  std::string full_name;  // set once, as the status is made
  bool is_static = false;
  // The worker was created by a kill of a pod known only to the runtime.
  bool runtime_pod = false;
  // A coroutine owns this UID: it runs (or is about to run) a sync method and will pick up
  // `pending` when done. False with `pending` set only for a static pod waiting for its turn.
  bool working = false;
  // Static pods: passed the full-name gate (kubelet's podStarted).
  bool started = false;
  bool started_terminating = false;  // the worker has observed the termination request
  bool deleted = false;              // deletionTimestamp set, or an orphan
  bool evicted = false;
  bool finished = false;  // syncTerminatedPod succeeded (or the pod never started)
  // Re-arms a failed terminating/terminated step. Armed, cancelled and destroyed on `strand` only.
  base::TimerPtr retry_timer;

  // The newest undelivered work (kubelet's lastUndeliveredWorkUpdate).
  api::Boxed<PodWork> pending;  // boxed, as `restart` and `termination`: a worker at rest has none
  // Cancels the work in flight (kubelet's ctx/cancelFn); replaced for each delivery, and without
  // a state of its own while no coroutine works for this UID.
  std::stop_source stop{std::nostopstate};
  // The newest options seen (kill options are never kept): what retries run with.
  UpdatePodOptions last;

  // The worker's place in the sync-phase queue (queue_ below): when its next sync is due.
  base::DueHook due;
  // What termination keeps (kubelet's terminatingAt, terminatedAt, gracePeriod and the kill
  // callbacks); none until a termination step is recorded.
  struct Termination {
    std::optional<base::MonotonicTime> terminating_at;  // termination requested
    std::optional<base::MonotonicTime> terminated_at;   // syncTerminatingPod succeeded
    // Effective grace period once terminating; nullopt for a pod that finished on its own.
    std::optional<int64_t> grace_period;
    std::vector<std::function<void()>> notify_post_terminating;
    std::vector<PodStatusFn> status_post_terminating;
  };
  api::Boxed<Termination> termination;
  // Config created this UID again while it was terminating: run these options once finished.
  api::Boxed<UpdatePodOptions> restart;

  // The termination record, made when there is none yet.
  Termination& term() { return termination ? *termination : termination.emplace(); }
  bool terminationRequested() const { return termination && termination->terminating_at; }
  bool terminated() const { return termination && termination->terminated_at; }
  std::optional<int64_t> gracePeriod() const {
    return termination ? termination->grace_period : std::nullopt;
  }
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

// A create that is replaced before it ran stays a create, so syncPod still sees the first sync.
inline void keepCreate(const PodWork& older, PodWork& newer) {
  if (older.type == WorkType::kSync && newer.type == WorkType::kSync &&
      older.options.update_type == api::SyncPodType::kCreate) {
    newer.options.update_type = api::SyncPodType::kCreate;
  }
}

}  // namespace pod_workers_internal

using namespace pod_workers_internal;

class BasicPodWorkers::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::any_io_executor executor, base::Clock& clock, base::Random& random, PodSyncer& syncer,
       PodWorkersOptions options)
      : executor_(std::move(executor)),
        clock_(clock),
        random_(random),
        syncer_(syncer),
        options_(options) {}

  // ---- pod_workers.cpp: updates, queries, the resync queue, shutdown ----

  void updatePod(UpdatePodOptions options);
  std::map<std::string, PodWorkerSync> syncKnownPods(const std::vector<api::PodPtr>& desired);
  void forgetWorker(const std::string& uid);
  std::vector<std::string> getWorkToSync();
  uint64_t generation() const;
  // The queue holds the worker's status itself (a current one: see queue_).
  void queueLocked(SyncStatus& st, base::MonotonicTime at);
  // Queued `delay` from now, plus the workers' jitter.
  void queueAfterLocked(SyncStatus& st, base::Duration delay);
  void unqueueLocked(SyncStatus& st);
  std::set<std::string> knownTerminatedUIDs() const;

  template <typename Pred>
  bool query(const std::string& uid, Pred pred, bool unknown_before_sync,
             bool unknown_after_sync) const {
    std::lock_guard lock(mu_);
    auto it = statuses_.find(uid);
    if (it != statuses_.end()) return pred(*it->second);
    return pods_synced_ ? unknown_after_sync : unknown_before_sync;
  }

  bool isPodForMirrorPodTerminatingByFullName(const std::string& full_name) const;
  void shutdown(std::function<void()> on_idle);
  size_t inFlight() const;
  std::optional<PodWorkerState> podWorkerState(const std::string& uid) const;

 private:
  enum class Gate { kRun, kStop };

  bool isCurrent(const StatusPtr& st) const {
    auto it = statuses_.find(st->uid);
    return it != statuses_.end() && it->second == st;
  }

  StatusPtr statusForLocked(const UpdatePodOptions& options, std::optional<Strand> strand);

  // A sync the syncer takes as done at once (PodSyncer::trySettledSync): the pod is queued for
  // its next resync and no work is delivered. False when the update needs the worker.
  bool settledSyncLocked(const UpdatePodOptions& options);
  // kubelet's UpdatePod, in steps.
  void updatePodLocked(UpdatePodOptions options, Deferred& deferred, std::optional<Strand> strand);
  // Whether an update is to be applied at all: none after shutdown, none without a pod, and only
  // kills of runtime pods. A kill of a runtime pod that config still knows becomes a kill of the
  // config pod.
  bool acceptUpdateLocked(UpdatePodOptions& options);
  // An update to a terminating pod: a create of the same UID is kept to restart the pod once it
  // has finished; while such a restart waits, a kill cancels it and any other update only
  // refreshes it. True when the update was consumed here.
  bool absorbedByRestartLocked(const StatusPtr& st, UpdatePodOptions& options, Deferred& deferred);
  // Whether this update starts the pod's termination (an orphan, a deletion, a terminal phase or
  // a kill); if so it is recorded and the pod leaves the resync queue.
  bool beginTerminationLocked(const StatusPtr& st, const UpdatePodOptions& options);
  // The work the update asks for in the pod's current phase. `grace_shortened` is set when a
  // kill shortened a terminating pod's grace period.
  PodWork workForLocked(const StatusPtr& st, UpdatePodOptions options, Deferred& deferred,
                        bool& grace_shortened);
  // Idle (or a static pod parked at the gate): the newest work goes out at once. Otherwise it
  // waits as the pending work, and the sync in flight is cancelled when `cancel_current`.
  void dispatchLocked(const StatusPtr& st, PodWork work, bool cancel_current, Deferred& deferred);

  // ---- pod_workers_loop.cpp: the worker coroutine ----

  void deliverLocked(const StatusPtr& st, PodWork work);
  // The coroutine that owns a UID while it has work. `self` and `st` are parameters so the frame
  // owns them from creation.
  static asio::awaitable<void> runWorker(std::shared_ptr<Impl> self, StatusPtr st, PodWork work,
                                         std::stop_token token);
  // Decides whether `work` may run now (kubelet's allowPodStart and acknowledgeTerminating).
  Gate gateLocked(const StatusPtr& st, PodWork& work, Deferred& deferred,
                  std::optional<int64_t>& grace, PodStatusFn& status_fn);
  // kubelet's allowStaticPodStart: no other started static pod holds the full name, and this UID
  // is the first live one waiting for it.
  bool allowStaticPodStartLocked(const SyncStatus& st);
  asio::awaitable<SyncResult> execute(PodWork work, std::optional<int64_t> grace,
                                      PodStatusFn status_fn, std::stop_token token);
  // Applies a sync method's result (kubelet's completeSync/completeTerminating/completeTerminated
  // and completeWork) and returns the next work to run on this coroutine, if any.
  std::optional<PodWork> completeLocked(const StatusPtr& st, const PodWork& work,
                                        const SyncResult& result, const std::stop_token& token,
                                        Deferred& deferred);
  void logSyncResult(const SyncStatus& st, const PodWork& work, const SyncResult& result,
                     const std::stop_token& token);
  // kubelet's completeSync: a terminal pod starts terminating, any other one is requeued.
  void completeSyncLocked(const StatusPtr& st, const PodWork& work, const SyncResult& result);
  // kubelet's completeTerminating. True when the worker is finished (an orphaned runtime pod
  // needs no terminated step).
  bool completeTerminatingLocked(const StatusPtr& st, const PodWork& work, bool ok,
                                 Deferred& deferred);
  // kubelet's completeTerminated. True when the worker is finished.
  bool completeTerminatedLocked(const StatusPtr& st, const PodWork& work, bool ok,
                                Deferred& deferred);
  // The pending work, which runs next on this coroutine; none makes the worker idle.
  std::optional<PodWork> takePendingLocked(const StatusPtr& st);
  void notifyTerminatedLocked(SyncStatus& st, Deferred& deferred);
  void finishLocked(const StatusPtr& st, Deferred& deferred);
  void completeUnstartedTerminatedLocked(const StatusPtr& st, Deferred& deferred);
  // The old life of a re-created UID has finished: forget it and start the new one, on the
  // same strand, as if the create arrived now.
  void restartLocked(const StatusPtr& old, Deferred& deferred);
  // Static pods: once a pod has no running containers its full name is free for the next one.
  // Also kicks the next waiting pod: a waiting pod that will never start no longer blocks others.
  void releaseStaticLocked(const SyncStatus& st);
  // Starts the first live static pod waiting for `full_name`, if it is parked.
  void kickStaticLocked(const std::string& full_name);
  void armRetryLocked(const StatusPtr& st);
  void onRetry(const StatusPtr& st);
  // Drops a status from every index; an in-flight coroutine notices through isCurrent().
  void retireLocked(StatusPtr st);  // by value: erasing the map entry must not free it
  // Timers are not thread-safe: cancel and destroy them on their strand.
  void retireTimerLocked(SyncStatus& st);
  void workerExitLocked(SyncStatus& st);

  asio::any_io_executor executor_;
  base::Clock& clock_;
  base::Random& random_;
  PodSyncer& syncer_;
  const PodWorkersOptions options_;

  mutable std::mutex mu_;
  bool closed_ = false;
  // syncKnownPods ran once: every pod config has was given to updatePod (kubelet's podsSynced).
  bool pods_synced_ = false;
  size_t in_flight_ = 0;
  std::vector<std::function<void()>> on_idle_;
  // By UID: each key views its own status's `uid` (added only by statusForLocked, never
  // reassigned), so a pod's UID is stored once here.
  std::unordered_map<std::string_view, StatusPtr> statuses_;
  // Static pods: the worker that holds each full name (keyed by a view of its own full name: an
  // entry leaves, in releaseStaticLocked, before its status is retired), and the workers waiting
  // for each full name in the order they were made (nearly always one; a status leaves its list
  // in retireLocked, so the list never points at a status that is gone).
  std::unordered_map<std::string_view, const SyncStatus*> started_static_;
  base::StringHashMap<std::vector<const SyncStatus*>> waiting_static_;
  // Sync-phase requeues (kubelet's workQueue; a new deadline replaces the old), taken by due time
  // so that a tick looks only at what is due. The queue holds the workers' statuses themselves,
  // each status its own due time: a resync of each of tens of thousands of pods takes and
  // requeues it without a lookup, and the queue costs a pointer per pod. Only a current status
  // is queued (in statuses_), and retireLocked unqueues it as it leaves statuses_ (holding it
  // meanwhile), so the queue never points at a status that is gone.
  base::IntrusiveDueQueue<SyncStatus, &SyncStatus::due> queue_;
  uint64_t generation_ = 0;
};

}  // namespace nodeagent::podworkers
