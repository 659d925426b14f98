// Injected time. Everything in nodeagent that waits, times out, backs off or stamps a time asks a
// Clock; only base/real_clock.cpp reads the real clocks. Tests use test/support/fake_clock.h, whose
// timers fire only when the test advances time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "base/asio.h"

namespace nodeagent::base {

using MonotonicTime = std::chrono::steady_clock::time_point;
using SystemTime = std::chrono::system_clock::time_point;
using Duration = std::chrono::nanoseconds;

// A one-shot timer bound to an executor (usually a strand). Not thread-safe: arm and cancel it on
// its executor.
class Timer {
 public:
  using Callback = std::function<void()>;
  virtual ~Timer() = default;

  // Arms the timer; `cb` runs on the timer's executor once `d` has passed. Re-arming drops the
  // previous callback without running it.
  virtual void asyncWaitFor(Duration d, Callback cb) = 0;
  // Drops the pending callback (if any) without running it. Destroying the timer cancels it too.
  virtual void cancel() = 0;
  virtual bool armed() const = 0;
};
using TimerPtr = std::unique_ptr<Timer>;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonotonicTime now() const = 0;
  virtual SystemTime wallNow() const = 0;
  virtual TimerPtr makeTimer(asio::any_io_executor ex) = 0;
};

// The process-wide real clock.
Clock& realClock();

// Suspends the calling coroutine for `d` on its own executor, using a timer of `clock`.
asio::awaitable<void> sleepFor(Clock& clock, Duration d);

}  // namespace nodeagent::base
