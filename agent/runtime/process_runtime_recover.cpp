// ProcessRuntime's recovery at start: the containers that earlier agents started are adopted
// from their state directories (running ones watched again, ended ones reported with their exit).
#include "agent/runtime/process_runtime_state.h"

namespace nodeagent::runtime {

void ProcessRuntime::State::adopt(const std::string& id, ShimConfig config, ShimState state) {
  const fs::path dir = containerDir(id);
  std::string error;
  const bool same_boot = !state.boot_id.empty() && state.boot_id == currentBootId();
  // A shim that exited while we are its parent (the agent process survived, e.g. tests) is a
  // zombie: reap it so it does not linger.
  if (state.shim_pid > 0 && same_boot) {
    auto ps = readProcStat(state.shim_pid);
    if (ps && ps->state == 'Z' && ps->start_ticks == state.shim_start_ticks) {
      ::waitpid(state.shim_pid, nullptr, WNOHANG);
    }
  }
  const std::string ns = config.pod_namespace;
  const std::string name = config.pod_name;
  const std::string container = config.container_name;
  Record r;
  r.config = std::move(config);
  r.config.argv = {};  // as in launch: the shim's config file keeps them
  r.config.env = {};
  r.config.working_dir = {};
  r.state = state;
  if (state.status != ShimStatus::kExited) {
    std::shared_ptr<Fd> pidfd;
    if (same_boot && state.shim_pid > 0 && processAlive(state.shim_pid, state.shim_start_ticks)) {
      pidfd = std::make_shared<Fd>(pidfdOpen(state.shim_pid));
      // Checked again with the pidfd held: the pid cannot be reused behind our back any more.
      if (pidfd->fd < 0 || !processAlive(state.shim_pid, state.shim_start_ticks)) pidfd.reset();
    }
    if (pidfd) {
      r.shim_pid = state.shim_pid;
      r.pidfd = pidfd;
      {
        std::lock_guard lock(mu_);
        putRecordLocked(id, std::move(r));
      }
      watch(id, pidfd);
      log_->info("Adopted container pod={}/{} container={} id={} pid={}", ns, name, container, id,
                 state.pid);
      return;
    }
    if (!same_boot) {
      r.state.status = ShimStatus::kExited;
      r.state.finished_at = r.state.finished_at ? r.state.finished_at : r.state.started_at;
      r.state.exit_code = 255;
      r.state.reason = "Error";
      r.state.message = "the node rebooted while the container ran";
      if (!writeFileAtomic((dir / kStateFileName).string(), encodeShimState(r.state), error)) {
        log_->warn("Cannot record container exit id={} error={}", id, error);
      }
    } else {
      r.state = settleDeadShim(id, state);
    }
  }
  std::lock_guard lock(mu_);
  putRecordLocked(id, std::move(r));
}

base::Status ProcessRuntime::State::recover() {
  const fs::path root = options_.root_dir / "containers";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return base::internalError("create " + root.string() + ": " + ec.message());
  int adopted = 0;
  int exited = 0;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    const std::string id = entry.path().filename().string();
    {
      std::lock_guard lock(mu_);
      if (records_.count(id)) continue;
    }
    std::string text, error;
    ShimConfig config;
    const fs::path config_path = entry.path() / kConfigFileName;
    if (!readWholeFile(config_path.string(), text, error)) {
      // Created but never configured: the agent stopped in the middle of a start.
      log_->warn("Removing incomplete container directory path={}", entry.path().string());
      fs::remove_all(entry.path(), ec);
      continue;
    }
    if (!decodeShimConfig(text, config, error)) {
      log_->warn("Skipping container with an unreadable config path={} error={}",
                 config_path.string(), error);
      continue;
    }
    ShimState state;
    const fs::path state_path = entry.path() / kStateFileName;
    if (!readWholeFile(state_path.string(), text, error) || !decodeShimState(text, state, error)) {
      // No shim ever recorded anything: it never started.
      state = ShimState{};
      state.boot_id = currentBootId();
      state = settleDeadShim(id, state);
    }
    adopt(id, std::move(config), std::move(state));
    std::lock_guard lock(mu_);
    if (records_[id].state.status == ShimStatus::kExited) {
      ++exited;
    } else {
      ++adopted;
    }
  }
  if (ec) return base::internalError("list " + root.string() + ": " + ec.message());
  log_->info("Recovered containers running={} exited={}", adopted, exited);
  return base::okStatus();
}

}  // namespace nodeagent::runtime
