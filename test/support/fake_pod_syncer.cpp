#include "test/support/fake_pod_syncer.h"

#include <algorithm>

namespace nodeagent::testing {

std::string_view methodName(FakePodSyncer::Method method) {
  switch (method) {
    case FakePodSyncer::Method::kSyncPod:
      return "syncPod";
    case FakePodSyncer::Method::kSyncTerminatingPod:
      return "syncTerminatingPod";
    case FakePodSyncer::Method::kSyncTerminatingRuntimePod:
      return "syncTerminatingRuntimePod";
    case FakePodSyncer::Method::kSyncTerminatedPod:
      return "syncTerminatedPod";
  }
  return "unknown";
}

// A held call: the coroutine's completion handler plus how to wake it (release or cancel).
struct FakePodSyncer::Waiter {
  asio::any_io_executor executor;
  std::function<void()> resume;
  bool done = false;
  bool cancelled = false;
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
};

FakePodSyncer::FakePodSyncer() = default;

FakePodSyncer::~FakePodSyncer() {
  // Held coroutines that were never released: dropping their handlers lets Asio destroy the
  // frames (through their executor) instead of leaking them.
  std::vector<std::shared_ptr<Waiter>> waiters;
  {
    std::lock_guard lock(mu_);
    waiters.swap(waiters_);
  }
  for (auto& w : waiters) w->resume = nullptr;
}

asio::awaitable<bool> FakePodSyncer::record(Call call, std::stop_token cancel, size_t& index) {
  bool hold = false;
  std::function<void(const Call&)> hook;
  {
    std::lock_guard lock(mu_);
    call.cancelled_at_start = cancel.stop_requested();
    index = calls_.size();
    calls_.push_back(call);
    hold = held_.contains({call.method, ""}) || held_.contains({call.method, call.uid()});
    hook = on_call_;
  }
  if (hook) hook(call);
  if (!hold) co_return false;

  auto waiter = std::make_shared<Waiter>();
  waiter->executor = co_await asio::this_coro::executor;
  {
    std::lock_guard lock(mu_);
    waiters_.push_back(waiter);
  }
  // NOTE: the initiation captures only pointers: GCC 12 can destroy non-trivial temporaries of a
  // co_await expression twice.
  Waiter* raw = waiter.get();
  std::stop_token* token = &cancel;
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [this, raw, token](auto handler) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        std::function<void()> resume = [shared]() mutable { (*shared)(); };
        bool released = false;
        {
          std::lock_guard lock(mu_);
          released = raw->done;
          if (!released) raw->resume = resume;
        }
        // Released before it suspended: resume at once (through the executor).
        if (released) asio::post(raw->executor, std::move(resume));
        // Runs at once when the token has already fired.
        raw->on_stop.emplace(*token, std::function<void()>([this, raw] { wake(raw, true); }));
      },
      asio::use_awaitable);
  waiter->on_stop.reset();
  co_return waiter->cancelled;
}

void FakePodSyncer::wake(Waiter* waiter, bool cancelled) {
  std::function<void()> resume;
  asio::any_io_executor ex;
  {
    std::lock_guard lock(mu_);
    if (waiter->done) return;
    waiter->done = true;
    waiter->cancelled = cancelled;
    resume = std::move(waiter->resume);
    ex = waiter->executor;
    std::erase_if(waiters_, [waiter](const auto& w) { return w.get() == waiter; });
  }
  if (resume) asio::post(ex, std::move(resume));
}

void FakePodSyncer::finish(size_t index, bool cancelled) {
  std::lock_guard lock(mu_);
  calls_[index].finished = true;
  calls_[index].cancelled = cancelled;
}

asio::awaitable<base::StatusOr<bool>> FakePodSyncer::syncPod(api::SyncPodType type, api::PodPtr pod,
                                                             api::PodPtr mirror_pod,
                                                             std::stop_token cancel) {
  Call call;
  call.method = Method::kSyncPod;
  call.type = type;
  call.pod = std::move(pod);
  call.mirror_pod = std::move(mirror_pod);
  size_t index = 0;
  const bool cancelled = co_await record(std::move(call), cancel, index);
  finish(index, cancelled);
  if (cancelled) co_return base::cancelledError("syncPod cancelled");
  std::lock_guard lock(mu_);
  if (sync_results_.empty()) co_return false;
  auto result = std::move(sync_results_.front());
  sync_results_.pop_front();
  co_return result;
}

namespace {
base::Status popOr(std::deque<base::Status>& results) {
  if (results.empty()) return base::okStatus();
  auto s = std::move(results.front());
  results.pop_front();
  return s;
}
}  // namespace

