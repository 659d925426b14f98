#include "cmd/nodeagent/lock_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace nodeagent::cmd {

LockFile::~LockFile() {
  if (fd_ >= 0) ::close(fd_);
}

LockFile::LockFile(LockFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

LockFile& LockFile::operator=(LockFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

int lockHolderPid(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  char buf[32] = {};
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  int pid = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) {
    if (pid > 100000000) return 0;
    pid = pid * 10 + (buf[i] - '0');
  }
  return pid;
}

base::StatusOr<LockFile> LockFile::acquire(const std::string& path, bool wait) {
  // O_NOFOLLOW: a symlink planted at the lock's path must not make root write elsewhere.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return base::unavailableError("cannot open the lock file " + path + ": " +
                                  std::strerror(errno));
  }
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      const int holder = lockHolderPid(path);
      return base::failedPreconditionError(
          "the lock file " + path + " is held by another nodeagent" +
          (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
          ": two agents on one root directory would kill each other's containers; stop the "
          "other agent or give this one its own --root-dir");
    }
    return base::unavailableError("cannot lock " + path + ": " + std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    return base::unavailableError("cannot write the lock file " + path + ": " + std::strerror(err));
  }
  LockFile lock;
  lock.fd_ = fd;
  lock.path_ = path;
  return lock;
}

}  // namespace nodeagent::cmd
