#include "agent/logs/log_file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "agent/runtime/cri_log.h"
#include "api/time.h"

namespace nodeagent::logs {
namespace {

// Large reads keep a 100 MiB log to a few hundred pool round trips.
constexpr size_t kReadChunk = 256 * 1024;
constexpr size_t kTailBlock = 64 * 1024;

std::string quoted(const std::string& path) { return "\"" + path + "\""; }

base::Status ioError(std::string_view what, const std::string& path, int err) {
  std::string message = std::string(what) + " log file " + quoted(path) + ": " + std::strerror(err);
  if (err == ENOENT) return base::notFoundError(std::move(message));
  return base::internalError(std::move(message));
}

// The rotated files of the log named `name` in `dir`, oldest first: `<name>.<YYYYmmdd-HHMMSS>`
// with the shim's "-<n>" clash counter, never its ".tmp" files.
std::vector<std::string> rotatedFiles(const std::filesystem::path& dir, const std::string& name) {
  std::vector<std::string> rotated;
  std::error_code ec;
  const std::string prefix = name + ".";
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string entry = it->path().filename().string();
    if (entry.size() > prefix.size() && entry.compare(0, prefix.size(), prefix) == 0 &&
        entry[prefix.size()] >= '0' && entry[prefix.size()] <= '9' &&
        entry.find(".tmp") == std::string::npos) {
      rotated.push_back(std::move(entry));
    }
  }
  // With room for the live file only, every rotated file is surplus: the shim's pruning order
  // (oldest first) is the order to read them in.
  return runtime::rotatedFilesToRemove(std::move(rotated), 1);
}

// kubelet writes timestamps as RFC3339NanoFixed: the record's time with all nine fraction
// digits, then a space. `ts` has at least the shape of RFC 3339 (looksLikeRfc3339 or a parse),
// "YYYY-MM-DDTHH:MM:SS[.digits]<zone>", but the file is not trusted: any number of fraction
// digits (only nine are kept, as a parse keeps nanoseconds) and a zone of any length (cut) fit
// in `buf`. Returns the length written to `buf`.
constexpr size_t kPrefixMax = 48;
size_t fixedTimestampPrefix(std::string_view ts, char (&buf)[kPrefixMax]) {
  std::memcpy(buf, ts.data(), 19);
  size_t n = 19;
  buf[n++] = '.';
  size_t pos = 19;
  if (pos < ts.size() && ts[pos] == '.') {
    ++pos;
    while (pos < ts.size() && ts[pos] >= '0' && ts[pos] <= '9') {
      if (n < 29) buf[n++] = ts[pos];
      ++pos;
    }
  }
  while (n < 29) buf[n++] = '0';  // "YYYY-MM-DDTHH:MM:SS." and nine digits
  std::string_view zone = ts.substr(pos);
  zone = zone.substr(0, std::min(zone.size(), kPrefixMax - 1 - n));
  std::memcpy(buf + n, zone.data(), zone.size());
  n += zone.size();
  buf[n++] = ' ';
  return n;
}

bool looksLikeRfc3339(std::string_view ts) {
  auto digits = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      if (ts[i] < '0' || ts[i] > '9') return false;
    }
    return true;
  };
  return ts.size() >= 20 && digits(0, 4) && ts[4] == '-' && digits(5, 7) && ts[7] == '-' &&
         digits(8, 10) && ts[10] == 'T' && digits(11, 13) && ts[13] == ':' && digits(14, 16) &&
         ts[16] == ':' && digits(17, 19);
}

}  // namespace

LogFileReader::LogFileReader(std::filesystem::path live_path, LogOptions options)
    : live_path_(std::move(live_path)), options_(std::move(options)) {
  if (options_.since_time) {
    since_nanos_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       options_.since_time->time_since_epoch())
                       .count();
  }
  if (options_.limit_bytes) bytes_left_ = std::max<int64_t>(*options_.limit_bytes, 0);
}

LogFileReader::~LogFileReader() {
  for (auto& f : files_) {
    if (f.fd >= 0) ::close(f.fd);
  }
}

