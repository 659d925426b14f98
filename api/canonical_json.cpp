#include "api/canonical_json.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

namespace nodeagent::api {
namespace {

using nlohmann::json;

// The bytes are exactly those of nlohmann's dump(-1, ' ', /*ensure_ascii=*/false,
// error_handler_t::replace), the serialization canonical JSON was first defined with; unit tests
// compare the two. nlohmann::json keeps objects in a std::map, so keys come out sorted by byte
// value (the order Go's encoding/json uses).
std::string nlohmannDump(const json& value) {
  // Input is UTF-8-checked before it gets here; the replace handler only makes sure a stray
  // invalid byte can never turn into an exception.
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What a byte needs in a JSON string: 0 nothing, 1 an escape, 2 the UTF-8 path.
constexpr std::array<unsigned char, 256> kByteClass = [] {
  std::array<unsigned char, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = 1;
  t['"'] = 1;
  t['\\'] = 1;
  for (int c = 0x80; c < 0x100; ++c) t[c] = 2;
  return t;
}();

// How many leading bytes of `s` need no escape and no UTF-8 check.
size_t cleanPrefixLength(std::string_view s) {
  size_t clean = 0;
  // Eight bytes at a time while none is below 0x20, '"', '\\' or above 0x7f.
  constexpr uint64_t kOnes = 0x0101010101010101ULL;
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  auto has_zero_byte = [](uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  while (clean + 8 <= s.size()) {
    uint64_t w;
    std::memcpy(&w, s.data() + clean, 8);
    if ((((w - 0x20 * kOnes) & ~w) | w | has_zero_byte(w ^ ('"' * kOnes)) |
         has_zero_byte(w ^ ('\\' * kOnes))) &
        kHigh) {
      break;
    }
    clean += 8;
  }
  while (clean < s.size() && kByteClass[static_cast<unsigned char>(s[clean])] == 0) ++clean;
  return clean;
}

// The common case, nothing to escape: one copy.
void appendQuoted(std::string_view s, std::string& out, char lead, char trail) {
  const size_t at = out.size();
  out.resize(at + s.size() + 2 + (lead != 0 ? 1 : 0) + (trail != 0 ? 1 : 0));
  char* d = out.data() + at;
  if (lead != 0) *d++ = lead;
  *d++ = '"';
  std::memcpy(d, s.data(), s.size());
  d += s.size();
  *d++ = '"';
  if (trail != 0) *d = trail;
}

// The escape of an ASCII byte that needs one ('"', '\\' or a control character).
void appendEscape(unsigned char c, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '\\';
  switch (c) {
    case '"':
      out += '"';
      break;
    case '\\':
      out += '\\';
      break;
    case '\b':
      out += 'b';
      break;
    case '\t':
      out += 't';
      break;
    case '\n':
      out += 'n';
      break;
    case '\f':
      out += 'f';
      break;
    case '\r':
      out += 'r';
      break;
    default:
      out += "u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
      break;
  }
}

// Appends `s` as a JSON string, between `lead` and `trail` when they are not 0.
void appendString(std::string_view s, std::string& out, char lead = 0, char trail = 0) {
  const size_t clean = cleanPrefixLength(s);
  if (clean == s.size()) return appendQuoted(s, out, lead, trail);
  if (lead != 0) out += lead;
  const size_t start = out.size();
  out += '"';
  size_t run = 0;  // start of the bytes not yet copied
  for (size_t i = clean; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const unsigned char kind = kByteClass[c];
    if (kind == 0) continue;
    if (kind == 2) {
      // Non-ASCII text goes through nlohmann's UTF-8 decoder (validation, replacement of bad
      // bytes).
      out.resize(start);
      out += nlohmannDump(json(std::string(s)));
      if (trail != 0) out += trail;
      return;
    }
    out.append(s.data() + run, i - run);
    run = i + 1;
    appendEscape(c, out);
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
  if (trail != 0) out += trail;
}

template <typename Int>
void appendInteger(Int v, std::string& out) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

// Marks sorted by node address, for a binary search at every object and array.
struct MarkIndex {
  std::vector<CanonicalMark*> sorted;

  CanonicalMark* find(const json* node) const {
    auto it = std::lower_bound(sorted.begin(), sorted.end(), node,
                               [](const CanonicalMark* m, const json* n) { return m->node < n; });
    return it != sorted.end() && (*it)->node == node ? *it : nullptr;
  }
};

template <bool kMarks>
void append(const json& value, std::string& out, const MarkIndex* marks) {
  switch (value.type()) {
    case json::value_t::object:
    case json::value_t::array: {
      CanonicalMark* mark = nullptr;
      if constexpr (kMarks) mark = marks->find(&value);
      const size_t begin = out.size();
      if (value.is_object()) {
        out += '{';
        bool first = true;
        for (const auto& [k, v] : value.get_ref<const json::object_t&>()) {
          appendString(k, out, first ? 0 : ',', ':');
          first = false;
          append<kMarks>(v, out, marks);
        }
        out += '}';
      } else {
        out += '[';
        bool first = true;
        for (const json& v : value.get_ref<const json::array_t&>()) {
          if (!first) out += ',';
          first = false;
          append<kMarks>(v, out, marks);
        }
        out += ']';
      }
      if (mark != nullptr) {
        mark->begin = begin;
        mark->end = out.size();
      }
      return;
    }
    case json::value_t::string:
      appendString(value.get_ref<const std::string&>(), out);
      return;
    case json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case json::value_t::null:
      out += "null";
      return;
    case json::value_t::number_integer:
      appendInteger(value.get<json::number_integer_t>(), out);
      return;
    case json::value_t::number_unsigned:
      appendInteger(value.get<json::number_unsigned_t>(), out);
      return;
    default:
      // Floats (nlohmann's shortest round-trip form, "1000.0"), binary and discarded values.
      out += nlohmannDump(value);
      return;
  }
}

}  // namespace

void appendCanonicalJson(const json& value, std::string& out) {
  append<false>(value, out, nullptr);
}

void appendCanonicalJson(const json& value, std::string& out, std::span<CanonicalMark> marks) {
  MarkIndex index;
  index.sorted.reserve(marks.size());
  for (CanonicalMark& m : marks) {
    m.begin = m.end = 0;
    index.sorted.push_back(&m);
  }
  std::sort(index.sorted.begin(), index.sorted.end(),
            [](const CanonicalMark* a, const CanonicalMark* b) { return a->node < b->node; });
  append<true>(value, out, &index);
}

std::string canonicalJson(const json& value) {
  std::string out;
  appendCanonicalJson(value, out);
  return out;
}

Hash128 canonicalHash(const json& value) { return hash128(canonicalJson(value)); }

}  // namespace nodeagent::api
