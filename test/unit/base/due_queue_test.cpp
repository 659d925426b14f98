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
