#include "api/yaml_scalar.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "api/yaml.h"

namespace nodeagent::api {
namespace {

using nlohmann::json;
using yaml_internal::Resolved;

bool isDigits(std::string_view s, int base) {
  if (s.empty()) return false;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    if (d >= base) return false;
  }
  return true;
}

// Go's strconv.ParseUint(s, 0, 64) on an unsigned digit string (no sign): base prefixes 0x, 0o,
// 0b and a leading 0 for octal.
bool parseGoUnsigned(std::string_view s, unsigned __int128* out) {
  int base = 10;
  if (s.size() > 1 && s[0] == '0') {
    char p = s[1];
    if (p == 'x' || p == 'X') {
      base = 16, s.remove_prefix(2);
    } else if (p == 'o' || p == 'O') {
      base = 8, s.remove_prefix(2);
    } else if (p == 'b' || p == 'B') {
      base = 2, s.remove_prefix(2);
    } else {
      base = 8, s.remove_prefix(1);
    }
  }
  if (!isDigits(s, base)) return false;
  unsigned __int128 v = 0;
  for (char c : s) {
    int d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
    v = v * base + d;
    if (v > static_cast<unsigned __int128>(UINT64_MAX)) return false;
  }
  *out = v;
  return true;
}

// ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$ (yaml.v2's yamlStyleFloat).
bool isYamlFloat(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > start;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits()) return false;
  } else {
    if (!digits()) return false;
    if (i < s.size() && s[i] == '.') {
      ++i;
      digits();
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

// The scalars yaml.v2's resolve table gives a fixed meaning.
enum class Fixed { kNone, kTrue, kFalse, kNull, kSpecialFloat };

Fixed fixedScalar(std::string_view s) {
  if (s.size() > 5) return Fixed::kNone;
  if (!s.empty() && std::string_view("yYnNoOtTfF~.+-").find(s[0]) == std::string_view::npos) {
    return Fixed::kNone;
  }
  auto any = [&](std::initializer_list<std::string_view> words) {
    for (std::string_view w : words) {
      if (s == w) return true;
    }
    return false;
  };
  switch (s.size()) {
    case 0:
      return Fixed::kNull;
    case 1:
      switch (s[0]) {
        case 'y':
        case 'Y':
          return Fixed::kTrue;
        case 'n':
        case 'N':
          return Fixed::kFalse;
        case '~':
          return Fixed::kNull;
        default:
          return Fixed::kNone;
      }
    case 2:
      if (any({"on", "On", "ON"})) return Fixed::kTrue;
      if (any({"no", "No", "NO"})) return Fixed::kFalse;
      return Fixed::kNone;
    case 3:
      if (any({"yes", "Yes", "YES"})) return Fixed::kTrue;
      if (any({"off", "Off", "OFF"})) return Fixed::kFalse;
      return Fixed::kNone;
    case 4:
      if (any({"true", "True", "TRUE"})) return Fixed::kTrue;
      if (any({"null", "Null", "NULL"})) return Fixed::kNull;
      if (any({".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF"})) return Fixed::kSpecialFloat;
      return Fixed::kNone;
    case 5:
      if (any({"false", "False", "FALSE"})) return Fixed::kFalse;
      if (any({"+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"})) {
        return Fixed::kSpecialFloat;
      }
      return Fixed::kNone;
    default:
      return Fixed::kNone;
  }
}

bool startsLikeNumber(char c) { return c == '.' || c == '+' || c == '-' || (c >= '0' && c <= '9'); }

// Fast path: a decimal without sign, leading zero or '_' that fits 18 digits is an int64.
std::optional<int64_t> shortDecimal(std::string_view in) {
  if (in.size() > 18 || (in[0] == '0' && in.size() != 1)) return std::nullopt;
  int64_t v = 0;
  for (char ch : in) {
    if (ch < '0' || ch > '9') return std::nullopt;
    v = v * 10 + (ch - '0');
  }
  return v;
}

// `plain` (a number's text without '_') as Go's ParseInt, else ParseUint when unsigned: nullopt
// when it is neither or does not fit.
std::optional<json> goInteger(std::string_view plain) {
  std::string_view digits = plain;
  bool negative = false;
  bool has_sign = false;
  if (!digits.empty() && (digits[0] == '+' || digits[0] == '-')) {
    negative = digits[0] == '-';
    has_sign = true;
    digits.remove_prefix(1);
  }
  unsigned __int128 magnitude = 0;
  if (!parseGoUnsigned(digits, &magnitude)) return std::nullopt;
  if (negative) {
    if (magnitude <= static_cast<unsigned __int128>(INT64_MAX) + 1) {
      return json(static_cast<int64_t>(-static_cast<__int128>(magnitude)));
    }
  } else if (magnitude <= static_cast<unsigned __int128>(INT64_MAX)) {
    return json(static_cast<int64_t>(magnitude));
  } else if (!has_sign) {
    return json(static_cast<uint64_t>(magnitude));
  }
  return std::nullopt;
}

}  // namespace

namespace yaml_internal {

bool staysString(std::string_view s) {
  return !s.empty() && !startsLikeNumber(s[0]) && fixedScalar(s) == Fixed::kNone;
}

Resolved resolvePlain(std::string in) {
  switch (fixedScalar(in)) {
    case Fixed::kTrue:
      return {json(true), {}};
    case Fixed::kFalse:
      return {json(false), {}};
    case Fixed::kNull:
      return {json(nullptr), {}};
    case Fixed::kSpecialFloat:
      return {json(), "\"" + in + "\" (infinity or NaN) cannot be represented in JSON"};
    case Fixed::kNone:
      break;
  }
  const char c = in[0];  // not empty: that is null
  if (!startsLikeNumber(c)) return {json(std::move(in)), {}};
  if (c == '.') {
    if (isYamlFloat(in)) {
      double d = std::strtod(in.c_str(), nullptr);
      if (std::isfinite(d)) return {json(d), {}};
    }
    return {json(std::move(in)), {}};
  }
  if (std::optional<int64_t> v = shortDecimal(in)) return {json(*v), {}};

  std::string plain;
  plain.reserve(in.size());
  for (char ch : in) {
    if (ch != '_') plain.push_back(ch);
  }
  if (std::optional<json> integer = goInteger(plain)) return {std::move(*integer), {}};
  if (isYamlFloat(plain)) {
    double d = std::strtod(plain.c_str(), nullptr);
    // Like Go's ParseFloat, an overflowing value is not a float; yaml.v2 then keeps the string.
    if (std::isfinite(d)) return {json(d), {}};
  }
  return {json(std::move(in)), {}};
}

}  // namespace yaml_internal

base::StatusOr<json> resolvePlainScalar(std::string_view text) {
  try {
    Resolved r = yaml_internal::resolvePlain(std::string(text));
    if (!r.error.empty()) return base::invalidArgumentError(r.error);
    return std::move(r.value);
  } catch (const std::exception& e) {
    return base::invalidArgumentError(std::string("YAML: ") + e.what());
  }
}

}  // namespace nodeagent::api
