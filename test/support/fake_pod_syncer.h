// A PodSyncer for tests: records every call, returns scripted results, and can hold calls until
// the test releases them (or their stop_token fires), to test coalescing and cancellation.
// Safe from any thread; held calls resume on their own executor (the pod strand).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "podworkers/pod_syncer.h"

namespace nodeagent::testing {

class FakePodSyncer final : public podworkers::PodSyncer {
 public:
  enum class Method {
    kSyncPod,
    kSyncTerminatingPod,
    kSyncTerminatingRuntimePod,
    kSyncTerminatedPod
  };

  struct Call {
    Method method = Method::kSyncPod;
    api::SyncPodType type = api::SyncPodType::kSync;  // syncPod only
    api::PodPtr pod;
    api::PodPtr mirror_pod;               // syncPod only
    std::optional<int64_t> grace_period;  // syncTerminatingPod only
    bool has_status_fn = false;           // syncTerminatingPod only
    bool cancelled_at_start = false;      // the stop_token had fired when the call began
    bool cancelled = false;               // the call returned Cancelled because its token fired
    bool finished = false;                // the call has returned
    std::string uid() const { return pod ? pod->metadata.uid : std::string(); }
  };

  FakePodSyncer();
  ~FakePodSyncer() override;

  asio::awaitable<base::StatusOr<bool>> syncPod(api::SyncPodType type, api::PodPtr pod,
                                                api::PodPtr mirror_pod,
                                                std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatingPod(api::PodPtr pod,
                                                   std::optional<int64_t> grace_period_seconds,
                                                   podworkers::PodStatusFn status_fn,
                                                   std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatingRuntimePod(api::PodPtr pod,
                                                          std::stop_token cancel) override;
  asio::awaitable<base::Status> syncTerminatedPod(api::PodPtr pod) override;
  // Answers `settled` (and counts the calls that answered true).
  bool trySettledSync(const api::PodPtr& pod, const api::PodPtr& mirror_pod) override;
  std::atomic<bool> settled{false};
  std::atomic<int> settled_syncs{0};

  // Scripted results, consumed in order per method; when empty: OK (syncPod: not terminal).
  void pushSyncPodResult(base::StatusOr<bool> result);
  void pushResult(Method method, base::Status status);

  // While set for a method, its calls (any UID, or only `uid` when given) suspend until
  // release() or until their stop_token fires (then they return Cancelled).
  void holdCalls(Method method, std::optional<std::string> uid = std::nullopt);
  void stopHolding();
  // Resumes every held call (they complete with their scripted result when the executor runs).
  void release();
  size_t heldCount() const;

  // Runs inside each call, before it may be held (e.g. to send updates from "inside" a sync).
  void setOnCall(std::function<void(const Call&)> hook);

  std::vector<Call> calls() const;
  std::vector<Call> callsFor(const std::string& uid) const;
  std::vector<Call> callsOf(Method method) const;
  size_t callCount() const;
  // Calls that started and have not returned yet.
  size_t activeCount() const;

 private:
  struct Waiter;
  asio::awaitable<bool> record(Call call, std::stop_token cancel, size_t& index);
  void finish(size_t index, bool cancelled);
  void wake(Waiter* waiter, bool cancelled);

  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::deque<base::StatusOr<bool>> sync_results_;
  std::deque<base::Status> terminating_results_;
  std::deque<base::Status> runtime_results_;
  std::deque<base::Status> terminated_results_;
  std::set<std::pair<Method, std::string>> held_;  // "" = every UID
  std::vector<std::shared_ptr<Waiter>> waiters_;
  std::function<void(const Call&)> on_call_;
};

std::string_view methodName(FakePodSyncer::Method method);

}  // namespace nodeagent::testing
