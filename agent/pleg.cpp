#include "agent/pleg.h"

#include <algorithm>

#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("pleg")

}  // namespace

std::string_view podLifecycleEventTypeName(PodLifecycleEvent::Type type) {
  switch (type) {
    case PodLifecycleEvent::Type::kContainerStarted:
      return "ContainerStarted";
    case PodLifecycleEvent::Type::kContainerDied:
      return "ContainerDied";
    case PodLifecycleEvent::Type::kContainerRemoved:
      return "ContainerRemoved";
    case PodLifecycleEvent::Type::kContainerChanged:
      return "ContainerChanged";
  }
  return "Unknown";
}

Pleg::Pleg(asio::any_io_executor executor, base::Clock& clock, runtime::Runtime& runtime,
           PlegOptions options)
    : strand_(asio::make_strand(executor)), clock_(clock), runtime_(runtime), options_(options) {}

void Pleg::start(Sink sink) {
  sink_ = std::move(sink);
  std::weak_ptr<Pleg> weak = weak_from_this();
  runtime_.setEventHandler([weak](const runtime::ContainerEvent& e) {
    if (auto self = weak.lock()) {
      asio::dispatch(self->strand_, [self, e] { self->onRuntimeEvent(e); });
    }
  });
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->timer_ = self->clock_.makeTimer(self->strand_);
    self->relistNow();
  });
}

void Pleg::stop() {
  stopped_ = true;
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (self->timer_) self->timer_->cancel();
  });
}

bool Pleg::healthy(std::string* why) const {
  auto last = last_relist_ns_.load();
  if (last == 0) {
    if (why != nullptr) *why = "pleg has yet to be successful";
    return false;
  }
  auto since = clock_.now().time_since_epoch() - base::Duration(last);
  if (since > options_.relist_threshold) {
    if (why != nullptr) {
      *why =
          "pleg was last seen active " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(since).count()) +
          "s ago; threshold is " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::seconds>(options_.relist_threshold).count()) +
          "s";
    }
    return false;
  }
  return true;
}

std::string Pleg::recordKey(std::string_view uid, std::string_view cid) {
  std::string key;
  key.reserve(uid.size() + 1 + cid.size());
  key.append(uid).push_back('\0');
  key.append(cid);
  return key;
}

Pleg::State Pleg::stateOf(const Records& records, std::string_view key) {
  auto it = std::lower_bound(records.begin(), records.end(), key,
                             [](const Record& r, std::string_view k) { return r.key < k; });
  return it != records.end() && it->key == key ? it->state : State::kNonExistent;
}

void Pleg::emit(std::string_view key, PodLifecycleEvent::Type type) {
  if (stopped_ || !sink_) return;
  ++events_;
  const auto sep = key.find('\0');
  sink_(PodLifecycleEvent{std::string(key.substr(0, sep)), type, std::string(key.substr(sep + 1))});
}

void Pleg::onRuntimeEvent(const runtime::ContainerEvent& e) {
  auto key = recordKey(e.pod_uid, e.container_id.toString());
  auto it = event_states_.find(key);
  // A container seen for the first time has no state yet.
  const State old_state = it != event_states_.end() ? it->second : stateOf(records_, key);
  const bool started = e.type == runtime::ContainerEvent::Type::kStarted;
  const State now = started ? State::kRunning : State::kExited;
  if (old_state == now) return;
  // Recorded before the event goes out: the sink may start a relist, which folds these states.
  if (it != event_states_.end()) {
    it->second = now;
  } else {
    it = event_states_.emplace(std::move(key), now).first;
  }
  emit(it->first, started ? PodLifecycleEvent::Type::kContainerStarted
                          : PodLifecycleEvent::Type::kContainerDied);
}

void Pleg::foldEventStates() {
  if (event_states_.empty()) return;
  Records merged;
  merged.reserve(records_.size() + event_states_.size());
  auto r = records_.begin();
  for (auto& [key, state] : event_states_) {
    for (; r != records_.end() && r->key < key; ++r) merged.push_back(std::move(*r));
    if (r != records_.end() && r->key == key) ++r;  // the event's state replaces it
    merged.push_back(Record{key, state});
  }
  for (; r != records_.end(); ++r) merged.push_back(std::move(*r));
  records_ = std::move(merged);
  event_states_.clear();
}

void Pleg::relistNow() {
  asio::co_spawn(
      strand_, [self = shared_from_this()]() -> asio::awaitable<void> { co_await self->relist(); },
      asio::detached);
}

void Pleg::armTimer() {
  if (stopped_ || !timer_) return;
  timer_->asyncWaitFor(options_.relist_period, [self = shared_from_this()] { self->relistNow(); });
}

