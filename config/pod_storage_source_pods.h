// PodStorage::SourcePods, private to config/pod_storage.cpp: the per-source index a SET of
// thousands of pods is merged against.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/pod_storage.h"

namespace nodeagent::config {

// One source's pods by UID: entries live densely in `slots_` (in insertion order, so a SET that
// repeats the previous order walks them sequentially), found through an open-addressing index
// with linear probing. A UID of up to kInlineUid bytes is kept inside its slot, so confirming a
// match reads no other memory.
class PodStorage::SourcePods {
 public:
  // Null if absent. Valid until the next insert or erase.
  Entry* find(std::string_view uid) {
    if (live_ == 0) return nullptr;
    const uint64_t h = hashUid(uid);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint32_t ix = index_[i];
      if (ix == kEmpty) return nullptr;
      Slot& slot = slots_[ix];
      if (slot.hash == h && slot.uidEquals(uid)) return &slot.entry;
    }
  }

  // `uid` must be absent. The returned reference is valid until the next insert or erase.
  Entry& insert(std::string_view uid, Entry entry) {
    if ((live_ + 1) * 2 > index_.size()) grow();
    uint32_t ix;
    if (!free_.empty()) {
      ix = free_.back();
      free_.pop_back();
    } else {
      // A quarter more at a time rather than double: one pod added to a store of thousands
      // would leave as many slots unused.
      if (slots_.size() == slots_.capacity()) reserve(slots_.size() + slots_.size() / 4 + 16);
      ix = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& slot = slots_[ix];
    slot.setUid(uid);
    slot.hash = hashUid(uid);
    slot.live = true;
    slot.entry = std::move(entry);
    place(ix);
    ++live_;
    return slot.entry;
  }

  // Removes `uid` if present and returns its stored pod (null if absent).
  api::PodPtr erase(std::string_view uid) {
    if (live_ == 0) return nullptr;
    const uint64_t h = hashUid(uid);
    size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      const uint32_t ix = index_[i];
      if (ix == kEmpty) return nullptr;
      if (slots_[ix].hash == h && slots_[ix].uidEquals(uid)) break;
    }
    const uint32_t ix = index_[i];
    api::PodPtr pod = std::move(slots_[ix].entry.pod);
    slots_[ix] = Slot{};
    free_.push_back(ix);
    --live_;
    // Backward-shift deletion keeps every probe chain unbroken without tombstones.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; index_[j] != kEmpty; j = (j + 1) & mask_) {
      const size_t home = slots_[index_[j]].hash & mask_;
      const bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
      if (movable) {
        index_[hole] = index_[j];
        hole = j;
      }
    }
    index_[hole] = kEmpty;
    return pod;
  }

  size_t size() const { return live_; }

  // Room for `n` entries in all: a first SET of thousands of pods allocates its slots once, at
  // their number.
  void reserve(size_t n) {
    if (n > slots_.capacity()) slots_.reserve(n);
  }

  // Calls f(Entry&) for every entry; f must not insert or erase.
  template <typename F>
  void forEach(F&& f) {
    for (auto& slot : slots_) {
      if (slot.live) f(slot.entry);
    }
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  static constexpr size_t kInlineUid = 47;

  struct Slot {
    uint64_t hash = 0;
    Entry entry;
    bool live = false;
    uint8_t inline_len = 0;
    char inline_uid[kInlineUid] = {};
    std::string long_uid;  // UIDs longer than kInlineUid

    void setUid(std::string_view uid) {
      if (uid.size() <= kInlineUid) {
        inline_len = static_cast<uint8_t>(uid.size());
        std::memcpy(inline_uid, uid.data(), uid.size());
        long_uid.clear();
      } else {
        inline_len = UINT8_MAX;
        long_uid.assign(uid);
      }
    }
    bool uidEquals(std::string_view uid) const {
      if (inline_len == UINT8_MAX) return long_uid == uid;
      return inline_len == uid.size() && std::memcmp(inline_uid, uid.data(), uid.size()) == 0;
    }
  };

  static uint64_t hashUid(std::string_view uid) { return std::hash<std::string_view>()(uid); }

  void place(uint32_t ix) {
    for (size_t i = slots_[ix].hash & mask_;; i = (i + 1) & mask_) {
      if (index_[i] == kEmpty) {
        index_[i] = ix;
        return;
      }
    }
  }

  void grow() {
    size_t capacity = index_.empty() ? 16 : index_.size() * 2;
    while ((live_ + 1) * 2 > capacity) capacity *= 2;
    index_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    for (uint32_t ix = 0; ix < slots_.size(); ++ix) {
      if (slots_[ix].live) place(ix);
    }
  }

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> index_;  // slot numbers, kEmpty for none
  size_t mask_ = 0;
  size_t live_ = 0;
};

}  // namespace nodeagent::config
