// Keys each due at a time, taken in time order: a key is scheduled (or moved to a new time),
// dropped, or taken once its time has come. Every operation is logarithmic. Not thread-safe.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "base/clock.h"

namespace nodeagent::base {

template <typename Key>
class DueQueue {
 public:
  // Schedules `key` at `at`; a key already there moves to `at`.
  void schedule(const Key& key, MonotonicTime at) {
    auto [it, inserted] = at_.try_emplace(key, at);
    if (!inserted) {
      order_.erase({it->second, key});
      it->second = at;
    }
    order_.emplace(at, key);
  }
  // Drops `key`; false when it was not there.
  bool erase(const Key& key) {
    auto it = at_.find(key);
    if (it == at_.end()) return false;
    order_.erase({it->second, key});
    at_.erase(it);
    return true;
  }
  bool contains(const Key& key) const { return at_.count(key) > 0; }
  bool empty() const { return at_.empty(); }
  size_t size() const { return at_.size(); }
  void clear() {
    at_.clear();
    order_.clear();
  }
  // When the first key is due; nullopt when empty.
  std::optional<MonotonicTime> next() const {
    if (order_.empty()) return std::nullopt;
    return order_.begin()->first;
  }
  // Removes and returns the keys due at `now` or before, earliest first.
  std::vector<Key> takeDue(MonotonicTime now) {
    std::vector<Key> out;
    while (!order_.empty() && order_.begin()->first <= now) {
      auto node = order_.extract(order_.begin());
      at_.erase(node.value().second);
      out.push_back(std::move(node.value().second));
    }
    return out;
  }

 private:
  std::map<Key, MonotonicTime, std::less<>> at_;
  std::set<std::pair<MonotonicTime, Key>> order_;
};

}  // namespace nodeagent::base
