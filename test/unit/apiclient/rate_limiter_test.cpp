#include <catch2/catch.hpp>

#include "api/rate_limiter.h"
#include "test/support/fake_clock.h"

using namespace std::chrono_literals;
using nodeagent::api::RateLimiter;

TEST_CASE("rate limiter: burst tokens are available at once, then qps per second",
          "[unit][apiclient]") {
  nodeagent::testing::FakeClock clock;
  RateLimiter limiter(50, 100, clock);
  int accepted = 0;
  for (int i = 0; i < 150; ++i) accepted += limiter.tryAccept() ? 1 : 0;
  CHECK(accepted == 100);
  clock.advance(100ms);  // 5 tokens at 50 qps
  accepted = 0;
  for (int i = 0; i < 10; ++i) accepted += limiter.tryAccept() ? 1 : 0;
  CHECK(accepted == 5);
  clock.advance(10s);  // refills only up to burst
  accepted = 0;
  for (int i = 0; i < 150; ++i) accepted += limiter.tryAccept() ? 1 : 0;
  CHECK(accepted == 100);
}

TEST_CASE("rate limiter: reservations queue in order at 1/qps spacing", "[unit][apiclient]") {
  nodeagent::testing::FakeClock clock;
  RateLimiter limiter(10, 2, clock);
  CHECK(limiter.reserve() == 0ns);
  CHECK(limiter.reserve() == 0ns);
  CHECK(limiter.reserve() == 100ms);
  CHECK(limiter.reserve() == 200ms);
  limiter.cancelReservation();
  CHECK(limiter.reserve() == 200ms);
  clock.advance(300ms);  // pays the 2-token debt and refills one
  CHECK(limiter.reserve() == 0ns);
  CHECK(limiter.reserve() == 100ms);
}

TEST_CASE("rate limiter: qps <= 0 disables limiting", "[unit][apiclient]") {
  nodeagent::testing::FakeClock clock;
  RateLimiter limiter(0, 1, clock);
  for (int i = 0; i < 1000; ++i) REQUIRE(limiter.reserve() == 0ns);
}
