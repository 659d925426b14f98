#include "api/string_table.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace nodeagent::api {

namespace {

bool byKey(const StringTable::value_type& a, const StringTable::value_type& b) {
  return a.first < b.first;
}

}  // namespace

StringTable::StringTable(const StringMap& items) {
  std::vector<value_type> sorted;
  sorted.reserve(items.size());
  for (const auto& [k, v] : items) sorted.emplace_back(k, v);
  block_ = build(sorted);
}

StringTable::StringTable(std::initializer_list<value_type> items)
    : block_(build(sortedUnique(std::vector<value_type>(items)))) {}

StringTable::StringTable(std::vector<value_type> items)
    : block_(build(sortedUnique(std::move(items)))) {}

StringTable::StringTable(const StringTable& o) {
  if (o.block_ == nullptr) return;
  const size_t bytes = o.blockBytes();
  block_ = static_cast<uint32_t*>(::operator new(bytes));
  std::memcpy(block_, o.block_, bytes);
}

StringTable::~StringTable() { ::operator delete(block_); }

std::vector<StringTable::value_type> StringTable::sortedUnique(std::vector<value_type> items) {
  std::stable_sort(items.begin(), items.end(), byKey);
  items.erase(
      std::unique(items.begin(), items.end(),
                  [](const value_type& a, const value_type& b) { return a.first == b.first; }),
      items.end());
  return items;
}

uint32_t* StringTable::build(const std::vector<value_type>& sorted) {
  if (sorted.empty()) return nullptr;
  size_t chars = 0;
  for (const auto& [k, v] : sorted) chars += k.size() + v.size();
  const size_t n = sorted.size();
  if (chars > UINT32_MAX || n > UINT32_MAX / 2 - 2)
    throw std::length_error("StringTable: too large");
  const size_t words = 2 * n + 2;
  auto* block = static_cast<uint32_t*>(::operator new(words * sizeof(uint32_t) + chars));
  block[0] = static_cast<uint32_t>(n);
  uint32_t* offsets = block + 1;
  char* out = reinterpret_cast<char*>(block + words);
  uint32_t at = 0;
  size_t j = 0;
  for (const auto& [k, v] : sorted) {
    for (std::string_view s : {k, v}) {
      offsets[j++] = at;
      if (!s.empty()) std::memcpy(out + at, s.data(), s.size());
      at += static_cast<uint32_t>(s.size());
    }
  }
  offsets[j] = at;
  return block;
}

size_t StringTable::blockBytes() const {
  const size_t n = block_[0];
  return (2 * n + 2) * sizeof(uint32_t) + block_[1 + 2 * n];
}

std::vector<StringTable::value_type> StringTable::items() const {
  return std::vector<value_type>(begin(), end());
}

StringTable::const_iterator StringTable::find(std::string_view key) const {
  size_t lo = 0;
  size_t hi = size();
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (this->key(mid) < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < size() && this->key(lo) == key ? const_iterator(this, lo) : end();
}

std::string_view StringTable::at(std::string_view key) const {
  auto it = find(key);
  if (it == end()) throw std::out_of_range("no key " + std::string(key));
  return it->second;
}

std::string_view StringTable::get(std::string_view key, std::string_view fallback) const {
  auto it = find(key);
  return it != end() ? it->second : fallback;
}

void StringTable::set(std::string_view key, std::string_view value) {
  // The new table is built from views into this one before this one is freed.
  std::vector<value_type> next = items();
  auto it = std::lower_bound(next.begin(), next.end(), value_type{key, {}}, byKey);
  if (it != next.end() && it->first == key) {
    it->second = value;
  } else {
    next.insert(it, {key, value});
  }
  *this = StringTable(std::move(next));
}

size_t StringTable::erase(std::string_view key) {
  auto it = find(key);
  if (it == end()) return 0;
  std::vector<value_type> next = items();
  next.erase(next.begin() + static_cast<std::ptrdiff_t>(it.i_));
  *this = StringTable(std::move(next));
  return 1;
}

StringMap StringTable::toMap() const {
  StringMap out;
  for (const auto& [k, v] : *this) out.emplace_hint(out.end(), k, v);
  return out;
}

bool StringTable::operator==(const StringTable& o) const {
  if (block_ == nullptr || o.block_ == nullptr) return size() == o.size();
  const size_t bytes = blockBytes();
  return bytes == o.blockBytes() && std::memcmp(block_, o.block_, bytes) == 0;
}

bool StringTable::operator==(const StringMap& o) const {
  if (o.size() != size()) return false;
  size_t i = 0;
  for (const auto& [k, v] : o) {
    if (key(i) != k || value(i) != v) return false;
    ++i;
  }
  return true;
}

}  // namespace nodeagent::api
