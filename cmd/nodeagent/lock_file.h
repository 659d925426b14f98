// The agent's exclusive lock on its state directory (kubelet's --lock-file): an flock(2) held for
// the life of the process on `<root-dir>/nodeagent.lock` and on `--lock-file` when given. A second
// agent on the same root dir would take the first one's containers for orphans and kill them, so
// it must not start: taking a held lock fails at once, naming the holder's PID (written into the
// file by the holder).
#pragma once

#include <string>

#include "base/status.h"

namespace nodeagent::cmd {

class LockFile {
 public:
  LockFile() = default;
  ~LockFile();
  LockFile(LockFile&& other) noexcept;
  LockFile& operator=(LockFile&& other) noexcept;
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;

  // Opens (creating, mode 0600) and locks `path`, then writes this process's PID into it.
  // `wait`: block until the holder lets go (kubelet with --exit-on-lock-contention); otherwise a
  // held lock is a FailedPrecondition error that names the path and the holder's PID. The
  // descriptor is close-on-exec, so containers never inherit the lock.
  static base::StatusOr<LockFile> acquire(const std::string& path, bool wait);

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// The PID written in a lock file, or 0 when it holds none.
int lockHolderPid(const std::string& path);

}  // namespace nodeagent::cmd
