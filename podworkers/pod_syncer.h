// PodSyncer: what a pod worker calls to make one pod real (kubelet 1.22+'s syncPod,
// syncTerminatingPod, syncTerminatingRuntimePod and syncTerminatedPod, the podSyncer interface of
// 1.27). The agent implements it (agent/); podworkers only calls it.
//
// Threading contract, for every method:
// - It runs as a coroutine on the pod's strand (the executor it is co_awaited from). The workers
//   never call two methods for the same UID at the same time and never call any method after
//   syncTerminatedPod (or syncTerminatingRuntimePod) succeeded, unless the same UID is created
//   again; different pods run concurrently on other strands.
// - It must not block a thread: waiting (grace periods, probes, process exits, apiserver calls)
//   is a co_await on a timer or an asynchronous operation.
// - `cancel` is kubelet's context: it fires when the pod starts terminating or its grace period
//   shrinks, so the worker can run newer work. After every co_await, check
//   `cancel.stop_requested()` before acting (never start a container after it fired), and return
//   a Cancelled status soon after it fires. Pods passed in are immutable and owned by the caller's
//   shared pointers; keep copies, not references into other objects.
// - Exceptions must not escape; if one does, the worker logs it and treats it as an Internal error.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>

#include "api/pod.h"
#include "api/pod_update.h"
#include "base/asio.h"
#include "base/status.h"

namespace nodeagent::podworkers {

// Lets a kill request override the status written for the pod when it is killed (kubelet's
// PodStatusFunc, e.g. eviction sets Failed/Evicted). Applied to the status generated from the
// latest state.
using PodStatusFn = std::function<void(api::PodStatus&)>;

class PodSyncer {
 public:
  virtual ~PodSyncer() = default;

  // Reconciles a pod that should be running: starts and restarts containers, writes status,
  // creates or replaces the mirror pod of a static pod (`mirror_pod` may be null).
  // Returns true when the pod has reached a terminal phase (Succeeded/Failed): the worker then
  // moves it to terminating. An error is retried by the next sync (10 s + jitter; 1 s for an
  // error whose message contains "network is not ready"). A Cancelled result after `cancel`
  // fired is not an error.
  virtual asio::awaitable<base::StatusOr<bool>> syncPod(api::SyncPodType type, api::PodPtr pod,
                                                        api::PodPtr mirror_pod,
                                                        std::stop_token cancel) = 0;

  // A sync of a settled pod, done at once: true when a syncPod(kSync) of `pod` with `mirror_pod`
  // would find nothing to do (the pod's last sync found nothing to do, and nothing it depends on
  // changed since), and the sync is then counted as done. The worker asks this only while it
  // is idle and its last sync was of the same objects, from the thread that asks it to sync,
  // under its own lock: it must not block, run coroutines or call back into the workers. False
  // when it cannot tell at once (the pod then syncs as usual).
  virtual bool trySettledSync(const api::PodPtr& pod, const api::PodPtr& mirror_pod) {
    (void)pod;
    (void)mirror_pod;
    return false;
  }

  // Stops every container of a pod that is terminating. `grace_period_seconds` is the effective
  // grace period (>= 1; it only shrinks between calls); nullopt when the pod finished on its own
  // (terminal phase) and the pod's own spec applies. `status_fn` (may be empty) is the latest kill
  // request's status override. Called again (after a backoff on error, at once after a
  // cancellation) until it returns OK, so it must be idempotent, and it must not return OK while
  // any container of the pod may still run or start.
  virtual asio::awaitable<base::Status> syncTerminatingPod(
      api::PodPtr pod, std::optional<int64_t> grace_period_seconds, PodStatusFn status_fn,
      std::stop_token cancel) = 0;

  // Stops the containers of a pod known only to the runtime (no config: an orphan found by
  // housekeeping); `pod` carries only what the runtime knows (UID, name, namespace). Same retry
  // contract as syncTerminatingPod; no syncTerminatedPod follows.
  virtual asio::awaitable<base::Status> syncTerminatingRuntimePod(api::PodPtr pod,
                                                                  std::stop_token cancel) = 0;

  // Cleans up after a pod whose containers have all stopped (volumes, directories, final status).
  // Called (with backoff on error) until it returns OK; after that the worker is finished.
  virtual asio::awaitable<base::Status> syncTerminatedPod(api::PodPtr pod) = 0;
};

}  // namespace nodeagent::podworkers
