#include "agent/read_only_server.h"

#include <nlohmann/json.hpp>

#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "agent/stats/resource_metrics.h"
#include "api/canonical_json.h"
#include "api/pod_json.h"
#include "base/printable.h"

namespace nodeagent::agent {

// A /pods answer as slices of texts the agent holds anyway (each pod's raw JSON, each status's
// JSON) and of literals, written out as they are: never copied into one string, so a poll of a
// large node neither allocates nor faults in megabytes, and an unchanged node is answered from
// the same slices again.
struct PodsText {
  std::vector<std::shared_ptr<const void>> held;  // what the slices point into
  std::vector<std::string_view> slices;

  void add(std::string_view slice) {
    if (!slice.empty()) slices.push_back(slice);
  }
  void add(const std::shared_ptr<const std::string>& text) {
    add(std::string_view(*text));
    held.push_back(text);
  }
  void add(const std::shared_ptr<const api::PodText>& text) {
    for (std::string_view piece : text->pieces()) add(piece);
    held.push_back(text);
  }
};

struct ReadOnlyServer::Impl {
  // What /pods keeps of each pod between requests, in UID order (the order the agent visits
  // pods in, so finding a pod's entry is one step): where its status goes in its raw JSON, and
  // its status as JSON with the status stamp it was written for. An answer after a change
  // writes only the statuses that changed.
  struct PodEntry {
    std::string uid;
    std::shared_ptr<const api::PodText> raw;  // held: `slot` is valid for this text only
    std::optional<api::StatusSlot> slot;
    std::optional<uint64_t> stamp;
    std::shared_ptr<const std::string> status_json;  // null: the pod's own status
    // The whole pod text when it cannot be sliced from `raw` (no raw text or no slot): written
    // when needed, until the pod or its status changes.
    std::shared_ptr<const std::string> whole;
  };
  // The entries of the next answer: each pod's entry of the last answer, or a new one.
  class NextEntries {
   public:
    explicit NextEntries(std::vector<PodEntry> old) : old_(std::move(old)) {
      fresh_.reserve(old_.size() + 16);
    }
    // The entry of the pod `uid`; pods come in UID order. Valid until the next call.
    PodEntry& take(const std::string& uid) {
      while (next_old_ < old_.size() && old_[next_old_].uid < uid) ++next_old_;
      if (next_old_ < old_.size() && old_[next_old_].uid == uid) {
        fresh_.push_back(std::move(old_[next_old_++]));
      } else {
        fresh_.push_back(PodEntry{uid, nullptr, std::nullopt, std::nullopt, nullptr, nullptr});
      }
      return fresh_.back();
    }
    // The entries taken; pods that are gone drop out.
    std::vector<PodEntry> taken() && { return std::move(fresh_); }

   private:
    std::vector<PodEntry> old_;
    size_t next_old_ = 0;
    std::vector<PodEntry> fresh_;
  };

  // Brings a pod's entry up to date with its raw text and its status as of `stamp`.
  static void updateEntry(PodEntry& e, const api::Pod& pod, std::optional<uint64_t> stamp,
                          const AgentView::StatusFetch& fetch) {
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
  }

  // Adds a pod's text: its raw JSON with the status JSON in its status slot, else its raw JSON
  // as it is (its own status), else the whole pod written out.
  static void addPod(PodsText& text, PodEntry& e, const api::Pod& pod) {
    if (e.slot && e.status_json) {
      for (std::string_view piece : api::withStatusAtPieces(*e.raw, *e.slot, *e.status_json)) {
        text.add(piece);
      }
      text.held.push_back(e.raw);
      text.held.push_back(e.status_json);
    } else if (e.slot) {
      text.add(e.raw);  // its own status
    } else {
      if (!e.whole) {
        std::string whole;
        api::appendPodJsonWithStatusJson(pod, e.status_json ? *e.status_json : "", whole);
        e.whole = std::make_shared<const std::string>(std::move(whole));
      }
      text.add(e.whole);
    }
  }

  std::mutex cache_mu;
  std::vector<PodEntry> pods;
  // The last answer and the version of the agent's pods and statuses it was made for.
  std::shared_ptr<const PodsText> text;
  uint64_t text_version = 0;
};

ReadOnlyServer::ReadOnlyServer(asio::any_io_executor executor, base::Clock& clock,
                               const AgentView& agent, ReadOnlyServerOptions options)
    : agent_(agent),
      options_(std::move(options)),
      impl_(std::make_unique<Impl>()),
      server_(std::move(executor), clock, options_.http,
              [this](const HttpRequest& request) { return handle(request); }) {
  health_checks_.push_back({"ping", nullptr});
  health_checks_.push_back({"pleg", [this](std::string* why) { return agent_.healthy(why); }});
  for (auto& c : options_.health_checks) health_checks_.push_back(std::move(c));
}

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
  Impl::NextEntries entries(std::move(impl_->pods));
  agent_.visitPodsWithStatus(
      [&](const api::Pod& pod, std::optional<uint64_t> stamp, const AgentView::StatusFetch& fetch) {
        if (!first) text->add(",");
        first = false;
        auto& e = entries.take(pod.metadata.uid);
        Impl::updateEntry(e, pod, stamp, fetch);
        Impl::addPod(*text, e, pod);
      });
  impl_->pods = std::move(entries).taken();  // pods that are gone drop out
  text->add(R"(],"kind":"PodList","metadata":{}})");
  impl_->text = std::move(text);
  impl_->text_version = version;
  return impl_->text;
}

HttpResponse ReadOnlyServer::handle(const HttpRequest& request) {
  const std::string& path = request.path;
  const bool known =
      path == "/healthz" || (!options_.healthz_only &&
                             (path == "/pods" || path == "/metrics" || path == "/manifest-errors" ||
                              ((path == "/stats/summary" || path == "/metrics/resource") &&
                               options_.stats_summary_json)));
  if (!known) return HttpResponse{404, "text/plain", "404 page not found\n", nullptr};
  if (request.method != "GET" && request.method != "HEAD") {
    return HttpResponse{405, "text/plain", "method not allowed\n", nullptr};
  }
  HttpResponse res;
  if (path == "/pods") {
    auto text = podsText();
    res.content_type = "application/json";
    // Aliases the text: the slices live as long as the answer that writes them.
    res.body_pieces = std::shared_ptr<const std::vector<std::string_view>>(text, &text->slices);
  } else if (path == "/healthz") {
    auto answer = healthzAnswer(health_checks_, request.query.find("verbose") != std::string::npos);
    res.status = answer.status;
    res.body = std::move(answer.body);
  } else if (path == "/stats/summary") {
    res.body = options_.stats_summary_json();
    if (res.body.empty()) {
      res.status = 503;
      res.body = "stats not yet available\n";
    } else {
      res.content_type = "application/json";
    }
  } else if (path == "/metrics/resource") {
    res.content_type = "text/plain; version=0.0.4";
    res.body = stats::resourceMetricsText(options_.stats_summary_json());
  } else if (path == "/metrics") {
    res.content_type = "text/plain; version=0.0.4";
    res.body = agent_.metricsText();
    if (options_.extra_metrics) res.body += options_.extra_metrics();
  } else {
    res.content_type = "application/json";
    res.body = options_.manifest_errors_json ? options_.manifest_errors_json() : "[]";
  }
  return res;
}

base::Status ReadOnlyServer::start() { return server_.start(); }

void ReadOnlyServer::stop() { server_.stop(); }

}  // namespace nodeagent::agent
