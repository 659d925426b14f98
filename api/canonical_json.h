// Canonical JSON: object keys sorted, no insignificant white space, numbers as parsed. The same
// value always prints the same bytes, so hashes of canonical JSON are stable.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "api/hash.h"

namespace nodeagent::api {

std::string canonicalJson(const nlohmann::json& value);
Hash128 canonicalHash(const nlohmann::json& value);

// Appends the canonical JSON of `value` to `out`.
void appendCanonicalJson(const nlohmann::json& value, std::string& out);

// A node inside the value being written whose own canonical JSON is wanted too: it is the
// substring [begin, end) of the output, so it costs no second serialization.
struct CanonicalMark {
  const nlohmann::json* node = nullptr;
  size_t begin = 0;
  size_t end = 0;
  std::string_view in(std::string_view out) const { return out.substr(begin, end - begin); }
};

// Like appendCanonicalJson, and fills in each mark whose node is an object or an array inside
// `value` (marks of other nodes keep begin == end == 0).
void appendCanonicalJson(const nlohmann::json& value, std::string& out,
                         std::span<CanonicalMark> marks);

}  // namespace nodeagent::api
