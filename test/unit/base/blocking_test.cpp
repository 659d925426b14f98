// base::runBlocking moves work off the caller's executor and resumes there; base::assertOnStrand
// stops a debug build that calls a strand-only entry point from elsewhere.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <optional>
#include <thread>

#include "base/blocking.h"
#include "base/status.h"
#include "test/support/skip.h"

using namespace nodeagent;

TEST_CASE("runBlocking runs the work on the pool and resumes on the caller's executor",
          "[unit][base]") {
  asio::io_context ioc;
  asio::thread_pool pool(1);
  const auto ioc_thread = std::this_thread::get_id();
  std::optional<std::thread::id> worked_on;
  std::optional<std::thread::id> resumed_on;
  std::optional<int> result;
  auto work = [&worked_on] {
    worked_on = std::this_thread::get_id();
    return 42;
  };
  asio::co_spawn(
      ioc,
      [&, work]() -> asio::awaitable<void> {
        auto blocking = base::runBlocking(pool.get_executor(), work);
        result = co_await std::move(blocking);
        resumed_on = std::this_thread::get_id();
      },
      asio::detached);
  // run() returns once the coroutine finished: the pending operation keeps the context busy.
  ioc.run();
  pool.join();
  REQUIRE(result == 42);
  REQUIRE(worked_on.has_value());
  CHECK(*worked_on != ioc_thread);
  CHECK(resumed_on == ioc_thread);
}

TEST_CASE("assertOnStrand aborts a debug build called outside its strand", "[unit][base]") {
#ifdef NDEBUG
  testing::skipTest("assertOnStrand checks only in debug builds (-DCMAKE_BUILD_TYPE=Debug)");
#else
  asio::io_context ioc;
  auto strand = asio::make_strand(ioc);
  bool on_strand_ok = false;
  asio::post(strand, [&] {
    base::assertOnStrand(strand, "on the strand");
    on_strand_ok = true;
  });
  ioc.run();
  CHECK(on_strand_ok);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    base::assertOnStrand(strand, "off the strand");
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
#endif
}
