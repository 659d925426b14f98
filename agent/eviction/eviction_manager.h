// kubelet's eviction manager (pkg/kubelet/eviction/eviction_manager.go, v1.18): every
// `monitoring_period` (10 s) it observes the node's signals (memory.available, nodefs.*,
// pid.available, through a SignalSource), finds the thresholds met, reports the node conditions
// they drive (MemoryPressure, DiskPressure, PIDPressure; a condition stays true until
// `pressure_transition_period` has passed since it was last observed), and once a threshold's
// grace period has passed, reclaims: node-level first for disk signals (the agent's
// `reclaim_node_level`: dead containers' logs and state; kubelet's container GC), then, when the
// signal is still met, evicts ONE pod per pass in kubelet's ranking:
//   memory: usage above requests first, then lower priority, then more usage above requests
//   disk:   usage above ephemeral-storage requests, priority, usage above requests
//   pids:   priority, then more processes (later kubelets' tie-break)
// Critical pods (static, mirror, priority >= 2000000000: cm::isCriticalPod) are never evicted.
// The evicted pod gets phase Failed, reason "Evicted", kubelet's message ("The node was low on
// resource: memory. Container c was using 123Mi, which exceeds its request of 0. "), a Warning
// "Evicted" event, and grace period 0 (hard threshold) or `max_pod_grace_period_seconds` as it is
// (soft; kubelet 1.18 ignores the pod's own). After an eviction the next pass runs as soon as the
// pod is cleaned up (`pod_cleaned_up`, polled every second for at most 30 s), as kubelet's.
//
// Admission (kubelet's eviction admit handler, run before the resource predicates): under any
// pressure critical pods are admitted; under memory pressure alone, pods that are not BestEffort
// (and BestEffort pods tolerating node.kubernetes.io/memory-pressure:NoSchedule); otherwise the
// pod is rejected with reason "Evicted", message "The node had condition: [DiskPressure]. ".
// (kubelet 1.18 admits a Burstable pod under memory+disk pressure because it looks at memory
// first; here disk and PID pressure reject every non-critical pod, as the docs say.)
//
// memory.available is kubelet's: capacity - the node's working set (RealSignalSource:
// signal_source.h). The transition damping, grace periods and minimum reclaim are kubelet's
// thresholdsMet / thresholdsFirstObservedAt / nodeConditionsObservedSince.
//
// Threading: start/stop/admitPod/conditions/lastObservations from any thread. The passes run on
// the manager's own strand; SignalSource::observe and `pod_usage` run on `blocking_executor`
// (never on a strand); `reclaim_node_level`'s coroutine is awaited on the strand. Create with
// std::make_shared; the Clock must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cm/resources.h"
#include "agent/eviction/thresholds.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::eviction {

// One signal's value (bytes, inodes or PIDs) and the capacity its percentages are of.
struct Observation {
  int64_t available = 0;
  int64_t capacity = 0;
  bool operator==(const Observation&) const = default;
};
using Observations = std::map<Signal, Observation>;

// Where the node's signals come from (kubelet: the summary provider / cadvisor).
class SignalSource {
 public:
  virtual ~SignalSource() = default;
  // The signals it can observe now; a missing one is not judged (kubelet: "no observation found
  // for eviction signal"). Blocking: runs on the blocking pool, one call at a time.
  virtual Observations observe() = 0;
};

// What a pod uses (kubelet: its PodStats in the summary). Unset: not known.
struct ContainerUsage {
  std::string name;
  std::optional<int64_t> memory_working_set_bytes;
  std::optional<int64_t> disk_bytes;  // its logs (the process runtime has no rootfs layer)
};
struct PodUsage {
  std::optional<int64_t> memory_working_set_bytes;  // the pod cgroup's working set
  std::optional<int64_t> disk_bytes;   // logs + emptyDir/hostPath volumes (kubelet's local volumes)
  std::optional<int64_t> inodes_used;  // the same files' inodes
  std::optional<int64_t> processes;    // pids in the pod cgroup
  std::vector<ContainerUsage> containers;
};
using PodUsageMap = std::map<std::string, PodUsage>;  // by pod UID

// The pressure conditions the node reports.
struct PressureConditions {
  bool memory = false;
  bool disk = false;
  bool pid = false;
  bool any() const { return memory || disk || pid; }
  bool operator==(const PressureConditions&) const = default;
};

// killPodNow: kills the pod through its pod worker with `status` as its final status and the
// grace period override; true once it is killed (or the kill was given up: kubelet counts the
// eviction either way).
using KillPodFunc = std::function<asio::awaitable<bool>(api::PodPtr pod, api::PodStatus status,
                                                        std::optional<int64_t> grace_override)>;
// Same signature as agent::EventSink (type, reason, message, field path "").
using PodEventFunc =
    std::function<void(const api::Pod&, const std::string& type, const std::string& reason,
                       const std::string& message, const std::string& field_path)>;
using NodeEventFunc = std::function<void(const std::string& type, const std::string& reason,
                                         const std::string& message)>;

