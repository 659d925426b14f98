#include "agent/read_only_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <atomic>
#include <mutex>
#include <sstream>
#include <vector>

#include "agent/agent.h"
#include "api/canonical_json.h"
#include "api/pod_json.h"

namespace nodeagent::agent {

struct ReadOnlyServer::Impl {
  httplib::Server server;
  // What /pods keeps of each pod between requests, in UID order (the order the agent visits
  // pods in, so finding a pod's entry is one step): where its status goes in its raw JSON, and
  // its status as JSON with the status stamp it was written for. A request writes only the
  // statuses that changed and copies everything else.
  struct PodEntry {
    std::string uid;
    std::shared_ptr<const std::string> raw;  // held: `slot` is valid for this text only
    std::optional<api::StatusSlot> slot;
    std::optional<uint64_t> stamp;
    std::string status_json;  // empty: the pod's own status
  };
  std::mutex cache_mu;
  std::vector<PodEntry> pods;
  std::atomic<size_t> last_pods_size{0};
};

ReadOnlyServer::ReadOnlyServer(Agent& agent, ReadOnlyServerOptions options)
    : agent_(agent), options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

ReadOnlyServer::~ReadOnlyServer() { stop(); }

std::string agentMetricsText(const Agent& agent) {
  const auto& m = agent.metrics();
  std::ostringstream out;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " counter\n"
        << name << ' ' << v << '\n';
  };
  counter("nodeagent_sync_pod_total", "syncPod calls.", m.sync_pod_total.load());
  counter("nodeagent_sync_pod_errors_total", "syncPod calls that returned an error.",
          m.sync_pod_errors.load());
  out << "# HELP nodeagent_sync_pod_duration_seconds_sum Time spent in syncPod.\n"
      << "# TYPE nodeagent_sync_pod_duration_seconds_sum counter\n"
      << "nodeagent_sync_pod_duration_seconds_sum "
      << static_cast<double>(m.sync_pod_duration_us.load()) / 1e6 << '\n';
  counter("nodeagent_containers_started_total", "Containers started.", m.containers_started.load());
  counter("nodeagent_containers_killed_total", "Containers killed.", m.containers_killed.load());
  counter("nodeagent_pods_rejected_total", "Pods rejected by admission.", m.pods_rejected.load());
  counter("nodeagent_housekeeping_total", "Housekeeping runs.", m.housekeeping_runs.load());
  counter("nodeagent_housekeeping_skipped_total",
          "Housekeeping runs that found nothing changed and did no work.",
          m.housekeeping_skipped.load());
  counter("nodeagent_pleg_relist_total", "PLEG relists.",
          agent.pleg().relistCount());
  counter("nodeagent_pleg_events_total", "PLEG events.",
          agent.pleg().eventCount());
  out << "# HELP nodeagent_config_updates_total Pod updates from PodConfig by op and source.\n"
      << "# TYPE nodeagent_config_updates_total counter\n";
  for (const auto& [key, count] : m.configUpdates()) {
    out << "nodeagent_config_updates_total{op=\"" << key.first << "\",source=\"" << key.second
        << "\"} " << count << '\n';
  }
  out << "# HELP nodeagent_pod_start_duration_seconds Time from first seen to running.\n"
      << "# TYPE nodeagent_pod_start_duration_seconds histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= std::size(AgentMetrics::kStartBuckets); ++i) {
    cumulative += m.start_latency_buckets[i].load();
    out << "nodeagent_pod_start_duration_seconds_bucket{le=\"";
    if (i < std::size(AgentMetrics::kStartBuckets)) {
      out << AgentMetrics::kStartBuckets[i];
    } else {
      out << "+Inf";
    }
    out << "\"} " << cumulative << '\n';
  }
  out << "nodeagent_pod_start_duration_seconds_sum "
      << static_cast<double>(m.start_latency_sum_us.load()) / 1e6 << '\n'
      << "nodeagent_pod_start_duration_seconds_count " << m.start_latency_count.load() << '\n';
  return out.str();
}

