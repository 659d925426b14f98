// ProcessRuntime's kills (preStop hook, SIGTERM, SIGKILL after the grace period) and commands
// run in a container's context (exec probes and hooks).
#include "agent/runtime/exec_process.h"
#include "agent/runtime/process_runtime_state.h"

namespace nodeagent::runtime {
namespace {

// How long to wait for a process to go after SIGKILL before giving up with an error.
constexpr seconds kKillTimeout{60};
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
  if (auto running = runningConfig(id); !running.ok()) co_return running.status();
  if (command.empty()) co_return base::invalidArgumentError("empty command");
  auto process =
      co_await spawnExec(std::move(id), std::move(command), ExecStdio{.out = true, .merged = true});
  if (!process.ok()) co_return process.status();
  const pid_t pid = process->pid;
  auto ex = co_await asio::this_coro::executor;
  // At most kMaxExecOutput bytes kept; the rest is read and dropped so the command never blocks
  // on a full pipe. Shared with the reader, which may outlive this frame.
  auto output = std::make_shared<std::string>();
  auto keep = [output](std::string_view piece) {
    output->append(piece.substr(0, kMaxExecOutput - std::min(kMaxExecOutput, output->size())));
    return true;
  };
  auto pipe = std::make_shared<OutputPipe>(ex, process->out, std::move(keep));
  asio::co_spawn(ex, OutputPipe::pump(pipe), asio::detached);
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
  result.exit_code = execExitCode(info);
  // The rest of the output is normally in flight; `clock_` outlives this frame's wait (the
  // runtime's clock outlives its State).
  std::vector<std::shared_ptr<OutputPipe>> pipes{pipe};
  auto finish = finishOutput(std::move(pipes), clock_, kExecOutputGrace);
  co_await std::move(finish);
  result.output = std::move(*output);
  co_return result;
}

base::StatusOr<ShimConfig> ProcessRuntime::State::runningConfig(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return base::notFoundError("container " + id + " not found");
  if (it->second.state.status != ShimStatus::kRunning) {
    return base::failedPreconditionError("container " + id + " is not running");
  }
  return it->second.config;
}

asio::awaitable<base::StatusOr<ExecChild>> ProcessRuntime::State::spawnExec(
    std::string id, std::vector<std::string> command, ExecStdio stdio) {
  auto spawn = [shim = options_.shim_path.string(), dir = containerDir(id).string(),
                command = std::move(command),
                stdio] { return spawnExecShim(shim, dir, command, stdio); };
  co_return co_await runOnFiles(std::move(spawn));
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
