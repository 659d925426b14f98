// The status syncer: the sending half of kubelet's status manager (status_manager.go syncPod /
// syncBatch). It observes the StatusManager's versions and brings the apiserver's copy of every
// pod's status in line with them:
//  - each new version (StatusManager::setOnChange) holds the pod for `coalesce_window` (50 ms)
//    from its first change not yet sent, then queues it: a pod whose status changes again within
//    the window (Pending, then Running once its containers started) is sent once, with its newest
//    status. Every sync reads the newest status, so a pod that changes while it waits in the queue
//    (behind the QPS limit) is sent once too. The queue runs up to `max_in_flight` requests at
//    once, never two of the same pod, so a pod's statuses reach the apiserver in order;
//  - a new pod's first status that says only that it is starting waits longer, up to
//    `first_status_hold` (10 s), for the status that follows (Running, or a failure), which then
//    goes out alone: a start that queues behind others still costs one PATCH;
//  - every `batch_period` (10 s) every cached status is checked again against the pod manager's
//    copy of the API pod, which catches up after an apiserver outage and reverts status edits made
//    by other clients;
//  - a sync sends a strategic-merge PATCH of pods/<name>/status carrying only the fields that
//    differ from the apiserver's copy, plus metadata.uid as a precondition; nothing is sent when
//    nothing differs;
//  - static pods report through their mirror pod (same name, the mirror's UID as precondition);
//    when that mirror is gone (404, or replaced: 409), the status waits for the pod manager's next
//    mirror, which is a new object with a new UID (recreated after a deletion or a lost apiserver
//    state), and is sent to it as soon as it shows up;
//  - once a gracefully deleted API pod's resources are reclaimed (`pod_resources_reclaimed`), the
//    syncer sends the final DELETE with grace 0 and the UID precondition.
// Requests go through the shared RestClient (its QPS/burst limit) on the shared API pool, through
// a PodStatusWriter (tests give their own).
//
// Threading: start/stop/notify and the metrics are safe from any thread; everything else runs on
// the syncer's strand. Create with std::make_shared; the StatusManager, PodManager, RestClient, API
// pool Clock must outlive it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "agent/status/status_manager.h"
#include "api/async_rest_client.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/due_queue.h"
#include "base/status.h"
#include "podmanager/pod_manager.h"

