// Keys each due at a time, taken in time order: a key is scheduled (or moved to a new time),
// dropped, or taken once its time has come. A key is found by hash (constant time) and ordered by
// time (logarithmic); each key is stored once. Not thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/clock.h"

namespace nodeagent::base {

template <typename Key, typename Hash = std::hash<Key>>
class DueQueue {
 public:
  DueQueue() = default;
  // The time order points into the key index: a copy would point into the original.
  DueQueue(const DueQueue&) = delete;
  DueQueue& operator=(const DueQueue&) = delete;
  DueQueue(DueQueue&&) noexcept = default;
  DueQueue& operator=(DueQueue&&) noexcept = default;

  // Schedules `key` at `at`; a key already there moves to `at`.
  void schedule(const Key& key, MonotonicTime at) {
    auto [it, inserted] = at_.try_emplace(key, at);
    if (!inserted) {
      if (it->second == at) return;
      order_.erase({it->second, &it->first});
      it->second = at;
    }
    order_.emplace(at, &it->first);
  }
  // Drops `key`; false when it was not there.
  bool erase(const Key& key) {
    auto it = at_.find(key);
    if (it == at_.end()) return false;
    order_.erase({it->second, &it->first});
    at_.erase(it);
    return true;
  }
  bool contains(const Key& key) const { return at_.count(key) > 0; }
  bool empty() const { return at_.empty(); }
  size_t size() const { return at_.size(); }
  void clear() {
    order_.clear();
    at_.clear();
  }
  // When the first key is due; nullopt when empty.
  std::optional<MonotonicTime> next() const {
    if (order_.empty()) return std::nullopt;
    return order_.begin()->first;
  }
  // Removes and returns the keys due at `now` or before, earliest first (equal times in key
  // order).
  std::vector<Key> takeDue(MonotonicTime now) {
    std::vector<Key> out;
    while (!order_.empty() && order_.begin()->first <= now) {
      const Key* key = order_.begin()->second;
      order_.erase(order_.begin());
      out.push_back(std::move(at_.extract(*key).key()));
    }
    return out;
  }

 private:
  // A key's node in `at_` does not move while it is there (rehashing keeps nodes), so the
  // order holds a pointer to the key instead of a second copy.
  using Slot = std::pair<MonotonicTime, const Key*>;
  struct ByTimeThenKey {
    bool operator()(const Slot& a, const Slot& b) const {
      if (a.first != b.first) return a.first < b.first;
      return *a.second < *b.second;
    }
  };

  std::unordered_map<Key, MonotonicTime, Hash> at_;
  std::set<Slot, ByTimeThenKey> order_;
};

}  // namespace nodeagent::base
