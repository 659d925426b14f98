#include "base/log.h"

#include <charconv>
#include <ctime>
#include <mutex>
#include <utility>
#include <vector>

#include <spdlog/cfg/env.h>
#include <spdlog/formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <nlohmann/json.hpp>

#include "base/printable.h"

namespace nodeagent::base {
namespace {

std::mutex& mu() {
  static std::mutex m;
  return m;
}

class LineFormatter;
spdlog::sink_ptr makeSink();

spdlog::sink_ptr& sharedSink() {
  static spdlog::sink_ptr sink = makeSink();
  return sink;
}

spdlog::level::level_enum& currentLevel() {
  static spdlog::level::level_enum level = spdlog::level::info;
  return level;
}

bool isKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The length of the key at `pos` (a lower-case letter, then [a-zA-Z0-9_]*, then '='; klog's
// camelCase keys such as exitCode count), 0 if none.
size_t keyAt(std::string_view s, size_t pos) {
  if (pos >= s.size() || s[pos] < 'a' || s[pos] > 'z') return 0;
  size_t end = pos;
  while (end < s.size() && isKeyChar(s[end])) ++end;
  return end < s.size() && s[end] == '=' ? end - pos : 0;
}

// The end (just past its closing quote) of the complete Go-quoted token starting at `pos`: no
// raw control character inside, and a space or the end after it. npos when there is none (the
// value merely starts with a quote and is quoted as a whole).
size_t quotedEnd(std::string_view s, size_t pos) {
  for (size_t i = pos + 1; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return std::string_view::npos;
    if (c == '\\') {
      ++i;
    } else if (c == '"') {
      return i + 1 == s.size() || s[i + 1] == ' ' ? i + 1 : std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

// The next " key=" at or after `from`: the position of the key, npos if none.
size_t nextKey(std::string_view s, size_t from) {
  for (size_t i = from; i + 1 < s.size(); ++i) {
    if (s[i] == ' ' && keyAt(s, i + 1) > 0) return i + 1;
  }
  return std::string_view::npos;
}

struct LogFields {
  std::string_view msg;
  // Values as written; `quoted`: a complete Go-quoted token, printed as it is.
  struct Value {
    std::string_view key;
    std::string_view value;
    bool quoted;
  };
  std::vector<Value> values;
};

LogFields splitLogFields(std::string_view payload) {
  LogFields out;
  size_t key = nextKey(payload, 0);
  out.msg = payload.substr(0, key == std::string_view::npos ? payload.size() : key - 1);
  while (key != std::string_view::npos) {
    const size_t len = keyAt(payload, key);
    const size_t value_at = key + len + 1;
    size_t value_end;
    size_t next;
    size_t quoted_end = value_at < payload.size() && payload[value_at] == '"'
                            ? quotedEnd(payload, value_at)
                            : std::string_view::npos;
    // A quoted token counts only when the next key (or the end) follows it at once.
    if (quoted_end != std::string_view::npos && quoted_end != payload.size() &&
        keyAt(payload, quoted_end + 1) == 0) {
      quoted_end = std::string_view::npos;
    }
    if (quoted_end != std::string_view::npos) {
      value_end = quoted_end;
      next = nextKey(payload, value_end);
    } else {
      next = nextKey(payload, value_at);
      value_end = next == std::string_view::npos ? payload.size() : next - 1;
    }
    out.values.push_back({payload.substr(key, len), payload.substr(value_at, value_end - value_at),
                          quoted_end != std::string_view::npos});
    key = next;
  }
  return out;
}

bool needsQuotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '\\' || c >= 0x7f) return true;
  }
  return false;
}

// The \xNN or \uNNNN escape whose letter `e` is v[i]: appends its byte (\x) or the UTF-8 of its
// code point (\u) and moves `i` to its last digit. False when the digits are not there.
bool appendHexEscape(std::string_view v, size_t& i, char e, std::string& out) {
  const size_t digits = e == 'x' ? 2 : 4;
  unsigned value = 0;
  const char* first = v.data() + i + 1;
  const char* last = first + std::min(digits, v.size() - 1 - (i + 1));
  auto [end, ec] = std::from_chars(first, last, value, 16);
  if (ec != std::errc() || end != first + digits) return false;
  i += digits;
  if (e == 'x' || value < 0x80) {
    out += static_cast<char>(value);
  } else if (value < 0x800) {
    out += static_cast<char>(0xc0 | (value >> 6));
    out += static_cast<char>(0x80 | (value & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (value >> 12));
    out += static_cast<char>(0x80 | ((value >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (value & 0x3f));
  }
  return true;
}

// The text of a Go-quoted string (the escapes goQuote writes), or `v` itself when not quoted.
std::string unquoted(std::string_view v) {
  if (v.size() < 2 || v.front() != '"' || v.back() != '"') return std::string(v);
  std::string out;
  for (size_t i = 1; i + 1 < v.size(); ++i) {
    if (v[i] != '\\' || i + 2 >= v.size()) {
      out += v[i];
      continue;
    }
    const char e = v[++i];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
        if (!appendHexEscape(v, i, e, out)) {
          out += '\\';
          out += e;  // not an escape goQuote writes: keep the text
        }
        break;
      default:
        out += e;
    }
  }
  return out;
}

std::string levelName(char level) {
  switch (level) {
    case 'T':
      return "trace";
    case 'D':
      return "debug";
    case 'I':
      return "info";
    case 'W':
      return "warning";
    case 'E':
      return "error";
    case 'C':
      return "critical";
  }
  return std::string(1, level);
}

std::string utcTimestamp(std::chrono::system_clock::time_point time) {
  const auto secs = std::chrono::time_point_cast<std::chrono::seconds>(time);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(time - secs).count();
  const std::time_t t = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[48];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%06lldZ", static_cast<long long>(micros));
  return buf;
}

class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(LogFormat format) : format_(format) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    static constexpr char kLevels[] = {'T', 'D', 'I', 'W', 'E', 'C', 'O'};
    const auto level = static_cast<size_t>(msg.level);
    const std::string line =
        formatLogLine(format_, msg.time, level < sizeof(kLevels) ? kLevels[level] : '?',
                      std::string_view(msg.logger_name.data(), msg.logger_name.size()),
                      static_cast<uint64_t>(msg.thread_id),
                      std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(format_);
  }

 private:
  LogFormat format_;
};

spdlog::sink_ptr makeSink() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  sink->set_formatter(std::make_unique<LineFormatter>(LogFormat::kText));
  return sink;
}

}  // namespace

std::string formatLogLine(LogFormat format, std::chrono::system_clock::time_point time, char level,
                          std::string_view logger, uint64_t thread, std::string_view payload) {
  const LogFields fields = splitLogFields(payload);
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["ts"] = utcTimestamp(time);
    j["level"] = levelName(level);
    j["logger"] = std::string(logger);
    j["thread"] = thread;
    j["msg"] = std::string(fields.msg);
    for (const auto& f : fields.values) {
      std::string key(f.key);
      if (key == "ts" || key == "level" || key == "logger" || key == "thread" || key == "msg") {
        key = "_" + key;
      }
      j[key] = f.quoted ? unquoted(f.value) : std::string(f.value);
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  std::string out = utcTimestamp(time);
  out += ' ';
  out += level;
  out += ' ';
  out += logger;
  out += " [" + std::to_string(thread) + "] ";
  // The message is nodeagent's own text, but a line break in it must not start a new line.
  for (char c : fields.msg) {
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  for (const auto& f : fields.values) {
    out += ' ';
    out += f.key;
    out += '=';
    if (f.quoted) {
      out += f.value;
    } else if (needsQuotes(f.value)) {
      out += goQuote(f.value);
    } else {
      out += f.value;
    }
  }
  out += '\n';
  return out;
}

spdlog::level::level_enum levelForVerbosity(int verbosity) {
  if (verbosity >= 6) return spdlog::level::trace;
  if (verbosity >= 4) return spdlog::level::debug;
  return spdlog::level::info;
}

void initLogging(const LogOptions& options) {
  std::lock_guard lock(mu());
  currentLevel() = options.quiet ? spdlog::level::warn : levelForVerbosity(options.verbosity);
  sharedSink()->set_formatter(std::make_unique<LineFormatter>(options.format));
  spdlog::set_level(currentLevel());
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->set_level(currentLevel()); });
  spdlog::cfg::load_env_levels();
}

std::shared_ptr<spdlog::logger> logger(std::string_view name) {
  std::string key(name);
  if (auto existing = spdlog::get(key)) return existing;
  std::lock_guard lock(mu());
  if (auto existing = spdlog::get(key)) return existing;
  auto l = std::make_shared<spdlog::logger>(key, sharedSink());
  l->set_level(currentLevel());
  spdlog::register_logger(l);
  return l;
}

}  // namespace nodeagent::base
