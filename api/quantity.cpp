#include "api/quantity.h"

#include <limits>

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

}  // namespace

base::StatusOr<Quantity> Quantity::parse(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return base::invalidArgumentError("invalid quantity \"" + std::string(text) + "\": " + why);
  };
  if (text.empty()) return bad("empty");
  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') {
    negative = text[pos] == '-';
    ++pos;
  }
  // Mantissa: digits, optionally a fraction (at least one digit overall).
  i128 mantissa = 0;
  int fraction_digits = 0;
  int digits = 0;
  bool overflow = false;
  auto addDigit = [&](char c) {
    if (mulOverflows(mantissa, 10, &mantissa) ||
        __builtin_add_overflow(mantissa, c - '0', &mantissa)) {
      overflow = true;
    }
  };
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    addDigit(text[pos++]);
    ++digits;
  }
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      addDigit(text[pos++]);
      ++digits;
      ++fraction_digits;
    }
  }
  if (digits == 0) return bad("expected a number");
  if (overflow) return base::outOfRangeError("quantity \"" + std::string(text) + "\" is too large");

  // Suffix.
  std::string_view suffix = text.substr(pos);
  int exp10 = 0;
  int exp2 = 0;
  if (suffix.empty()) {
  } else if (suffix == "n") {
    exp10 = -9;
  } else if (suffix == "u") {
    exp10 = -6;
  } else if (suffix == "m") {
    exp10 = -3;
  } else if (suffix == "k") {
    exp10 = 3;
  } else if (suffix == "M") {
    exp10 = 6;
  } else if (suffix == "G") {
    exp10 = 9;
  } else if (suffix == "T") {
    exp10 = 12;
  } else if (suffix == "P") {
    exp10 = 15;
  } else if (suffix == "E") {
    exp10 = 18;
  } else if (suffix == "Ki") {
    exp2 = 10;
  } else if (suffix == "Mi") {
    exp2 = 20;
  } else if (suffix == "Gi") {
    exp2 = 30;
  } else if (suffix == "Ti") {
    exp2 = 40;
  } else if (suffix == "Pi") {
    exp2 = 50;
  } else if (suffix == "Ei") {
    exp2 = 60;
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view e = suffix.substr(1);
    bool eneg = false;
    if (!e.empty() && (e[0] == '+' || e[0] == '-')) {
      eneg = e[0] == '-';
      e.remove_prefix(1);
    }
    if (e.empty()) return bad("expected digits after the exponent");
    int64_t ev = 0;
    for (char c : e) {
      if (c < '0' || c > '9') return bad("unknown suffix \"" + std::string(suffix) + "\"");
      if (ev < 1000000) ev = ev * 10 + (c - '0');
    }
    exp10 = static_cast<int>(eneg ? -ev : ev);
  } else {
    return bad("unknown suffix \"" + std::string(suffix) + "\"");
  }

  i128 v = mantissa;
  if (mulOverflows(v, i128{1} << exp2, &v)) {
    return base::outOfRangeError("quantity \"" + std::string(text) + "\" is too large");
  }
  int p = exp10 - fraction_digits + 9;  // power of ten from mantissa units to nano-units
  if (p >= 0) {
    if (v != 0 && (p > 38 || mulOverflows(v, pow10(p), &v))) {
      return base::outOfRangeError("quantity \"" + std::string(text) + "\" is too large");
    }
  } else if (v != 0) {
    // Finer than a nano-unit: round up to the next nano-unit, as resource.Quantity does.
    if (-p > 38) {
      v = negative ? 0 : 1;
    } else {
      i128 d = pow10(-p);
      v = negative ? v / d : ceilDiv(v, d);
    }
  }
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
