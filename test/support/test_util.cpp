#include "test/support/test_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace nodeagent::testing {

TempDir::TempDir(const std::string& prefix) {
  auto base = std::filesystem::temp_directory_path() / (prefix + "-XXXXXX");
  std::string templ = base.string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + templ);
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds deadline,
                std::chrono::milliseconds interval) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::sleep_for(interval);
  }
}

void writeFile(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path.string());
  out << content;
}

std::string readFile(const std::filesystem::path& path) {
  // POSIX reads: a /proc file of a process that exits meanwhile fails with ESRCH, which a
  // std::filebuf turns into an exception.
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::filesystem::path binaryPath(const std::string& name) {
  return std::filesystem::path(NODEAGENT_BINARY_DIR) / name;
}

std::filesystem::path testDataPath(const std::string& relative) {
  return std::filesystem::path(NODEAGENT_TEST_DATA_DIR) / relative;
}

int countEntries(const std::filesystem::path& dir) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

}  // namespace nodeagent::testing
