#include "agent/runtime/shim_spawner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "agent/runtime/spawn.h"
#include "base/log.h"

namespace nodeagent::runtime {
namespace {

NODEAGENT_LOGGER("runtime")

// Errors of a helper's start that say the shim binary cannot be one (so that trying again is
// pointless): missing or not executable, or it ended or spoke something else instead of greeting.
bool helperImpossible(int error) {
  return error == ENOENT || error == EACCES || error == ENOEXEC || error == EPROTO ||
         error == ECONNRESET || error == EMSGSIZE;
}

}  // namespace

ShimSpawner::ShimSpawner(std::filesystem::path shim, std::chrono::milliseconds answer_timeout)
    : shim_(std::move(shim)), answer_timeout_(answer_timeout) {}

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

bool ShimSpawner::ensureHelperLocked() {
  if (sock_ >= 0) return true;
  if (!helper_possible_) return false;
  if (direct_spawns_before_retry_ > 0) {
    --direct_spawns_before_retry_;
    return false;
  }
  const int error = startHelperLocked();
  if (error == 0) {
    log()->info("Started the spawn helper for container shims pid={} shim={}", helper_pid_,
                shim_.string());
    return true;
  }
  if (helperImpossible(error)) {
    helper_possible_ = false;
    log()->warn(
        "Cannot start the spawn helper; container shims are started directly from now on shim={} "
        "error={}",
        shim_.string(), std::strerror(error));
  } else {
    direct_spawns_before_retry_ = kDirectSpawnsBeforeRetry;
    log()->warn(
        "Cannot start the spawn helper; the next {} container shims are started directly shim={} "
        "error={}",
        kDirectSpawnsBeforeRetry, shim_.string(), std::strerror(error));
  }
  return false;
}

int ShimSpawner::startHelperLocked() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return errno;
  const auto usec = std::chrono::duration_cast<std::chrono::microseconds>(answer_timeout_).count();
  const timeval timeout{static_cast<time_t>(usec / 1000000),
                        static_cast<suseconds_t>(usec % 1000000)};
  if (::setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) != 0) {
    const int error = errno;
    ::close(pair[0]);
    ::close(pair[1]);
    return error;
  }
  // Its stderr is the agent's when that is open (its rare messages then reach the agent's log).
  const int err_fd = ::fcntl(2, F_GETFD) >= 0 ? 2 : -1;
  const int fds[] = {-1, -1, err_fd, pair[1]};
  pid_t pid = 0;
  const int rc = spawnDetached({shim_.string(), "spawner"}, fds, pid);
  ::close(pair[1]);
  if (rc != 0) {
    ::close(pair[0]);
    return rc;
  }
  sock_ = pair[0];
  helper_pid_ = pid;
  if (const int greeting = receiveSpawnGreeting(sock_); greeting != 0) {
    stopHelperLocked();
    return greeting;
  }
  return 0;
}

void ShimSpawner::stopHelperLocked() {
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
  if (helper_pid_ > 0) {
    // It exits on its own once the socket closed; a helper stuck in a start must not hold the
    // agent up either. Its shims keep running.
    ::kill(helper_pid_, SIGKILL);
    while (::waitpid(helper_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  helper_pid_ = 0;
}

bool ShimSpawner::spawnThroughHelperLocked(const std::vector<std::string>& args,
                                           std::span<const int> fds, Child& child, int& error) {
  error = sendSpawnRequest(sock_, args, fds);
  if (error == EINVAL || error == E2BIG) return true;  // this request's fault, not the helper's
  if (error != 0) {
    // Not delivered: the helper has not seen it, so another helper cannot make a second child.
    log()->warn("The spawn helper has gone; starting another pid={} error={}", helper_pid_,
                std::strerror(error));
    stopHelperLocked();
    return false;
  }
  SpawnReply reply;
  int pidfd = -1;
  if (const int err = receiveSpawnReply(sock_, reply, pidfd); err != 0) {
    // Delivered but unanswered: the helper may have started the child. Starting another could
    // make two, so the caller decides from the child's own report; the next spawn gets a new
    // helper.
    log()->warn("The spawn helper failed during a start pid={} error={}", helper_pid_,
                err == EAGAIN ? "no answer in time" : std::strerror(err));
    stopHelperLocked();
    error = kAnswerLost;
    return true;
  }
  error = reply.error;
  if (error == 0) child = Child{reply.pid, pidfd};
  return true;
}

int ShimSpawner::spawn(const std::vector<std::string>& args, std::span<const int> fds,
                       Child& child) {
  {
    std::lock_guard lock(mu_);
    // A helper found gone before it saw the request is replaced once, at once.
    for (int attempt = 0; attempt < 2 && ensureHelperLocked(); ++attempt) {
      int error = 0;
      if (spawnThroughHelperLocked(args, fds, child, error)) return error;
    }
  }
  pid_t pid = 0;
  int pidfd = -1;
  if (const int rc = spawnDetachedWithPidfd(args, fds, pid, pidfd); rc != 0) return rc;
  child = Child{pid, pidfd};
  return 0;
}

}  // namespace nodeagent::runtime
