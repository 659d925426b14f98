// PodLifecycle: kubelet's PodSyncer, what a pod worker calls to make one pod real. syncPod
// (kubelet's syncPod and kuberuntime's SyncPod: compute the pod's actions, then carry them out step
// by step), syncTerminatingPod, syncTerminatingRuntimePod and syncTerminatedPod; container starts
// with crash backoff, image pulls (agent/images), lifecycle hooks, volumes, active deadlines,
// mirror pod upkeep, and the pod's API status (kubelet's generateAPIPodStatus).
//
// Threading: the PodSyncer methods run on the pod's strand (podworkers/pod_syncer.h) and wait only
// through co_await; file work (pod directories, volumes) goes to the blocking pool.
// generateAPIPodStatus and the start-failure bookkeeping are safe from any thread.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "agent/agent_metrics.h"
#include "agent/crash_backoff.h"
#include "agent/images/image_manager.h"
#include "agent/pod_actions.h"
#include "agent/pod_cgroups.h"
#include "agent/pod_directories.h"
#include "agent/pod_lifecycle_sandbox.h"
#include "agent/prober/probe_handler.h"
#include "agent/prober/prober.h"
#include "agent/runtime/runtime.h"
#include "agent/status/container_statuses.h"
#include "agent/status/status_manager.h"
#include "agent/volume/env_sources.h"
#include "agent/volumes.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/string_map.h"
#include "podmanager/pod_manager.h"
#include "podworkers/pod_syncer.h"

namespace nodeagent::agent {

// Records a pod event (type Normal/Warning, reason, message, container field path) for the
// apiserver. Called on pod strands; must not block.
using EventSink =
    std::function<void(const api::Pod&, const std::string& type, const std::string& reason,
                       const std::string& message, const std::string& field_path)>;

struct PodLifecycleOptions {
  // The host IP: every pod's hostIP, and the podIP of pods with the node's network.
  std::string node_ip;
  // What a resourceFieldRef env of a limit the container does not set reads as.
  runtime::NodeAllocatableResources node_allocatable;
  // kubelet's DNS settings, for the sandboxes of a runtime that runs images (whose containers have
  // a root filesystem, and so a resolv.conf, of their own).
  PodDnsOptions dns;
  // kubelet's runtimeState.networkErrors: "" while the runtime's network is ready. A pod that is
  // not hostNetwork does not sync while it says otherwise (Warning NetworkNotReady, "network is
  // not ready: ..."; the pod stays Pending and is retried). Empty: always ready.
  std::function<std::string()> network_errors;
  // The runtime's sandboxes have a network namespace and an IP of their own unless hostNetwork (a
  // CRI runtime): a pod's IP is its sandbox's (status.podIP, and the status.podIP env of its
  // containers), and a sandbox whose network does not fit the pod is replaced (kubelet's
  // podSandboxChanged). Off (the process and fake runtimes): every pod has the node's IP.
  bool sandbox_network = false;
  // A pod kill still running after its grace period plus half of it (at least this long) gets a
  // Warning ExceededGracePeriod event, as kubelet's killPodNow reports it.
  base::Duration kill_timeout_minimum = std::chrono::seconds(10);
  // A mirror pod someone deleted (kubectl delete) is re-created this long after the agent removed
  // it. `kubectl delete` waits with a GET and then a LIST+WATCH by name, and treats only a DELETED
  // event or a changed UID at the GET as done: a new mirror created between its GET and its LIST
  // hides the deletion from it, and it waits for the new mirror's deletion forever.
  base::Duration mirror_recreate_delay = std::chrono::seconds(1);
  // Pods from the apiserver may run as root on the node, privileged or with added capabilities
  // (--allow-root-api-pods). Off: such a container is not started (CreateContainerConfigError).
  bool allow_root_api_pods = false;
  // kubelet's seccompDefault and seccomp profile root (<root-dir>/seccomp): see
  // runtime::seccompProfileFor.
  bool seccomp_default = false;
  std::filesystem::path seccomp_profile_root;
};

class PodLifecycle final : public podworkers::PodSyncer {
 public:
  // What the pod lifecycle works with; each must outlive it.
  struct Deps {
    base::Clock& clock;
    runtime::Runtime& runtime;
    StatusManager& status_manager;
    // The desired pods (a pod config no longer has loses its exited containers) and the mirror
    // client.
    podmanager::PodManager& pod_manager;
    CrashBackoff& crash_backoff;
    Prober& prober;
    ProbeHandler& hooks;  // runs postStart hooks
    PodDirectories& dirs;
    VolumePreparer& volumes;
    PodCgroups& cgroups;
    AgentMetrics& metrics;
    asio::any_io_executor blocking;  // the pool for file work
    EventSink record_event;          // may be empty
    // Syncs the pod `uid` again after `delay` (when a container's crash backoff ends).
    std::function<void(const std::string& uid, base::Duration delay)> schedule_sync;
    // Reads the pods' imagePullSecrets; null without an apiserver.
    std::shared_ptr<ApiObjectSource> api_objects = nullptr;
  };

