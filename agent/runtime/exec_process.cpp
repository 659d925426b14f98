#include "agent/runtime/exec_process.h"

#include <stdlib.h>

#include <array>

#include "agent/runtime/process_runtime_state.h"

namespace nodeagent::runtime {
namespace {

// Descriptors made for one spawn: the command's ends (closed once it was spawned) and ours (kept
// when the spawn succeeded). Closes what it still holds.
struct SpawnFds {
  std::array<int, 3> child{-1, -1, -1};
  std::array<int, 3> parent{-1, -1, -1};
  ~SpawnFds() {
    closeChildSide();
    for (int& fd : parent) closeFd(fd);
  }
  void closeChildSide() {
    for (int& fd : child) closeFd(fd);
  }
  // Closes `fd` and every alias of it in the two arrays.
  void closeFd(int& fd) {
    if (fd < 0) return;
    const int value = fd;
    ::close(value);
    for (int& other : child) other = other == value ? -1 : other;
    for (int& other : parent) other = other == value ? -1 : other;
  }
};

base::Status openPipe(int& read_end, int& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return base::internalError(std::string("pipe: ") + std::strerror(errno));
  }
  read_end = fds[0];
  write_end = fds[1];
  return base::okStatus();
}

base::Status openPipes(const ExecStdio& stdio, SpawnFds& fds) {
  if (stdio.in) RETURN_IF_ERROR(openPipe(fds.child[0], fds.parent[0]));
  if (stdio.out) RETURN_IF_ERROR(openPipe(fds.parent[1], fds.child[1]));
  if (stdio.merged) {
    fds.child[2] = fds.child[1];
  } else if (stdio.err) {
    RETURN_IF_ERROR(openPipe(fds.parent[2], fds.child[2]));
  }
  return base::okStatus();
}

// A pseudo-terminal: its slave is the command's stdin, stdout and stderr; the master is ours
// twice (input and output each get a descriptor of their own for the reactor).
base::Status openTerminal(SpawnFds& fds) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return base::internalError(std::string("posix_openpt: ") + std::strerror(errno));
  fds.parent[1] = master;
  char name[128];
  if (::grantpt(master) != 0 || ::unlockpt(master) != 0 ||
      ::ptsname_r(master, name, sizeof name) != 0) {
    return base::internalError(std::string("pseudo-terminal: ") + std::strerror(errno));
  }
  const int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) return base::internalError(std::string(name) + ": " + std::strerror(errno));
  fds.child = {slave, slave, slave};
  fds.parent[0] = ::fcntl(master, F_DUPFD_CLOEXEC, 0);
  if (fds.parent[0] < 0) return base::internalError(std::string("dup: ") + std::strerror(errno));
  return base::okStatus();
}

}  // namespace

base::StatusOr<ExecChild> spawnExecShim(const std::string& shim, const std::string& dir,
                                        const std::vector<std::string>& command,
                                        const ExecStdio& stdio) {
  SpawnFds fds;
  RETURN_IF_ERROR(stdio.tty ? openTerminal(fds) : openPipes(stdio, fds));
  std::vector<std::string> args{shim, "exec", dir};
  args.insert(args.end(), command.begin(), command.end());
  pid_t pid = 0;
  // Directly, not through the spawn helper: the command's exit code comes from waitid, so it
  // must be the agent's own child. The command's stdout and stderr are /dev/null unless piped.
  int pidfd = -1;
  const int rc = spawnDetachedWithPidfd(args, fds.child, pid, pidfd);
  fds.closeChildSide();
  if (rc != 0) return base::unavailableError("cannot start " + shim + ": " + std::strerror(rc));
  ExecChild child{pid, pidfd, fds.parent[0], fds.parent[1], fds.parent[2]};
  for (int& fd : fds.parent) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    fd = -1;  // the child's now
  }
  return child;
}

int execExitCode(const siginfo_t& info) {
  return info.si_code == CLD_EXITED ? info.si_status : exitCodeForSignal(info.si_status);
}

OutputPipe::OutputPipe(asio::any_io_executor ex, int fd, Sink sink, std::function<void()> on_end)
    : sd_(ex, fd), sink_(std::move(sink)), on_end_(std::move(on_end)), changed_(ex), room_(ex) {
  changed_.expires_at(asio::steady_timer::time_point::max());
  room_.expires_at(asio::steady_timer::time_point::max());
}

asio::awaitable<void> OutputPipe::pump(std::shared_ptr<OutputPipe> pipe) {
  while (!pipe->closed_) {
    boost::system::error_code ec;
    const size_t n = co_await pipe->sd_.async_read_some(
        asio::buffer(pipe->buf_), asio::redirect_error(asio::use_awaitable, ec));
    const bool room = n == 0 || pipe->sink_(std::string_view(pipe->buf_, n));
    // A terminal's master reads EIO once the last holder of the slave is gone: its end.
    if (ec) break;
    if (room) continue;
    pipe->paused_ = true;
    co_await pipe->room_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    pipe->paused_ = false;
    pipe->changed_.cancel();
  }
  pipe->finish();
}

void OutputPipe::drain() {
  if (!sd_.is_open()) return;
  while (true) {
    const ssize_t n = ::read(sd_.native_handle(), buf_, sizeof buf_);
    if (n > 0) {
      sink_(std::string_view(buf_, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;
  }
}

void OutputPipe::close() {
  closed_ = true;
  boost::system::error_code ec;
  sd_.close(ec);
  room_.cancel();
}

void OutputPipe::finish() {
  if (done_) return;
  done_ = true;
  changed_.cancel();
  if (on_end_) on_end_();
}

asio::awaitable<void> finishOutput(std::vector<std::shared_ptr<OutputPipe>> pipes,
                                   base::Clock& clock, base::Duration grace) {
  auto ex = co_await asio::this_coro::executor;
  while (true) {
    std::shared_ptr<OutputPipe> target;
    bool paused = false;
    for (const auto& p : pipes) {
      if (p->done() || (target && target->paused())) continue;
      target = p;
      paused = p->paused();
    }
    if (!target) break;
    auto gave_up = std::make_shared<bool>(false);
    base::TimerPtr timer;
    if (!paused) {
      timer = clock.makeTimer(ex);
      timer->asyncWaitFor(grace, [gave_up, target] {
        *gave_up = true;
        target->changed_.cancel();
      });
    }
    boost::system::error_code ec;
    co_await target->changed_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (timer) timer->cancel();
    const bool any_paused =
        std::any_of(pipes.begin(), pipes.end(), [](const auto& p) { return p->paused(); });
    if (*gave_up && !target->done() && !any_paused) break;
  }
  for (const auto& p : pipes) {
    p->drain();
    p->close();
  }
}

}  // namespace nodeagent::runtime
