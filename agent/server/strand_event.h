// A wake-up for coroutines on one strand: wait() returns once notify() ran (a waiter then checks
// its condition again; a notify() with nobody waiting is not remembered). A timer that never
// expires, used as an event.
#pragma once

#include "base/asio.h"

namespace nodeagent::agent {

class StrandEvent {
 public:
  explicit StrandEvent(const asio::any_io_executor& ex) : timer_(ex) {
    timer_.expires_at(asio::steady_timer::time_point::max());
  }
  void notify() { timer_.cancel(); }
  asio::awaitable<void> wait() {
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

 private:
  asio::steady_timer timer_;
};

}  // namespace nodeagent::agent
