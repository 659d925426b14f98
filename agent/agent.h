// The agent: kubelet's Kubelet type for the pod pipeline's sync loop side. It is the SyncHandler
// the sync loop calls (admission, dispatch to the pod workers, housekeeping), and it owns the
// pipeline's parts: the pod workers, the sync loop, the PLEG, the prober and the PodLifecycle the
// workers call (agent/pod_lifecycle.h: syncPod and the terminations). The pod manager, status
// manager, runtime, clock and random source are given to it and must outlive it.
//
// Threading: SyncHandler methods run on the sync loop's strand (checked in debug builds);
// PodLifecycle's on each pod's strand. Shared state is the pod manager and status manager
// (thread-safe). The AgentView methods are safe from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "agent/admission.h"
#include "agent/agent_metrics.h"
#include "agent/agent_view.h"
#include "agent/crash_backoff.h"
#include "agent/housekeeping.h"
#include "agent/pleg.h"
#include "agent/pod_cgroups.h"
#include "agent/pod_directories.h"
#include "agent/pod_lifecycle.h"
#include "agent/prober/prober.h"
#include "agent/runtime/runtime.h"
#include "agent/status/status_manager.h"
#include "agent/sync_handler.h"
#include "agent/sync_loop.h"
#include "agent/volumes.h"
#include "base/clock.h"
#include "base/random.h"
#include "podmanager/pod_manager.h"
#include "podworkers/pod_workers.h"

namespace nodeagent::agent {

struct AgentOptions {
  std::string node_name;
  // The host IP: every pod's hostIP, and the podIP of pods with the node's network.
  std::string node_ip;
  // PodLifecycleOptions' dns, network_errors and sandbox_network: kubelet's DNS settings for pod
  // sandboxes, its runtimeState.networkErrors (pods that are not hostNetwork wait while it is not
  // empty) and whether the runtime's sandboxes have networks (and IPs) of their own.
  PodDnsOptions dns;
  std::function<std::string()> network_errors;
  bool sandbox_network = false;
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
  // kubelet's ContainerGCPeriod: how soon after a container of a wanted pod exited housekeeping
  // looks for dead containers and sandboxes to remove.
  base::Duration container_gc_period = std::chrono::minutes(1);
  // PodLifecycleOptions::kill_timeout_minimum and mirror_recreate_delay.
  base::Duration kill_timeout_minimum = std::chrono::seconds(10);
  base::Duration mirror_recreate_delay = std::chrono::seconds(1);
  // Optional: records a pod event for the apiserver (called on pod strands; must not block).
  EventSink record_event;
  // Runs probes and lifecycle hooks; null means the real one (exec through the runtime,
  // httpGet/tcpSocket over sockets). Tests give a fake.
  std::shared_ptr<ProbeHandler> probe_handler;
  // Pods from the apiserver may run as root on the node, privileged or with added capabilities
  // (--allow-root-api-pods). Off: such a container is not started (CreateContainerConfigError),
  // so the right to create a pod in the cluster is not root on the node. Static pods (file,
  // http) always run as their spec says.
  bool allow_root_api_pods = false;
  // --seccomp-default: a container whose pod and own securityContext name no seccompProfile gets
  // the runtime's default profile (RuntimeDefault) instead of none (Unconfined). Localhost
  // profiles are files below <root_dir>/seccomp.
  bool seccomp_default = false;
  // Admission that runs before the resource predicates (kubelet's eviction admit handler). Any
  // thread; must not block. Optional.
  std::function<AdmitResult(const api::Pod&)> admit_handler;
  // Pod cgroups (kubepods and below); null when limits are not enforced.
  std::shared_ptr<cm::ContainerManager> container_manager;
  // The node's memory capacity in bytes (the containers' OOM score adjustment).
  int64_t memory_capacity = 0;
  // Where pods' configMap and secret volumes and env read the objects from; null without an
  // apiserver.
  std::shared_ptr<ApiObjectSource> api_objects;
  // Where file work runs (pod directories, volumes, orphaned directories): the daemon's blocking
  // pool. Empty: the agent's own executor (single-threaded tests that drain their io_context).
  asio::any_io_executor blocking_executor;
};

class Agent final : public SyncHandler, public AgentView {
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
  void handlePodAdditions(const api::ChunkedPods& pods) override;
  void handlePodUpdates(const api::ChunkedPods& pods) override;
  void handlePodRemoves(const api::ChunkedPods& pods) override;
  void handlePodReconcile(const api::ChunkedPods& pods) override;
  void handlePodSyncs(const std::vector<api::PodPtr>& pods) override;
  void handlePlegEvent(const PodLifecycleEvent& event) override;
  std::vector<api::PodPtr> podsToSync() override;
  void handlePodCleanups() override;

  // AgentView (any thread).
  void visitPodsWithStatus(const PodVisitor& fn) const override;
  uint64_t podsWithStatusVersion() const override;
  PodWithStatus podByName(std::string_view ns, std::string_view name) const override;
  bool healthy(std::string* why) const override;
  std::string metricsText() const override;

  // For the eviction manager (any thread):
  // kubelet's activePods: the pods config wants that are neither terminated nor terminating.
  std::vector<api::PodPtr> activePods() const;
  // kubelet's killPodNow: kills the pod through its worker, `status` (phase, reason, message)
  // becoming its final status, with the grace period override.
  void evictPod(api::PodPtr pod, api::PodStatus status, std::optional<int64_t> grace_override);
  // No container of the pod can run any more and its cgroup is gone.
  bool podCleanedUp(const api::Pod& pod) const;
  // Node-level reclaim (kubelet's container GC): removes exited containers (their state and
  // logs), keeping only the newest of each container of a pod config still wants and that is
  // not terminated. A coroutine for any executor: the collection runs on the agent's executor and
  // the caller resumes on its own; no thread waits for it.
  asio::awaitable<base::Status> removeDeadContainers();

