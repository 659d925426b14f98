// The agent: kubelet's Kubelet type for the pod pipeline. It is the SyncHandler the sync loop
// calls (admission, dispatch to the pod workers, housekeeping) and the PodSyncer the pod workers
// call (syncPod, syncTerminatingPod, syncTerminatedPod, driving the runtime). It owns the pod
// workers, the sync loop and the PLEG; the pod manager, status manager, runtime, clock and mirror
// client are given to it and must outlive it.
//
// Threading: SyncHandler methods run on the sync loop's strand; PodSyncer methods on each pod's
// strand. Shared state is the pod manager and status manager (thread-safe), and the few maps
// below guarded by `mu_`.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/admission.h"
#include "agent/container_statuses.h"
#include "agent/crash_backoff.h"
#include "agent/metrics.h"
#include "agent/pleg.h"
#include "agent/prober/prober.h"
#include "agent/runtime/runtime.h"
#include "agent/status/status_manager.h"
#include "agent/sync_handler.h"
#include "agent/sync_loop.h"
#include "base/clock.h"
#include "base/random.h"
#include "podmanager/pod_manager.h"
#include "podworkers/pod_syncer.h"
#include "podworkers/pod_workers.h"

namespace nodeagent::agent {

struct AgentOptions {
  std::string node_name;
  std::string node_ip;  // the host IP (pods share the host network)
  std::filesystem::path root_dir = "/var/lib/nodeagent";
  NodeAllocatable allocatable;
  base::Duration crashloop_backoff_initial = std::chrono::seconds(10);
  base::Duration crashloop_backoff_max = std::chrono::seconds(300);
  podworkers::PodWorkersOptions workers;
  SyncLoopOptions sync_loop;
  PlegOptions pleg;
  // Housekeeping (every 2s) does its O(pods) work only when the pod manager, the pod workers or
  // the runtime (PLEG events) changed since its last pass, or when that pass acted; and at least
  // once per this period as a safety net.
  base::Duration housekeeping_full_period = std::chrono::minutes(5);
  // A pod kill still running after its grace period plus half of it (at least this long) gets a
  // Warning ExceededGracePeriod event, as kubelet's killPodNow reports it.
  base::Duration kill_timeout_minimum = std::chrono::seconds(10);
  // A mirror pod someone deleted (kubectl delete) is re-created this long after the agent removed
  // it. `kubectl delete` waits with a GET and then a LIST+WATCH by name, and treats only a DELETED
  // event or a changed UID at the GET as done: a new mirror created between its GET and its LIST
  // hides the deletion from it, and it waits for the new mirror's deletion forever.
  base::Duration mirror_recreate_delay = std::chrono::seconds(1);
  // Optional: records a pod event (type Normal/Warning, reason, message, container field path)
  // for the apiserver. Called on pod strands; must not block.
  std::function<void(const api::Pod&, const std::string& type, const std::string& reason,
                     const std::string& message, const std::string& field_path)>
      record_event;
  // Runs probes and lifecycle hooks; null means the real one (exec through the runtime,
  // httpGet/tcpSocket over sockets). Tests give a fake.
  std::shared_ptr<ProbeHandler> probe_handler;
  // Pods from the apiserver may run as root on the node, privileged or with added capabilities
  // (--allow-root-api-pods). Off: such a container is not started (CreateContainerConfigError),
  // so the right to create a pod in the cluster is not root on the node. Static pods (file,
  // http) always run as their spec says.
  bool allow_root_api_pods = false;
};

// Counters the metrics endpoint reads.
struct AgentMetrics {
  std::atomic<uint64_t> sync_pod_total{0};
  std::atomic<uint64_t> sync_pod_errors{0};
  std::atomic<uint64_t> containers_started{0};
  std::atomic<uint64_t> containers_killed{0};
  std::atomic<uint64_t> pods_rejected{0};
  std::atomic<uint64_t> housekeeping_runs{0};
  std::atomic<uint64_t> housekeeping_skipped{0};  // nothing changed since the last pass
  // Pod start latency (first seen -> running), kubelet_pod_start_duration_seconds.
  Histogram pod_start{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  void observeStartLatency(base::Duration d);
  // syncPod durations by SyncPodType (sync, update, create, kill), as
  // kubelet_pod_worker_duration_seconds{operation_type}.
  Histogram pod_worker[4];

  // Config updates received, by (op, source).
  void countConfigUpdate(api::PodOperation op, const std::string& source);
  std::map<std::pair<std::string, std::string>, uint64_t> configUpdates() const;

 private:
  mutable std::mutex config_updates_mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> config_updates_;
};

class Agent final : public SyncHandler, public podworkers::PodSyncer {
 public:
  // `source_seen(source)` answers whether a source has sent its first SET; `all_sources_ready()`
  // whether every configured source has (PodConfig's readiness, any thread).
  Agent(asio::any_io_executor executor, base::Clock& clock, base::Random& random,
        runtime::Runtime& runtime, podmanager::PodManager& pod_manager,
        StatusManager& status_manager, std::function<bool(const std::string&)> source_seen,
        std::function<bool()> all_sources_ready, AgentOptions options);
  ~Agent() override;

