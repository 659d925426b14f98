// One copy of each distinct part among the objects alive that hold one: the codec's pod specs,
// their canonical texts and container lists (replicas of one template, or a fleet of static pods,
// share them) and the status manager's pod conditions (pods whose conditions changed within the
// same second share them).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "api/hash.h"
#include "api/pod.h"

namespace nodeagent::api {

namespace detail {

// A weak reference to one copy of each distinct value, by a hash of its content. Thread-safe.
template <typename V>
class WeakTable {
 public:
  // The value interned under `key` when it equals `*candidate` and someone still holds it, or
  // else `candidate`, interned now. `candidate` is the value of one holder, `frozen` when that
  // holder copies before writing; a value that another holder, not frozen, may write in place is
  // interned as a copy (counted: the holder and `candidate`).
  std::shared_ptr<V> intern(std::shared_ptr<V> candidate, bool frozen, const Hash128& key) {
    const bool copy_first = !frozen && candidate.use_count() > 2;
    return internWith(
        key, [&](const V& held) { return held == *candidate; },
        [&] { return copy_first ? std::make_shared<V>(*candidate) : std::move(candidate); });
  }

  // The value interned under `key` that `same(value)` accepts and someone still holds, or else
  // the value `make()` returns, interned now: a caller whose value is not yet made makes it only
  // when no match is held.
  template <typename Same, typename Make>
  std::shared_ptr<V> internWith(const Hash128& key, Same same, Make make) {
    std::lock_guard lock(mu_);
    auto& slot = table_[key];
    if (auto held = slot.lock(); held && same(*held)) return held;
    std::shared_ptr<V> candidate = make();
    slot = candidate;
    // A value no one holds any more leaves the table in a sweep once the table grew by half.
    if (++added_ > table_.size() / 2 + 1024) {
      std::erase_if(table_, [](const auto& e) { return e.second.expired(); });
      added_ = 0;
    }
    return candidate;
  }

 private:
  std::mutex mu_;
  std::unordered_map<Hash128, std::weak_ptr<V>, Hash128Hasher> table_;
  size_t added_ = 0;
};

}  // namespace detail

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
    return SharedList<T>::shared(table_.intern(list.sharedItems(), list.frozen(), key));
  }

 private:
  detail::WeakTable<std::vector<T>> table_;
};

template <typename T>
class BoxInterner {
 public:
  // ListInterner's rule for one part: the part of an equal box interned before and still held, or
  // else `box`'s part, interned now; a write through the result copies it first. The caller
  // replaces `box` with the result (or drops it): `box` may write its part in place.
  SharedBox<T> intern(const SharedBox<T>& box, const Hash128& key) {
    if (!box.has_value()) return box;
    return SharedBox<T>::shared(table_.intern(box.sharedValue(), box.frozen(), key));
  }

 private:
  detail::WeakTable<T> table_;
};

}  // namespace nodeagent::api