  const AgentMetrics& metrics() const { return metrics_; }
  const std::string& nodeName() const { return options_.node_name; }
  podworkers::BasicPodWorkers& podWorkers() { return *pod_workers_; }
  Pleg& pleg() { return *pleg_; }
  const Pleg& pleg() const { return *pleg_; }
  SyncLoop& syncLoop() { return *sync_loop_; }
  const SyncLoop& syncLoop() const { return *sync_loop_; }
  Prober& prober() { return *prober_; }
  PodLifecycle& lifecycle() { return *lifecycle_; }

 private:
  void assertOnSyncLoop(const char* what) const;
  std::vector<api::PodPtr> activePodsBefore(const std::unordered_set<std::string_view>& batch_uids,
                                            const ActivePodsCache::Key& key);
  void admitAndDispatch(const api::PodPtr& pod, std::vector<api::PodPtr>& active);
  void dispatchWork(const api::PodPtr& pod, api::SyncPodType type, const api::PodPtr& mirror);
  void handleMirrorPod(const api::PodPtr& mirror);
  void deletePod(const api::PodPtr& pod);
  void killPod(api::PodPtr pod, bool runtime_pod);
  void rejectPod(const api::Pod& pod, const std::string& reason, const std::string& message);
  bool podIsInactive(const api::Pod& pod) const;
  void trackDeadline(const api::PodPtr& pod);
  // kubelet's pod manager registering pods with its configmap and secret managers: what the pod
  // references is watched (the Watch strategy) unless it is gone or terminal.
  void registerApiObjects(const api::Pod& pod);
  // Schedules a sync of `uid` after `delay` (crash-loop backoff expiry). Any thread.
  void scheduleSync(const std::string& uid, base::Duration delay);

  // Housekeeping (agent/housekeeping.cpp). One pass runs on cleanup_strand_ and reads only
  // thread-safe state; what needs the sync loop's state (rejected pods) comes back in the result.
  HousekeepingInputs housekeepingInputs() const;
  struct CleanupResult {
    bool acted = false;                // killed or removed something, or must look again
    std::set<std::string> keep;        // UIDs still known anywhere
    std::vector<api::PodPtr> restart;  // wanted pods without a worker (rejected ones included)
  };
  asio::awaitable<CleanupResult> cleanups();
  void applyCleanupResult(const CleanupResult& result, HousekeepingInputs inputs,
                          base::MonotonicTime started);
  void killWorkersOfRemovedPods(const std::map<std::string, podworkers::PodWorkerSync>& working,
                                CleanupResult& result);
  // Kills runtime pods nothing wants and removes pod directories and pod cgroups nothing knows;
  // true when it acted (or must look again).
  asio::awaitable<bool> cleanupRuntimePods(std::map<std::string, podworkers::PodWorkerSync> working,
                                           std::set<std::string> keep);
  asio::awaitable<bool> deleteOrphanedMirrorPods();
  asio::awaitable<size_t> garbageCollectContainers();
  // Removes the pod's exited containers (all but the newest of each name when `keep_newest`);
  // how many.
  asio::awaitable<size_t> removeExitedContainers(const runtime::PodStatus& status,
                                                 bool keep_newest);
  // For a pod still wanted: its exited containers but the newest of each name; whether any.
  asio::awaitable<bool> removeOlderExitedContainers(const runtime::Pod& rp);
  // kubelet's sandbox GC for a pod still wanted: its newest sandbox stays, an older one goes once
  // it is not ready and holds none of the pod's containers. A status call only for a pod that
  // lists such a sandbox. True when one was removed.
  asio::awaitable<bool> removeOlderSandboxes(const runtime::Pod& rp);
  // Removes the (exited) containers and (not ready) sandboxes of a runtime pod nobody wants;
  // whether anything was removed.
  asio::awaitable<bool> removeRuntimePod(const runtime::Pod& rp);

  asio::any_io_executor executor_;
  base::Clock& clock_;
  runtime::Runtime& runtime_;
  podmanager::PodManager& pod_manager_;
  StatusManager& status_manager_;
  std::function<bool(const std::string&)> source_seen_;
  std::function<bool()> all_sources_ready_;
  AgentOptions options_;
  asio::any_io_executor blocking_;
  CrashBackoff crash_backoff_;
  AgentMetrics metrics_;
  PodDirectories pod_dirs_;
  VolumePreparer volumes_;
  PodCgroups pod_cgroups_;

  std::shared_ptr<ProbeHandler> probe_handler_;
  std::shared_ptr<SyncLoop> sync_loop_;
  std::shared_ptr<Prober> prober_;
  std::unique_ptr<PodLifecycle> lifecycle_;
  std::unique_ptr<podworkers::BasicPodWorkers> pod_workers_;
  std::shared_ptr<Pleg> pleg_;
  asio::strand<asio::any_io_executor> cleanup_strand_;

  // Sync loop strand only.
  std::set<std::string> rejected_;
  std::set<std::string> deadline_uids_;
  std::map<std::string, base::TimerPtr> wake_timers_;
  bool cleanup_running_ = false;
  HousekeepingSkip housekeeping_skip_;
  uint64_t unknown_pod_events_ = 0;  // PLEG events of pods the pod manager does not know
  uint64_t container_exits_ = 0;     // ContainerDied events of pods it knows
  ActivePodsCache active_pods_cache_;
};

}  // namespace nodeagent::agent