namespace nodeagent::agent {

// The requests the syncer makes. The daemon's (restPodStatusWriter) runs them on the API pool.
class PodStatusWriter {
 public:
  virtual ~PodStatusWriter() = default;
  // A strategic-merge PATCH of `path` (pods/<name>/status); the answer is the pod as stored.
  virtual asio::awaitable<base::StatusOr<nlohmann::json>> patchStatus(std::string path,
                                                                      nlohmann::json body) = 0;
  // A DELETE of `path` (the pod) with the DeleteOptions `options`.
  virtual asio::awaitable<base::StatusOr<nlohmann::json>> deletePod(std::string path,
                                                                    nlohmann::json options) = 0;
};

// The RestClient's patchJson and deleteJson on `api`'s pool.
std::shared_ptr<PodStatusWriter> restPodStatusWriter(api::AsyncRestClient api);

// The longest coalesce_window: a status never waits longer for the changes that may follow it,
// except a new pod's first starting status (StatusSyncerOptions::first_status_hold).
inline constexpr base::Duration kMaxStatusCoalesceWindow = std::chrono::milliseconds(100);

// The status requests to keep in flight (StatusSyncerOptions::max_in_flight) for a client limited
// to `qps` requests a second (0 or less: no limit) on an API pool of `pool_threads`. A request
// holds a pool thread for its wait on the limit and its round trip (a few milliseconds). While
// the limit's spacing is longer than a round trip, two keep it busy without more threads asleep on
// it (the default 50 QPS); above that, one more per 2 ms of round trip the spacing no longer
// covers, up to all of the pool's threads but one, which stays free for the node's lease, its
// status and mirror pods (three on the default pool of four, from 1,000 QPS); never fewer than two.
size_t statusRequestsInFlight(double qps, size_t pool_threads);

// The API pool's threads for a client limited to `qps` requests a second (0 or less: no limit):
// four, enough while the limit lets at most a few requests go per round trip; eight above 1,000
// QPS, so that the status requests of many pods started at once fill the round trips the limit
// allows (status_bench, 1,000 pods at 10,000 QPS on two cores: all Running after 1.0-1.2 s with
// eight, 1.0-1.6 s with four; sixteen were slower again, the processes then wait for the CPU).
inline constexpr size_t kApiPoolThreads = 4;
inline constexpr size_t kLargeApiPoolThreads = 8;
size_t apiPoolThreadsFor(double qps);

struct StatusSyncerOptions {
  base::Duration batch_period = std::chrono::seconds(10);
  // How long a pod's first change not yet sent waits for more changes of the same pod before it
  // is queued (then sent with the newest status). Cut to kMaxStatusCoalesceWindow; 0 queues every
  // change at once, as kubelet does.
  base::Duration coalesce_window = std::chrono::milliseconds(50);
  // A new pod's first status while it only says the pod is starting (phase Pending, its
  // containers all waiting as ContainerCreating or PodInitializing, and the apiserver's copy
  // holding no container status yet) waits up to this long for the status that follows it: Running,
  // a failure, anything else ends the wait, and that newer status goes out alone within
  // coalesce_window. Starts queued behind each other (hundreds of pods at once) then cost one
  // PATCH per pod. Cut to batch_period; 0, or a coalesce_window of 0, sends it at once.
  base::Duration first_status_hold = std::chrono::seconds(10);
  // Requests of different pods in flight at once (a pod's own go one at a time). Each occupies a
  // thread of the API pool while it waits for the QPS limit (see statusRequestsInFlight).
  size_t max_in_flight = 2;
  // How often pods waiting for their final DELETE, or static pods waiting for their mirror pod,
  // are checked again.
  base::Duration deletion_check_period = std::chrono::milliseconds(500);
  // True once the pod's containers have stopped and its resources are reclaimed (pod workers'
  // isPodKnownTerminated). Any thread. Unset: always true.
  std::function<bool(const std::string& uid)> pod_resources_reclaimed;
};

struct StatusSyncerMetrics {
  std::atomic<uint64_t> patches{0};
  std::atomic<uint64_t> patch_errors{0};
  std::atomic<uint64_t> unchanged{0};  // syncs that found nothing to send
  std::atomic<uint64_t> deletes{0};
};

class StatusSyncer : public std::enable_shared_from_this<StatusSyncer> {
 public:
  StatusSyncer(asio::any_io_executor executor, base::Clock& clock, api::AsyncRestClient api,
               StatusManager& status_manager, podmanager::PodManager& pod_manager,
               StatusSyncerOptions options = {});
  StatusSyncer(asio::any_io_executor executor, base::Clock& clock,
               std::shared_ptr<PodStatusWriter> writer, StatusManager& status_manager,
               podmanager::PodManager& pod_manager, StatusSyncerOptions options = {});
  ~StatusSyncer();

  // Hooks the StatusManager and starts the batch timer. Any thread.
  void start();
  // Stops timers and queueing; requests in flight finish in the background. Any thread.
  void stop();
  // Queues a sync of `uid` (static, regular or mirror UID) once the coalescing window of its
  // first change not yet sent has passed. Any thread.
  void notify(const std::string& uid);
  // Queues a sync of every pod now rather than at the next batch: the apiserver lost its state,
  // so its copies of our statuses are gone. Any thread.
  void resyncAll();

  const StatusSyncerMetrics& metrics() const { return metrics_; }

