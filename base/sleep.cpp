#include <memory>

#include "base/clock.h"

namespace nodeagent::base {

asio::awaitable<void> sleepFor(Clock& clock, Duration d) {
  auto ex = co_await asio::this_coro::executor;
  // A timer whose callback completes a one-shot channel-like wait: the coroutine suspends on an
  // async_initiate that the timer callback resumes.
  auto timer = clock.makeTimer(ex);
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(
      [&timer, d](auto handler) mutable {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        timer->asyncWaitFor(d, [shared]() mutable { (*shared)(); });
      },
      asio::use_awaitable);
}

}  // namespace nodeagent::base