  // Starts the PLEG and the sync loop.
  void start();
  // Stops taking work; `on_idle` runs once no sync is in flight. Containers keep running.
  void stop(std::function<void()> on_idle);

  // PodConfig's output: any thread.
  void onPodUpdate(api::PodUpdate update) {
    metrics_.countConfigUpdate(update.op, update.source);
    sync_loop_->onPodUpdate(std::move(update));
  }

  // SyncHandler (sync loop strand).
  void handlePodAdditions(const std::vector<api::PodPtr>& pods) override;
  void handlePodUpdates(const std::vector<api::PodPtr>& pods) override;
  void handlePodRemoves(const std::vector<api::PodPtr>& pods) override;
  void handlePodReconcile(const std::vector<api::PodPtr>& pods) override;
  void handlePodSyncs(const std::vector<api::PodPtr>& pods) override;
  void handlePlegEvent(const PodLifecycleEvent& event) override;
  std::vector<api::PodPtr> podsToSync() override;
  void handlePodCleanups() override;

  // PodSyncer (pod strands).
  asio::awaitable<base::StatusOr<bool>> syncPod(api::SyncPodType type, api::PodPtr pod,
                                                api::PodPtr mirror_pod,
                                                std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatingPod(api::PodPtr pod,
                                                   std::optional<int64_t> grace_period_seconds,
                                                   podworkers::PodStatusFn status_fn,
                                                   std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatingRuntimePod(api::PodPtr pod,
                                                          std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatedPod(api::PodPtr pod) override;

  // Calls `fn` with each desired pod, in UID order, the stamp of its live status (nullopt before
  // the first sync) and a way to get that status (copied only when asked for): the read-only
  // /pods endpoint. Any thread.
  using StatusFetch = std::function<std::optional<api::PodStatus>()>;
  void visitPodsWithStatus(const std::function<void(const api::Pod&, std::optional<uint64_t> stamp,
                                                    const StatusFetch& status)>& fn) const;
  // Changes whenever what visitPodsWithStatus visits may change (a pod or a status). Any thread.
  uint64_t podsWithStatusVersion() const;
  // Health of the pipeline (PLEG relisting). Any thread.
  bool healthy(std::string* why) const;
  const AgentMetrics& metrics() const { return metrics_; }
  const std::string& nodeName() const { return options_.node_name; }
  podworkers::BasicPodWorkers& podWorkers() { return *pod_workers_; }
  Pleg& pleg() { return *pleg_; }
  const Pleg& pleg() const { return *pleg_; }
  SyncLoop& syncLoop() { return *sync_loop_; }
  const SyncLoop& syncLoop() const { return *sync_loop_; }
  Prober& prober() { return *prober_; }

  // kubelet's generateAPIPodStatus. Any thread.
  api::PodStatus generateAPIPodStatus(const api::Pod& pod, const runtime::PodStatus& status) const;

 private:
  void dispatchWork(const api::PodPtr& pod, api::SyncPodType type, const api::PodPtr& mirror);
  void handleMirrorPod(const api::PodPtr& mirror);
  void deletePod(const api::PodPtr& pod);
  void rejectPod(const api::Pod& pod, const std::string& reason, const std::string& message);
  bool podIsInactive(const api::Pod& pod) const;
  bool pastActiveDeadline(const api::Pod& pod) const;
  void trackDeadline(const api::PodPtr& pod);
  // Schedules a sync of `uid` after `delay` (crash-loop backoff expiry). Any thread.
  void scheduleSync(const std::string& uid, base::Duration delay);
  // What housekeeping looks at changed when any of these changed.
  struct CleanupInputs {
    uint64_t pods = 0;
    uint64_t workers = 0;
    uint64_t unknown_pod_events = 0;
    bool operator==(const CleanupInputs&) const = default;
  };
  CleanupInputs cleanupInputs() const;
  // One housekeeping pass, on cleanup_strand_. It reads only thread-safe state; what needs the
  // sync loop's state (rejected pods) comes back in the result.
  struct CleanupResult {
    bool acted = false;                // killed or removed something, or must look again
    std::set<std::string> keep;        // UIDs still known anywhere
    std::vector<api::PodPtr> restart;  // wanted pods without a worker (rejected ones included)
  };
  asio::awaitable<CleanupResult> cleanups();

  asio::awaitable<base::Status> startContainerWithBackoff(const api::PodPtr& pod, size_t index,
                                                          bool init,
                                                          const runtime::PodStatus& status,
                                                          bool* in_backoff);
  base::StatusOr<std::vector<std::pair<std::string, std::string>>> prepareVolumes(
      const api::Pod& pod);
  // runtime_.killPod, reporting ExceededGracePeriod when the kill outlasts its grace period.
  asio::awaitable<base::Status> killPodWatched(const api::PodPtr& pod, runtime::Pod running,
                                               std::optional<int64_t> grace_override);
  // kubelet's postStart step of startContainer: a failed hook kills the container.
  asio::awaitable<base::Status> runPostStartHook(const api::PodPtr& pod,
                                                 const api::Container& container,
                                                 const runtime::ContainerId& id);
  void onProbeFailure(const std::string& uid, const std::string& container, ProbeType type,
                      const ProbeOutcome& outcome);
  asio::awaitable<void> syncMirrorPod(const api::PodPtr& pod, const api::PodPtr& mirror,
                                      const std::stop_token& cancel);
  void setStartFailure(const std::string& uid, const std::string& container, StartFailure f);
  void clearStartFailure(const std::string& uid, const std::string& container);
  StartFailures startFailures(const std::string& uid) const;
  // <root-dir>/pods/<uid>; an error when the UID is not a single path component.
  base::StatusOr<std::filesystem::path> podDir(const std::string& uid) const;

  asio::any_io_executor executor_;
  base::Clock& clock_;
  runtime::Runtime& runtime_;
  podmanager::PodManager& pod_manager_;
  StatusManager& status_manager_;
  std::function<bool(const std::string&)> source_seen_;
  std::function<bool()> all_sources_ready_;
  AgentOptions options_;
  CrashBackoff crash_backoff_;
  AgentMetrics metrics_;

  std::unique_ptr<podworkers::BasicPodWorkers> pod_workers_;
  std::shared_ptr<SyncLoop> sync_loop_;
  std::shared_ptr<Pleg> pleg_;
  std::shared_ptr<ProbeHandler> probe_handler_;
  std::shared_ptr<Prober> prober_;
  asio::strand<asio::any_io_executor> cleanup_strand_;

  // Sync loop strand only.
  std::set<std::string> rejected_;
  std::set<std::string> deadline_uids_;
  std::map<std::string, base::TimerPtr> wake_timers_;
  bool cleanup_running_ = false;
  struct LastCleanup {
    CleanupInputs inputs;
    base::MonotonicTime at;
    bool acted = false;
  };
  std::optional<LastCleanup> last_cleanup_;
  uint64_t unknown_pod_events_ = 0;  // PLEG events of pods the pod manager does not know
  // The pods admission counted as active after the last batch of additions, valid while the
  // key (pod manager, pod workers and terminal-status generations) is unchanged.
  struct ActiveKey {
    uint64_t pods = 0;
    uint64_t workers = 0;
    uint64_t terminal = 0;
    bool operator==(const ActiveKey&) const = default;
  };
  struct ActiveCache {
    ActiveKey key;
    std::vector<api::PodPtr> pods;
  };
  std::optional<ActiveCache> active_cache_;

  mutable std::mutex mu_;
  std::map<std::string, StartFailures> start_failures_;  // by pod UID
  std::set<std::string> started_once_;                   // pods whose start latency was observed
  std::set<std::string> dirs_made_;  // pods whose directories exist (periodic syncs skip the I/O)
};

// The pod's QoS class (Guaranteed, Burstable, BestEffort).
std::string podQosClass(const api::Pod& pod);

}  // namespace nodeagent::agent
