#include "agent/event_recorder.h"

#include <nlohmann/json.hpp>

#include "api/async_rest_client.h"

#include "api/api_errors.h"
#include "api/time.h"
#include "base/log.h"
#include "base/printable.h"
#include "config/manifest_errors.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("events")

}  // namespace

EventRecorder::EventRecorder(asio::any_io_executor executor, base::Clock& clock,
                             api::AsyncRestClient api, EventRecorderOptions options)
    : strand_(asio::make_strand(executor)),
      clock_(clock),
      async_(std::move(api)),
      options_(std::move(options)) {}

EventRecorder::~EventRecorder() = default;

void EventRecorder::stop() { stopped_ = true; }

void EventRecorder::record(const api::Pod& pod, const std::string& type, const std::string& reason,
                           const std::string& message, const std::string& field_path) {
  record(EventObject{"Pod", "v1", pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid,
                     field_path},
         type, reason, message);
}

EventObject EventRecorder::nodeReference() const {
  return EventObject{"Node", "v1", "", options_.node_name, options_.node_name, ""};
}

void EventRecorder::record(const EventObject& object, const std::string& type,
                           const std::string& reason, const std::string& message) {
  if (stopped_) return;
  if (queued_.fetch_add(1) >= options_.max_queue) {
    queued_.fetch_sub(1);
    dropped_.fetch_add(1);
    return;
  }
  Pending p{object, type, reason, message, api::Timestamp(clock_.wallNow().time_since_epoch())};
  asio::post(strand_, [self = shared_from_this(), p = std::move(p)]() mutable {
    self->queue_.push_back(std::move(p));
    if (self->draining_) return;
    self->draining_ = true;
    asio::co_spawn(
        self->strand_,
        [](std::shared_ptr<EventRecorder> s) -> asio::awaitable<void> {
          co_await s->drain();
        }(self),
        asio::detached);
  });
}

asio::awaitable<void> EventRecorder::drain() {
  while (!queue_.empty()) {
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1);
    if (stopped_) continue;
    // Awaitables live in named variables: GCC 12 destroys temporaries of a co_await expression
    // twice.
    auto recording = recordToSink(std::move(p));
    co_await std::move(recording);
  }
  draining_ = false;
}

// As client-go's recordToSink: a repeat of an event posted before PATCHes that Event; anything
// else, or a repeat whose Event expired, is POSTed as a new Event.
asio::awaitable<void> EventRecorder::recordToSink(Pending p) {
  // client-go posts events about cluster-scoped objects in "default".
  const std::string ns = p.object.namespace_.empty() ? "default" : p.object.namespace_;
  const std::string key = eventKey(p, ns);
  const std::string now = api::formatTime(p.at);
  auto it = seen_.find(key);
  if (it != seen_.end()) {
    // Only drain() (one at a time, on the strand) changes seen_, so `it` stays valid.
    auto patching = patchRepeat(p, ns, now, it->second);
    const RepeatResult result = co_await std::move(patching);
    switch (result) {
      case RepeatResult::kPatched:
        it->second.count += 1;
        co_return;
      case RepeatResult::kFailed:
        co_return;
      case RepeatResult::kExpired:
        seen_.erase(it);  // the Event expired: post a new one
        break;
    }
  }
  auto posting = postEvent(std::move(p), ns, now, key);
  co_await std::move(posting);
}

// What makes events repeats of each other (client-go's EventCorrelator aggregates the same way):
// the object (with the container), type, reason and message.
std::string EventRecorder::eventKey(const Pending& p, const std::string& ns) {
  const EventObject& o = p.object;
  return o.kind + "\x1f" + ns + "\x1f" + o.name + "\x1f" + o.uid + "\x1f" + o.field_path + "\x1f" +
         p.type + "\x1f" + p.reason + "\x1f" + p.message;
}

