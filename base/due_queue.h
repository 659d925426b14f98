// Keys each due at a time, taken in time order: a key is scheduled (or moved to a new time),
// dropped, or taken once its time has come. A key is found by hash (constant time); each key is
// stored once.
//
// The time order is kept in buckets of `granularity` (one second by default): scheduling appends
// to the bucket of its time, and taking walks the due buckets in order, each a contiguous run of
// entries. With tens of thousands of keys (every pod of a large node, due once a minute) this
// costs a fraction of an ordered tree's or a heap's cache misses per key. Moving a key to a new
// time leaves its old entry behind as a stale one (told apart by a sequence number), skipped
// when its bucket comes up; the buckets are rebuilt when stale entries outnumber live ones.
// Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/due_times.h"

namespace nodeagent::base {

template <typename Key, typename Hash = std::hash<Key>>
class DueQueue {
 public:
  explicit DueQueue(Duration granularity = std::chrono::seconds(1)) : times_(granularity) {}
  // Slots point into the key index: a copy would point into the original.
  DueQueue(const DueQueue&) = delete;
  DueQueue& operator=(const DueQueue&) = delete;

  // Schedules `key` at `at`; a key already there moves to `at`.
  void schedule(const Key& key, MonotonicTime at) {
    auto [it, inserted] = index_.try_emplace(key, 0);
    if (inserted) {
      it->second = allocSlot(&it->first);
    } else {
      const MonotonicTime old = slots_[it->second].at;
      if (old == at) return;
      times_.left(old);  // (the first key may have moved)
    }
    Slot& slot = slots_[it->second];
    slot.at = at;
    slot.seq = ++seq_;
    buckets_[times_.bucketOf(at)].push_back(Entry{at, slot.seq, it->second});
    ++entries_;
    times_.scheduled(at);
    if (entries_ > 2 * index_.size() + 64) rebuild();
  }
  // Drops `key`; false when it was not there.
  bool erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    times_.left(slots_[it->second].at);
    freeSlot(it->second);
    index_.erase(it);
    return true;
  }
  bool contains(const Key& key) const { return index_.count(key) > 0; }
  // When `key` is due; nullopt when it is not scheduled.
  std::optional<MonotonicTime> dueAt(const Key& key) const {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    return slots_[it->second].at;
  }
  bool empty() const { return index_.empty(); }
  size_t size() const { return index_.size(); }
  void clear() {
    index_.clear();
    slots_.clear();
    free_.clear();
    buckets_.clear();
    entries_ = 0;
    times_.cleared();
  }
  // When the first key is due; nullopt when empty.
  std::optional<MonotonicTime> next() const {
    return times_.next([this] { return firstTime(); });
  }
  // Removes and returns the keys due at `now` or before, earliest first (equal times in the order
  // they were scheduled at that time).
  std::vector<Key> takeDue(MonotonicTime now) {
    std::vector<Entry> due;
    const int64_t last = times_.bucketOf(now);
    for (auto b = buckets_.begin(); b != buckets_.end() && b->first <= last;) {
      auto& entries = b->second;
      size_t kept = 0;
      for (const Entry& e : entries) {
        if (!live(e)) continue;
        if (e.at <= now) {
          due.push_back(e);
        } else {
          entries[kept++] = e;  // (only in the bucket of `now`)
        }
      }
      entries_ -= entries.size() - kept;
      entries.resize(kept);
      b = entries.empty() ? buckets_.erase(b) : std::next(b);
    }
    std::sort(due.begin(), due.end(), [](const Entry& a, const Entry& b) {
      return a.at != b.at ? a.at < b.at : a.seq < b.seq;
    });
    std::vector<Key> out;
    out.reserve(due.size());
    for (const Entry& e : due) {
      const Key* key = slots_[e.slot].key;
      freeSlot(e.slot);
      out.push_back(std::move(index_.extract(*key).key()));
    }
    if (!due.empty()) times_.taken();
    return out;
  }

 private:
  // A key's node in `index_` does not move while it is there (rehashing keeps nodes), so a slot
  // holds a pointer to the key instead of a second copy. A free slot has no key.
  struct Slot {
    const Key* key = nullptr;
    MonotonicTime at{};
    uint64_t seq = 0;
  };
  struct Entry {
    MonotonicTime at;
    uint64_t seq;  // unique per scheduling: orders equal times, and tells a stale entry
    uint32_t slot;
  };

  bool live(const Entry& e) const {
    const Slot& s = slots_[e.slot];
    return s.key != nullptr && s.seq == e.seq;
  }
  uint32_t allocSlot(const Key* key) {
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    slots_[i].key = key;
    return i;
  }
  void freeSlot(uint32_t i) {
    slots_[i] = Slot{};
    free_.push_back(i);
  }
  // The earliest live time: the first bucket holding a live entry has it.
  std::optional<MonotonicTime> firstTime() const {
    for (const auto& [bucket, entries] : buckets_) {
      std::optional<MonotonicTime> first;
      for (const Entry& e : entries) {
        if (live(e) && (!first || e.at < *first)) first = e.at;
      }
      if (first) return first;
    }
    return std::nullopt;
  }
  // The buckets again with one entry per scheduled key.
  void rebuild() {
    buckets_.clear();
    entries_ = 0;
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].key == nullptr) continue;
      buckets_[times_.bucketOf(slots_[i].at)].push_back(Entry{slots_[i].at, slots_[i].seq, i});
      ++entries_;
    }
  }

  detail::DueTimes times_;
  std::unordered_map<Key, uint32_t, Hash> index_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::map<int64_t, std::vector<Entry>> buckets_;
  size_t entries_ = 0;  // in buckets_, stale ones included
  uint64_t seq_ = 0;
};

}  // namespace nodeagent::base
