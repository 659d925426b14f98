#include <catch2/catch.hpp>

#include "base/backoff.h"
#include "test/support/fake_clock.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {
class FixedRandom final : public base::Random {
 public:
  explicit FixedRandom(double v) : v_(v) {}
  double uniform() override { return v_; }
  uint64_t next64() override { return 4; }

 private:
  double v_;
};
}  // namespace

TEST_CASE("backoff: doubles to the cap, jitter adds a fraction, reset starts over",
          "[unit][base]") {
  FixedRandom random(0.5);
  base::Backoff backoff({.initial = 1s, .max = 20s, .factor = 2.0, .jitter = 0.0}, random);
  std::vector<base::Duration> got;
  for (int i = 0; i < 7; ++i) got.push_back(backoff.next());
  CHECK(got == std::vector<base::Duration>{1s, 2s, 4s, 8s, 16s, 20s, 20s});
  backoff.reset();
  CHECK(backoff.next() == 1s);

  base::Backoff jittered({.initial = 10s, .max = 300s, .factor = 2.0, .jitter = 0.5}, random);
  CHECK(jittered.next() == 12500ms);  // 10s + 0.5 * 0.5 * 10s
  CHECK(base::jitter(60s, 0.5, random) == 75s);
}

TEST_CASE("fake clock: timers fire in deadline order only when time advances", "[unit][base]") {
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);  // poll() must not stop the context when idle
  testing::FakeClock clock;
  auto a = clock.makeTimer(ioc.get_executor());
  auto b = clock.makeTimer(ioc.get_executor());
  auto c = clock.makeTimer(ioc.get_executor());
  std::vector<std::string> fired;
  a->asyncWaitFor(3s, [&] { fired.push_back("a"); });
  b->asyncWaitFor(1s, [&] { fired.push_back("b"); });
  c->asyncWaitFor(2s, [&] { fired.push_back("c"); });
  ioc.poll();
  CHECK(fired.empty());
  CHECK(clock.pendingTimers() == 3);

  clock.advance(2s);
  ioc.poll();
  CHECK(fired == std::vector<std::string>{"b", "c"});
  CHECK(a->armed());

  SECTION("re-arming drops the old callback") {
    a->asyncWaitFor(5s, [&] { fired.push_back("a2"); });
    clock.advance(1s);
    ioc.poll();
    CHECK(fired.size() == 2);
    clock.advance(4s);
    ioc.poll();
    CHECK(fired.back() == "a2");
  }
  SECTION("cancel drops the callback") {
    a->cancel();
    CHECK_FALSE(a->armed());
    clock.advance(10s);
    ioc.poll();
    CHECK(fired.size() == 2);
  }
}

TEST_CASE("sleepFor suspends a coroutine until the fake clock passes the delay", "[unit][base]") {
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);  // poll() must not stop the context when idle
  testing::FakeClock clock;
  bool done = false;
  asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        co_await base::sleepFor(clock, 10s);
        done = true;
      },
      asio::detached);
  ioc.poll();
  clock.advance(9s);
  ioc.poll();
  CHECK_FALSE(done);
  clock.advance(1s);
  ioc.poll();
  CHECK(done);
}