asio::awaitable<base::Status> FakePodSyncer::syncTerminatingPod(
    api::PodPtr pod, std::optional<int64_t> grace_period_seconds, podworkers::PodStatusFn status_fn,
    std::stop_token cancel) {
  Call call;
  call.method = Method::kSyncTerminatingPod;
  call.type = api::SyncPodType::kKill;
  call.pod = std::move(pod);
  call.grace_period = grace_period_seconds;
  call.has_status_fn = static_cast<bool>(status_fn);
  size_t index = 0;
  const bool cancelled = co_await record(std::move(call), cancel, index);
  finish(index, cancelled);
  if (cancelled) co_return base::cancelledError("syncTerminatingPod cancelled");
  std::lock_guard lock(mu_);
  co_return popOr(terminating_results_);
}

asio::awaitable<base::Status> FakePodSyncer::syncTerminatingRuntimePod(api::PodPtr pod,
                                                                       std::stop_token cancel) {
  Call call;
  call.method = Method::kSyncTerminatingRuntimePod;
  call.type = api::SyncPodType::kKill;
  call.pod = std::move(pod);
  size_t index = 0;
  const bool cancelled = co_await record(std::move(call), cancel, index);
  finish(index, cancelled);
  if (cancelled) co_return base::cancelledError("syncTerminatingRuntimePod cancelled");
  std::lock_guard lock(mu_);
  co_return popOr(runtime_results_);
}

bool FakePodSyncer::trySettledSync(const api::PodPtr&, const api::PodPtr&) {
  if (!settled.load()) return false;
  ++settled_syncs;
  return true;
}

asio::awaitable<base::Status> FakePodSyncer::syncTerminatedPod(api::PodPtr pod) {
  Call call;
  call.method = Method::kSyncTerminatedPod;
  call.pod = std::move(pod);
  size_t index = 0;
  const bool cancelled = co_await record(std::move(call), std::stop_token(), index);
  finish(index, cancelled);
  std::lock_guard lock(mu_);
  co_return popOr(terminated_results_);
}

void FakePodSyncer::pushSyncPodResult(base::StatusOr<bool> result) {
  std::lock_guard lock(mu_);
  sync_results_.push_back(std::move(result));
}

void FakePodSyncer::pushResult(Method method, base::Status status) {
  std::lock_guard lock(mu_);
  switch (method) {
    case Method::kSyncPod:
      if (status.ok()) {
        sync_results_.push_back(false);
      } else {
        sync_results_.push_back(std::move(status));
      }
      break;
    case Method::kSyncTerminatingPod:
      terminating_results_.push_back(std::move(status));
      break;
    case Method::kSyncTerminatingRuntimePod:
      runtime_results_.push_back(std::move(status));
      break;
    case Method::kSyncTerminatedPod:
      terminated_results_.push_back(std::move(status));
      break;
  }
}

void FakePodSyncer::holdCalls(Method method, std::optional<std::string> uid) {
  std::lock_guard lock(mu_);
  held_.insert({method, uid.value_or("")});
}

void FakePodSyncer::stopHolding() {
  std::lock_guard lock(mu_);
  held_.clear();
}

void FakePodSyncer::release() {
  std::vector<std::pair<asio::any_io_executor, std::function<void()>>> resumes;
  {
    std::lock_guard lock(mu_);
    for (auto& w : waiters_) {
      w->done = true;
      if (w->resume) resumes.emplace_back(w->executor, std::move(w->resume));
    }
    waiters_.clear();
  }
  for (auto& [ex, resume] : resumes) asio::post(ex, std::move(resume));
}

size_t FakePodSyncer::heldCount() const {
  std::lock_guard lock(mu_);
  return waiters_.size();
}

void FakePodSyncer::setOnCall(std::function<void(const Call&)> hook) {
  std::lock_guard lock(mu_);
  on_call_ = std::move(hook);
}

std::vector<FakePodSyncer::Call> FakePodSyncer::calls() const {
  std::lock_guard lock(mu_);
  return calls_;
}

std::vector<FakePodSyncer::Call> FakePodSyncer::callsFor(const std::string& uid) const {
  std::lock_guard lock(mu_);
  std::vector<Call> out;
  std::copy_if(calls_.begin(), calls_.end(), std::back_inserter(out),
               [&uid](const Call& c) { return c.uid() == uid; });
  return out;
}

std::vector<FakePodSyncer::Call> FakePodSyncer::callsOf(Method method) const {
  std::lock_guard lock(mu_);
  std::vector<Call> out;
  std::copy_if(calls_.begin(), calls_.end(), std::back_inserter(out),
               [method](const Call& c) { return c.method == method; });
  return out;
}

size_t FakePodSyncer::callCount() const {
  std::lock_guard lock(mu_);
  return calls_.size();
}

size_t FakePodSyncer::activeCount() const {
  std::lock_guard lock(mu_);
  return static_cast<size_t>(
      std::count_if(calls_.begin(), calls_.end(), [](const Call& c) { return !c.finished; }));
}

}  // namespace nodeagent::testing
