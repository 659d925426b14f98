// ProcessRuntime's kills (preStop hook, SIGTERM, SIGKILL after the grace period) and commands
// run in a container's context (exec probes and hooks).
#include "agent/runtime/process_runtime_state.h"

namespace nodeagent::runtime {
namespace {

// How long to wait for a process to go after SIGKILL before giving up with an error.
constexpr seconds kKillTimeout{60};
// How long an exec'd command's output may still arrive after the command exited.
constexpr std::chrono::milliseconds kExecOutputGrace{200};

// The output pipe of an exec'd command; read on the exec's strand, at most kMaxExecOutput bytes
// kept (the rest is read and dropped so the command never blocks on a full pipe).
struct ExecPipe {
  ExecPipe(asio::any_io_executor ex, int fd) : sd(ex, fd), eof(ex) {
    eof.expires_at(asio::steady_timer::time_point::max());  // an event, never a deadline
  }
  void append(const char* p, size_t n) {
    const size_t room = kMaxExecOutput - std::min(kMaxExecOutput, out.size());
    out.append(p, std::min(n, room));
  }
  // Reads what the pipe holds right now (the fd is non-blocking).
  void drain() {
    if (!sd.is_open()) return;
    while (true) {
      ssize_t n = ::read(sd.native_handle(), buf, sizeof buf);
      if (n > 0) {
        append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return;
    }
  }
  asio::posix::stream_descriptor sd;
  // Cancelled when the reader has seen the end of the output (or an error).
  asio::steady_timer eof;
  bool done = false;
  std::string out;
  char buf[4096];
};

asio::awaitable<void> readExecOutput(std::shared_ptr<ExecPipe> pipe) {
  while (true) {
    boost::system::error_code ec;
    size_t n = co_await pipe->sd.async_read_some(asio::buffer(pipe->buf),
                                                 asio::redirect_error(asio::use_awaitable, ec));
    if (n > 0) pipe->append(pipe->buf, n);
    if (ec) {
      pipe->done = true;
      pipe->eof.cancel();
      co_return;
    }
  }
}

// A command `nodeagent-shim exec` runs: our child, its pidfd, and the read end of its output
// pipe (non-blocking).
struct ExecProcess {
  pid_t pid = 0;
  int pidfd = -1;
  int out_fd = -1;
};

// Starts `shim exec dir command...` with its stdout and stderr on one pipe.
base::StatusOr<ExecProcess> spawnExecShim(const std::string& shim, const std::string& dir,
                                          const std::vector<std::string>& command) {
  int out_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0) {
    return base::internalError(std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> args{shim, "exec", dir};
  args.insert(args.end(), command.begin(), command.end());
  pid_t pid = 0;
  const int out = out_fds[1];
  const int rc = spawnShimProcess(
      std::move(args),
      [out](posix_spawn_file_actions_t& fa) {
        posix_spawn_file_actions_adddup2(&fa, out, 1);
        posix_spawn_file_actions_adddup2(&fa, out, 2);
      },
      pid);
  ::close(out_fds[1]);
  if (rc != 0) {
    ::close(out_fds[0]);
    return base::unavailableError("cannot start " + shim + ": " + std::strerror(rc));
  }
  int pidfd = pidfdOpen(pid);
  if (pidfd < 0) {
    int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(out_fds[0]);
    return base::internalError(std::string("pidfd_open: ") + std::strerror(err));
  }
  ::fcntl(out_fds[0], F_SETFL, ::fcntl(out_fds[0], F_GETFL) | O_NONBLOCK);
  return ExecProcess{pid, pidfd, out_fds[0]};
}

// The command's output once it exited: the rest of it is normally in flight; children left in
// the background may hold the pipe open for ever, so the wait for its end is short. `clock` (the
// runtime's, which outlives its State) is a reference: the call is awaited at once.
asio::awaitable<std::string> collectExecOutput(std::shared_ptr<ExecPipe> pipe, base::Clock& clock) {
  boost::system::error_code ec;
  if (!pipe->done) {
    auto grace = clock.makeTimer(co_await asio::this_coro::executor);
    grace->asyncWaitFor(kExecOutputGrace, [pipe] { pipe->eof.cancel(); });
    co_await pipe->eof.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    grace->cancel();
  }
  pipe->drain();
  pipe->sd.close(ec);
  co_return std::move(pipe->out);
}

}  // namespace

asio::awaitable<void> ProcessRuntime::State::runHook(std::string id,
                                                     std::vector<std::string> command,
                                                     base::Duration timeout) {
  auto task = exec(id, std::move(command), timeout);
  auto result = co_await std::move(task);
  if (!result.ok()) {
    log()->warn("PreStop hook failed to start id={} error={}", id, result.status().toString());
  } else if (result->timed_out) {
    log()->warn("PreStop hook did not finish within the grace period id={}", id);
  } else if (result->exit_code != 0) {
    log()->warn("PreStop hook failed id={} exitCode={}", id, result->exit_code);
  }
}

asio::awaitable<base::StatusOr<ExecResult>> ProcessRuntime::State::exec(
    std::string id, std::vector<std::string> command, base::Duration timeout) {
  // The output reader and the waiter share state: one strand for both.
  auto strand = asio::make_strand(co_await asio::this_coro::executor);
  auto task = execOnStrand(std::move(id), std::move(command), timeout);
  // co_spawn needs a default-constructible result: StatusOr travels in an optional.
  auto result = co_await asio::co_spawn(strand, std::move(task), asio::use_awaitable);
  co_return std::move(*result);
}

asio::awaitable<std::optional<base::StatusOr<ExecResult>>> ProcessRuntime::State::execOnStrand(
    std::string id, std::vector<std::string> command, base::Duration timeout) {
  {
    std::lock_guard lock(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) co_return base::notFoundError("container " + id + " not found");
    if (it->second.state.status != ShimStatus::kRunning) {
      co_return base::failedPreconditionError("container " + id + " is not running");
    }
  }
  if (command.empty()) co_return base::invalidArgumentError("empty command");
  auto process = spawnExecShim(options_.shim_path.string(), containerDir(id).string(), command);
  if (!process.ok()) co_return process.status();
  const pid_t pid = process->pid;
  auto ex = co_await asio::this_coro::executor;
  auto pipe = std::make_shared<ExecPipe>(ex, process->out_fd);
  asio::co_spawn(ex, readExecOutput(pipe), asio::detached);
  asio::posix::stream_descriptor sd(ex, process->pidfd);
  auto timer = clock_.makeTimer(ex);
  bool timed_out = false;
  // The command is our unreaped child until waitid below, so its pid (= its process group) is
  // ours.
  timer->asyncWaitFor(timeout, [pid, &timed_out] {
    timed_out = true;
    ::kill(-pid, SIGKILL);
  });
  co_await base::waitReadable(sd);
  timer->cancel();
  siginfo_t info{};
  // WNOHANG: after an aborted wait (shutdown) the command may still run; never block here.
  ::waitid(kPPidfd, static_cast<id_t>(process->pidfd), &info, WEXITED | WNOHANG);
  ExecResult result;
  result.timed_out = timed_out;
  result.exit_code =
      info.si_code == CLD_EXITED ? info.si_status : exitCodeForSignal(info.si_status);
  result.output = co_await collectExecOutput(pipe, clock_);
  co_return result;
}

asio::awaitable<base::Status> ProcessRuntime::State::kill(api::PodPtr pod, ContainerId id,
                                                          KillOptions options, std::string reason) {
  ShimConfig config;
  ShimState st;
  PreStopHookRunner runner;
  {
    std::lock_guard lock(mu_);
    runner = pre_stop_runner_;
    auto it = records_.find(id.id);
    if (it == records_.end()) {
      co_return base::notFoundError("container " + id.toString() + " not found");
    }
    config = it->second.config;
    st = it->second.state;
  }
  if (st.status == ShimStatus::kExited) co_return base::okStatus();

  const int64_t hook_grace =
      pod ? killGracePeriodSeconds(*pod, options.probe_grace) : config.grace_period_seconds;
  // The pod's spec decides the hook when there is a pod; the exec hook recorded at start serves
  // orphans (a restarted agent whose pod is gone).
  const api::Container* spec = pod ? findSpecContainer(*pod, config.container_name) : nullptr;
  const bool has_hook =
      spec ? spec->lifecycle && spec->lifecycle->pre_stop : !config.pre_stop.empty();
  base::Duration hook_time{0};
  if (has_hook && hook_grace > 0 && st.status == ShimStatus::kRunning) {
    auto started = clock_.now();
    if (spec && runner) {
      PreStopHookRequest request{pod, config.container_name, id, seconds(hook_grace)};
      auto hook = runner(std::move(request));
      co_await std::move(hook);
    } else if (std::vector<std::string> command = spec ? preStopCommand(*spec) : config.pre_stop;
               !command.empty()) {
      co_await runHook(id.id, std::move(command), seconds(hook_grace));
    } else {
      log()->warn("Skipping a preStop hook that is not exec pod={}/{} container={}",
                  config.pod_namespace, config.pod_name, config.container_name);
    }
    hook_time = clock_.now() - started;
  }
  const int64_t grace =
      graceAfterPreStopSeconds(hook_grace, hook_time, options, options_.minimum_grace_seconds);
  log()->info("Killing container pod={}/{} container={} id={} gracePeriod={} reason={}",
              config.pod_namespace, config.pod_name, config.container_name, id.id, grace, reason);

  co_await signalContainer(id.id, grace == 0 ? SIGKILL : SIGTERM);
  if (grace > 0 && co_await waitExit(id.id, seconds(grace))) co_return base::okStatus();
  co_await signalContainer(id.id, SIGKILL);
  if (co_await waitExit(id.id, kKillTimeout)) co_return base::okStatus();
  co_return base::deadlineExceededError("container " + id.toString() + " is still running " +
                                        std::to_string(kKillTimeout.count()) + "s after SIGKILL");
}

}  // namespace nodeagent::runtime
