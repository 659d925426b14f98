// A stable 128-bit content hash (of canonical JSON and other byte strings). The algorithm is
// fixed forever: static pod UIDs derive from it, so a change would restart every static pod.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace nodeagent::api {

struct Hash128 {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const Hash128&) const = default;
  auto operator<=>(const Hash128&) const = default;
  // 32 lower-case hex digits.
  std::string toHex() const;
};

Hash128 hash128(std::string_view bytes);

// The hasher of unordered containers keyed by a Hash128: its bits are already spread evenly, so
// one half of them serves.
struct Hash128Hasher {
  size_t operator()(const Hash128& h) const noexcept { return static_cast<size_t>(h.low); }
};

}  // namespace nodeagent::api
