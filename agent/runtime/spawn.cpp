#include "agent/runtime/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace nodeagent::runtime {
namespace {

// Sends one message with `fds` as SCM_RIGHTS (none when empty).
int sendWithFds(int sock, const void* data, size_t size, std::span<const int> fds) {
  iovec iov{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSpawnFds)] = {};
  if (fds.size() > kMaxSpawnFds) return EINVAL;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    if (::sendmsg(sock, &msg, MSG_NOSIGNAL) >= 0) return 0;
    if (errno != EINTR) return errno;
  }
}

// Receives one message into `data` (at most `size` bytes; `got` its length) and its SCM_RIGHTS
// descriptors (close-on-exec) into `fds`. A message or descriptor list that did not fit is an
// error (EMSGSIZE), with whatever descriptors came closed.
int receiveWithFds(int sock, void* data, size_t size, size_t& got, std::vector<int>& fds) {
  iovec iov{data, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxSpawnFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  fds.clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    for (int fd : fds) ::close(fd);
    fds.clear();
    return EMSGSIZE;
  }
  if (n == 0) return ECONNRESET;  // a SEQPACKET peer that closed (requests are never empty)
  got = static_cast<size_t>(n);
  return 0;
}

}  // namespace

int spawnDetached(const std::vector<std::string>& args, std::span<const int> fds, pid_t& pid) {
  if (args.empty() || fds.size() > kMaxSpawnFds) return EINVAL;
  // A source that is another slot's target would be overwritten before its own dup2 (a caller
  // whose standard descriptors were closed gets pipes there), and one already in its own slot
  // keeps close-on-exec unless the C library clears it (glibc 2.29 and later): every source below
  // the slots' end is moved above them first.
  std::array<int, kMaxSpawnFds> moved;
  std::array<int, kMaxSpawnFds> source;
  moved.fill(-1);
  source.fill(-1);
  for (size_t i = 0; i < fds.size(); ++i) {
    source[i] = fds[i];
    if (fds[i] >= 0 && fds[i] < static_cast<int>(kMaxSpawnFds)) {
      moved[i] = ::fcntl(fds[i], F_DUPFD_CLOEXEC, static_cast<int>(kMaxSpawnFds));
      if (moved[i] < 0) {
        const int err = errno;
        for (int fd : moved) {
          if (fd >= 0) ::close(fd);
        }
        return err;
      }
      source[i] = moved[i];
    }
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  const size_t slots = fds.empty() ? 1 : fds.size();
  for (size_t i = 0; i < slots; ++i) {
    const int target = static_cast<int>(i);
    if (source[i] >= 0) {
      posix_spawn_file_actions_adddup2(&fa, source[i], target);
    } else {
      posix_spawn_file_actions_addopen(&fa, target, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY, 0);
    }
  }
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const int rc = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  for (int fd : moved) {
    if (fd >= 0) ::close(fd);
  }
  return rc;
}

void resetSignalDispositions() {
  // Only ignored signals: a handler does not survive an exec anyway, and the C library's own
  // handlers (older glibc installs SIGSETXID's at start) must stay. The kernel's call, since
  // glibc's sigaction() refuses its two.
  struct KernelSigaction {
    void* handler;
    unsigned long flags;
    void* restorer;
    uint64_t mask;
  };
  for (int sig = 1; sig < NSIG; ++sig) {
    KernelSigaction old{};
    if (::syscall(SYS_rt_sigaction, sig, nullptr, &old, sizeof old.mask) != 0) continue;
    if (old.handler != reinterpret_cast<void*>(SIG_IGN)) continue;
    KernelSigaction dfl{nullptr, 0, nullptr, 0};  // SIG_DFL
    ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
  }
}

int spawnDetachedWithPidfd(const std::vector<std::string>& args, std::span<const int> fds,
                           pid_t& pid, int& pidfd) {
  pidfd = -1;
  if (const int rc = spawnDetached(args, fds, pid); rc != 0) return rc;
  pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) return 0;
  const int err = errno;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return err;
}

int sendSpawnRequest(int sock, const std::vector<std::string>& args, std::span<const int> fds) {
  if (fds.size() > kMaxSpawnFds) return EINVAL;
  std::string message;
  std::vector<int> passed;
  for (int fd : fds) {
    message.push_back(fd >= 0 ? 'f' : 'n');
    if (fd >= 0) passed.push_back(fd);
  }
  message.push_back('\0');
  for (const auto& a : args) {
    message += a;
    message.push_back('\0');
  }
  if (message.size() > kMaxSpawnRequest) return E2BIG;
  return sendWithFds(sock, message.data(), message.size(), passed);
}

int receiveSpawnRequest(int sock, std::vector<std::string>& args, std::vector<int>& fds) {
  std::string buffer(kMaxSpawnRequest, '\0');
  size_t got = 0;
  std::vector<int> passed;
  if (int err = receiveWithFds(sock, buffer.data(), buffer.size(), got, passed); err != 0) {
    return err;
  }
  buffer.resize(got);
  const size_t slots_end = buffer.find('\0');
  size_t next = 0;
  fds.clear();
  args.clear();
  // Slots, then at least one NUL-terminated argument.
  bool bad = slots_end == std::string::npos || slots_end > kMaxSpawnFds ||
             slots_end + 1 >= buffer.size() || buffer.back() != '\0';
  for (size_t i = 0; !bad && i < slots_end; ++i) {
    if (buffer[i] == 'n') {
      fds.push_back(-1);
    } else if (buffer[i] == 'f' && next < passed.size()) {
      fds.push_back(passed[next++]);
    } else {
      bad = true;
    }
  }
  if (bad || next != passed.size()) {
    for (int fd : passed) ::close(fd);
    fds.clear();
    return EPROTO;
  }
  for (size_t at = slots_end + 1; at < buffer.size();) {
    const size_t end = buffer.find('\0', at);
    args.emplace_back(buffer, at, end - at);
    at = end + 1;
  }
  return 0;
}

int sendSpawnGreeting(int sock) {
  return sendWithFds(sock, kSpawnGreeting, sizeof kSpawnGreeting - 1, {});
}

int receiveSpawnGreeting(int sock) {
  char buffer[sizeof kSpawnGreeting] = {};
  size_t got = 0;
  std::vector<int> fds;
  if (int err = receiveWithFds(sock, buffer, sizeof buffer, got, fds); err != 0) return err;
  const bool same = fds.empty() && got == sizeof kSpawnGreeting - 1 &&
                    std::memcmp(buffer, kSpawnGreeting, got) == 0;
  for (int fd : fds) ::close(fd);
  return same ? 0 : EPROTO;
}

int sendSpawnReply(int sock, const SpawnReply& reply, int pidfd) {
  if (reply.error != 0 || pidfd < 0) return sendWithFds(sock, &reply, sizeof reply, {});
  const int fds[] = {pidfd};
  return sendWithFds(sock, &reply, sizeof reply, fds);
}

int receiveSpawnReply(int sock, SpawnReply& reply, int& pidfd) {
  pidfd = -1;
  size_t got = 0;
  std::vector<int> fds;
  if (int err = receiveWithFds(sock, &reply, sizeof reply, got, fds); err != 0) return err;
  const bool want_fd = reply.error == 0;
  if (got != sizeof reply || fds.size() != (want_fd ? 1U : 0U)) {
    for (int fd : fds) ::close(fd);
    return EPROTO;
  }
  if (want_fd) pidfd = fds[0];
  return 0;
}

}  // namespace nodeagent::runtime
