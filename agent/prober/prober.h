// The prober (kubelet's prober.Manager with its workers and results managers): one worker per
// container and probe type (liveness, readiness, startup) for containers that have probes, and
// nothing at all for containers without: no worker, no timer.
//
// A worker probes only while its container runs: it learns about container starts and exits
// from the statuses syncPod generates (updatePodStatus, kubelet's UpdatePodStatus), waits
// initialDelaySeconds after the start, then probes every periodSeconds with timeoutSeconds, and
// keeps its result until successThreshold/failureThreshold consecutive runs agree. Initial
// results are kubelet's: readiness Failure, liveness Success, startup Unknown. A startup probe
// gates liveness and readiness until it succeeds (then readiness is probed at once); a liveness
// or startup failure holds the worker until a new container replaces the failed one; a pod with
// a deletion timestamp is not liveness- or startup-probed. A result that changes calls
// `on_change(uid)` (the agent syncs the pod, like kubelet's probe result channels); every failed
// or errored run calls `on_failure` (the Unhealthy event).
//
// Threading: every public method may be called from any thread. Each worker runs on its own
// strand of the given executor; probe I/O is asynchronous (ProbeHandler), so a probe never
// blocks a pod strand or an io_context thread. Callbacks run on worker strands and must not
// block. Create with std::make_shared; call stop() before the executor goes away.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/prober/probe_failures.h"
#include "agent/prober/probe_handler.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::agent {

// results.Result.
enum class ProbeResult { kUnknown, kSuccess, kFailure };

class Prober final : public std::enable_shared_from_this<Prober>, public ProbeFailures {
 public:
  using ChangeFn = std::function<void(const std::string& pod_uid)>;
  using FailureFn = std::function<void(const std::string& pod_uid, const std::string& container,
                                       ProbeType type, const ProbeOutcome& outcome)>;

  // The pod's IP, the default host of its httpGet and tcpSocket probes (kubelet's
  // status.PodIP: the sandbox's IP for a pod with a network of its own, else the node's). Any
  // thread.
  using PodIpFn = std::function<std::string(const std::string& pod_uid)>;

  Prober(asio::any_io_executor executor, base::Clock& clock, std::shared_ptr<ProbeHandler> handler,
         PodIpFn pod_ip, ChangeFn on_change, FailureFn on_failure);
  ~Prober() override;

  // kubelet's AddPod: workers for the pod's containers' probes (idle until a container runs).
  // Called again with a newer version of the pod (deletion timestamp, probe specs).
  void addPod(const api::Pod& pod);
  // kubelet's RemovePod: stops the pod's workers.
  void removePod(const std::string& pod_uid);
  // kubelet's CleanupPods: stops the workers of pods not in `desired`.
  void cleanupPods(const std::set<std::string>& desired);
  // kubelet's UpdatePodStatus: starts, restarts or idles the pod's workers to follow its
  // containers, and sets `started` and `ready` of the containers that have probes.
  void updatePodStatus(const api::Pod& pod, std::vector<api::ContainerStatus>& statuses);
  // ProbeFailures (computePodActions).
  std::string_view failedProbe(const std::string& pod_uid, const std::string& container_name,
                               const runtime::ContainerId& id) const override;
  // Stops every worker; later calls do nothing.
  void stop();

  // A number that changes whenever a result of the pod's workers changes (or its workers do), so
  // that a resync can tell that the statuses' `ready` and `started` would come out the same; 0
  // for a pod without probes. Any thread.
  uint64_t resultsVersion(const std::string& pod_uid) const;

  // The result a worker holds for its current container (kUnknown without such a worker).
  ProbeResult result(const std::string& pod_uid, const std::string& container_name,
                     ProbeType type) const;
  size_t workerCount() const;

 private:
  struct Worker;
  struct PodEntry {
    bool deleting = false;
    uint64_t version = 0;  // resultsVersion
    std::vector<std::shared_ptr<Worker>> workers;
  };
  struct Schedule {
    std::shared_ptr<Worker> worker;
    uint64_t generation = 0;
    base::Duration delay{};
  };

  void observeLocked(const std::shared_ptr<Worker>& w, const api::ContainerStatus& status,
                     std::vector<Schedule>& schedules, std::vector<std::shared_ptr<Worker>>& idle);
  void apply(std::vector<Schedule> schedules, std::vector<std::shared_ptr<Worker>> idle);
  void stopWorkersLocked(PodEntry& entry, std::vector<std::shared_ptr<Worker>>& idle);
  // On the worker's strand.
  void arm(const std::shared_ptr<Worker>& w, uint64_t generation, base::Duration delay);
  void tick(const std::shared_ptr<Worker>& w, uint64_t generation);
  static asio::awaitable<void> runProbe(std::shared_ptr<Prober> self, std::shared_ptr<Worker> w,
                                        uint64_t generation, ProbeTarget target);
  // A probe's result (not an error) for the worker: kubelet's doProbe counts runs of the same
  // result and takes it once failureThreshold/successThreshold runs agree. True when the
  // worker's result changed; a startup success adds the triggers of its container's other probes.
  bool recordResultLocked(Worker& w, ProbeResult r, std::vector<Schedule>& triggers);
  // kubelet's manual trigger: probe readiness and liveness now rather than a period later.
  void triggerAfterStartupLocked(const Worker& startup, std::vector<Schedule>& triggers);
  void bumpVersionLocked(const std::string& pod_uid);
  const Worker* findLocked(const std::string& pod_uid, const std::string& container,
                           ProbeType type) const;

  asio::any_io_executor executor_;
  base::Clock& clock_;
  std::shared_ptr<ProbeHandler> handler_;
  PodIpFn pod_ip_;
  ChangeFn on_change_;
  FailureFn on_failure_;

  mutable std::mutex mu_;
  bool stopped_ = false;
  std::unordered_map<std::string, PodEntry> pods_;
  uint64_t versions_ = 0;  // the last PodEntry::version given out (a re-made entry gets a new one)
  std::atomic<size_t> pods_with_probes_{0};
};

// True when a container of the pod has a liveness, readiness or startup probe.
bool hasProbes(const api::Pod& pod);

}  // namespace nodeagent::agent
