// The only file allowed to read real time (DESIGN.md: time is injected).
#include <memory>

#include "base/clock.h"

namespace nodeagent::base {
namespace {

class RealTimer final : public Timer {
 public:
  explicit RealTimer(asio::any_io_executor ex) : timer_(std::make_shared<asio::steady_timer>(ex)) {}
  ~RealTimer() override { cancel(); }

  void asyncWaitFor(Duration d, Callback cb) override {
    cancel();
    const uint64_t gen = state_->generation;
    state_->armed = true;
    timer_->expires_after(d);
    // The handler owns the callback; a stale handler (cancelled, re-armed or destroyed timer)
    // sees a newer generation and does nothing, even if it was already queued.
    timer_->async_wait([timer = timer_, state = state_, gen,
                        cb = std::move(cb)](const boost::system::error_code& ec) mutable {
      if (ec || state->generation != gen) return;
      state->armed = false;
      cb();
    });
  }

  void cancel() override {
    ++state_->generation;
    state_->armed = false;
    timer_->cancel();
  }

  bool armed() const override { return state_->armed; }

 private:
  struct State {
    bool armed = false;
    uint64_t generation = 0;
  };
  std::shared_ptr<asio::steady_timer> timer_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

class RealClock final : public Clock {
 public:
  MonotonicTime now() const override { return std::chrono::steady_clock::now(); }
  SystemTime wallNow() const override { return std::chrono::system_clock::now(); }
  TimerPtr makeTimer(asio::any_io_executor ex) override {
    return std::make_unique<RealTimer>(std::move(ex));
  }
};

}  // namespace

Clock& realClock() {
  static RealClock clock;
  return clock;
}

}  // namespace nodeagent::base