 private:
  struct PodState {
    uint64_t synced_version = 0;
    // The apiserver's status as our last PATCH answered, valid while the pod manager still holds
    // `base_pod`, the very copy that PATCH was computed from (the watch has delivered nothing
    // since, not even our own write). The copy's identity is what counts, not its resourceVersion:
    // the pod config keeps the first resourceVersion it saw, as kubelet's does, while it takes
    // every later status.
    api::PodPtr base_pod;
    std::shared_ptr<const nlohmann::json> answered_status;
    bool delete_sent = false;
    // The mirror pod a PATCH found gone (404/409): nothing is sent until the pod manager holds
    // another one.
    api::PodPtr gone_mirror;
  };

  // Queues `uid` at the end of its window (see notify), or at once without one.
  void hold(const std::string& uid);
  // Whether the newest status of `uid` (translated) is a new pod's first, starting one (see
  // StatusSyncerOptions::first_status_hold).
  bool isFirstStartingStatus(const std::string& uid);
  // Queues `uid` now (a pod in flight goes again once its request is done).
  void enqueue(const std::string& uid);
  // The same for a UID already translated (a static pod's, never its mirror's).
  void enqueueTranslated(const std::string& uid);
  // Queues the pods whose window has passed and arms the timer for the next one.
  void releaseDue();
  void armWindowTimer();
  // Starts syncs of queued pods, up to max_in_flight.
  void runQueue();
  asio::awaitable<void> syncQueued(std::string uid);
  asio::awaitable<void> syncPod(std::string uid);
  // syncPod's steps. The pod whose status to PATCH (a static pod's mirror), or null while there
  // is none (a static pod then waits for its mirror).
  api::PodPtr statusTarget(const std::string& uid, const api::PodPtr& pod);
  // The apiserver's copy of `target`'s status, as last known: what the patch is computed from.
  nlohmann::json apiserverStatus(const std::string& uid, const api::PodPtr& target);
  // Sends the patch; false when it failed (a gone mirror waits for the next one).
  asio::awaitable<bool> patchStatus(std::string uid, api::PodPtr pod, api::PodPtr target,
                                    uint64_t version, nlohmann::json patch);
  // Sends the final DELETE of a deleted API pod once its resources are reclaimed.
  asio::awaitable<void> maybeDelete(api::PodPtr pod, std::string uid);
  void batch();
  void checkDeletions();
  void armRetry();

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  std::shared_ptr<PodStatusWriter> writer_;
  StatusManager& status_manager_;
  podmanager::PodManager& pod_manager_;
  StatusSyncerOptions options_;
  StatusSyncerMetrics metrics_;
  std::atomic<bool> stopped_{false};

  // Strand only.
  // Pods waiting for their window to pass, due at its end.
  base::DueQueue<std::string> held_;
  // Those of them held for first_status_hold: a newer status shortens their wait.
  std::set<std::string> starting_;
  std::deque<std::string> queue_;
  std::set<std::string> queued_;
  // Pods with a sync in flight, and those of them queued again meanwhile.
  std::set<std::string> in_flight_;
  std::set<std::string> again_;
  std::map<std::string, PodState> state_;
  std::set<std::string> pending_deletes_;
  std::set<std::string> waiting_for_mirror_;  // static pods whose mirror is not there yet
  base::TimerPtr batch_timer_;
  base::TimerPtr delete_timer_;
  base::TimerPtr window_timer_;
  base::MonotonicTime window_due_{};  // when window_timer_ fires, while it is armed
};

// The strategic-merge patch of a pod's `status` from `old_status` to `new_status` (both encoded
// PodStatus JSON): changed fields whole, conditions one by one (merged by type, so conditions
// owned by others survive; fields a changed condition lost are removed with null),
// message/reason/podIP(s)/hostIP removed with null. An empty object when nothing differs.
nlohmann::json podStatusPatch(const nlohmann::json& old_status, const nlohmann::json& new_status);

}  // namespace nodeagent::agent
