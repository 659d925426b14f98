#include "base/duration.h"

#include <cstdint>
#include <limits>

namespace nodeagent::base {
namespace {

struct Unit {
  std::string_view name;
  uint64_t nanos;
};

// Longest names first where one is a prefix of another ("ms" before "m").
constexpr Unit kUnits[] = {
    {"ns", 1ULL},
    {"us", 1000ULL},
    {"\xC2\xB5s", 1000ULL},  // U+00B5 micro sign
    {"\xCE\xBCs", 1000ULL},  // U+03BC Greek small letter mu
    {"ms", 1000000ULL},
    {"s", 1000000000ULL},
    {"m", 60ULL * 1000000000ULL},
    {"h", 3600ULL * 1000000000ULL},
};

Status invalid(std::string_view text, std::string_view why) {
  return invalidArgumentError("invalid duration \"" + std::string(text) +
                              "\": " + std::string(why));
}

bool isDigit(char c) { return c >= '0' && c <= '9'; }

constexpr uint64_t kMaxNanos = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// The number of one "<number><unit>" component: its whole part and up to 18 fraction digits
// (frac / scale), enough for nanosecond precision of any unit.
struct Number {
  uint64_t whole = 0;
  uint64_t frac = 0;
  uint64_t scale = 1;
};

// Reads the number at the start of `s` and removes it from `s`.
Status readNumber(std::string_view text, std::string_view& s, Number& n) {
  bool any_digits = false;
  bool overflow = false;
  while (!s.empty() && isDigit(s.front())) {
    any_digits = true;
    if (n.whole > (kMaxNanos - static_cast<uint64_t>(s.front() - '0')) / 10) overflow = true;
    if (!overflow) n.whole = n.whole * 10 + static_cast<uint64_t>(s.front() - '0');
    s.remove_prefix(1);
  }
  if (overflow) return invalid(text, "out of range");
  if (!s.empty() && s.front() == '.') {
    s.remove_prefix(1);
    while (!s.empty() && isDigit(s.front())) {
      any_digits = true;
      if (n.scale < 1000000000000000000ULL) {
        n.frac = n.frac * 10 + static_cast<uint64_t>(s.front() - '0');
        n.scale *= 10;
      }
      s.remove_prefix(1);
    }
  }
  if (!any_digits) return invalid(text, "expected a number");
  return okStatus();
}

// Reads the unit at the start of `s` and removes it from `s`.
StatusOr<const Unit*> readUnit(std::string_view text, std::string_view& s) {
  size_t unit_len = 0;
  while (unit_len < s.size() && s[unit_len] != '.' && !isDigit(s[unit_len])) ++unit_len;
  if (unit_len == 0) return invalid(text, "missing unit");
  std::string_view unit_name = s.substr(0, unit_len);
  const Unit* unit = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit_name) unit = &u;
  }
  if (unit == nullptr) return invalid(text, "unknown unit \"" + std::string(unit_name) + "\"");
  s.remove_prefix(unit_len);
  return unit;
}

// The component in nanoseconds.
StatusOr<uint64_t> componentNanos(std::string_view text, const Number& n, const Unit& unit) {
  if (n.whole > kMaxNanos / unit.nanos) return invalid(text, "out of range");
  uint64_t value = n.whole * unit.nanos;
  if (n.frac > 0) {
    // frac/scale < 1, so frac * nanos / scale < nanos <= 3.6e12: compute in long double to
    // avoid overflowing frac * nanos (frac may have 18 digits).
    long double part = static_cast<long double>(n.frac) * static_cast<long double>(unit.nanos) /
                       static_cast<long double>(n.scale);
    value += static_cast<uint64_t>(part);
  }
  return value;
}

}  // namespace

StatusOr<Duration> parseDuration(std::string_view text) {
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return Duration::zero();
  if (s.empty()) return invalid(text, "empty");

  uint64_t total = 0;
  while (!s.empty()) {
    Number number;
    RETURN_IF_ERROR(readNumber(text, s, number));
    ASSIGN_OR_RETURN(const Unit* unit, readUnit(text, s));
    ASSIGN_OR_RETURN(uint64_t value, componentNanos(text, number, *unit));
    if (value > kMaxNanos - total) return invalid(text, "out of range");
    total += value;
  }
  auto signed_total = static_cast<int64_t>(total);
  return Duration(negative ? -signed_total : signed_total);
}

namespace {

// Appends v / 10^prec with trailing zeros of the fraction dropped.
void appendFraction(std::string& out, uint64_t v, int prec) {
  uint64_t pow = 1;
  for (int i = 0; i < prec; ++i) pow *= 10;
  out += std::to_string(v / pow);
  uint64_t frac = v % pow;
  if (frac == 0) return;
  std::string digits = std::to_string(frac);
  digits.insert(0, static_cast<size_t>(prec) - digits.size(), '0');
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  out += '.';
  out += digits;
}

}  // namespace

std::string formatDuration(Duration d) {
  int64_t n = d.count();
  if (n == 0) return "0s";
  std::string out;
  uint64_t u;
  if (n < 0) {
    out += '-';
    u = static_cast<uint64_t>(-(n + 1)) + 1;
  } else {
    u = static_cast<uint64_t>(n);
  }
  if (u < 1000000000ULL) {
    if (u < 1000ULL) {
      out += std::to_string(u) + "ns";
    } else if (u < 1000000ULL) {
      appendFraction(out, u, 3);
      out += "\xC2\xB5s";
    } else {
      appendFraction(out, u, 6);
      out += "ms";
    }
    return out;
  }
  uint64_t hours = u / (3600ULL * 1000000000ULL);
  u -= hours * 3600ULL * 1000000000ULL;
  uint64_t minutes = u / (60ULL * 1000000000ULL);
  u -= minutes * 60ULL * 1000000000ULL;
  if (hours > 0) out += std::to_string(hours) + "h";
  if (hours > 0 || minutes > 0) out += std::to_string(minutes) + "m";
  appendFraction(out, u, 9);
  out += "s";
  return out;
}

}  // namespace nodeagent::base
