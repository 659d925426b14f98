#include <memory>

#include "base/clock.h"

namespace nodeagent::base {

asio::awaitable<void> sleepFor(Clock& clock, Duration d) {
  auto ex = co_await asio::this_coro::executor;
  // A timer whose callback completes a one-shot channel-like wait: the coroutine suspends on an
  // async_initiate that the timer callback resumes.
  auto timer = clock.makeTimer(ex);
  // NOTE: the initiation lambda lives in a named variable: GCC 12 destroys the captures of a
  // lambda written inside the co_await expression twice.
  auto initiate = [&timer, d](auto handler) mutable {
    auto shared = std::make_shared<decltype(handler)>(std::move(handler));
    timer->asyncWaitFor(d, [shared]() mutable { (*shared)(); });
  };
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(initiate,
                                                                       asio::use_awaitable);
}

}  // namespace nodeagent::base
