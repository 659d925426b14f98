// `nodeagent-shim spawner`: the agent's spawn helper (agent/runtime/spawn.h). It starts the
// container shims the agent asks for, from a process whose descriptor table is a handful of
// entries instead of the agent's one per running container, hands the agent a pidfd of each, and
// reaps them when they end. Single-threaded; it exits when the agent's end of its socket (fd 3)
// closes, and the shims it started stay (they belong to init then, as they do when the agent
// itself ends).
#include "cmd/nodeagent-shim/spawner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "agent/runtime/spawn.h"

namespace nodeagent::shim {
namespace {

namespace rt = nodeagent::runtime;

constexpr int kSocket = 3;

void reapChildren() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// Serves one request. False when the agent has gone (or spoke something else).
bool serveOne() {
  std::vector<std::string> args;
  std::vector<int> fds;
  const int err = rt::receiveSpawnRequest(kSocket, args, fds);
  if (err == EAGAIN || err == EINTR) return true;
  if (err != 0) {
    if (err != ECONNRESET) {
      std::fprintf(stderr, "nodeagent-shim spawner: request: %s\n", std::strerror(err));
    }
    return false;
  }
  rt::SpawnReply reply;
  pid_t pid = 0;
  int pidfd = -1;
  reply.error = rt::spawnDetachedWithPidfd(args, fds, pid, pidfd);
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  if (reply.error == 0) reply.pid = pid;
  const int sent = rt::sendSpawnReply(kSocket, reply, pidfd);
  if (pidfd >= 0) ::close(pidfd);
  // A child the agent did not get a pidfd of would run unwatched.
  if (sent != 0 && reply.error == 0) ::kill(pid, SIGKILL);
  return sent == 0;
}

}  // namespace

int spawnerMode() {
  // Nothing of the agent's but the socket (and stdio) stays open here.
  ::syscall(SYS_close_range, static_cast<unsigned>(kSocket) + 1, ~0U, 0U);
  if (::fcntl(kSocket, F_SETFD, FD_CLOEXEC) != 0) {
    std::fprintf(stderr, "nodeagent-shim spawner: fd %d: %s\n", kSocket, std::strerror(errno));
    return 2;
  }
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) {
    std::fprintf(stderr, "nodeagent-shim spawner: signalfd: %s\n", std::strerror(errno));
    return 2;
  }
  if (const int err = rt::sendSpawnGreeting(kSocket); err != 0) {
    std::fprintf(stderr, "nodeagent-shim spawner: greeting: %s\n", std::strerror(err));
    return 2;
  }
  for (;;) {
    pollfd fds[2] = {{kSocket, POLLIN, 0}, {sigfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "nodeagent-shim spawner: poll: %s\n", std::strerror(errno));
      return 2;
    }
    if (fds[1].revents != 0) {
      signalfd_siginfo si;
      while (::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      }
      reapChildren();
    }
    if ((fds[0].revents & POLLIN) != 0) {
      if (!serveOne()) return 0;
    } else if (fds[0].revents != 0) {
      return 0;  // hung up or failed with nothing left to read
    }
  }
}

}  // namespace nodeagent::shim
