#include "test/support/fake_clock.h"

#include <vector>

namespace nodeagent::testing {
namespace {

class FakeTimer final : public base::Timer {
 public:
  FakeTimer(FakeClock& clock, asio::any_io_executor ex) : clock_(clock), ex_(std::move(ex)) {}
  ~FakeTimer() override { cancel(); }

  void asyncWaitFor(base::Duration d, Callback cb) override {
    cancel();
    auto state = state_;
    const uint64_t gen = ++state->generation;
    state->armed = true;
    key_ = clock_.schedule(d, FakeClock::Alarm{ex_, [state, gen, cb = std::move(cb)]() {
                                                 if (state->generation != gen) return;
                                                 state->armed = false;
                                                 cb();
                                               }});
  }

  void cancel() override {
    ++state_->generation;
    state_->armed = false;
    if (key_) clock_.unschedule(*key_);
    key_.reset();
  }

  bool armed() const override { return state_->armed; }

 private:
  struct State {
    uint64_t generation = 0;
    bool armed = false;
  };
  FakeClock& clock_;
  asio::any_io_executor ex_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::optional<FakeClock::Key> key_;
};

}  // namespace

FakeClock::FakeClock()
    : now_(base::MonotonicTime(std::chrono::hours(1000))),
      wall_(base::SystemTime(std::chrono::seconds(1767225600))) {}  // 2026-01-01T00:00:00Z

FakeClock::~FakeClock() {
  // Alarms hold callbacks that may own timers; destroy them outside the lock.
  std::map<Key, Alarm> doomed;
  {
    std::lock_guard lock(mu_);
    doomed.swap(alarms_);
  }
}

base::MonotonicTime FakeClock::now() const {
  std::lock_guard lock(mu_);
  return now_;
}

base::SystemTime FakeClock::wallNow() const {
  std::lock_guard lock(mu_);
  return wall_;
}

base::TimerPtr FakeClock::makeTimer(asio::any_io_executor ex) {
  return std::make_unique<FakeTimer>(*this, std::move(ex));
}

void FakeClock::setWallTime(base::SystemTime t) {
  std::lock_guard lock(mu_);
  wall_ = t;
}

FakeClock::Key FakeClock::schedule(base::Duration d, Alarm alarm) {
  std::lock_guard lock(mu_);
  if (d < base::Duration::zero()) d = base::Duration::zero();
  Key key{now_ + d, seq_++};
  alarms_.emplace(key, std::move(alarm));
  return key;
}

void FakeClock::unschedule(const Key& key) {
  Alarm doomed;
  {
    std::lock_guard lock(mu_);
    auto it = alarms_.find(key);
    if (it == alarms_.end()) return;
    doomed = std::move(it->second);
    alarms_.erase(it);
  }
}

void FakeClock::advance(base::Duration d) {
  std::vector<Alarm> due;
  {
    std::lock_guard lock(mu_);
    now_ += d;
    wall_ += std::chrono::duration_cast<base::SystemTime::duration>(d);
    while (!alarms_.empty() && alarms_.begin()->first.first <= now_) {
      due.push_back(std::move(alarms_.begin()->second));
      alarms_.erase(alarms_.begin());
    }
  }
  for (auto& alarm : due) asio::post(alarm.ex, std::move(alarm.cb));
}

size_t FakeClock::pendingTimers() const {
  std::lock_guard lock(mu_);
  return alarms_.size();
}

std::optional<base::Duration> FakeClock::nextDeadlineIn() const {
  std::lock_guard lock(mu_);
  if (alarms_.empty()) return std::nullopt;
  return alarms_.begin()->first.first - now_;
}

}  // namespace nodeagent::testing
