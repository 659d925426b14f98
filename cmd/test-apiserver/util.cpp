#include "cmd/test-apiserver/util.h"

#include <time.h>

#include <array>
#include <cctype>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace nodeagent::testapiserver {
namespace {

std::string formatWithFraction(base::SystemTime t, int digits) {
  const auto since = t.time_since_epoch();
  auto secs = std::chrono::floor<std::chrono::seconds>(since);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(since - secs).count();
  time_t tt = static_cast<time_t>(secs.count());
  struct tm tm_utc {};
  gmtime_r(&tt, &tm_utc);
  std::array<char, 64> buf{};
  size_t n = strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%S", &tm_utc);
  std::string out(buf.data(), n);
  if (digits > 0) {
    std::array<char, 32> frac{};
    std::snprintf(frac.data(), frac.size(), ".%06lld", static_cast<long long>(micros));
    out += frac.data();
  }
  out += 'Z';
  return out;
}

}  // namespace

std::string formatTime(base::SystemTime t) { return formatWithFraction(t, 0); }
std::string formatMicroTime(base::SystemTime t) { return formatWithFraction(t, 6); }

std::optional<base::SystemTime> parseTime(std::string_view text) {
  std::string s(text);
  struct tm tm_utc {};
  int consumed = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm_utc.tm_year, &tm_utc.tm_mon,
                  &tm_utc.tm_mday, &tm_utc.tm_hour, &tm_utc.tm_min, &tm_utc.tm_sec,
                  &consumed) != 6 ||
      consumed != 19) {
    return std::nullopt;
  }
  tm_utc.tm_year -= 1900;
  tm_utc.tm_mon -= 1;
  time_t secs = timegm(&tm_utc);
  std::chrono::nanoseconds frac{0};
  size_t i = 19;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t scale = 100000000;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      frac += std::chrono::nanoseconds((s[i] - '0') * scale);
      scale /= 10;
      ++i;
    }
  }
  int offset_secs = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    int hh = 0, mm = 0;
    if (std::sscanf(s.c_str() + i + 1, "%2d:%2d", &hh, &mm) != 2) return std::nullopt;
    offset_secs = (hh * 3600 + mm * 60) * (s[i] == '+' ? 1 : -1);
    i += 6;
  } else {
    return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  return base::SystemTime(std::chrono::duration_cast<base::SystemTime::duration>(
      std::chrono::seconds(secs - offset_secs) + frac));
}

std::string humanDuration(base::Duration d) {
  const int64_t seconds = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  auto fmt = [](const char* f, int64_t a, int64_t b = 0) {
    std::array<char, 32> buf{};
    std::snprintf(buf.data(), buf.size(), f, static_cast<long long>(a), static_cast<long long>(b));
    return std::string(buf.data());
  };
  if (seconds < -1) return "<invalid>";
  if (seconds < 0) return "0s";
  if (seconds < 60 * 2) return fmt("%llds", seconds);
  const int64_t minutes = seconds / 60;
  if (minutes < 10) {
    const int64_t s = seconds % 60;
    return s == 0 ? fmt("%lldm", minutes) : fmt("%lldm%llds", minutes, s);
  }
  if (minutes < 60 * 3) return fmt("%lldm", minutes);
  const int64_t hours = minutes / 60;
  if (hours < 8) {
    const int64_t m = minutes % 60;
    return m == 0 ? fmt("%lldh", hours) : fmt("%lldh%lldm", hours, m);
  }
  if (hours < 48) return fmt("%lldh", hours);
  if (hours < 24 * 8) {
    const int64_t h = hours % 24;
    return h == 0 ? fmt("%lldd", hours / 24) : fmt("%lldd%lldh", hours / 24, h);
  }
  if (hours < 24 * 365 * 2) return fmt("%lldd", hours / 24);
  if (hours < 24 * 365 * 8) {
    const int64_t dy = (hours / 24) % 365;
    return dy == 0 ? fmt("%lldy", hours / 24 / 365) : fmt("%lldy%lldd", hours / 24 / 365, dy);
  }
  return fmt("%lldy", hours / 24 / 365);
}

namespace {
constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64Encode(std::string_view data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    uint32_t v = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8) | uint8_t(data[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < data.size()) {
    uint32_t v = uint8_t(data[i]) << 16;
    if (i + 1 < data.size()) v |= uint8_t(data[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < data.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> base64Decode(std::string_view text) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    int v;
    if (c == '-') {
      v = 62;
    } else if (c == '_') {
      v = 63;
    } else {
      auto pos = kAlphabet.find(c);
      if (pos == std::string_view::npos) return std::nullopt;
      v = static_cast<int>(pos);
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::vector<std::string> splitString(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(separator, start);
    parts.emplace_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

std::string base64UrlEncode(std::string_view data) {
  std::string out = base64Encode(data);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

std::optional<std::string> base64UrlDecode(std::string_view text) {
  // One character left over carries fewer than 8 bits: no byte ends there.
  if (text.size() % 4 == 1) return std::nullopt;
  for (char c : text) {
    if (c == '+' || c == '/' || c == '=') return std::nullopt;
  }
  return base64Decode(text);
}

namespace {

base::Status corruptBase64(size_t at) {
  return base::invalidArgumentError("illegal base64 data at input byte " + std::to_string(at));
}

bool isNewline(char c) { return c == '\r' || c == '\n'; }

}  // namespace

// Follows Go's decodeQuantum so the reported offsets are the ones kube-apiserver reports.
base::StatusOr<std::string> base64DecodeStd(std::string_view src) {
  std::string out;
  size_t si = 0;
  while (true) {
    std::array<uint8_t, 4> dbuf{};
    size_t dlen = 4;
    bool end = false;
    for (size_t j = 0; j < 4; ++j) {
      if (si == src.size()) {
        if (j == 0) return out;
        return corruptBase64(si - j);
      }
      const char in = src[si++];
      const auto pos = kAlphabet.find(in);
      if (pos != std::string_view::npos) {
        dbuf[j] = static_cast<uint8_t>(pos);
        continue;
      }
      if (isNewline(in)) {
        --j;
        continue;
      }
      if (in != '=' || j < 2) return corruptBase64(si - 1);
      if (j == 2) {
        while (si < src.size() && isNewline(src[si])) ++si;
        if (si == src.size()) return corruptBase64(src.size());
        if (src[si] != '=') return corruptBase64(si - 1);
        ++si;
      }
      while (si < src.size() && isNewline(src[si])) ++si;
      if (si < src.size()) return corruptBase64(si);
      dlen = j;
      end = true;
      break;
    }
    const uint32_t v = (uint32_t{dbuf[0]} << 18) | (uint32_t{dbuf[1]} << 12) |
                       (uint32_t{dbuf[2]} << 6) | uint32_t{dbuf[3]};
    out += static_cast<char>((v >> 16) & 0xff);
    if (dlen >= 3) out += static_cast<char>((v >> 8) & 0xff);
    if (dlen == 4) out += static_cast<char>(v & 0xff);
    if (end) return out;
  }
}

bool nestedDeeperThan(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

std::string stringAt(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string asciiLower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace nodeagent::testapiserver
