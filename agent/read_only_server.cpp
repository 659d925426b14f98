#include "agent/read_only_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <mutex>
#include <string_view>
#include <sstream>
#include <vector>

#include "agent/agent.h"
#include "api/canonical_json.h"
#include "api/pod_json.h"

namespace nodeagent::agent {

// A /pods answer as slices of texts the agent holds anyway (each pod's raw JSON, each status's
// JSON) and of literals, written out a chunk at a time: never copied into one string, so a
// poll of a large node neither allocates nor faults in megabytes, and an unchanged node is
// answered from the same slices again.
struct PodsText {
  std::vector<std::shared_ptr<const std::string>> held;  // what the slices point into
  std::vector<std::string_view> slices;
  size_t size = 0;

  void add(std::string_view slice) {
    if (slice.empty()) return;
    slices.push_back(slice);
    size += slice.size();
  }
  void add(const std::shared_ptr<const std::string>& text) {
    add(std::string_view(*text));
    held.push_back(text);
  }
};

// Copies a PodsText out in order, a chunk per call (httplib asks for the rest from `offset`
// after each write).
class PodsTextWriter {
 public:
  explicit PodsTextWriter(std::shared_ptr<const PodsText> text) : text_(std::move(text)) {}

  bool write(size_t offset, size_t length, httplib::DataSink& sink) {
    // Small enough to come from the heap (not a fresh mapping per answer), large enough that
    // a megabyte list takes a few dozen writes.
    static constexpr size_t kChunk = 64 * 1024;
    const auto& slices = text_->slices;
    // Offsets only move forward.
    while (slice_ < slices.size() && slice_begin_ + slices[slice_].size() <= offset) {
      slice_begin_ += slices[slice_].size();
      ++slice_;
    }
    chunk_.clear();
    const size_t end = offset + std::min(length, kChunk);
    size_t pos = offset;
    for (size_t i = slice_, begin = slice_begin_; i < slices.size() && pos < end; ++i) {
      const size_t from = pos - begin;
      const size_t take = std::min(slices[i].size() - from, end - pos);
      chunk_.append(slices[i].substr(from, take));
      pos += take;
      begin += slices[i].size();
    }
    return sink.write(chunk_.data(), chunk_.size());
  }

 private:
  std::shared_ptr<const PodsText> text_;
  size_t slice_ = 0;        // the slice holding the next byte
  size_t slice_begin_ = 0;  // its offset in the text
  std::string chunk_;
};

struct ReadOnlyServer::Impl {
  httplib::Server server;
  // What /pods keeps of each pod between requests, in UID order (the order the agent visits
  // pods in, so finding a pod's entry is one step): where its status goes in its raw JSON, and
  // its status as JSON with the status stamp it was written for. An answer after a change
  // writes only the statuses that changed.
  struct PodEntry {
    std::string uid;
    std::shared_ptr<const std::string> raw;  // held: `slot` is valid for this text only
    std::optional<api::StatusSlot> slot;
    std::optional<uint64_t> stamp;
    std::shared_ptr<const std::string> status_json;  // null: the pod's own status
    // The whole pod text when it cannot be sliced from `raw` (no raw text or no slot): written
    // when needed, until the pod or its status changes.
    std::shared_ptr<const std::string> whole;
  };
  std::mutex cache_mu;
  std::vector<PodEntry> pods;
  // The last answer and the version of the agent's pods and statuses it was made for.
  std::shared_ptr<const PodsText> text;
  uint64_t text_version = 0;
};

ReadOnlyServer::ReadOnlyServer(Agent& agent, ReadOnlyServerOptions options)
    : agent_(agent), options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

ReadOnlyServer::~ReadOnlyServer() { stop(); }

std::shared_ptr<const PodsText> ReadOnlyServer::podsText() {
  // Read before the pods are visited: a change while the answer is made shows as another
  // version next time.
  const uint64_t version = agent_.podsWithStatusVersion();
  std::lock_guard lock(impl_->cache_mu);
  if (impl_->text && impl_->text_version == version) return impl_->text;
  auto text = std::make_shared<PodsText>();
  if (impl_->text) {
    text->slices.reserve(impl_->text->slices.size() + 64);
    text->held.reserve(impl_->text->held.size() + 16);
  }
  text->add(R"({"apiVersion":"v1","items":[)");
  bool first = true;
  std::vector<Impl::PodEntry> old = std::move(impl_->pods);
  std::vector<Impl::PodEntry> fresh;
  fresh.reserve(old.size() + 16);
  size_t next_old = 0;
  agent_.visitPodsWithStatus([&](const api::Pod& pod, std::optional<uint64_t> stamp,
                                 const Agent::StatusFetch& fetch) {
    if (!first) text->add(",");
    first = false;
    const std::string& uid = pod.metadata.uid;
    while (next_old < old.size() && old[next_old].uid < uid) ++next_old;
    if (next_old < old.size() && old[next_old].uid == uid) {
      fresh.push_back(std::move(old[next_old++]));
    } else {
      fresh.push_back(Impl::PodEntry{uid, nullptr, std::nullopt, std::nullopt, nullptr, nullptr});
    }
    auto& e = fresh.back();
    if (e.raw != pod.raw || !e.raw) {
      e.raw = pod.raw;
      e.slot = e.raw ? api::findStatusSlot(*e.raw) : std::nullopt;
      e.whole.reset();
    }
    if (stamp != e.stamp) {
      // New or changed. The status read now may be newer than `stamp`: then the next request
      // sees another stamp and writes it again.
      e.stamp = stamp;
      e.status_json.reset();
      e.whole.reset();
      if (auto status = stamp ? fetch() : std::nullopt) {
        std::string json;
        api::appendCanonicalJson(api::encodePodStatus(*status), json);
        e.status_json = std::make_shared<const std::string>(std::move(json));
      }
    }
    if (e.slot && e.status_json) {
      for (std::string_view piece : api::withStatusAtPieces(*e.raw, *e.slot, *e.status_json)) {
        text->add(piece);
      }
      text->held.push_back(e.raw);
      text->held.push_back(e.status_json);
    } else if (e.slot) {
      text->add(e.raw);  // its own status
    } else {
      if (!e.whole) {
        std::string whole;
        api::appendPodJsonWithStatusJson(pod, e.status_json ? *e.status_json : "", whole);
        e.whole = std::make_shared<const std::string>(std::move(whole));
      }
      text->add(e.whole);
    }
  });
  impl_->pods = std::move(fresh);  // pods that are gone drop out
  text->add(R"(],"kind":"PodList","metadata":{}})");
  impl_->text = std::move(text);
  impl_->text_version = version;
  return impl_->text;
}

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
    auto text = podsText();
    const size_t size = text->size;
    auto writer = std::make_shared<PodsTextWriter>(std::move(text));
    res.set_content_provider(size, "application/json",
                             [writer](size_t offset, size_t length, httplib::DataSink& sink) {
                               return writer->write(offset, length, sink);
                             });
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