struct EvictionManagerOptions {
  std::vector<Threshold> thresholds;  // parseThresholdConfig
  base::Duration monitoring_period =
      kDefaultEvictionMonitoringPeriod;  // --eviction-monitoring (10s)
  base::Duration pressure_transition_period = kDefaultPressureTransitionPeriod;  // 5m
  // --eviction-max-pod-grace-period: the grace period of a soft eviction, whatever the pod's
  // (kubelet 1.18's gracePeriodOverride). Not negative.
  int64_t max_pod_grace_period_seconds = 0;
  // After an eviction: how often and how long to wait for `pod_cleaned_up`.
  base::Duration cleanup_poll = std::chrono::seconds(1);
  base::Duration cleanup_timeout = std::chrono::seconds(30);

  std::shared_ptr<SignalSource> signals;  // required
  // The admitted, not terminated pods (kubelet's activePods). Called on the manager's strand:
  // must not block.
  std::function<std::vector<api::PodPtr>()> active_pods;
  // Usage of `pods` by UID; a pod missing from the answer ranks first (kubelet: "prioritize
  // evicting the pod for which no stats were found"). Blocking: runs on the blocking pool.
  std::function<PodUsageMap(const std::vector<api::PodPtr>& pods)> pod_usage;
  KillPodFunc kill_pod;  // required to evict
  // Node-level reclaim for a disk signal (remove dead containers' logs and state). A coroutine
  // awaited on the manager's strand: it must not block (it may hop to another executor and back).
  // Optional.
  std::function<asio::awaitable<base::Status>(Signal signal)> reclaim_node_level;
  PodEventFunc record_pod_event;  // optional
  NodeEventFunc
      record_node_event;  // optional: Warning EvictionThresholdMet "Attempting to reclaim memory"
  // Called (on the manager's strand) when the reported conditions change. Optional.
  std::function<void(const PressureConditions&)> on_conditions_changed;
  // Whether an evicted pod's resources are released (containers gone, cgroup removed). Called on
  // the strand: must not block. Optional: without it the next pass waits a monitoring period.
  std::function<bool(const api::Pod&)> pod_cleaned_up;
  // Where blocking work runs; empty: the executor given to the constructor (tests).
  asio::any_io_executor blocking_executor;
};

class EvictionManager : public std::enable_shared_from_this<EvictionManager> {
 public:
  EvictionManager(asio::any_io_executor executor, base::Clock& clock,
                  EvictionManagerOptions options);
  ~EvictionManager();

  // Runs the first pass at once, then every monitoring period. Any thread.
  void start();
  // No pass starts once it returns (one in flight finishes its step). Any thread.
  void stop();

  // The eviction admit handler. Any thread.
  cm::AdmitResult admitPod(const api::Pod& pod) const;
  // The node conditions to report now. Any thread.
  PressureConditions conditions() const;
  // The last pass's observations. Any thread.
  Observations lastObservations() const;
  // Pods evicted so far. Any thread.
  uint64_t evictions() const { return evictions_.load(); }
  uint64_t passes() const { return passes_.load(); }

 private:
  asio::awaitable<std::optional<api::PodPtr>> synchronize();
  std::vector<Threshold> updateThresholds(const Observations& observations);
  asio::awaitable<bool> reclaimNodeLevel(Signal signal);
  void schedule(base::Duration d);
  void runPass();
  void pollCleanup();
  asio::any_io_executor blockingExecutor() const;

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  EvictionManagerOptions options_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> passes_{0};

  mutable std::mutex mu_;
  PressureConditions conditions_;   // guarded by mu_
  Observations last_observations_;  // guarded by mu_

  // Strand only.
  base::TimerPtr timer_;
  std::vector<Threshold> thresholds_met_;
  std::vector<std::pair<Threshold, base::MonotonicTime>> first_observed_;
  std::map<NodeCondition, base::MonotonicTime> condition_last_observed_;
  api::PodPtr cleanup_pod_;
  base::MonotonicTime cleanup_deadline_{};
};

// thresholdsMet: the thresholds whose signal's available is below the threshold (plus the
// minimum reclaim when `enforce_min_reclaim`). A signal without observation is not met.
std::vector<Threshold> thresholdsMet(const std::vector<Threshold>& thresholds,
                                     const Observations& observations, bool enforce_min_reclaim);

// The rankings (stable: pods that compare equal keep their order). `usage` answers null for a
// pod without stats.
using PodUsageLookup = std::function<const PodUsage*(const api::Pod&)>;
void rankMemoryPressure(std::vector<api::PodPtr>& pods, const PodUsageLookup& usage);
// nodefs.available / imagefs.available rank by bytes, *.inodesFree by inodes.
void rankDiskPressure(std::vector<api::PodPtr>& pods, const PodUsageLookup& usage, Signal signal);
void rankPidPressure(std::vector<api::PodPtr>& pods, const PodUsageLookup& usage);

// kubelet's evictionMessage for `resource` ("memory", "ephemeral-storage", "inodes", "pids").
std::string evictionMessage(std::string_view resource, const api::Pod& pod, const PodUsage* usage);

}  // namespace nodeagent::eviction
