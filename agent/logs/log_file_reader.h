// The blocking half of readLogs (agent/logs/container_logs.h): opens the files of one CRI log,
// finds where the last N lines start, and turns the files' bytes into /containerLogs output in
// large chunks. Every method blocks on file IO and runs on the file pool, one call at a time;
// the coroutine in container_logs.cpp owns the waiting, the sink and the follow logic.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/logs/container_logs.h"
#include "base/status.h"

namespace nodeagent::logs {

class LogFileReader {
 public:
  enum class Progress {
    kMore,  // call read() again: more data may be there now
    kEnd,   // everything written so far was read (follow: wait for more)
    kDone,  // nothing more to output: the last file ended (no follow) or a limit was reached
  };
  struct Chunk {
    base::Status status;
    std::string out;
    Progress progress = Progress::kMore;
  };

  LogFileReader(std::filesystem::path live_path, LogOptions options);
  ~LogFileReader();
  LogFileReader(const LogFileReader&) = delete;
  LogFileReader& operator=(const LogFileReader&) = delete;

  // Opens the rotated files (oldest first) and the live file and positions the reader at the
  // start of the last tail_lines lines. NotFound naming the live file when no file exists.
  base::Status open();
  // Reads the next piece of the current file and formats its complete records into `out`.
  // With follow, the end of the live file is kEnd unless the live path now names a new file (a
  // rotation): then the old file is read to its end and the new one from its start.
  Chunk read();

  const std::filesystem::path& livePath() const { return live_path_; }

 private:
  struct File {
    int fd = -1;
    std::string path;
    dev_t dev = 0;
    ino_t ino = 0;
    int64_t size = 0;  // when opened
    int64_t offset = 0;
  };

  bool openFile(const std::string& path, File& file, base::Status& error);
  base::Status seekTail(int64_t lines);
  Chunk endOfFile();
  bool liveRotated();
  void switchTo(File file);
  void consume(std::string_view data, std::string& out);
  // One record (`terminated`: it ended with '\n'). False when a limit ends the output.
  bool emitRecord(std::string_view line, bool terminated, std::string& out);
  void appendText(std::string_view text, std::string& out);

  std::filesystem::path live_path_;
  LogOptions options_;
  std::optional<int64_t> since_nanos_;
  std::vector<File> files_;  // files_[current_] onwards are still to be read
  size_t current_ = 0;
  std::string carry_;           // an incomplete record at the end of the last read
  bool rotation_seen_ = false;  // the live path names a new file; finish the current one
  int64_t lines_left_ = -1;     // without follow, tail_lines still to output (-1: no limit)
  int64_t bytes_left_ = -1;     // limit_bytes still to output (-1: no limit)
  bool done_ = false;
  std::string buffer_;
};

}  // namespace nodeagent::logs