asio::awaitable<EventRecorder::RepeatResult> EventRecorder::patchRepeat(Pending p, std::string ns,
                                                                        std::string now,
                                                                        Seen seen) {
  nlohmann::json patch = {{"count", seen.count + 1}, {"lastTimestamp", now}};
  const std::string path = api::eventsPath(ns) + "/" + seen.event_name;
  auto call = [path, patch](api::RestClient& c) {
    return c.patchJson(path, patch, api::PatchType::kStrategicMerge);
  };
  auto r = co_await api::runOnPool(async_, call);
  if (r.ok()) {
    patched_.fetch_add(1);
    co_return RepeatResult::kPatched;
  }
  if (!api::isNotFound(r.status())) {
    failed_.fetch_add(1);
    log()->debug("Cannot update event reason={} err={}", p.reason, r.status().toString());
    co_return RepeatResult::kFailed;
  }
  co_return RepeatResult::kExpired;
}

asio::awaitable<void> EventRecorder::postEvent(Pending p, std::string ns, std::string now,
                                               std::string key) {
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), ".%llx",
                static_cast<unsigned long long>(p.at.time_since_epoch().count()) + sequence_++);
  const std::string event_name = p.object.name + suffix;
  const nlohmann::json event = makeEvent(p, ns, event_name, now);
  const std::string collection = api::eventsPath(ns);
  auto call = [collection, event](api::RestClient& c) { return c.createJson(collection, event); };
  auto r = co_await api::runOnPool(async_, call);
  if (!r.ok()) {
    failed_.fetch_add(1);
    log()->debug("Cannot post event reason={} err={}", p.reason, r.status().toString());
    co_return;
  }
  posted_.fetch_add(1);
  if (seen_.size() >= options_.max_cache) seen_.clear();
  seen_[key] = Seen{event_name, 1, now};
}

// A new core/v1 Event, first and last seen `now`, with count 1.
nlohmann::json EventRecorder::makeEvent(const Pending& p, const std::string& ns,
                                        const std::string& event_name,
                                        const std::string& now) const {
  const EventObject& o = p.object;
  nlohmann::json involved = {
      {"kind", o.kind}, {"name", o.name}, {"uid", o.uid}, {"apiVersion", o.api_version}};
  if (!o.namespace_.empty()) involved["namespace"] = o.namespace_;
  if (!o.field_path.empty()) involved["fieldPath"] = o.field_path;
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", event_name}, {"namespace", ns}}},
      {"involvedObject", involved},
      {"reason", p.reason},
      {"message", p.message},
      {"type", p.type},
      {"source", {{"component", options_.component}, {"host", options_.node_name}}},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1},
      {"reportingComponent", options_.component},
      {"reportingInstance", options_.node_name},
  };
}

void recordManifestError(EventRecorder& recorder, const config::ManifestError& error) {
  if (error.invalid.empty()) return;
  // One line per field error in the registry; one line in the event.
  std::string errors;
  for (char c : error.invalid) {
    if (c == '\n') {
      errors += "; ";
    } else {
      errors += c;
    }
  }
  std::string message;
  EventObject object;
  if (!error.pod.name.empty()) {
    // kubelet's wording ("Error validating pod %s from %s, ignoring: %v"), where the pod is
    // name_namespace(uid) and the location is named too; the last good version keeps running.
    object = EventObject{"Pod", "v1", error.pod.namespace_, error.pod.name, error.pod.uid, ""};
    message = "Error validating pod " + error.pod.name + "_" + error.pod.namespace_ + "(" +
              error.pod.uid + ") from " + error.source + " " + error.location + ": " + errors;
  } else {
    object = recorder.nodeReference();
    message =
        "Error validating pod manifest from " + error.source + " " + error.location + ": " + errors;
  }
  // A file name may hold any bytes; the Event is JSON.
  recorder.record(object, kEventTypeWarning, kReasonFailedValidation, base::validUtf8(message));
}

}  // namespace nodeagent::agent
