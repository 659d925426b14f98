// The sync loop (kubelet's syncLoop): one strand that serves config updates, PLEG events, a 1 s
// sync tick (pods due for a resync or past their deadline) and 2 s housekeeping, calling the
// SyncHandler. Inputs arrive from any thread and are queued on the strand in arrival order; each
// kind of input is handled as one strand task, so no source starves another. The tick and
// housekeeping keep their phase from start() (as Go's tickers do: a late run does not push the
// next one back), so a housekeeping run falls on a tick and both cost the process one wakeup.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "agent/pleg.h"
#include "agent/sync_handler.h"
#include "api/pod_update.h"
#include "base/clock.h"

namespace nodeagent::agent {

struct SyncLoopOptions {
  base::Duration sync_period = std::chrono::seconds(1);
  base::Duration housekeeping_period = std::chrono::seconds(2);
};

class SyncLoop : public std::enable_shared_from_this<SyncLoop> {
 public:
  // `all_sources_ready` gates housekeeping (kubelet's sourcesReady.AllReady); any thread.
  SyncLoop(asio::any_io_executor executor, base::Clock& clock, SyncHandler& handler,
           std::function<bool()> all_sources_ready, SyncLoopOptions options = {});

  void start();
  // Cancels the timers; inputs after stop() are dropped. Any thread.
  void stop();

  // Any thread.
  void onPodUpdate(api::PodUpdate update);
  void onPlegEvent(const PodLifecycleEvent& event);

  asio::strand<asio::any_io_executor>& strand() { return strand_; }
  uint64_t housekeepingRuns() const { return housekeeping_runs_.load(); }
  // Housekeeping periods that passed without a run because a source was not ready.
  uint64_t housekeepingWaitingForSources() const { return housekeeping_waiting_.load(); }
  // When the sync tick last ran (start() counts as one): a loop whose strand is stuck stops
  // ticking. Any thread.
  base::MonotonicTime lastTick() const {
    return base::MonotonicTime(base::Duration(last_tick_.load(std::memory_order_relaxed)));
  }

 private:
  void handleUpdate(const api::PodUpdate& update);
  void tick();
  void housekeeping();
  // From now to the next multiple of `period` after start().
  base::Duration untilNext(base::Duration period) const;

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  SyncHandler& handler_;
  std::function<bool()> all_sources_ready_;
  SyncLoopOptions options_;
  base::TimerPtr sync_timer_;
  base::TimerPtr housekeeping_timer_;
  base::MonotonicTime started_at_{};
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> housekeeping_runs_{0};
  std::atomic<uint64_t> housekeeping_waiting_{0};
  std::atomic<int64_t> last_tick_{0};  // lastTick() as nanoseconds
};

}  // namespace nodeagent::agent
