#include "agent/runtime/cri_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

namespace nodeagent::runtime {
namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;

void splitNanos(int64_t unix_nanos, time_t& secs, int64_t& frac) {
  secs = static_cast<time_t>(unix_nanos / kNanosPerSecond);
  frac = unix_nanos % kNanosPerSecond;
  if (frac < 0) {
    frac += kNanosPerSecond;
    --secs;
  }
}

// (timestamp part, clash counter) of a rotated name's suffix, for ordering by age.
std::pair<std::string, long> rotationKey(const std::string& name) {
  auto dot = name.rfind(".log.");
  std::string suffix = dot == std::string::npos ? name : name.substr(dot + 5);
  long counter = 0;
  auto dash = suffix.find('-', 9);  // the clash counter follows the "YYYYmmdd-HHMMSS" part
  if (dash != std::string::npos) {
    counter = std::strtol(suffix.c_str() + dash + 1, nullptr, 10);
    suffix.resize(dash);
  }
  return {suffix, counter};
}

}  // namespace

std::string formatRfc3339Nano(int64_t unix_nanos) {
  time_t secs;
  int64_t frac;
  splitNanos(unix_nanos, secs, frac);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                        tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  std::string out(buf, static_cast<size_t>(n));
  if (frac != 0) {
    char fbuf[16];
    std::snprintf(fbuf, sizeof fbuf, "%09lld", static_cast<long long>(frac));
    std::string f(fbuf);
    while (!f.empty() && f.back() == '0') f.pop_back();
    out += '.';
    out += f;
  }
  out += 'Z';
  return out;
}

void appendCriRecord(std::string& out, int64_t unix_nanos, LogStream stream, bool partial,
                     std::string_view text) {
  out += formatRfc3339Nano(unix_nanos);
  out += stream == LogStream::kStdout ? " stdout " : " stderr ";
  out += partial ? "P " : "F ";
  out.append(text.data(), text.size());
  out += '\n';
}

std::optional<CriRecord> parseCriRecord(std::string_view line) {
  auto sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return std::nullopt;
  auto sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return std::nullopt;
  auto sp3 = line.find(' ', sp2 + 1);
  // A record whose text is empty still has the separator after the tag.
  if (sp3 == std::string_view::npos) return std::nullopt;
  CriRecord rec;
  rec.timestamp = std::string(line.substr(0, sp1));
  auto stream = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (stream == "stdout") {
    rec.stream = LogStream::kStdout;
  } else if (stream == "stderr") {
    rec.stream = LogStream::kStderr;
  } else {
    return std::nullopt;
  }
  auto tag = line.substr(sp2 + 1, sp3 - sp2 - 1);
  if (tag == "P") {
    rec.partial = true;
  } else if (tag != "F") {
    return std::nullopt;
  }
  rec.text = std::string(line.substr(sp3 + 1));
  return rec;
}

