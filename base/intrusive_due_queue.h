// Items each due at a time, taken in time order, as DueQueue but with each item's due time kept
// in the item itself (a DueHook member): the queue stores one pointer per scheduled item and
// nothing else, so tens of thousands of long-lived items (every pod worker of a large node, due
// once a minute) cost it 8 bytes each instead of an index node, a slot and an entry.
//
// The time order is kept in buckets of `granularity` (one second by default), each an unordered
// run of pointers; an item's hook holds its time and its place in its bucket, so a move or a drop
// takes it out of its bucket at once (the last pointer fills its place) and no stale entries are
// left behind. Taking walks the due buckets in order and sorts what is due by time, equal times
// in the order they were scheduled.
//
// An item must be dropped (erase, takeDue or clear) before it is destroyed or moved. Not
// thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "base/clock.h"
#include "base/due_times.h"

namespace nodeagent::base {

// What an item of an IntrusiveDueQueue holds: its due time and its place in the queue.
// A copy is not queued (the queue points at the original).
struct DueHook {
  static constexpr uint32_t kNotQueued = UINT32_MAX;
  DueHook() = default;
  DueHook(const DueHook&) {}
  DueHook& operator=(const DueHook&) { return *this; }

  MonotonicTime at{};
  uint32_t pos = kNotQueued;  // in the bucket of `at`
  // Orders equal times by scheduling. 32 bits keep the hook in 16 bytes: after 2^32 schedules
  // the count wraps, and only items due at the very same nanosecond on either side of the wrap
  // come out in another order.
  uint32_t seq = 0;
  bool queued() const { return pos != kNotQueued; }
};

template <typename T, DueHook T::*Hook>
class IntrusiveDueQueue {
 public:
  explicit IntrusiveDueQueue(Duration granularity = std::chrono::seconds(1))
      : times_(granularity) {}
  // Items point at their places in the buckets.
  IntrusiveDueQueue(const IntrusiveDueQueue&) = delete;
  IntrusiveDueQueue& operator=(const IntrusiveDueQueue&) = delete;

  // Schedules `item` at `at`; an item already there moves to `at`.
  void schedule(T& item, MonotonicTime at) {
    DueHook& hook = item.*Hook;
    if (hook.queued()) {
      if (hook.at == at) return;
      times_.left(hook.at);  // (the first item may have moved)
      unlink(item);
    } else {
      ++size_;
    }
    hook.at = at;
    hook.seq = ++seq_;
    auto& bucket = buckets_[times_.bucketOf(at)];
    hook.pos = static_cast<uint32_t>(bucket.size());
    bucket.push_back(&item);
    times_.scheduled(at);
  }
  // Drops `item`; false when it was not there.
  bool erase(T& item) {
    DueHook& hook = item.*Hook;
    if (!hook.queued()) return false;
    times_.left(hook.at);
    unlink(item);
    hook.pos = DueHook::kNotQueued;
    --size_;
    return true;
  }
  bool contains(const T& item) const { return (item.*Hook).queued(); }
  // When `item` is due; nullopt when it is not scheduled.
  std::optional<MonotonicTime> dueAt(const T& item) const {
    const DueHook& hook = item.*Hook;
    if (!hook.queued()) return std::nullopt;
    return hook.at;
  }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  void clear() {
    for (auto& [bucket, items] : buckets_) {
      for (T* item : items) (item->*Hook).pos = DueHook::kNotQueued;
    }
    buckets_.clear();
    size_ = 0;
    times_.cleared();
  }
  // When the first item is due; nullopt when empty.
  std::optional<MonotonicTime> next() const {
    return times_.next([this] { return firstTime(); });
  }
  // Removes and returns the items due at `now` or before, earliest first (equal times in the
  // order they were scheduled at that time).
  std::vector<T*> takeDue(MonotonicTime now) {
    std::vector<T*> due;
    const int64_t last = times_.bucketOf(now);
    for (auto b = buckets_.begin(); b != buckets_.end() && b->first <= last;) {
      auto& items = b->second;
      uint32_t kept = 0;
      for (T* item : items) {
        DueHook& hook = item->*Hook;
        if (hook.at <= now) {
          hook.pos = DueHook::kNotQueued;
          due.push_back(item);
        } else {
          hook.pos = kept;  // (only in the bucket of `now`)
          items[kept++] = item;
        }
      }
      items.resize(kept);
      b = items.empty() ? buckets_.erase(b) : std::next(b);
    }
    std::sort(due.begin(), due.end(), [](const T* a, const T* b) {
      const DueHook& x = a->*Hook;
      const DueHook& y = b->*Hook;
      return x.at != y.at ? x.at < y.at : x.seq < y.seq;
    });
    size_ -= due.size();
    if (!due.empty()) times_.taken();
    return due;
  }

 private:
  // Takes a queued item out of its bucket (its hook still says where it was).
  void unlink(T& item) {
    const DueHook& hook = item.*Hook;
    auto b = buckets_.find(times_.bucketOf(hook.at));
    auto& items = b->second;
    T* moved = items.back();
    items[hook.pos] = moved;
    (moved->*Hook).pos = hook.pos;
    items.pop_back();
    if (items.empty()) buckets_.erase(b);
  }
  // The earliest time: every bucket holds only queued items, so the first one has it.
  std::optional<MonotonicTime> firstTime() const {
    if (buckets_.empty()) return std::nullopt;
    const auto& items = buckets_.begin()->second;
    MonotonicTime first = (items.front()->*Hook).at;
    for (const T* item : items) first = std::min(first, (item->*Hook).at);
    return first;
  }

  detail::DueTimes times_;
  std::map<int64_t, std::vector<T*>> buckets_;
  size_t size_ = 0;
  uint32_t seq_ = 0;
};

}  // namespace nodeagent::base
