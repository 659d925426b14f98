// The agent's own metrics: the counters and histograms the pod pipeline keeps (kubelet's names
// where kubelet has the same measure), and their Prometheus text for /metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "agent/metrics.h"
#include "api/pod_update.h"
#include "base/clock.h"

namespace nodeagent::agent {

class Pleg;
class SyncLoop;

// Counters and histograms; every member is safe from any thread.
struct AgentMetrics {
  std::atomic<uint64_t> sync_pod_total{0};
  std::atomic<uint64_t> sync_pod_errors{0};
  // syncPod calls that found the pod as the last one left it, with nothing to do (a resync of
  // a settled pod): no status was generated and no action computed.
  std::atomic<uint64_t> sync_pod_unchanged{0};
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

// The Prometheus text of the agent's metrics, the PLEG's and the sync loop's, and this process'
// process_* metrics.
void writeAgentMetrics(std::ostream& out, const AgentMetrics& m, const Pleg& pleg,
                       const SyncLoop& sync_loop, std::string_view node_name);

}  // namespace nodeagent::agent