bool LogFileReader::openFile(const std::string& path, File& file, base::Status& error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = ioError("failed to open", path, errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    error = ioError("failed to stat", path, errno);
    ::close(fd);
    return false;
  }
  file = File{fd, path, st.st_dev, st.st_ino, static_cast<int64_t>(st.st_size), 0};
  return true;
}

base::Status LogFileReader::open() {
  const std::filesystem::path dir = live_path_.parent_path();
  base::Status error;
  for (const auto& name : rotatedFiles(dir, live_path_.filename().string())) {
    File file;
    // A rotated file pruned since the listing is skipped.
    if (openFile((dir / name).string(), file, error)) files_.push_back(file);
  }
  File live;
  if (openFile(live_path_.string(), live, error)) {
    files_.push_back(live);
  } else if (files_.empty() || error.code() != base::StatusCode::kNotFound) {
    return error;
  }
  if (options_.tail_lines) {
    RETURN_IF_ERROR(seekTail(*options_.tail_lines));
    if (!options_.follow) lines_left_ = std::max<int64_t>(*options_.tail_lines, 0);
  }
  done_ = lines_left_ == 0 || bytes_left_ == 0;
  return base::okStatus();
}

// kubelet's tail.FindTailLineStartIndex over the files as one stream: the start of the last
// `lines` newline-terminated lines (an unterminated last line is not counted but is read).
base::Status LogFileReader::seekTail(int64_t lines) {
  int64_t newlines = 0;
  std::string block(kTailBlock, '\0');
  for (size_t i = files_.size(); i-- > 0;) {
    File& f = files_[i];
    for (int64_t right = f.size; right > 0;) {
      int64_t left = std::max<int64_t>(right - static_cast<int64_t>(kTailBlock), 0);
      auto want = static_cast<size_t>(right - left);
      ssize_t n = ::pread(f.fd, block.data(), want, left);
      if (n < 0) return ioError("failed to tail", f.path, errno);
      // A file that shrank since fstat: scan what is there.
      const char* end = block.data() + n;
      while (const void* nl =
                 ::memrchr(block.data(), '\n', static_cast<size_t>(end - block.data()))) {
        end = static_cast<const char*>(nl);
        if (++newlines > lines) {
          f.offset = left + (end - block.data()) + 1;
          current_ = i;
          return base::okStatus();
        }
      }
      right = left;
    }
  }
  current_ = 0;
  return base::okStatus();
}

LogFileReader::Chunk LogFileReader::read() {
  Chunk chunk;
  if (done_) {
    chunk.progress = Progress::kDone;
    return chunk;
  }
  File& f = files_[current_];
  buffer_.resize(kReadChunk);
  ssize_t n;
  do {
    n = ::pread(f.fd, buffer_.data(), buffer_.size(), f.offset);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    chunk.status = ioError("failed to read", f.path, errno);
    return chunk;
  }
  if (n == 0) return endOfFile();
  f.offset += n;
  chunk.out.reserve(static_cast<size_t>(n) + static_cast<size_t>(n) / 2);
  consume(std::string_view(buffer_.data(), static_cast<size_t>(n)), chunk.out);
  chunk.progress = done_ ? Progress::kDone : Progress::kMore;
  return chunk;
}

LogFileReader::Chunk LogFileReader::endOfFile() {
  Chunk chunk;
  const bool last = current_ + 1 == files_.size();
  if (!last || !options_.follow || rotation_seen_) {
    // The file is complete: an unterminated record at its end is output as it is (kubelet's
    // "Incomplete line in log file").
    if (!carry_.empty() && !emitRecord(carry_, false, chunk.out)) done_ = true;
    carry_.clear();
  }
  if (!last) {
    ::close(files_[current_].fd);
    files_[current_].fd = -1;
    ++current_;
  } else if (!options_.follow) {
    done_ = true;
  } else if (rotation_seen_) {
    File next;
    base::Status error;
    rotation_seen_ = false;
    if (!openFile(live_path_.string(), next, error)) {
      if (error.code() != base::StatusCode::kNotFound) chunk.status = error;
      chunk.progress = Progress::kEnd;
      return chunk;
    }
    switchTo(next);
  } else if (liveRotated()) {
    // Read the old file to its end once more: the writer may have added records between the
    // last read and the rename.
    rotation_seen_ = true;
  } else {
    chunk.progress = Progress::kEnd;
    return chunk;
  }
  chunk.progress = done_ ? Progress::kDone : Progress::kMore;
  return chunk;
}

