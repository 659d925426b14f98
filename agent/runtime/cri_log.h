// CRI container log format and rotation policy, shared by the agent and nodeagent-shim.
//
// Each line a container writes becomes `<RFC3339Nano> <stream> <tag> <text>\n` where stream is
// "stdout" or "stderr" and tag is "F" (the line ended) or "P" (a partial piece of a line longer
// than the reader's buffer; the next pieces follow). This is what `kubectl logs` and log shippers
// read from /var/log/pods. The shim rotates `<n>.log` to `<n>.log.<YYYYmmdd-HHMMSS>` by size and
// keeps at most max-files files per log (the live one included), like kubelet's log manager.
//
// Pure code with no dependency beyond the C++ standard library: nodeagent-shim compiles it too
// and must stay small.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodeagent::runtime {

inline constexpr int64_t kDefaultLogMaxSize = 10 * 1024 * 1024;  // containerLogMaxSize 10Mi
inline constexpr int kDefaultLogMaxFiles = 5;                    // containerLogMaxFiles
// Longest piece of one line written as one record; longer lines are split into P records.
inline constexpr size_t kDefaultMaxLineRecord = 16 * 1024;

enum class LogStream { kStdout, kStderr };

// Go's time.RFC3339Nano in UTC: "2024-01-02T03:04:05.123456789Z", trailing fraction zeros
// trimmed (no fraction at all when it is zero).
std::string formatRfc3339Nano(int64_t unix_nanos);

// Appends one CRI record. `text` must not contain '\n'.
void appendCriRecord(std::string& out, int64_t unix_nanos, LogStream stream, bool partial,
                     std::string_view text);

struct CriRecord {
  std::string timestamp;
  LogStream stream = LogStream::kStdout;
  bool partial = false;
  std::string text;
};
// Parses one record (without its '\n'); nullopt when it is not in CRI format.
std::optional<CriRecord> parseCriRecord(std::string_view line);

// Splits a byte stream into CRI pieces: complete lines (partial=false, newline dropped) and, when
// a line grows beyond `max_record` bytes, partial pieces of exactly `max_record` bytes.
class LineSplitter {
 public:
  using Sink = std::function<void(std::string_view text, bool partial)>;
  explicit LineSplitter(size_t max_record = kDefaultMaxLineRecord) : max_record_(max_record) {}

  void feed(std::string_view data, const Sink& sink);
  // End of stream: an unterminated tail is emitted as a complete line (as containerd does).
  void finish(const Sink& sink);
  size_t buffered() const { return pending_.size(); }

 private:
  size_t max_record_;
  std::string pending_;
};

// True when a record of `record_size` bytes must go to a fresh file: the current file is not
// empty and would exceed `max_size`. A record larger than max_size still goes into a fresh file
// whole, so a record is never split across files.
bool shouldRotate(int64_t current_size, int64_t record_size, int64_t max_size);

// "<log>.<YYYYmmdd-HHMMSS>" (kubelet's rotated name) for the UTC time `unix_nanos`.
std::string rotatedLogName(const std::string& log_name, int64_t unix_nanos);

// Given the names of the rotated files of one log (`<log>.<suffix>`, in any order), the ones to
// delete so that at most `max_files` files remain counting the live log: the oldest first.
// Names sort by age because the suffix is a fixed-width UTC timestamp (plus "-<n>" on clashes).
std::vector<std::string> rotatedFilesToRemove(std::vector<std::string> rotated, int max_files);

// Renames the live log `log` to its rotated name for `unix_nanos`, with "-<n>" appended when that
// name is taken (two rotations in one second). True with the name in `rotated`; false with errno
// set when the rename failed (the live log is then untouched).
bool rotateLogFile(const std::string& log, int64_t unix_nanos, std::string& rotated);

// Deletes the rotated files of `log` (`<log>.<suffix>` beside it) beyond `max_files`, counting
// the live log, oldest first.
void pruneRotatedLogs(const std::string& log, int max_files);

// kubelet's MaxContainerTerminationMessageLength, MaxContainerTerminationMessageLogLines and
// MaxContainerTerminationMessageLogLength.
inline constexpr size_t kMaxTerminationMessageLength = 4 * 1024;
inline constexpr int kMaxTerminationMessageLogLines = 80;
inline constexpr size_t kMaxTerminationMessageLogLength = 2048;
inline constexpr std::string_view kTerminationMessageFileName = "termination-log";
inline constexpr std::string_view kTerminationMessagePathEnv = "NODEAGENT_TERMINATION_MESSAGE_PATH";

// The text of the last `max_lines` records of the CRI log at `path` (a complete record ends with
// '\n'), at most its last `max_bytes` bytes: kubelet's readLastStringFromContainerLogs. "" when
// the file cannot be read.
std::string tailCriLogText(const std::string& path, int max_lines, size_t max_bytes);

// kubelet's getTerminationMessage for an exited container: the last kMaxTerminationMessageLength
// bytes of `message_path`; when they are empty (or the file is missing) and `fallback_to_logs`
// (FallbackToLogsOnError and a failed exit), the tail of the CRI log at `log_path`. A read error
// other than a missing file gives "Error on reading termination log <path>: <error>".
std::string readTerminationMessage(const std::string& message_path, bool fallback_to_logs,
                                   const std::string& log_path);

}  // namespace nodeagent::runtime
