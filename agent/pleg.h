// The pod lifecycle event generator (kubelet's PLEG), event-driven: the runtime reports container
// starts and exits as they happen (a pidfd per shim on the io_context), and a periodic relist
// (default 10 s) compares the runtime's pods with the last view to catch anything missed.
// Health: unhealthy when no relist succeeded for `relist_threshold` (3 minutes). As kubelet's, the
// relist takes a pod's sandboxes for containers of it (a CRI runtime lists them): a sandbox that
// stops being ready is a ContainerDied of its pod, whose sync then replaces it.
//
// Runs on its own strand; events go to the sink given to start() (called on that strand).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/metrics.h"
#include "agent/runtime/runtime.h"
#include "base/clock.h"

namespace nodeagent::agent {

struct PodLifecycleEvent {
  enum class Type { kContainerStarted, kContainerDied, kContainerRemoved, kContainerChanged };
  std::string pod_uid;
  Type type = Type::kContainerStarted;
  std::string container_id;  // ContainerId::toString()
};
std::string_view podLifecycleEventTypeName(PodLifecycleEvent::Type type);

struct PlegOptions {
  base::Duration relist_period = std::chrono::seconds(10);
  base::Duration relist_threshold = std::chrono::minutes(3);
};

class Pleg : public std::enable_shared_from_this<Pleg> {
 public:
  using Sink = std::function<void(const PodLifecycleEvent&)>;

  Pleg(asio::any_io_executor executor, base::Clock& clock, runtime::Runtime& runtime,
       PlegOptions options = {});

  // Installs the runtime event hook, runs a first relist and arms the periodic one. Once.
  void start(Sink sink);
  // Cancels the relist timer; events after stop() are dropped. Any thread.
  void stop();

  // Any thread. `why` gets the reason when unhealthy.
  bool healthy(std::string* why = nullptr) const;
  uint64_t relistCount() const { return relists_.load(); }
  uint64_t eventCount() const { return events_.load(); }
  // As of the last relist: pods with a running container or a ready sandbox, and running
  // containers.
  uint64_t runningPods() const { return running_pods_.load(); }
  uint64_t runningContainers() const { return running_containers_.load(); }
  // kubelet_pleg_relist_duration_seconds and kubelet_pleg_relist_interval_seconds.
  const Histogram& relistDuration() const { return relist_duration_; }
  const Histogram& relistInterval() const { return relist_interval_; }

  // Runs one relist now (tests, and the periodic timer).
  void relistNow();

 private:
  enum class State : uint8_t { kRunning, kExited, kUnknown, kNonExistent };
  // One container's last seen state, keyed by "<pod uid>\0<container id>": sorted by key, the
  // records are in pod order, then container order, and each costs one string.
  struct Record {
    std::string key;
    State state;
  };
  using Records = std::vector<Record>;  // sorted by key, each key once
  static std::string recordKey(std::string_view uid, std::string_view cid);
  // The state of `key` in `records` (kNonExistent when absent).
  static State stateOf(const Records& records, std::string_view key);
  void onRuntimeEvent(const runtime::ContainerEvent& e);
  // Folds the states set by runtime events since the last relist into records_.
  void foldEventStates();
  asio::awaitable<void> relist();
  // relist's steps.
  void observeRelistInterval(base::MonotonicTime started);
  void markRelisted(base::MonotonicTime started);
  static State convertState(runtime::ContainerState state);
  static Records containerRecords(const std::vector<runtime::Pod>& pods);
  void updateRunningPodAndContainerMetrics(const std::vector<runtime::Pod>& pods);
  // Events for the containers of records_ whose state changed in (or that are gone from) current.
  void emitChangedAndRemoved(const Records& current);
  // Events for the containers of current that records_ has not seen.
  void emitFirstSeen(const Records& current);
  // The events for one container going from old_state to now (none when they are equal).
  void generateEvents(std::string_view key, State old_state, State now);
  void emit(std::string_view key, PodLifecycleEvent::Type type);
  void armTimer();

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  runtime::Runtime& runtime_;
  PlegOptions options_;
  Sink sink_;
  base::TimerPtr timer_;
  std::atomic<bool> stopped_{false};
  bool relisting_ = false;
  // The runtime's podsVersion() at the last full list (strand only).
  std::optional<uint64_t> listed_version_;
  // Last seen state of each container (strand only): what the last relist saw, and over it the
  // states runtime events set since (a sorted vector takes no cheap inserts: the next relist
  // folds them in).
  Records records_;
  std::map<std::string, State, std::less<>> event_states_;
  std::atomic<int64_t> last_relist_ns_{0};  // MonotonicTime since epoch; 0 = never
  std::atomic<uint64_t> relists_{0};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> running_pods_{0};
  std::atomic<uint64_t> running_containers_{0};
  Histogram relist_duration_;
  Histogram relist_interval_;
  std::optional<base::MonotonicTime> last_relist_start_;  // strand only
};

}  // namespace nodeagent::agent
