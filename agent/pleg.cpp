#include "agent/pleg.h"

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

void Pleg::emit(const std::string& uid, PodLifecycleEvent::Type type, const std::string& cid) {
  if (stopped_ || !sink_) return;
  ++events_;
  sink_(PodLifecycleEvent{uid, type, cid});
}

void Pleg::onRuntimeEvent(const runtime::ContainerEvent& e) {
  auto cid = e.container_id.toString();
  auto& containers = records_[e.pod_uid];
  // A container seen for the first time has no state yet (a default State would be kRunning).
  auto& state = containers.try_emplace(cid, State::kNonExistent).first->second;
  if (e.type == runtime::ContainerEvent::Type::kStarted) {
    if (state == State::kRunning) return;
    state = State::kRunning;
    emit(e.pod_uid, PodLifecycleEvent::Type::kContainerStarted, cid);
  } else {
    if (state == State::kExited) return;
    state = State::kExited;
    emit(e.pod_uid, PodLifecycleEvent::Type::kContainerDied, cid);
  }
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
    markRelisted(started);
    armTimer();
    co_return;
  }
  auto pods = co_await runtime_.getPods(true);
  relisting_ = false;
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
    auto& containers = current[pod.uid];
    for (const auto& c : pod.containers) containers[c.id.toString()] = convertState(c.state);
  }
  return current;
}

void Pleg::updateRunningPodAndContainerMetrics(const std::vector<runtime::Pod>& pods) {
  uint64_t running_pods = 0;
  uint64_t running_containers = 0;
  for (const auto& pod : pods) {
    bool pod_running = false;
    for (const auto& c : pod.containers) {
      if (c.state == runtime::ContainerState::kRunning) {
        ++running_containers;
        pod_running = true;
      }
    }
    if (pod_running) ++running_pods;
  }
  running_pods_ = running_pods;
  running_containers_ = running_containers;
}

void Pleg::emitChangedAndRemoved(const Records& current) {
  for (const auto& [uid, old_containers] : records_) {
    auto cur_pod = current.find(uid);
    for (const auto& [cid, old_state] : old_containers) {
      State now = State::kNonExistent;
      if (cur_pod != current.end()) {
        auto it = cur_pod->second.find(cid);
        if (it != cur_pod->second.end()) now = it->second;
      }
      generateEvents(uid, cid, old_state, now);
    }
  }
}

void Pleg::emitFirstSeen(const Records& current) {
  for (const auto& [uid, containers] : current) {
    auto old_pod = records_.find(uid);
    for (const auto& [cid, state] : containers) {
      if (old_pod != records_.end() && old_pod->second.count(cid) > 0) continue;
      // A container listed for the first time did not exist before.
      generateEvents(uid, cid, State::kNonExistent, state);
    }
  }
}

void Pleg::generateEvents(const std::string& uid, const std::string& cid, State old_state,
                          State now) {
  using T = PodLifecycleEvent::Type;
  if (now == old_state) return;
  switch (now) {
    case State::kRunning:
      emit(uid, T::kContainerStarted, cid);
      break;
    case State::kExited:
      emit(uid, T::kContainerDied, cid);
      break;
    case State::kUnknown:
      emit(uid, T::kContainerChanged, cid);
      break;
    case State::kNonExistent:
      if (old_state != State::kExited) emit(uid, T::kContainerDied, cid);
      emit(uid, T::kContainerRemoved, cid);
      break;
  }
}

}  // namespace nodeagent::agent
