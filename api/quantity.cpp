#include "api/quantity.h"

#include <limits>
#include <string>
#include <string_view>

namespace nodeagent::api {
namespace {

using i128 = __int128;
using u128 = unsigned __int128;

constexpr i128 kNanosPerUnit = 1000000000;

bool mulOverflows(i128 a, i128 b, i128* out) { return __builtin_mul_overflow(a, b, out); }

i128 pow10(int n) {
  i128 v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}

// Ceiling of a / b for b > 0.
i128 ceilDiv(i128 a, i128 b) {
  i128 q = a / b;
  if (a % b != 0 && a > 0) ++q;
  return q;
}

int64_t clampToInt64(i128 v) {
  if (v > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  if (v < std::numeric_limits<int64_t>::min()) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

// The number before the suffix: digits, optionally a fraction (at least one digit overall).
struct Mantissa {
  i128 value = 0;
  int fraction_digits = 0;
  int digits = 0;
  bool overflow = false;
};

// Reads the mantissa from `pos` on and leaves `pos` after it.
Mantissa parseMantissa(std::string_view text, size_t& pos) {
  Mantissa m;
  auto addDigit = [&](char c) {
    if (mulOverflows(m.value, 10, &m.value) || __builtin_add_overflow(m.value, c - '0', &m.value)) {
      m.overflow = true;
    }
  };
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    addDigit(text[pos++]);
    ++m.digits;
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      addDigit(text[pos++]);
      ++m.digits;
      ++m.fraction_digits;
    }
  }
  return m;
}

// What a suffix multiplies the mantissa by: 10^exp10 * 2^exp2.
struct Scale {
  int exp10 = 0;
  int exp2 = 0;
};

struct NamedSuffix {
  std::string_view name;
  Scale scale;
};

// Decimal SI and binary suffixes (resource.Quantity's).
constexpr NamedSuffix kSuffixes[] = {
    {"n", {-9, 0}},  {"u", {-6, 0}},  {"m", {-3, 0}},  {"k", {3, 0}},   {"M", {6, 0}},
    {"G", {9, 0}},   {"T", {12, 0}},  {"P", {15, 0}},  {"E", {18, 0}},  {"Ki", {0, 10}},
    {"Mi", {0, 20}}, {"Gi", {0, 30}}, {"Ti", {0, 40}}, {"Pi", {0, 50}}, {"Ei", {0, 60}},
};

// The scale of a suffix: none, an SI or binary suffix, or a decimal exponent (e3, E-6).
// False with `why` set when the suffix is malformed.
bool parseSuffix(std::string_view suffix, Scale& scale, std::string& why) {
  scale = Scale{};
  if (suffix.empty()) return true;
  for (const NamedSuffix& s : kSuffixes) {
    if (suffix == s.name) {
      scale = s.scale;
      return true;
    }
  }
  if (suffix[0] != 'e' && suffix[0] != 'E') {
    why = "unknown suffix \"" + std::string(suffix) + "\"";
    return false;
  }
  std::string_view e = suffix.substr(1);
  bool eneg = false;
  if (!e.empty() && (e[0] == '+' || e[0] == '-')) {
    eneg = e[0] == '-';
    e.remove_prefix(1);
  }
  if (e.empty()) {
    why = "expected digits after the exponent";
    return false;
  }
  int64_t ev = 0;
  for (char c : e) {
    if (c < '0' || c > '9') {
      why = "unknown suffix \"" + std::string(suffix) + "\"";
      return false;
    }
    if (ev < 1000000) ev = ev * 10 + (c - '0');
  }
  scale.exp10 = static_cast<int>(eneg ? -ev : ev);
  return true;
}

// The magnitude in nano-units of a mantissa with `fraction_digits` times `scale`, rounded up to
// a whole nano-unit as resource.Quantity does. False when it does not fit.
bool toNanos(i128 mantissa, int fraction_digits, const Scale& scale, bool negative, i128& out) {
  i128 v = mantissa;
  if (mulOverflows(v, i128{1} << scale.exp2, &v)) return false;
  int p = scale.exp10 - fraction_digits + 9;  // power of ten from mantissa units to nano-units
  if (p >= 0) {
    if (v != 0 && (p > 38 || mulOverflows(v, pow10(p), &v))) return false;
  } else if (v != 0) {
    // Finer than a nano-unit: round up to the next nano-unit, as resource.Quantity does.
    if (-p > 38) {
      v = negative ? 0 : 1;
    } else {
      i128 d = pow10(-p);
      v = negative ? v / d : ceilDiv(v, d);
    }
  }
  out = v;
  return true;
}

}  // namespace

base::StatusOr<Quantity> Quantity::parse(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return base::invalidArgumentError("invalid quantity \"" + std::string(text) + "\": " + why);
  };
  auto too_large = [&] {
    return base::outOfRangeError("quantity \"" + std::string(text) + "\" is too large");
  };
  if (text.empty()) return bad("empty");
  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') {
    negative = text[pos] == '-';
    ++pos;
  }
  const Mantissa mantissa = parseMantissa(text, pos);
  if (mantissa.digits == 0) return bad("expected a number");
  if (mantissa.overflow) return too_large();
  Scale scale;
  std::string why;
  if (!parseSuffix(text.substr(pos), scale, why)) return bad(why);
  i128 v = 0;
  if (!toNanos(mantissa.value, mantissa.fraction_digits, scale, negative, v)) return too_large();
  Quantity q;
  q.nanos_ = negative ? -v : v;
  q.text_ = std::string(text);
  return q;
}

Quantity Quantity::fromValue(int64_t value) {
  Quantity q;
  q.nanos_ = static_cast<i128>(value) * kNanosPerUnit;
  q.text_ = std::to_string(value);
  return q;
}

Quantity Quantity::fromMilli(int64_t milli) {
  Quantity q;
  q.nanos_ = static_cast<i128>(milli) * 1000000;
  q.text_ = milli % 1000 == 0 ? std::to_string(milli / 1000) : std::to_string(milli) + "m";
  return q;
}

Quantity Quantity::fromBytes(int64_t bytes) {
  static const char* const kSuffixes[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  Quantity q;
  q.nanos_ = static_cast<i128>(bytes) * kNanosPerUnit;
  int k = 0;
  int64_t v = bytes;
  while (v != 0 && k < 6 && v % 1024 == 0) {
    v /= 1024;
    ++k;
  }
  q.text_ = std::to_string(v) + kSuffixes[k];
  return q;
}

int64_t Quantity::value() const { return clampToInt64(ceilDiv(nanos_, kNanosPerUnit)); }

int64_t Quantity::milliValue() const { return clampToInt64(ceilDiv(nanos_, 1000000)); }

}  // namespace nodeagent::api
