#include "base/readable_wait.h"

#include <fcntl.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <memory>

namespace nodeagent::base {
namespace {

struct Pipe {
  int r = -1;
  int w = -1;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    if (w >= 0) ::close(w);
  }
};

using Descriptor = asio::posix::stream_descriptor;

// Builds the situation in which the reactor applies a stale event: descriptor `first` is
// readable and its event is collected, then a handler queued ahead of that event closes `first`
// and starts `wait` on a fresh descriptor for `second` (which is not readable), so the fresh
// descriptor takes over the recycled reactor state that the stale event points to.
// Returns the fresh descriptor. `ctx` is polled once.
std::shared_ptr<Descriptor> staleEventOnFreshDescriptor(
    asio::io_context& ctx, Pipe& first, Pipe& second,
    const std::function<void(std::shared_ptr<Descriptor>)>& wait) {
  auto old_sd = std::make_shared<Descriptor>(ctx, first.r);
  old_sd->async_wait(Descriptor::wait_read, [](const boost::system::error_code&) {});
  REQUIRE(::write(first.w, "x", 1) == 1);
  std::shared_ptr<Descriptor> fresh;
  asio::post(ctx, [&] {
    old_sd->close();
    fresh = std::make_shared<Descriptor>(ctx, second.r);
    wait(fresh);
  });
  ctx.poll();
  REQUIRE(fresh);
  return fresh;
}

TEST_CASE(
    "a bare async_wait completes on a stale event of a closed descriptor (the reactor "
    "behaviour the readable waits guard against)",
    "[unit][base][readable_wait]") {
  asio::io_context ctx;
  Pipe first, second;
  bool woke = false;
  auto fresh = staleEventOnFreshDescriptor(ctx, first, second, [&](std::shared_ptr<Descriptor> sd) {
    sd->async_wait(Descriptor::wait_read, [&](const boost::system::error_code& ec) {
      if (!ec) woke = true;
    });
  });
  // If this fails, the reactor no longer delivers stale events and the test below proves
  // nothing: rebuild the situation for the new reactor.
  REQUIRE(woke);
  CHECK_FALSE(pollsReadable(second.r));
}

TEST_CASE(
    "asyncWaitReadable ignores a stale wake-up and completes when the descriptor is "
    "readable",
    "[unit][base][readable_wait]") {
  asio::io_context ctx;
  Pipe first, second;
  int completions = 0;
  boost::system::error_code result = asio::error::would_block;
  auto fresh = staleEventOnFreshDescriptor(ctx, first, second, [&](std::shared_ptr<Descriptor> sd) {
    asyncWaitReadable(std::move(sd), [&](const boost::system::error_code& ec) {
      ++completions;
      result = ec;
    });
  });
  CHECK(completions == 0);
  REQUIRE(::write(second.w, "y", 1) == 1);
  ctx.restart();
  ctx.poll();
  CHECK(completions == 1);
  CHECK_FALSE(result);
}

TEST_CASE("asyncWaitReadable reports a cancelled wait", "[unit][base][readable_wait]") {
  asio::io_context ctx;
  Pipe pipe;
  auto sd = std::make_shared<Descriptor>(ctx, pipe.r);
  boost::system::error_code result;
  int completions = 0;
  asyncWaitReadable(sd, [&](const boost::system::error_code& ec) {
    ++completions;
    result = ec;
  });
  ctx.poll();
  CHECK(completions == 0);
  sd->cancel();
  ctx.restart();
  ctx.poll();
  CHECK(completions == 1);
  CHECK(result == asio::error::operation_aborted);
}

TEST_CASE("waitReadable ignores a stale wake-up and returns when the descriptor is readable",
          "[unit][base][readable_wait]") {
  asio::io_context ctx;
  Pipe first, second;
  bool done = false;
  boost::system::error_code result = asio::error::would_block;
  auto fresh = staleEventOnFreshDescriptor(ctx, first, second, [&](std::shared_ptr<Descriptor> sd) {
    asio::co_spawn(
        ctx,
        [&done, &result, sd]() -> asio::awaitable<void> {
          result = co_await waitReadable(*sd);
          done = true;
        },
        asio::detached);
  });
  CHECK_FALSE(done);
  REQUIRE(::write(second.w, "y", 1) == 1);
  ctx.restart();
  ctx.poll();
  CHECK(done);
  CHECK_FALSE(result);
}

}  // namespace
}  // namespace nodeagent::base
