// Hash maps and sets keyed by std::string that are looked up by std::string_view (or a C string)
// without building a std::string per lookup (C++20 heterogeneous unordered lookup).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace nodeagent::base {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

template <typename Value>
using StringHashMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;
using StringHashSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;

}  // namespace nodeagent::base