void LineSplitter::feed(std::string_view data, const Sink& sink) {
  while (!data.empty()) {
    auto nl = data.find('\n');
    std::string_view chunk = nl == std::string_view::npos ? data : data.substr(0, nl);
    // Emit full-size partial pieces while the line outgrows the buffer (a line of exactly
    // max_record bytes stays one complete record).
    while (pending_.size() + chunk.size() > max_record_) {
      size_t take = max_record_ - pending_.size();
      if (pending_.empty()) {
        sink(chunk.substr(0, take), true);
      } else {
        pending_.append(chunk.data(), take);
        sink(pending_, true);
        pending_.clear();
      }
      chunk.remove_prefix(take);
    }
    if (nl == std::string_view::npos) {
      pending_.append(chunk.data(), chunk.size());
      return;
    }
    if (pending_.empty()) {
      sink(chunk, false);
    } else {
      pending_.append(chunk.data(), chunk.size());
      sink(pending_, false);
      pending_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish(const Sink& sink) {
  if (pending_.empty()) return;
  sink(pending_, false);
  pending_.clear();
}

bool shouldRotate(int64_t current_size, int64_t record_size, int64_t max_size) {
  if (max_size <= 0 || current_size <= 0) return false;
  return current_size + record_size > max_size;
}

std::string rotatedLogName(const std::string& log_name, int64_t unix_nanos) {
  time_t secs;
  int64_t frac;
  splitNanos(unix_nanos, secs, frac);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d-%02d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return log_name + "." + buf;
}

std::vector<std::string> rotatedFilesToRemove(std::vector<std::string> rotated, int max_files) {
  std::sort(rotated.begin(), rotated.end(), [](const std::string& a, const std::string& b) {
    return rotationKey(a) < rotationKey(b);
  });
  // The live log counts as one file.
  size_t keep = max_files > 1 ? static_cast<size_t>(max_files - 1) : 0;
  if (rotated.size() <= keep) return {};
  rotated.resize(rotated.size() - keep);
  return rotated;
}

bool rotateLogFile(const std::string& log, int64_t unix_nanos, std::string& rotated) {
  const std::string target = rotatedLogName(log, unix_nanos);
  std::string candidate = target;
  for (int n = 1; ::access(candidate.c_str(), F_OK) == 0; ++n) {
    candidate = target + "-" + std::to_string(n);
  }
  if (::rename(log.c_str(), candidate.c_str()) != 0) return false;
  rotated = std::move(candidate);
  return true;
}

void pruneRotatedLogs(const std::string& log, int max_files) {
  const auto slash = log.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : log.substr(0, slash);
  const std::string prefix = (slash == std::string::npos ? log : log.substr(slash + 1)) + ".";
  std::vector<std::string> rotated;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name.find(".tmp") == std::string::npos) {
        rotated.push_back(std::move(name));
      }
    }
    ::closedir(d);
  }
  for (const auto& name : rotatedFilesToRemove(rotated, max_files)) {
    ::unlink((dir + "/" + name).c_str());
  }
}

namespace {

// The last `max` bytes of the file at `path`; false with errno set when it cannot be read.
bool readTail(const std::string& path, size_t max, std::string& out, bool& truncated) {
  out.clear();
  truncated = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return false;
  }
  off_t size = st.st_size;
  off_t from = size > static_cast<off_t>(max) ? size - static_cast<off_t>(max) : 0;
  truncated = from > 0;
  out.resize(static_cast<size_t>(size - from));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd, out.data() + got, out.size() - got, from + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      errno = err;
      return false;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  ::close(fd);
  return true;
}

}  // namespace

std::string tailCriLogText(const std::string& path, int max_lines, size_t max_bytes) {
  // 80 records rarely exceed this; the result keeps only the last max_bytes of text anyway.
  constexpr size_t kReadLimit = 256 * 1024;
  std::string data;
  bool truncated = false;
  if (!readTail(path, kReadLimit, data, truncated)) return "";
  std::deque<std::string> texts;
  size_t pos = 0;
  if (truncated) {
    pos = data.find('\n');  // the first line is cut
    pos = pos == std::string::npos ? data.size() : pos + 1;
  }
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    if (auto rec = parseCriRecord(std::string_view(data).substr(pos, end - pos))) {
      texts.push_back(rec->partial ? std::move(rec->text) : rec->text + "\n");
      if (static_cast<int>(texts.size()) > max_lines) texts.pop_front();
    }
    pos = end + 1;
  }
  std::string out;
  for (const auto& t : texts) out += t;
  if (out.size() > max_bytes) out.erase(0, out.size() - max_bytes);
  return out;
}

std::string readTerminationMessage(const std::string& message_path, bool fallback_to_logs,
                                   const std::string& log_path) {
  std::string message;
  bool truncated = false;
  if (!message_path.empty() &&
      !readTail(message_path, kMaxTerminationMessageLength, message, truncated) &&
      errno != ENOENT) {
    return "Error on reading termination log " + message_path + ": " + std::strerror(errno);
  }
  if (message.empty() && fallback_to_logs) {
    message =
        tailCriLogText(log_path, kMaxTerminationMessageLogLines, kMaxTerminationMessageLogLength);
  }
  return message;
}

}  // namespace nodeagent::runtime