// As kubelet's GenericPLEG.relist: lists the runtime's pods (unless the runtime says nothing
// changed since the last list), records each container's state and emits an event for every
// container whose state differs from the previous relist's.
asio::awaitable<void> Pleg::relist() {
  if (relisting_ || stopped_) co_return;
  relisting_ = true;
  auto started = clock_.now();
  observeRelistInterval(started);
  ScopedTimer timing(relist_duration_, clock_);
  // Read before listing: a change while the list is built shows as a new version next time.
  const auto version = runtime_.podsVersion();
  if (version && listed_version_ == version) {
    relisting_ = false;
    foldEventStates();
    markRelisted(started);
    armTimer();
    co_return;
  }
  auto pods = co_await runtime_.getPods(true);
  relisting_ = false;
  // Events that arrived while listing count as what the last relist saw, as they always have.
  foldEventStates();
  if (!pods.ok()) {
    log()->warn("Relist failed, keeping the previous view err={}", pods.status().toString());
    armTimer();
    co_return;
  }
  markRelisted(started);
  listed_version_ = version;
  updateRunningPodAndContainerMetrics(*pods);
  auto current = containerRecords(*pods);
  // Old records first (changes and removals), then containers seen for the first time.
  emitChangedAndRemoved(current);
  emitFirstSeen(current);
  records_ = std::move(current);
  armTimer();
}

void Pleg::observeRelistInterval(base::MonotonicTime started) {
  if (last_relist_start_) {
    relist_interval_.observe(std::chrono::duration<double>(started - *last_relist_start_).count());
  }
  last_relist_start_ = started;
}

void Pleg::markRelisted(base::MonotonicTime started) {
  last_relist_ns_ = started.time_since_epoch().count();
  ++relists_;
}

Pleg::State Pleg::convertState(runtime::ContainerState state) {
  if (state == runtime::ContainerState::kRunning) return State::kRunning;
  if (state == runtime::ContainerState::kExited) return State::kExited;
  return State::kUnknown;
}

Pleg::Records Pleg::containerRecords(const std::vector<runtime::Pod>& pods) {
  Records current;
  for (const auto& pod : pods) {
    // kubelet's relist treats a sandbox as one more container of its pod.
    for (const auto* list : {&pod.containers, &pod.sandboxes}) {
      for (const auto& c : *list) {
        current.push_back(Record{recordKey(pod.uid, c.id.toString()), convertState(c.state)});
      }
    }
  }
  std::stable_sort(current.begin(), current.end(),
                   [](const Record& a, const Record& b) { return a.key < b.key; });
  // A container listed twice keeps its last record, as the map it was once built in did.
  size_t kept = 0;
  for (auto& record : current) {
    if (kept > 0 && current[kept - 1].key == record.key) {
      current[kept - 1].state = record.state;
    } else {
      if (&current[kept] != &record) current[kept] = std::move(record);
      ++kept;
    }
  }
  current.resize(kept);
  return current;
}

void Pleg::updateRunningPodAndContainerMetrics(const std::vector<runtime::Pod>& pods) {
  uint64_t running_pods = 0;
  uint64_t running_containers = 0;
  for (const auto& pod : pods) {
    // kubelet_running_pods counts pods with a ready sandbox; a runtime without sandboxes has a
    // running pod while a container of it runs.
    bool pod_running = false;
    for (const auto& c : pod.containers) {
      if (c.state == runtime::ContainerState::kRunning) {
        ++running_containers;
        pod_running = true;
      }
    }
    for (const auto& s : pod.sandboxes) {
      if (s.state == runtime::ContainerState::kRunning) pod_running = true;
    }
    if (pod_running) ++running_pods;
  }
  running_pods_ = running_pods;
  running_containers_ = running_containers;
}

// Both walk records_ and `current` side by side (both sorted by key): events come in key order,
// pod by pod.
void Pleg::emitChangedAndRemoved(const Records& current) {
  auto cur = current.begin();
  for (const auto& [key, old_state] : records_) {
    while (cur != current.end() && cur->key < key) ++cur;
    const bool listed = cur != current.end() && cur->key == key;
    generateEvents(key, old_state, listed ? cur->state : State::kNonExistent);
  }
}

void Pleg::emitFirstSeen(const Records& current) {
  auto old = records_.begin();
  for (const auto& [key, state] : current) {
    while (old != records_.end() && old->key < key) ++old;
    if (old != records_.end() && old->key == key) continue;
    // A container listed for the first time did not exist before.
    generateEvents(key, State::kNonExistent, state);
  }
}

void Pleg::generateEvents(std::string_view key, State old_state, State now) {
  using T = PodLifecycleEvent::Type;
  if (now == old_state) return;
  switch (now) {
    case State::kRunning:
      emit(key, T::kContainerStarted);
      break;
    case State::kExited:
      emit(key, T::kContainerDied);
      break;
    case State::kUnknown:
      emit(key, T::kContainerChanged);
      break;
    case State::kNonExistent:
      if (old_state != State::kExited) emit(key, T::kContainerDied);
      emit(key, T::kContainerRemoved);
      break;
  }
}

}  // namespace nodeagent::agent
