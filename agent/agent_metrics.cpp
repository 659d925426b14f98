#include "agent/agent_metrics.h"

#include "agent/pleg.h"
#include "agent/sync_loop.h"
#include "base/printable.h"

namespace nodeagent::agent {

void AgentMetrics::observeStartLatency(base::Duration d) {
  pod_start.observe(std::chrono::duration<double>(d).count());
}

void AgentMetrics::countConfigUpdate(api::PodOperation op, const std::string& source) {
  std::lock_guard lock(config_updates_mu_);
  ++config_updates_[{std::string(api::podOperationName(op)), source}];
}

std::map<std::pair<std::string, std::string>, uint64_t> AgentMetrics::configUpdates() const {
  std::lock_guard lock(config_updates_mu_);
  return config_updates_;
}

namespace {

void writeCounter(std::ostream& out, const char* name, const char* help, uint64_t v) {
  writeMetricHeader(out, name, "counter", help);
  out << name << ' ' << v << '\n';
}

void writeGauge(std::ostream& out, const char* name, const char* help, uint64_t v) {
  writeMetricHeader(out, name, "gauge", help);
  out << name << ' ' << v << '\n';
}

// kubelet's names, where kubelet has the same measure.
void writeKubeletMetrics(std::ostream& out, const AgentMetrics& m, const Pleg& pleg,
                         std::string_view node_name) {
  writeMetricHeader(out, "kubelet_node_name", "gauge", "The node's name. The count is always 1.");
  out << "kubelet_node_name{node=\"" << base::prometheusLabelValue(node_name) << "\"} 1\n";
  writeGauge(out, "kubelet_running_pods",
             "Number of pods that have a running container, as of the last "
             "PLEG relist.",
             pleg.runningPods());
  writeMetricHeader(out, "kubelet_running_containers", "gauge",
                    "Number of containers currently running, as of the last PLEG relist.");
  out << "kubelet_running_containers{container_state=\"running\"} " << pleg.runningContainers()
      << '\n';
  writeMetricHeader(out, "kubelet_pod_start_duration_seconds", "histogram",
                    "Duration in seconds from the agent seeing a pod for the first time to the "
                    "pod starting to run.");
  m.pod_start.write(out, "kubelet_pod_start_duration_seconds");
  writeMetricHeader(out, "kubelet_pod_worker_duration_seconds", "histogram",
                    "Duration in seconds to sync a single pod, by operation type.");
  for (auto type : {api::SyncPodType::kCreate, api::SyncPodType::kUpdate, api::SyncPodType::kSync,
                    api::SyncPodType::kKill}) {
    m.pod_worker[static_cast<size_t>(type)].write(
        out, "kubelet_pod_worker_duration_seconds",
        "operation_type=\"" + std::string(api::syncPodTypeName(type)) + "\"");
  }
  writeMetricHeader(out, "kubelet_pleg_relist_duration_seconds", "histogram",
                    "Duration in seconds for relisting pods in PLEG.");
  pleg.relistDuration().write(out, "kubelet_pleg_relist_duration_seconds");
  writeMetricHeader(out, "kubelet_pleg_relist_interval_seconds", "histogram",
                    "Interval in seconds between relisting in PLEG.");
  pleg.relistInterval().write(out, "kubelet_pleg_relist_interval_seconds");
}

// nodeagent's own.
void writeNodeagentMetrics(std::ostream& out, const AgentMetrics& m, const Pleg& pleg,
                           const SyncLoop& sync_loop) {
  writeCounter(out, "nodeagent_sync_pod_total",
               "syncPod calls, and periodic syncs of settled pods taken as done without one.",
               m.sync_pod_total.load());
  writeCounter(out, "nodeagent_sync_pod_errors_total", "syncPod calls that returned an error.",
               m.sync_pod_errors.load());
  writeCounter(out, "nodeagent_sync_pod_unchanged_total",
               "syncPod calls that found the pod as the last sync left it, with nothing to do.",
               m.sync_pod_unchanged.load());
  writeCounter(out, "nodeagent_containers_started_total", "Containers started.",
               m.containers_started.load());
  writeCounter(out, "nodeagent_containers_killed_total", "Containers killed.",
               m.containers_killed.load());
  writeCounter(out, "nodeagent_pods_rejected_total", "Pods rejected by admission.",
               m.pods_rejected.load());
  writeCounter(out, "nodeagent_housekeeping_total", "Housekeeping runs.",
               m.housekeeping_runs.load());
  writeCounter(out, "nodeagent_housekeeping_skipped_total",
               "Housekeeping runs that found nothing changed and did no work.",
               m.housekeeping_skipped.load());
  writeCounter(out, "nodeagent_housekeeping_waiting_for_sources_total",
               "Housekeeping runs not done because a pod source has not been seen: containers of "
               "removed pods are not cleaned up meanwhile.",
               sync_loop.housekeepingWaitingForSources());
  writeCounter(out, "nodeagent_pleg_relist_total", "PLEG relists.", pleg.relistCount());
  writeCounter(out, "nodeagent_pleg_events_total", "PLEG events.", pleg.eventCount());
  writeMetricHeader(out, "nodeagent_config_updates_total", "counter",
                    "Pod updates from PodConfig by op and source.");
  for (const auto& [key, count] : m.configUpdates()) {
    out << "nodeagent_config_updates_total{op=\"" << key.first << "\",source=\"" << key.second
        << "\"} " << count << '\n';
  }
}

}  // namespace

void writeAgentMetrics(std::ostream& out, const AgentMetrics& m, const Pleg& pleg,
                       const SyncLoop& sync_loop, std::string_view node_name) {
  writeKubeletMetrics(out, m, pleg, node_name);
  writeNodeagentMetrics(out, m, pleg, sync_loop);
  writeProcessMetrics(out);
}

}  // namespace nodeagent::agent
