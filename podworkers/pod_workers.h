// Pod workers: one worker per pod UID that drives the pod through kubelet 1.22+'s lifecycle
// (sync -> terminating -> terminated) by calling the PodSyncer (podworkers/pod_syncer.h).
//
// - updatePod() is called by the sync loop from any thread and never waits for a sync. Each UID
//   has its own strand of the shared executor; its sync methods run there as coroutines.
// - Coalescing: one sync in flight, plus the newest update pending. A pending create stays a
//   create when a later update replaces it; once a pod is terminating every later update is
//   termination work, so a pending kill is never turned back into a sync.
// - Termination (one way): a kill, a deletionTimestamp, a terminal phase or a terminal result of
//   syncPod moves the pod to terminating; the running syncPod is cancelled through its
//   stop_token. syncTerminatingPod is retried (backoff on error) until OK, then syncTerminatedPod
//   until OK; then the worker is finished and ignores updates until syncKnownPods forgets it.
//   Grace periods only shrink; a shorter one cancels a running syncTerminatingPod and reruns it.
// - UID reuse: a create for a UID that is terminating or finished (the same manifest deleted and
//   added again) restarts the pod with the newest config as soon as the old life has finished.
// - Static pods: two static pods with the same full name never run side by side. A new one waits
//   until the one that started first has stopped all its containers, then starts at once
//   (several waiting pods start in the order they were first seen).
//
// Requeue: a pod in the sync phase is put in a work queue after each sync, due after
// `resync_interval` (+ up to 50% jitter) on success and `backoff_period` (+ up to 50%) on error.
// The sync loop's 1 s tick calls getWorkToSync() for the due UIDs and dispatches a kSync for each
// pod that config still has (kubelet's getPodsToSync), so the resync sees the current pod and
// mirror pod. Terminating and terminated work does not use the queue: such pods may already be
// gone from config, so their workers retry by themselves on their own timers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/pod.h"
#include "api/pod_update.h"
#include "base/clock.h"
#include "base/random.h"
#include "podworkers/pod_syncer.h"

namespace nodeagent::podworkers {

// syncPod errors whose message contains this are retried after 1 s (+ jitter) instead of 10 s.
inline constexpr std::string_view kNetworkNotReadyErrorMsg = "network is not ready";

struct KillPodOptions {
  // Called once no container of the pod can run any more (syncTerminatingPod succeeded), or at
  // once when the pod is already terminated or is not known to need killing. Runs on an arbitrary
  // thread (a pod strand or the caller of updatePod), never under the workers' lock; must not
  // block. Dropped without a call on shutdown.
  std::function<void()> on_completed;
  // An eviction: the pod's content may be removed as soon as it is terminated.
  bool evict = false;
  // Overrides the status the kill writes (the newest kill's override wins).
  PodStatusFn pod_status_fn;
  // Requested grace period; the effective one is the smallest ever requested (never below 1).
  std::optional<int64_t> grace_period_seconds_override;
};

struct UpdatePodOptions {
  api::PodPtr pod;         // required
  api::PodPtr mirror_pod;  // static pods only; may be null
  // Boxed (reads as a std::optional): most updates are not kills, and the workers keep each
  // pod's newest options.
  api::Boxed<KillPodOptions> kill_pod_options;
  api::SyncPodType update_type = api::SyncPodType::kSync;
  // `pod` was built from the runtime's view of a pod that config no longer has (an orphan): only
  // kKill is accepted, and the worker calls syncTerminatingRuntimePod, then finishes.
  bool runtime_pod = false;
};

enum class PodWorkerState { kSyncPod, kTerminatingPod, kTerminatedPod };
std::string_view podWorkerStateName(PodWorkerState state);

// What syncKnownPods reports per known worker (kubelet 1.27 PodWorkerSync).
struct PodWorkerSync {
  PodWorkerState state = PodWorkerState::kSyncPod;
  bool orphan = false;      // not in the desired set
  bool has_config = false;  // the worker has a config pod (false for runtime-only kills)
  bool is_static = false;
  bool operator==(const PodWorkerSync&) const = default;
};

// The interface the sync loop and housekeeping use (a fake lives in test/support). Every method
// is safe from any thread and never waits for a sync to run.
class PodWorkers {
 public:
  virtual ~PodWorkers() = default;

  // Delivers a config change, a periodic sync or a kill for options.pod's UID (see the file
  // comment for coalescing and termination). Ignored after shutdown.
  virtual void updatePod(UpdatePodOptions options) = 0;

  // Removes finished workers whose UID is not in `desired`, and reports every remaining worker.
  // After the first call, pods unknown to the workers count as not running (see the queries).
  virtual std::map<std::string, PodWorkerSync> syncKnownPods(
      const std::vector<api::PodPtr>& desired) = 0;