bool LogFileReader::liveRotated() {
  struct stat st {};
  if (::stat(live_path_.c_str(), &st) != 0) return false;
  const File& f = files_[current_];
  return st.st_dev != f.dev || st.st_ino != f.ino;
}

void LogFileReader::switchTo(File file) {
  ::close(files_[current_].fd);
  files_[current_].fd = -1;
  files_.push_back(file);
  ++current_;
}

void LogFileReader::consume(std::string_view data, std::string& out) {
  size_t pos = 0;
  if (!carry_.empty()) {
    const void* nl = std::memchr(data.data(), '\n', data.size());
    if (nl == nullptr) {
      carry_.append(data);
      return;
    }
    pos = static_cast<size_t>(static_cast<const char*>(nl) - data.data());
    carry_.append(data.substr(0, pos));
    ++pos;
    bool more = emitRecord(carry_, true, out);
    carry_.clear();
    if (!more) {
      done_ = true;
      return;
    }
  }
  while (pos < data.size()) {
    const void* nl = std::memchr(data.data() + pos, '\n', data.size() - pos);
    if (nl == nullptr) {
      carry_.assign(data.substr(pos));
      return;
    }
    size_t end = static_cast<size_t>(static_cast<const char*>(nl) - data.data());
    if (!emitRecord(data.substr(pos, end - pos), true, out)) {
      done_ = true;
      return;
    }
    pos = end + 1;
  }
}

// kubelet's parseCRILog + logWriter.write: a line that is not a CRI record is skipped.
bool LogFileReader::emitRecord(std::string_view line, bool terminated, std::string& out) {
  auto sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return true;
  std::string_view ts = line.substr(0, sp1);
  // The time is parsed only when it is used (sinceTime); otherwise the shape of RFC 3339
  // ("YYYY-MM-DDTHH:MM:SS...") is enough to skip what is not a record, at a fraction of the cost.
  int64_t nanos = 0;
  if (since_nanos_) {
    auto time = api::parseTime(ts);
    if (!time.ok()) return true;
    nanos = time->time_since_epoch().count();
  } else if (!looksLikeRfc3339(ts)) {
    return true;
  }
  std::string_view rest = line.substr(sp1 + 1);
  auto sp2 = rest.find(' ');
  if (sp2 == std::string_view::npos) return true;
  std::string_view stream = rest.substr(0, sp2);
  if (stream != "stdout" && stream != "stderr") return true;
  rest.remove_prefix(sp2 + 1);
  auto sp3 = rest.find(' ');
  if (sp3 == std::string_view::npos) return true;
  // Tags are ':'-separated; the first says whether the line goes on in the next record.
  const bool partial = rest.substr(0, std::min(sp3, rest.find(':'))) == "P";
  if (lines_left_ > 0) --lines_left_;
  if (!since_nanos_ || nanos >= *since_nanos_) {
    if (options_.timestamps) {
      char prefix[kPrefixMax];
      appendText(std::string_view(prefix, fixedTimestampPrefix(ts, prefix)), out);
    }
    appendText(rest.substr(sp3 + 1), out);
    if (terminated && !partial) appendText("\n", out);
  }
  return lines_left_ != 0 && bytes_left_ != 0;
}

void LogFileReader::appendText(std::string_view text, std::string& out) {
  if (bytes_left_ < 0) {
    out.append(text);
    return;
  }
  size_t n = std::min<size_t>(text.size(), static_cast<size_t>(bytes_left_));
  out.append(text.data(), n);
  bytes_left_ -= static_cast<int64_t>(n);
}

}  // namespace nodeagent::logs
