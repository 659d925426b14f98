#include "api/time.h"

#include <cstdio>

namespace nodeagent::api {
namespace {

using std::chrono::days;
using std::chrono::floor;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::nanoseconds;
using std::chrono::seconds;

bool digitsAt(std::string_view s, size_t pos, size_t n, int* out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

base::Status bad(std::string_view text, const std::string& why) {
  return base::invalidArgumentError("invalid RFC 3339 time \"" + std::string(text) + "\": " + why);
}

// "2024-01-02T03:04:05" plus the fraction digits given.
std::string format(Timestamp t, int fraction_digits, bool trim) {
  auto day = floor<days>(t);
  std::chrono::year_month_day ymd{day};
  std::chrono::hh_mm_ss<nanoseconds> hms{t - day};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02d:%02d:%02lld", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<long long>(hms.seconds().count()));
  std::string out = buf;
  if (fraction_digits > 0) {
    char frac[16];
    std::snprintf(frac, sizeof(frac), "%09lld", static_cast<long long>(hms.subseconds().count()));
    std::string f(frac, static_cast<size_t>(fraction_digits));
    if (trim) {
      while (!f.empty() && f.back() == '0') f.pop_back();
    }
    if (!f.empty()) out += "." + f;
  }
  out += 'Z';
  return out;
}

}  // namespace

base::StatusOr<Timestamp> parseTime(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)
  int year, month, day, hour, minute, second;
  if (!digitsAt(text, 0, 4, &year) || text.size() < 20 || text[4] != '-' ||
      !digitsAt(text, 5, 2, &month) || text[7] != '-' || !digitsAt(text, 8, 2, &day) ||
      text[10] != 'T' || !digitsAt(text, 11, 2, &hour) || text[13] != ':' ||
      !digitsAt(text, 14, 2, &minute) || text[16] != ':' || !digitsAt(text, 17, 2, &second)) {
    return bad(text, "expected YYYY-MM-DDTHH:MM:SS followed by Z or an offset");
  }
  size_t pos = 19;
  int64_t nanos = 0;
  if (text[pos] == '.') {
    ++pos;
    size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') ++pos;
    size_t n = pos - start;
    if (n == 0) return bad(text, "empty fraction of a second");
    if (n > 9) return bad(text, "fraction of a second longer than 9 digits");
    for (size_t i = start; i < pos; ++i) nanos = nanos * 10 + (text[i] - '0');
    for (size_t i = n; i < 9; ++i) nanos *= 10;
  }
  int offset_minutes = 0;
  if (pos < text.size() && text[pos] == 'Z') {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int sign = text[pos] == '-' ? -1 : 1;
    int oh, om;
    if (!digitsAt(text, pos + 1, 2, &oh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !digitsAt(text, pos + 4, 2, &om)) {
      return bad(text, "expected an offset like +02:00");
    }
    if (oh > 23 || om > 59) return bad(text, "offset out of range");
    offset_minutes = sign * (oh * 60 + om);
    pos += 6;
  } else {
    return bad(text, "expected Z or an offset like +02:00");
  }
  if (pos != text.size()) return bad(text, "trailing characters");
  std::chrono::year_month_day ymd{std::chrono::year(year),
                                  std::chrono::month(static_cast<unsigned>(month)),
                                  std::chrono::day(static_cast<unsigned>(day))};
  if (!ymd.ok()) return bad(text, "no such date");
  if (hour > 23 || minute > 59 || second > 59) return bad(text, "no such time of day");
  Timestamp t = std::chrono::sys_days(ymd) + hours(hour) + minutes(minute) + seconds(second) +
                nanoseconds(nanos) - minutes(offset_minutes);
  return t;
}

std::string formatTime(Timestamp t) { return format(floor<seconds>(t), 0, false); }

std::string formatMicroTime(Timestamp t) {
  return format(floor<std::chrono::microseconds>(t), 6, false);
}

std::string formatNanoTime(Timestamp t) { return format(t, 9, true); }

}  // namespace nodeagent::api
