// A Clock whose time moves only when a test calls advance(). Due timers fire in (deadline,
// arming order) and their callbacks are posted to the timer's executor; drain with ioc.poll().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "base/clock.h"

namespace nodeagent::testing {

class FakeClock final : public base::Clock {
 public:
  FakeClock();
  ~FakeClock() override;

  base::MonotonicTime now() const override;
  base::SystemTime wallNow() const override;
  base::TimerPtr makeTimer(asio::any_io_executor ex) override;

  // Moves time forward and posts every timer due by the new time.
  void advance(base::Duration d);
  void setWallTime(base::SystemTime t);
  // Number of armed timers (any executor).
  size_t pendingTimers() const;
  // Time until the earliest armed timer, if any.
  std::optional<base::Duration> nextDeadlineIn() const;

  // Internal, used by FakeTimer.
  struct Alarm {
    asio::any_io_executor ex;
    std::function<void()> cb;
  };
  using Key = std::pair<base::MonotonicTime, uint64_t>;
  Key schedule(base::Duration d, Alarm alarm);
  void unschedule(const Key& key);

 private:
  mutable std::mutex mu_;
  base::MonotonicTime now_;
  base::SystemTime wall_;
  uint64_t seq_ = 0;
  std::map<Key, Alarm> alarms_;
};

}  // namespace nodeagent::testing
