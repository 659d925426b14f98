// A small map of strings kept in one allocation, sorted by key: an object's labels and
// annotations. A decoded object never changes, so lookups (binary search) and walks are what
// matter; `set` and `erase` rebuild it. Reads like a const std::map<std::string, std::string>
// whose items are string_views into the table: they live as long as the table is neither
// changed nor destroyed (copy them to keep them longer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nodeagent::api {

using StringMap = std::map<std::string, std::string>;

class StringTable {
 public:
  using value_type = std::pair<std::string_view, std::string_view>;

  class const_iterator {
   public:
    // Items are values (views), not references: a C++20 bidirectional iterator, an input
    // iterator to pre-C++20 algorithms.
    using iterator_category = std::input_iterator_tag;
    using iterator_concept = std::bidirectional_iterator_tag;
    using value_type = StringTable::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = value_type;
    // `it->first` and `it->second` read the item through a temporary.
    struct Arrow {
      value_type item;
      const value_type* operator->() const { return &item; }
    };

    const_iterator() = default;
    value_type operator*() const { return {table_->key(i_), table_->value(i_)}; }
    Arrow operator->() const { return {**this}; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    const_iterator operator++(int) {
      auto old = *this;
      ++i_;
      return old;
    }
    const_iterator& operator--() {
      --i_;
      return *this;
    }
    const_iterator operator--(int) {
      auto old = *this;
      --i_;
      return old;
    }
    bool operator==(const const_iterator& o) const { return i_ == o.i_ && table_ == o.table_; }

   private:
    friend class StringTable;
    const_iterator(const StringTable* table, size_t i) : table_(table), i_(i) {}
    const StringTable* table_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = const_iterator;

  StringTable() = default;
  // The items of a map (implicit, as the map it stands for).
  StringTable(const StringMap& items);  // NOLINT
  // Items in any order; of equal keys the first is kept, as in a map.
  StringTable(std::initializer_list<value_type> items);
  explicit StringTable(std::vector<value_type> items);
  StringTable(const StringTable& o);
  StringTable(StringTable&& o) noexcept : block_(std::exchange(o.block_, nullptr)) {}
  StringTable& operator=(StringTable o) noexcept {
    std::swap(block_, o.block_);
    return *this;
  }
  ~StringTable();

  size_t size() const { return block_ != nullptr ? block_[0] : 0; }
  bool empty() const { return size() == 0; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }
  std::string_view key(size_t i) const { return piece(2 * i); }
  std::string_view value(size_t i) const { return piece(2 * i + 1); }

  const_iterator find(std::string_view key) const;
  size_t count(std::string_view key) const { return find(key) != end() ? 1 : 0; }
  bool contains(std::string_view key) const { return find(key) != end(); }
  // The value of `key`; throws std::out_of_range when there is none.
  std::string_view at(std::string_view key) const;
  // The value of `key`, or `fallback` (a view of it: keep the fallback alive).
  std::string_view get(std::string_view key, std::string_view fallback = {}) const;

  // Sets `key` to `value` (adding it when absent); removes `key`. Both rebuild the table.
  void set(std::string_view key, std::string_view value);
  size_t erase(std::string_view key);

  StringMap toMap() const;
  bool operator==(const StringTable& o) const;
  bool operator==(const StringMap& o) const;

 private:
  // Items sorted by key with unique keys.
  static uint32_t* build(const std::vector<value_type>& sorted);
  static std::vector<value_type> sortedUnique(std::vector<value_type> items);
  std::vector<value_type> items() const;
  std::string_view piece(size_t j) const {
    const uint32_t* offsets = block_ + 1;
    return {chars() + offsets[j], offsets[j + 1] - offsets[j]};
  }
  const char* chars() const { return reinterpret_cast<const char*>(block_ + 2 * block_[0] + 2); }
  size_t blockBytes() const;

  // null when empty; else [count][2 * count + 1 offsets into the characters][characters]: item
  // i's key is characters [offsets[2i], offsets[2i+1]), its value [offsets[2i+1], offsets[2i+2]).
  uint32_t* block_ = nullptr;
};

}  // namespace nodeagent::api
