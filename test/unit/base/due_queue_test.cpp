// One contract, two queues: DueQueue (keys by value) and IntrusiveDueQueue (each item holds its
// own due time), the latter driven through string-named items so that every case runs on both.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/due_queue.h"
#include "base/intrusive_due_queue.h"

using nodeagent::base::DueHook;
using nodeagent::base::DueQueue;
using nodeagent::base::Duration;
using nodeagent::base::IntrusiveDueQueue;
using nodeagent::base::MonotonicTime;
using namespace std::chrono_literals;

namespace {

using StringDueQueue = DueQueue<std::string>;

// IntrusiveDueQueue with DueQueue's interface: items named by string keys.
class IntrusiveByName {
 public:
  explicit IntrusiveByName(Duration granularity = std::chrono::seconds(1)) : q_(granularity) {}
  void schedule(const std::string& key, MonotonicTime at) { q_.schedule(item(key), at); }
  bool erase(const std::string& key) { return q_.erase(item(key)); }
  bool contains(const std::string& key) { return q_.contains(item(key)); }
  std::optional<MonotonicTime> dueAt(const std::string& key) { return q_.dueAt(item(key)); }
  bool empty() const { return q_.empty(); }
  size_t size() const { return q_.size(); }
  void clear() { q_.clear(); }
  std::optional<MonotonicTime> next() const { return q_.next(); }
  std::vector<std::string> takeDue(MonotonicTime now) {
    std::vector<std::string> keys;
    for (const Item* i : q_.takeDue(now)) keys.push_back(i->key);
    return keys;
  }

 private:
  struct Item {
    std::string key;
    DueHook due;
  };
  Item& item(const std::string& key) {
    auto& i = items_[key];  // map nodes do not move
    i.key = key;
    return i;
  }
  std::map<std::string, Item> items_;
  IntrusiveDueQueue<Item, &Item::due> q_;
};

}  // namespace

TEMPLATE_TEST_CASE("due queue: keys come out due and in time order and a new time replaces the old",
                   "[unit][base]", StringDueQueue, IntrusiveByName) {
  const MonotonicTime t0{};
  TestType q;
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

TEMPLATE_TEST_CASE("due queue: equal times come out in scheduling order", "[unit][base]",
                   StringDueQueue, IntrusiveByName) {
  const MonotonicTime t0{};
  TestType q;
  q.schedule("z", t0 + 1s);
  q.schedule("a", t0 + 1s);
  q.schedule("m", t0 + 1s);
  q.schedule("z", t0 + 2s);  // moved: now after the others
  q.schedule("z", t0 + 1s);  // and back: scheduled last at 1 s
  CHECK(q.takeDue(t0 + 1s) == std::vector<std::string>{"a", "m", "z"});
  CHECK(q.empty());
  CHECK_FALSE(q.next());
}

TEMPLATE_TEST_CASE("due queue: many moves and drops keep one due time per key", "[unit][base]",
                   StringDueQueue, IntrusiveByName) {
  // Thousands of moves and drops (stale entries and free slots in DueQueue, places taken over by
  // the last item of a bucket in IntrusiveDueQueue): every key must still come out exactly once,
  // at its newest time, and next() must name that time.
  const MonotonicTime t0{};
  TestType q;
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

TEMPLATE_TEST_CASE("due queue: times finer than its buckets come out exactly when due",
                   "[unit][base]", StringDueQueue, IntrusiveByName) {
  const MonotonicTime t0{};
  TestType q(1s);
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

TEMPLATE_TEST_CASE("due queue: random moves drops and takes agree with a plain model",
                   "[unit][base]", StringDueQueue, IntrusiveByName) {
  // Times from 0 to 40 s at 250 ms steps (several per bucket), 60 keys, 5,000 operations: the
  // queue must answer as a map of key to time does.
  const MonotonicTime t0{};
  TestType q;
  std::map<std::string, MonotonicTime> model;
  std::mt19937 rng(7);
  MonotonicTime now = t0;
  for (int op = 0; op < 5000; ++op) {
    const std::string key = "k" + std::to_string(rng() % 60);
    const auto at = now + std::chrono::milliseconds(250 * (rng() % 160));
    switch (rng() % 4) {
      case 0:
      case 1:
        q.schedule(key, at);
        model[key] = at;
        break;
      case 2:
        CHECK(q.erase(key) == (model.erase(key) == 1));
        break;
      case 3: {
        now += std::chrono::milliseconds(250 * (rng() % 8));
        std::map<std::string, MonotonicTime> due;
        for (auto it = model.begin(); it != model.end();) {
          if (it->second <= now) {
            due.insert(*it);
            it = model.erase(it);
          } else {
            ++it;
          }
        }
        const auto got = q.takeDue(now);
        REQUIRE(got.size() == due.size());
        // Every due key once, in time order (the model does not keep the scheduling order that
        // breaks ties).
        std::vector<MonotonicTime> times;
        for (const auto& key : got) {
          REQUIRE(due.count(key) == 1);
          times.push_back(due.at(key));
          due.erase(key);
        }
        CHECK(std::is_sorted(times.begin(), times.end()));
        break;
      }
    }
    REQUIRE(q.size() == model.size());
    std::optional<MonotonicTime> first;
    for (const auto& [k, t] : model) first = first ? std::min(*first, t) : t;
    REQUIRE(q.next() == first);
  }
}

TEST_CASE("intrusive due queue: a copy of a queued item is not queued", "[unit][base]") {
  struct Item {
    DueHook due;
  };
  const MonotonicTime t0{};
  IntrusiveDueQueue<Item, &Item::due> q;
  Item a;
  q.schedule(a, t0 + 1s);
  Item copy = a;
  CHECK(q.contains(a));
  CHECK_FALSE(q.contains(copy));
  CHECK_FALSE(q.erase(copy));  // touches nothing of `a`'s place
  Item other;
  q.schedule(other, t0 + 1s);
  other = a;  // an assignment keeps the item's own place
  CHECK(q.contains(other));
  CHECK(q.size() == 2);
  const auto due = q.takeDue(t0 + 1s);
  REQUIRE(due.size() == 2);
  CHECK(due[0] == &a);
  CHECK(due[1] == &other);
}
