#include "test/support/fake_pod_workers.h"

namespace nodeagent::testing {

using podworkers::PodWorkerState;

FakePodWorkers::FakePodWorkers(asio::any_io_executor executor, podworkers::PodSyncer& syncer)
    : strand_(asio::make_strand(std::move(executor))), syncer_(&syncer) {}

void FakePodWorkers::updatePod(podworkers::UpdatePodOptions options) {
  std::lock_guard lock(mu_);
  updates_.push_back(options);
  if (!syncer_) return;
  queue_.push_back(std::move(options));
  if (draining_) return;
  draining_ = true;
  asio::co_spawn(*strand_, drain(), asio::detached);
}

asio::awaitable<void> FakePodWorkers::drain() {
  for (;;) {
    podworkers::UpdatePodOptions next;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) {
        draining_ = false;
        co_return;
      }
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    if (next.update_type == api::SyncPodType::kKill) {
      std::optional<int64_t> grace;
      podworkers::PodStatusFn status_fn;
      if (next.kill_pod_options) {
        grace = next.kill_pod_options->grace_period_seconds_override;
        status_fn = next.kill_pod_options->pod_status_fn;
      }
      base::Status s;
      if (next.runtime_pod) {
        s = co_await syncer_->syncTerminatingRuntimePod(next.pod, std::stop_token());
      } else {
        s = co_await syncer_->syncTerminatingPod(next.pod, grace, status_fn, std::stop_token());
        if (s.ok()) s = co_await syncer_->syncTerminatedPod(next.pod);
      }
      if (s.ok() && next.kill_pod_options && next.kill_pod_options->on_completed) {
        next.kill_pod_options->on_completed();
      }
    } else {
      base::StatusOr<bool> result =
          co_await syncer_->syncPod(next.update_type, next.pod, next.mirror_pod, std::stop_token());
      (void)result;
    }
  }
}

std::map<std::string, podworkers::PodWorkerSync> FakePodWorkers::syncKnownPods(
    const std::vector<api::PodPtr>& desired) {
  std::lock_guard lock(mu_);
  pods_synced_ = true;
  known_calls_.push_back(desired);
  std::set<std::string> known;
  for (const auto& p : desired) known.insert(p->metadata.uid);
  std::map<std::string, podworkers::PodWorkerSync> out;
  for (auto [uid, sync] : states_) {
    sync.orphan = !known.contains(uid);
    out[uid] = sync;
  }
  return out;
}

void FakePodWorkers::forgetWorker(const std::string& uid) {
  std::lock_guard lock(mu_);
  ++generation_;
  forgotten_.push_back(uid);
  states_.erase(uid);
}

std::vector<std::string> FakePodWorkers::getWorkToSync() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  out.swap(due_);
  return out;
}

namespace {
template <typename Map, typename Pred>
bool answer(const Map& states, const std::string& uid, bool synced, Pred pred, bool before,
            bool after) {
  auto it = states.find(uid);
  if (it != states.end()) return pred(it->second.state);
  return synced ? after : before;
}
}  // namespace

bool FakePodWorkers::isPodTerminationRequested(const std::string& uid) const {
  std::lock_guard lock(mu_);
  return answer(
      states_, uid, pods_synced_, [](PodWorkerState s) { return s != PodWorkerState::kSyncPod; },
      false, false);
}

bool FakePodWorkers::isPodKnownTerminated(const std::string& uid) const {
  std::lock_guard lock(mu_);
  return answer(
      states_, uid, pods_synced_,
      [](PodWorkerState s) { return s == PodWorkerState::kTerminatedPod; }, false, false);
}

bool FakePodWorkers::couldHaveRunningContainers(const std::string& uid) const {
  std::lock_guard lock(mu_);
  return answer(
      states_, uid, pods_synced_,
      [](PodWorkerState s) { return s != PodWorkerState::kTerminatedPod; }, true, false);
}

bool FakePodWorkers::shouldPodContainersBeTerminating(const std::string& uid) const {
  std::lock_guard lock(mu_);
  return answer(
      states_, uid, pods_synced_, [](PodWorkerState s) { return s != PodWorkerState::kSyncPod; },
      false, true);
}

bool FakePodWorkers::shouldPodRuntimeBeRemoved(const std::string& uid) const {
  std::lock_guard lock(mu_);
  return answer(
      states_, uid, pods_synced_,
      [](PodWorkerState s) { return s == PodWorkerState::kTerminatedPod; }, false, true);
}

bool FakePodWorkers::shouldPodContentBeRemoved(const std::string& uid) const {
  std::lock_guard lock(mu_);
  return answer(
      states_, uid, pods_synced_,
      [](PodWorkerState s) { return s == PodWorkerState::kTerminatedPod; }, false, true);
}

bool FakePodWorkers::isPodForMirrorPodTerminatingByFullName(const std::string& full_name) const {
  std::lock_guard lock(mu_);
  return terminating_static_.contains(full_name);
}

uint64_t FakePodWorkers::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

std::vector<podworkers::UpdatePodOptions> FakePodWorkers::updates() const {
  std::lock_guard lock(mu_);
  return updates_;
}

std::vector<std::string> FakePodWorkers::forgotten() const {
  std::lock_guard lock(mu_);
  return forgotten_;
}

std::vector<std::vector<api::PodPtr>> FakePodWorkers::knownPodsCalls() const {
  std::lock_guard lock(mu_);
  return known_calls_;
}

void FakePodWorkers::setState(const std::string& uid, PodWorkerState state, bool is_static) {
  std::lock_guard lock(mu_);
  ++generation_;
  states_[uid] = podworkers::PodWorkerSync{state, false, true, is_static};
}

void FakePodWorkers::clearState(const std::string& uid) {
  std::lock_guard lock(mu_);
  ++generation_;
  states_.erase(uid);
}

void FakePodWorkers::setTerminatingStaticFullName(const std::string& full_name, bool terminating) {
  std::lock_guard lock(mu_);
  ++generation_;
  if (terminating) {
    terminating_static_.insert(full_name);
  } else {
    terminating_static_.erase(full_name);
  }
}

void FakePodWorkers::addDue(const std::string& uid) {
  std::lock_guard lock(mu_);
  due_.push_back(uid);
}

}  // namespace nodeagent::testing
