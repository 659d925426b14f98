// The event recorder (client-go's record.EventRecorder as the kubelet uses it): posts core/v1
// Events about pods (Created, Started, Killing, BackOff, Failed, ...) to the apiserver.
// Manifest errors of the file and HTTP sources become Warning FailedValidation events
// (recordManifestError), about the pod when the manifest named one, else about the Node.
// Recording never blocks the caller: events go into a bounded queue drained on the recorder's
// strand, and when the queue is full the event is dropped and counted. Repeats of the same event
// (same object, type, reason and message) are aggregated like client-go's EventCorrelator: the
// existing Event is PATCHed with count+1 and a new lastTimestamp. Requests go through the shared
// RestClient, so they respect its QPS/burst (kubelet's eventRecordQPS 50 / eventBurst 100).
//
// Threading: record() and the counters are safe from any thread. Create with std::make_shared;
// the RestClient, API pool and Clock must outlive it.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "api/async_rest_client.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::config {
struct ManifestError;
}

namespace nodeagent::agent {

inline constexpr char kEventTypeNormal[] = "Normal";
inline constexpr char kEventTypeWarning[] = "Warning";
inline constexpr char kReasonFailedValidation[] = "FailedValidation";

// The object an event is about (a core/v1 ObjectReference).
struct EventObject {
  std::string kind;  // "Pod", "Node"
  std::string api_version = "v1";
  std::string namespace_;  // "" for a cluster-scoped object: its Events go to "default"
  std::string name;
  std::string uid;
  std::string field_path;  // a container: "spec.containers{web}"
};

struct EventRecorderOptions {
  std::string node_name;
  std::string component = "kubelet";
  size_t max_queue = 1000;
  size_t max_cache = 4096;  // aggregated events remembered
};

class EventRecorder : public std::enable_shared_from_this<EventRecorder> {
 public:
  EventRecorder(asio::any_io_executor executor, base::Clock& clock, api::AsyncRestClient api,
                EventRecorderOptions options);
  ~EventRecorder();

  // Records an event about `pod`. `field_path` names the container ("spec.containers{web}").
  // Any thread; never blocks.
  void record(const api::Pod& pod, const std::string& type, const std::string& reason,
              const std::string& message, const std::string& field_path = "");
  // Records an event about any object. Any thread; never blocks.
  void record(const EventObject& object, const std::string& type, const std::string& reason,
              const std::string& message);
  // This node as kubelet refers to it in events: kind Node, name and uid the node name.
  EventObject nodeReference() const;
  void stop();

  uint64_t posted() const { return posted_.load(); }
  uint64_t patched() const { return patched_.load(); }
  uint64_t dropped() const { return dropped_.load(); }
  uint64_t failed() const { return failed_.load(); }

 private:
  struct Pending {
    EventObject object;
    std::string type, reason, message;
    api::Timestamp at;
  };
  struct Seen {
    std::string event_name;
    int64_t count = 0;
    std::string first_timestamp;
  };
  enum class RepeatResult { kPatched, kFailed, kExpired };
  asio::awaitable<void> drain();
  // drain's steps for one event.
  asio::awaitable<void> recordToSink(Pending p);
  static std::string eventKey(const Pending& p, const std::string& ns);
  // PATCHes the Event `seen` names with count+1; kExpired when that Event is gone.
  asio::awaitable<RepeatResult> patchRepeat(Pending p, std::string ns, std::string now, Seen seen);
  asio::awaitable<void> postEvent(Pending p, std::string ns, std::string now, std::string key);
  nlohmann::json makeEvent(const Pending& p, const std::string& ns, const std::string& event_name,
                           const std::string& now) const;

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  api::AsyncRestClient async_;
  EventRecorderOptions options_;
  std::atomic<bool> stopped_{false};
  std::atomic<size_t> queued_{0};
  std::atomic<uint64_t> posted_{0}, patched_{0}, dropped_{0}, failed_{0};

  // Strand only.
  std::deque<Pending> queue_;
  bool draining_ = false;
  std::map<std::string, Seen> seen_;
  uint64_t sequence_ = 0;
};

// A Warning FailedValidation event for a manifest error (a ManifestErrors listener): about the
// pod the manifest defines when its name could be read, else about the Node; the message names
// the source, the file or URL, and the errors. Any thread; never blocks.
void recordManifestError(EventRecorder& recorder, const config::ManifestError& error);

}  // namespace nodeagent::agent
