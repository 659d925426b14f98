#include "agent/sync_loop.h"

#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

}  // namespace

SyncLoop::SyncLoop(asio::any_io_executor executor, base::Clock& clock, SyncHandler& handler,
                   std::function<bool()> all_sources_ready, SyncLoopOptions options)
    : strand_(asio::make_strand(executor)),
      clock_(clock),
      handler_(handler),
      all_sources_ready_(std::move(all_sources_ready)),
      options_(options) {}

void SyncLoop::start() {
  started_at_ = clock_.now();
  last_tick_ = started_at_.time_since_epoch().count();
  asio::dispatch(strand_, [self = shared_from_this()] {
    self->sync_timer_ = self->clock_.makeTimer(self->strand_);
    self->housekeeping_timer_ = self->clock_.makeTimer(self->strand_);
    self->sync_timer_->asyncWaitFor(self->untilNext(self->options_.sync_period),
                                    [self] { self->tick(); });
    self->housekeeping_timer_->asyncWaitFor(self->untilNext(self->options_.housekeeping_period),
                                            [self] { self->housekeeping(); });
  });
}

void SyncLoop::stop() {
  stopped_ = true;
  asio::dispatch(strand_, [self = shared_from_this()] {
    if (self->sync_timer_) self->sync_timer_->cancel();
    if (self->housekeeping_timer_) self->housekeeping_timer_->cancel();
  });
}

void SyncLoop::onPodUpdate(api::PodUpdate update) {
  if (stopped_) return;
  asio::post(strand_, [self = shared_from_this(), u = std::move(update)] {
    if (!self->stopped_) self->handleUpdate(u);
  });
}

void SyncLoop::onPlegEvent(const PodLifecycleEvent& event) {
  if (stopped_) return;
  asio::post(strand_, [self = shared_from_this(), event] {
    if (!self->stopped_) self->handler_.handlePlegEvent(event);
  });
}

void SyncLoop::handleUpdate(const api::PodUpdate& update) {
  using Op = api::PodOperation;
  if (!update.pods.empty()) {
    log()->debug("Config update op={} source={} pods={}", api::podOperationName(update.op),
                 update.source, update.pods.size());
  }
  switch (update.op) {
    case Op::kAdd:
    case Op::kRestore:
      handler_.handlePodAdditions(update.pods);
      break;
    case Op::kUpdate:
    case Op::kDelete:
      handler_.handlePodUpdates(update.pods);
      break;
    case Op::kRemove:
      handler_.handlePodRemoves(update.pods);
      break;
    case Op::kReconcile:
      handler_.handlePodReconcile(update.pods);
      break;
    case Op::kSet:
      log()->error("The sync loop does not support snapshot updates source={}", update.source);
      break;
  }
}

void SyncLoop::tick() {
  if (stopped_) return;
  last_tick_.store(clock_.now().time_since_epoch().count(), std::memory_order_relaxed);
  auto pods = handler_.podsToSync();
  if (!pods.empty()) handler_.handlePodSyncs(pods);
  sync_timer_->asyncWaitFor(untilNext(options_.sync_period),
                            [self = shared_from_this()] { self->tick(); });
}

base::Duration SyncLoop::untilNext(base::Duration period) const {
  if (period <= base::Duration::zero()) return period;
  return period - (clock_.now() - started_at_) % period;
}

void SyncLoop::housekeeping() {
  if (stopped_) return;
  if (all_sources_ready_()) {
    handler_.handlePodCleanups();
    ++housekeeping_runs_;
  } else {
    if (housekeeping_waiting_++ == 0) {
      log()->info(
          "Housekeeping waits until every pod source is seen: containers of removed pods "
          "are not cleaned up meanwhile");
    } else {
      log()->debug("Skipping housekeeping: not every source is ready");
    }
  }
  housekeeping_timer_->asyncWaitFor(untilNext(options_.housekeeping_period),
                                    [self = shared_from_this()] { self->housekeeping(); });
}

}  // namespace nodeagent::agent
