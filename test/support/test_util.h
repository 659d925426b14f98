// Small helpers for integration and e2e tests: unique temp dirs, waiting with deadlines.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

namespace nodeagent::testing {

// A fresh directory under $TMPDIR, removed (recursively) when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "nodeagent-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Polls `pred` every `interval` (a few milliseconds) until it is true or `deadline` passes (real
// time: for integration and e2e tests only). Returns the last value of `pred`. A costly `pred`
// (listing thousands of objects) wants a longer interval.
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds deadline = std::chrono::seconds(10),
                std::chrono::milliseconds interval = std::chrono::milliseconds(5));

// Writes a file atomically enough for tests (write then close).
void writeFile(const std::filesystem::path& path, const std::string& content);
std::string readFile(const std::filesystem::path& path);

// The entries of a directory (without . and ..); 0 when it cannot be read. A process's open
// descriptors are countEntries("/proc/<pid>/fd"), its threads countEntries("/proc/<pid>/task").
int countEntries(const std::filesystem::path& dir);

// Paths of the built binaries and the checked-in test data.
std::filesystem::path binaryPath(const std::string& name);
std::filesystem::path testDataPath(const std::string& relative);

}  // namespace nodeagent::testing
