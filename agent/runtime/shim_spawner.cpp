#include "agent/runtime/shim_spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/runtime/spawn.h"
#include "base/log.h"

namespace nodeagent::runtime {
namespace {

NODEAGENT_LOGGER("runtime")

// How long the agent waits for the helper's greeting or one reply (a start is a posix_spawn of a
// small static program: milliseconds) before it gives the helper up.
constexpr int kHelperTimeoutSeconds = 10;

}  // namespace

ShimSpawner::ShimSpawner(std::filesystem::path shim) : shim_(std::move(shim)) {}

ShimSpawner::~ShimSpawner() {
  std::lock_guard lock(mu_);
  stopHelperLocked();
}

bool ShimSpawner::usingHelper() const {
  std::lock_guard lock(mu_);
  return sock_ >= 0;
}

pid_t ShimSpawner::helperPid() const {
  std::lock_guard lock(mu_);
  return helper_pid_;
}

bool ShimSpawner::startHelperLocked() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    log()->warn("Cannot start the spawn helper; container shims are started directly error={}",
                std::strerror(errno));
    return false;
  }
  // Its stderr is the agent's when that is open (its rare messages then reach the agent's log).
  const int err_fd = ::fcntl(2, F_GETFD) >= 0 ? 2 : -1;
  const int fds[] = {-1, -1, err_fd, pair[1]};
  pid_t pid = 0;
  int rc = spawnDetached({shim_.string(), "spawner"}, fds, pid);
  ::close(pair[1]);
  if (rc == 0) {
    const timeval timeout{kHelperTimeoutSeconds, 0};
    ::setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    sock_ = pair[0];
    helper_pid_ = pid;
    rc = receiveSpawnGreeting(sock_);
    if (rc == 0) {
      log()->info("Started the spawn helper for container shims pid={} shim={}", pid,
                  shim_.string());
      return true;
    }
    stopHelperLocked();
  } else {
    ::close(pair[0]);
  }
  log()->warn(
      "Cannot start the spawn helper; container shims are started directly shim={} error={}",
      shim_.string(), std::strerror(rc));
  return false;
}

void ShimSpawner::stopHelperLocked() {
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
  if (helper_pid_ > 0) {
    // It exits on its own once the socket closed; a helper stuck in a start must not hold the
    // agent up either. Its shims keep running.
    ::kill(helper_pid_, SIGKILL);
    ::waitpid(helper_pid_, nullptr, 0);
  }
  helper_pid_ = 0;
}

bool ShimSpawner::spawnThroughHelperLocked(const std::vector<std::string>& args,
                                           std::span<const int> fds, Child& child, int& error) {
  error = sendSpawnRequest(sock_, args, fds);
  if (error == EINVAL || error == E2BIG) return true;  // this request's fault, not the helper's
  if (error != 0) {
    // Not delivered: the helper has not seen it, so a direct start cannot make a second shim.
    log()->warn("The spawn helper has gone; starting another pid={} error={}", helper_pid_,
                std::strerror(error));
    stopHelperLocked();
    return false;
  }
  SpawnReply reply;
  int pidfd = -1;
  if (const int err = receiveSpawnReply(sock_, reply, pidfd); err != 0) {
    // Delivered but unanswered: the helper may have started the shim. Starting another would
    // risk two shims for one container, so this start fails (its cleanup kills what runs in the
    // container's cgroup) and the next one gets a new helper.
    log()->warn("The spawn helper failed during a start pid={} error={}", helper_pid_,
                std::strerror(err));
    stopHelperLocked();
    error = err == EAGAIN ? ETIMEDOUT : err;
    return true;
  }
  error = reply.error;
  if (error == 0) child = Child{reply.pid, pidfd};
  return true;
}

int ShimSpawner::spawn(const std::vector<std::string>& args, std::span<const int> fds,
                       Child& child) {
  std::lock_guard lock(mu_);
  // A helper found gone before it saw the request is replaced once, at once.
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (sock_ < 0 && helper_possible_) helper_possible_ = startHelperLocked();
    if (sock_ < 0) break;
    int error = 0;
    if (spawnThroughHelperLocked(args, fds, child, error)) return error;
  }
  pid_t pid = 0;
  int pidfd = -1;
  if (const int rc = spawnDetachedWithPidfd(args, fds, pid, pidfd); rc != 0) return rc;
  child = Child{pid, pidfd};
  return 0;
}

}  // namespace nodeagent::runtime
