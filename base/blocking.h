// Blocking work (file system, process creation, blocking network calls) never runs on a strand or
// an io_context thread: it runs on a pool of its own, and the coroutine that needs it waits with
// co_await. And the entry points documented "strand only" check it in debug builds.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <utility>

#include "base/asio.h"

namespace nodeagent::base {

// Runs `fn()` on `pool` and resumes the awaiting coroutine on its own executor with the result
// (`fn` must return a value: base::Status for an action). Not a coroutine itself: `fn` is moved
// into the operation before the caller suspends (GCC 12 mishandles lambda temporaries inside a
// co_await expression).
template <typename F>
auto runBlocking(asio::any_io_executor pool, F fn) -> asio::awaitable<std::invoke_result_t<F&>> {
  using R = std::invoke_result_t<F&>;
  static_assert(!std::is_void_v<R>, "runBlocking needs a result (return base::Status)");
  auto init = [pool = std::move(pool), fn = std::move(fn)](auto handler) mutable {
    auto ex = asio::get_associated_executor(handler);
    asio::post(pool, [ex, fn = std::move(fn), handler = std::move(handler)]() mutable {
      R result = fn();
      asio::post(ex, [handler = std::move(handler), result = std::move(result)]() mutable {
        std::move(handler)(std::move(result));
      });
    });
  };
  return asio::async_initiate<decltype(asio::use_awaitable), void(R)>(std::move(init),
                                                                      asio::use_awaitable);
}

// Debug builds: aborts, naming `what`, when the calling thread is not running `strand` (an entry
// point documented "strand only" called from elsewhere). Release builds: nothing.
template <typename Strand>
void assertOnStrand([[maybe_unused]] const Strand& strand, [[maybe_unused]] const char* what) {
#ifndef NDEBUG
  if (!strand.running_in_this_thread()) {
    std::fprintf(stderr, "nodeagent: %s called outside its strand\n", what);
    std::abort();
  }
#endif
}

}  // namespace nodeagent::base
