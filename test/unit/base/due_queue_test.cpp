#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "base/due_queue.h"

using nodeagent::base::DueQueue;
using nodeagent::base::MonotonicTime;
using namespace std::chrono_literals;

TEST_CASE("due queue: keys come out due and in time order and a new time replaces the old",
          "[unit][base]") {
  const MonotonicTime t0{};
  DueQueue<std::string> q;
  CHECK(q.empty());
  CHECK_FALSE(q.next());
  q.schedule("b", t0 + 2s);
  q.schedule("a", t0 + 3s);
  q.schedule("c", t0 + 1s);
  CHECK(q.size() == 3);
  CHECK(*q.next() == t0 + 1s);
  // "c" moves later: it is due once, at its new time.
  q.schedule("c", t0 + 4s);
  CHECK(q.size() == 3);
  CHECK(q.takeDue(t0 + 1s).empty());
  CHECK(q.takeDue(t0 + 3s) == std::vector<std::string>{"b", "a"});
  CHECK_FALSE(q.contains("a"));
  CHECK(q.contains("c"));
  CHECK(*q.next() == t0 + 4s);
  CHECK(q.erase("c"));
  CHECK_FALSE(q.erase("c"));
  CHECK(q.empty());
  CHECK(q.takeDue(t0 + 10s).empty());
  q.schedule("d", t0);
  q.clear();
  CHECK(q.empty());
  CHECK_FALSE(q.next());
}

TEST_CASE("due queue: equal times come out in scheduling order", "[unit][base]") {
  const MonotonicTime t0{};
  DueQueue<std::string> q;
  q.schedule("z", t0 + 1s);
  q.schedule("a", t0 + 1s);
  q.schedule("m", t0 + 1s);
  q.schedule("z", t0 + 2s);  // moved: now after the others
  q.schedule("z", t0 + 1s);  // and back: scheduled last at 1 s
  CHECK(q.takeDue(t0 + 1s) == std::vector<std::string>{"a", "m", "z"});
  CHECK(q.empty());
  CHECK_FALSE(q.next());
}

TEST_CASE("due queue: many moves and drops keep one due time per key", "[unit][base]") {
  // Each move leaves a stale heap entry and each drop a free slot: after thousands of them every
  // key must still come out exactly once, at its newest time, and next() must name that time.
  const MonotonicTime t0{};
  DueQueue<std::string> q;
  constexpr int kKeys = 300;
  for (int round = 0; round < 20; ++round) {
    for (int k = 0; k < kKeys; ++k) {
      q.schedule("k" + std::to_string(k), t0 + std::chrono::seconds(1000 + (k * 7 + round) % 97));
    }
    for (int k = 0; k < kKeys; k += 5) CHECK(q.erase("k" + std::to_string(k)));
  }
  for (int k = 0; k < kKeys; ++k) {
    if (k % 5 != 0) q.schedule("k" + std::to_string(k), t0 + std::chrono::seconds(k));
  }
  CHECK(q.size() == static_cast<size_t>(kKeys - kKeys / 5));
  CHECK(*q.next() == t0 + 1s);
  CHECK(q.erase("k1"));
  CHECK(*q.next() == t0 + 2s);
  auto due = q.takeDue(t0 + 150s);
  std::vector<std::string> want;
  for (int k = 2; k <= 150; ++k) {
    if (k % 5 != 0) want.push_back("k" + std::to_string(k));
  }
  CHECK(due == want);
  CHECK(*q.next() == t0 + 151s);
  due = q.takeDue(t0 + 10000s);
  CHECK(due.size() == static_cast<size_t>(kKeys - kKeys / 5) - 1 - want.size());
  CHECK(q.empty());
  CHECK_FALSE(q.next());
  // A key taken can be scheduled again.
  q.schedule("k2", t0 + 1s);
  CHECK(q.takeDue(t0 + 1s) == std::vector<std::string>{"k2"});
}

TEST_CASE("due queue: times finer than its buckets come out exactly when due", "[unit][base]") {
  const MonotonicTime t0{};
  DueQueue<std::string> q(1s);
  q.schedule("late", t0 + 1700ms);
  q.schedule("mid", t0 + 1500ms);
  q.schedule("early", t0 + 1200ms);
  CHECK(*q.next() == t0 + 1200ms);
  CHECK(q.takeDue(t0 + 1199ms).empty());
  CHECK(q.takeDue(t0 + 1600ms) == std::vector<std::string>{"early", "mid"});
  CHECK(*q.next() == t0 + 1700ms);
  q.schedule("late", t0 + 900ms);  // moved into an earlier bucket
  CHECK(*q.next() == t0 + 900ms);
  CHECK(q.takeDue(t0 + 1s) == std::vector<std::string>{"late"});
  CHECK(q.empty());
  CHECK_FALSE(q.next());
}