  // Drops all state of `uid` at once: pending work and requeues are discarded and an in-flight
  // sync finishes without a follow-up. For pods that are gone for good; housekeeping should prefer
  // syncKnownPods, which never forgets a pod that may still have running containers.
  virtual void forgetWorker(const std::string& uid) = 0;

  // UIDs in the sync phase whose requeue time has come; each is returned once per requeue
  // (kubelet's workQueue.GetWork). The caller dispatches a kSync for each pod config still has.
  virtual std::vector<std::string> getWorkToSync() = 0;

  // True from the first update of a pod that asked for termination until the worker is
  // forgotten. May be true while syncPod still runs.
  virtual bool isPodTerminationRequested(const std::string& uid) const = 0;
  // True once syncTerminatingPod succeeded (no container can run), until forgotten.
  virtual bool isPodKnownTerminated(const std::string& uid) const = 0;
  // False once the pod is known terminated; for unknown pods true until syncKnownPods first ran.
  virtual bool couldHaveRunningContainers(const std::string& uid) const = 0;
  // True once the worker has begun termination (no syncPod will run again); for unknown pods
  // true after syncKnownPods first ran.
  virtual bool shouldPodContainersBeTerminating(const std::string& uid) const = 0;
  // True once the pod is known terminated; for unknown pods true after syncKnownPods first ran.
  virtual bool shouldPodRuntimeBeRemoved(const std::string& uid) const = 0;
  // True for evicted pods, and for deleted pods once terminated; for unknown pods true after
  // syncKnownPods first ran.
  virtual bool shouldPodContentBeRemoved(const std::string& uid) const = 0;
  // True while the static pod that holds `full_name` is terminating (housekeeping must not delete
  // its mirror pod yet).
  virtual bool isPodForMirrorPodTerminatingByFullName(const std::string& full_name) const = 0;
  // Changes whenever a worker changes state (terminating, terminated, finished) or is forgotten.
  // Apart from new workers (which need no housekeeping), what syncKnownPods reports can only
  // differ when this differs. Housekeeping uses it to skip work on a quiet node.
  virtual uint64_t generation() const = 0;
};

struct PodWorkersOptions {
  base::Duration resync_interval = std::chrono::minutes(1);           // --sync-frequency
  base::Duration backoff_period = std::chrono::seconds(10);           // after a failed sync
  base::Duration transient_backoff_period = std::chrono::seconds(1);  // "network is not ready"
  double jitter_factor = 0.5;  // extra fraction in [0, factor) added to each delay
};

// The real pod workers. The executor (an io_context or a thread pool), clock, random source and
// syncer must outlive every handler the workers post (in practice: the io_context's run()). Call
// shutdown() before the executor stops; the destructor calls it too.
class BasicPodWorkers final : public PodWorkers {
 public:
  BasicPodWorkers(asio::any_io_executor executor, base::Clock& clock, base::Random& random,
                  PodSyncer& syncer, PodWorkersOptions options = {});
  ~BasicPodWorkers() override;
  BasicPodWorkers(const BasicPodWorkers&) = delete;
  BasicPodWorkers& operator=(const BasicPodWorkers&) = delete;

  void updatePod(UpdatePodOptions options) override;
  std::map<std::string, PodWorkerSync> syncKnownPods(
      const std::vector<api::PodPtr>& desired) override;
  void forgetWorker(const std::string& uid) override;
  std::vector<std::string> getWorkToSync() override;

  bool isPodTerminationRequested(const std::string& uid) const override;
  bool isPodKnownTerminated(const std::string& uid) const override;
  bool couldHaveRunningContainers(const std::string& uid) const override;
  bool shouldPodContainersBeTerminating(const std::string& uid) const override;
  bool shouldPodRuntimeBeRemoved(const std::string& uid) const override;
  bool shouldPodContentBeRemoved(const std::string& uid) const override;
  bool isPodForMirrorPodTerminatingByFullName(const std::string& full_name) const override;
  uint64_t generation() const override;

  // Stops taking work: later updates are ignored, pending work, requeues and retry timers are
  // dropped, kill callbacks are not called. Syncs already running finish (they are not
  // cancelled); `on_idle` (optional) is posted to the executor once none runs. Any thread;
  // idempotent (a later call's on_idle also fires once idle).
  void shutdown(std::function<void()> on_idle = {});

  // The UIDs isPodKnownTerminated answers true for, at once (one pass instead of a lookup per
  // pod: admission asks this of every pod on the node).
  std::set<std::string> knownTerminatedUIDs() const;

  // Number of workers currently running a sync method (for shutdown and tests).
  size_t inFlight() const;
  // The phase of a known UID (nullopt when unknown).
  std::optional<PodWorkerState> podWorkerState(const std::string& uid) const;

 private:
  // Shared with the worker coroutines and timers, so it outlives this object while they run.
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace nodeagent::podworkers
