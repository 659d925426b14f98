// Runs one coroutine to completion on a test's io_context from the test's thread.
#pragma once

#include <catch2/catch.hpp>
#include <exception>
#include <optional>
#include <utility>

#include "base/asio.h"

namespace nodeagent::testing {

// co_spawns `aw` on `ioc` and runs `ioc` on this thread until the coroutine has finished (work
// it waits for elsewhere, e.g. a call on an API pool, keeps it running). Fails the test when the
// coroutine throws. `ioc` must not be run by another thread meanwhile.
template <typename T>
T runAwaitable(asio::io_context& ioc, asio::awaitable<T> aw) {
  std::optional<T> out;
  std::exception_ptr error;
  auto guard = asio::make_work_guard(ioc);
  asio::co_spawn(ioc, std::move(aw), [&](std::exception_ptr e, T value) {
    error = e;
    if (!e) out.emplace(std::move(value));
    guard.reset();
  });
  ioc.restart();
  ioc.run();
  REQUIRE_FALSE(error);
  REQUIRE(out.has_value());
  return std::move(*out);
}

}  // namespace nodeagent::testing
