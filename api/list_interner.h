// One copy of each distinct list among the objects alive that hold one: the codec's container
// lists (replicas of one template share their containers) and the status manager's pod conditions
// (pods whose conditions changed within the same second share them).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "api/hash.h"
#include "api/pod.h"

namespace nodeagent::api {

template <typename T>
class ListInterner {
 public:
  // A list with the items of an equal list interned before and still held by someone, or else
  // `list`'s items, interned now. `key` is a hash of the items' content (equal lists have equal
  // keys); a match is confirmed by comparison. Either way a write through the result copies the
  // items first. The caller replaces `list` with the result (or drops it): `list` may write its
  // items in place. Thread-safe.
  SharedList<T> intern(const SharedList<T>& list, const Hash128& key) {
    if (list.empty()) return list;
    std::lock_guard lock(mu_);
    auto& slot = table_[key];
    if (auto held = slot.lock(); held && *held == list.items()) {
      return SharedList<T>::shared(std::move(held));
    }
    std::shared_ptr<std::vector<T>> items = list.sharedItems();
    // Items another list holds too, which that list may write in place, are interned as a copy
    // (counted: `list` and `items`).
    if (!list.frozen() && items.use_count() > 2) {
      items = std::make_shared<std::vector<T>>(*items);
    }
    slot = items;
    // A list no one holds any more leaves the table in a sweep once the table grew by half.
    if (++added_ > table_.size() / 2 + 1024) {
      std::erase_if(table_, [](const auto& e) { return e.second.expired(); });
      added_ = 0;
    }
    return SharedList<T>::shared(std::move(items));
  }

 private:
  struct KeyHash {
    size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.low ^ h.high); }
  };
  std::mutex mu_;
  std::unordered_map<Hash128, std::weak_ptr<std::vector<T>>, KeyHash> table_;
  size_t added_ = 0;
};

}  // namespace nodeagent::api