  PodLifecycle(Deps deps, PodLifecycleOptions options);

  asio::awaitable<base::StatusOr<bool>> syncPod(api::SyncPodType type, api::PodPtr pod,
                                                api::PodPtr mirror_pod,
                                                std::stop_token cancel) override;
  bool trySettledSync(const api::PodPtr& pod, const api::PodPtr& mirror_pod) override;
  asio::awaitable<base::Status> syncTerminatingPod(api::PodPtr pod,
                                                   std::optional<int64_t> grace_period_seconds,
                                                   podworkers::PodStatusFn status_fn,
                                                   std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatingRuntimePod(api::PodPtr pod,
                                                          std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatedPod(api::PodPtr pod) override;

  // kubelet's generateAPIPodStatus. Any thread.
  api::PodStatus generateAPIPodStatus(const api::Pod& pod, const runtime::PodStatus& status) const;

 private:
  // syncPod's steps, in kubelet's order.
  void forgetFinishedLife(const api::Pod& pod);
  // Generates and stores the pod's API status; true when its phase is terminal. `stamp`: the
  // status manager's stamp of the pod's status afterwards.
  bool publishStatus(const api::Pod& pod, const runtime::PodStatus& status, uint64_t& stamp);
  // Sets the reason and message of the pod's stored status (a sync that cannot go on).
  void setStatusReason(const api::Pod& pod, std::string reason, std::string message);
  // Records why the pod is refused (`names` is the failed path-name check) and returns it.
  base::Status refuseBadNames(const api::Pod& pod, base::Status names);
  // The pod's cgroup, its directories (`dirs`) and then its volumes, made on the blocking pool
  // (skipped, with no hop, for a pod without volumes whose cgroup and directories exist).
  struct PreparedPod {
    base::Status cgroup;
    base::Status dirs;
    base::StatusOr<std::vector<runtime::PodVolume>> volumes;
  };
  asio::awaitable<PreparedPod> preparePod(api::PodPtr pod);
  // Records why the pod's cgroup could not be made (kubelet's FailedToCreatePodContainer).
  base::Status refuseWithoutCgroup(const api::Pod& pod, base::Status cgroup);
  // kubelet's NetworkNotReady: the error that keeps a pod that is not hostNetwork from syncing
  // while the runtime's network is not ready, recorded as a Warning event; OK otherwise.
  base::Status checkNetworkReady(const api::Pod& pod);
  // The runtime network's errors that keep the pod from syncing ("" for a hostNetwork pod, or
  // while the network is ready).
  std::string networkErrors(const api::Pod& pod) const;
  // The pod's IPs from its sandbox's (kubelet): the node's for a pod with the node's network.
  std::vector<std::string> podIps(const api::Pod& pod,
                                  const std::vector<std::string>& sandbox_ips) const;
  // A terminated pod's cgroup is killed and removed (on the blocking pool).
  asio::awaitable<void> destroyPodCgroup(api::PodPtr pod);
  // (Coroutines take their parameters by value: a reference would outlive its caller only by
  // luck.)
  // kuberuntime's SyncPod: the pod's actions computed from its runtime status and carried out.
  // True when there was nothing to do.
  asio::awaitable<base::StatusOr<bool>> syncRuntimePod(api::PodPtr pod, runtime::PodStatus status,
                                                       std::vector<runtime::PodVolume> volumes,
                                                       std::stop_token cancel);
  asio::awaitable<base::Status> killForActions(api::PodPtr pod, PodActions actions,
                                               runtime::Pod running, std::stop_token cancel);
  // The rest of kubelet's killPodWithSyncResult for a replaced sandbox: every ready sandbox of
  // the pod stopped, and its exited init containers removed so that they run again
  // (purgeInitContainers).
  asio::awaitable<base::Status> retireSandboxes(api::PodPtr pod, PodActions actions,
                                                runtime::PodStatus status);
  // The sandbox the starts go to (actions.sandbox_id) or a new one, and the pod's IP in it.
  struct Sandbox {
    std::string id;
    std::string pod_ip;
    // The sandbox's config for this sync's container starts (runtimes that run images only).
    std::shared_ptr<const runtime::PodSandboxConfig> config;
  };
  asio::awaitable<base::StatusOr<Sandbox>> ensureSandbox(api::PodPtr pod, PodActions actions,
                                                         std::vector<std::string> ips);
  // kubelet's generatePodSandboxConfig for the pod (the node's resolv.conf read on the blocking
  // pool), its warnings recorded as events.
  asio::awaitable<base::StatusOr<runtime::PodSandboxConfig>> sandboxConfig(api::PodPtr pod,
                                                                           uint32_t attempt);
  asio::awaitable<base::Status> startForActions(api::PodPtr pod, PodActions actions,
                                                runtime::PodStatus status, Sandbox sandbox,
                                                std::vector<runtime::PodVolume> volumes,
                                                std::stop_token cancel);
  asio::awaitable<void> publishStatusAfterStarts(api::PodPtr pod);
  // kubelet_pod_start_duration_seconds (config.seen -> Running): observed when `status`, about to
  // be cached after the agent started the pod's containers, is Running and the cached one is not.
  // Not from other syncs: after an agent restart, pods already running have a new config.seen and
  // no cached status, and are not starts.
  void observeStart(const api::Pod& pod, const api::PodStatus& status);
  // A Warning OOMKilled event for each container the kernel's OOM killer ended, once.
  void reportOomKills(const api::Pod& pod, const runtime::PodStatus& status);

  // Container start with crash backoff (kubelet's doBackOff + startContainer).
  struct StartRequest {
    api::PodPtr pod;
    size_t index = 0;
    bool init = false;
    std::string sandbox_id;
    std::string pod_ip;  // the sandbox's (status.podIP)
    std::vector<runtime::PodVolume> volumes;
    std::shared_ptr<const runtime::PodSandboxConfig> sandbox_config;
  };
  // `status` is the pod's runtime status before the starts (whose exits decide the backoff).
  asio::awaitable<base::Status> startContainerWithBackoff(
      StartRequest request, std::shared_ptr<const runtime::PodStatus> status);
  bool inBackoff(const api::Pod& pod, const api::Container& container,
                 const runtime::PodStatus& status);
  // kubelet's EnsureImageExists step of startContainer, for a runtime that runs images: a failure
  // becomes the container's waiting reason, and the pod is synced again when a pull backoff ends.
  // The image manager's result when the image is there (its image, when it was already present,
  // goes to the runtime with the start); nullopt (no error, as a crash backoff) while its pull
  // backs off; the pull's or the policy's error otherwise.
  asio::awaitable<base::StatusOr<std::optional<images::EnsureImageResult>>> ensureImage(
      api::PodPtr pod, api::Container container);
  // The container with its variables from ConfigMaps and Secrets resolved (env_sources.h); the
  // container as it is, at once, when it has none. InvalidArgument on failure.
  asio::awaitable<base::StatusOr<ContainerEnvSources>> envSources(api::PodPtr pod,
                                                                  api::Container container);
  base::StatusOr<runtime::StartContainerOptions> startOptions(const StartRequest& request,
                                                              const api::Container& container);
  void reportStarted(const api::Pod& pod, const api::Container& container,
                     const runtime::ContainerId& id, int attempt);
  // kubelet's postStart step of startContainer: a failed hook kills the container. An httpGet
  // hook goes to `pod_ip` (the node's when empty).
  asio::awaitable<base::Status> runPostStartHook(api::PodPtr pod, api::Container container,
                                                 runtime::ContainerId id, std::string pod_ip);
  // runtime.killPod, reporting ExceededGracePeriod when the kill outlasts its grace period.
  asio::awaitable<base::Status> killPodWatched(api::PodPtr pod, runtime::Pod running,
                                               std::optional<int64_t> grace_override);
  asio::awaitable<void> syncMirrorPod(api::PodPtr pod, api::PodPtr mirror, std::stop_token cancel);
  void recordEvent(const api::Pod& pod, const std::string& type, const std::string& reason,
                   const std::string& message, const std::string& field_path) const;

  // A settled pod: what the inputs of its last sync were when that sync found nothing to do. A
  // resync with the same inputs would generate the same status and compute no action, so it is
  // skipped (kubelet's periodic resync of a healthy pod, at a few microseconds).
  // Node-wide versions, each changing whenever the per-pod input it covers changes for any pod:
  // read before a pod's own inputs, an unchanged one vouches for them without a lookup.
  struct Watermarks {
    std::optional<uint64_t> runtime;  // Runtime::podsVersion (read for per-pod versions only)
    uint64_t status = 0;              // StatusManager::version
    uint64_t dirs = 0;                // PodDirectories::removals
    uint64_t cgroups = 0;             // PodCgroups::removals
    bool operator==(const Watermarks&) const = default;
  };
  struct Settled {
    api::PodPtr pod;     // the same object (a changed pod is a new one)
    api::PodPtr mirror;  // the same object, or both null
    // Runtime::podStatusVersion when the runtime tells one (runtime_versioned), else the
    // fingerprint of its status.
    uint64_t runtime_state = 0;
    uint64_t probe_version = 0;  // Prober::resultsVersion
    uint64_t status_stamp = 0;   // the status manager's stamp of the pod's status
    // Read before the values above were last found (or known) to be the pod's.
    Watermarks marks;
    bool runtime_versioned = false;
  };
  // One record per settled pod of a large node: with its hash node (a view of the UID, no cached
  // hash) it fills one 128-byte block.
  static_assert(sizeof(Settled) <= 104);
  Watermarks watermarks() const;
  enum class Resync { kFull, kSkip, kSkipIfStatusSame };
  // Whether this sync of `pod` may be skipped; kSkipIfStatusSame with the fingerprint the
  // runtime status must have (`fingerprint`) when the runtime tells no version.
  Resync settledResync(const api::PodPtr& pod, const api::PodPtr& mirror, uint64_t& fingerprint);
  // Whether a sync that found nothing to do leaves `pod` settled: its status and actions depend
  // on nothing but the inputs Settled holds (no volumes to refresh, no deadline, no start failure,
  // its mirror pod in place).
  bool canSettle(const api::Pod& pod, const api::PodPtr& mirror) const;
  void settle(Settled settled);
  void unsettle(const std::string& uid);

  void setStartFailure(const std::string& uid, const std::string& container, StartFailure f);
  void clearStartFailure(const std::string& uid, const std::string& container);
  StartFailures startFailures(const std::string& uid) const;

  Deps deps_;
  PodLifecycleOptions options_;
  images::ImageManager images_{deps_.clock, deps_.runtime,     deps_.record_event,
                               {},          deps_.api_objects, deps_.blocking};

  mutable std::mutex mu_;
  std::map<std::string, StartFailures> start_failures_;        // by pod UID
  std::map<std::string, std::set<std::string>> oom_reported_;  // by pod UID: container IDs
  // By pod UID: each key views its record's own `pod`'s UID (settle() keeps them together).
  std::unordered_map<std::string_view, Settled, base::StringHash, std::equal_to<>> settled_;
};

// kubelet's lifecycle HandlerRunner for preStop hooks, installed in the runtime
// (runtime::PreStopHookRunner): runs the exec or httpGet hook (to `pod_ip`) through `handler`,
// bounded by the request's timeout; a failure is logged and recorded as a FailedPreStopHook event.
asio::awaitable<void> runPreStopHook(std::shared_ptr<ProbeHandler> handler, std::string pod_ip,
                                     EventSink record_event, runtime::PreStopHookRequest request);

// kubelet's prober event for a failed or errored probe: a Warning Unhealthy event on the container.
void reportProbeFailure(const api::Pod& pod, const std::string& container, ProbeType type,
                        const ProbeOutcome& outcome, const EventSink& record_event);

// Whether the pod ran longer than its activeDeadlineSeconds (counted from its status' startTime).
// Any thread.
bool pastActiveDeadline(const api::Pod& pod, const StatusManager& status_manager,
                        base::Clock& clock);

// The pod's QoS class (Guaranteed, Burstable, BestEffort).
std::string podQosClass(const api::Pod& pod);

}  // namespace nodeagent::agent