base::Status ReadOnlyServer::start() {
  auto& server = impl_->server;
  server.Get("/pods", [this](const httplib::Request&, httplib::Response& res) {
    // Written pod by pod: a JSON tree of the whole list costs tens of KiB per pod at once.
    std::string body;
    // Sized like the last answer: growing a megabyte string by doubling copies it several times.
    body.reserve(impl_->last_pods_size.load() + 4096);
    body = R"({"apiVersion":"v1","items":[)";
    bool first = true;
    std::lock_guard lock(impl_->cache_mu);
    std::vector<Impl::PodEntry> old = std::move(impl_->pods);
    std::vector<Impl::PodEntry> fresh;
    fresh.reserve(old.size() + 16);
    size_t next_old = 0;
    agent_.visitPodsWithStatus([&](const api::Pod& pod, std::optional<uint64_t> stamp,
                                   const Agent::StatusFetch& fetch) {
      if (!first) body += ',';
      first = false;
      const std::string& uid = pod.metadata.uid;
      while (next_old < old.size() && old[next_old].uid < uid) ++next_old;
      if (next_old < old.size() && old[next_old].uid == uid) {
        fresh.push_back(std::move(old[next_old++]));
      } else {
        fresh.push_back(Impl::PodEntry{uid, nullptr, std::nullopt, std::nullopt, {}});
      }
      auto& e = fresh.back();
      if (e.raw != pod.raw || !e.raw) {
        e.raw = pod.raw;
        e.slot = e.raw ? api::findStatusSlot(*e.raw) : std::nullopt;
      }
      if (stamp != e.stamp) {
        // New or changed. The status read now may be newer than `stamp`: then the next request
        // sees another stamp and writes it again.
        e.stamp = stamp;
        e.status_json.clear();
        if (auto status = stamp ? fetch() : std::nullopt) {
          api::appendCanonicalJson(api::encodePodStatus(*status), e.status_json);
          e.status_json.shrink_to_fit();  // kept until the status changes
        }
      }
      if (e.slot && !e.status_json.empty()) {
        api::appendWithStatusAt(*e.raw, *e.slot, e.status_json, body);
      } else {
        api::appendPodJsonWithStatusJson(pod, e.status_json, body);
      }
    });
    impl_->pods = std::move(fresh);  // pods that are gone drop out
    body += R"(],"kind":"PodList","metadata":{}})";
    impl_->last_pods_size = body.size();
    res.body = std::move(body);  // set_content would copy it
    res.set_header("Content-Type", "application/json");
  });
  server.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    std::string why;
    bool ok = agent_.healthy(&why);
    if (ok && options_.extra_health) ok = options_.extra_health(&why);
    res.status = ok ? 200 : 500;
    res.set_content(ok ? "ok" : "[-]" + why, "text/plain");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    auto text = agentMetricsText(agent_);
    if (options_.extra_metrics) text += options_.extra_metrics();
    res.set_content(text, "text/plain; version=0.0.4");
  });
  server.Get("/manifest-errors", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(options_.manifest_errors_json ? options_.manifest_errors_json() : "[]",
                    "application/json");
  });
  // Two workers: requests are short, and each worker thread costs a stack and malloc state.
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  if (options_.port == 0) {
    port_ = server.bind_to_any_port(options_.address);
    if (port_ <= 0) return base::unavailableError("cannot bind the read-only port on " + options_.address);
  } else {
    if (!server.bind_to_port(options_.address, options_.port)) {
      return base::unavailableError("cannot bind the read-only port " + options_.address + ":" +
                                    std::to_string(options_.port));
    }
    port_ = options_.port;
  }
  thread_ = std::thread([this] { impl_->server.listen_after_bind(); });
  return base::okStatus();
}

void ReadOnlyServer::stop() {
  if (thread_.joinable()) {
    impl_->server.stop();
    thread_.join();
  }
}

}  // namespace nodeagent::agent
