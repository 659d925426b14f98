// ProcessRuntime's recovery at start: the containers that earlier agents started are adopted from
// their state directories (running ones watched again, ended ones reported with their exit). What
// the files say is checked against the live shims of this root dir (/proc, see shim_processes.h): a
// live shim is adopted from what the kernel shows when its state file is unusable, and killed
// deliberately when even its config file is, so that a container is never started twice.
#include <poll.h>

#include "agent/runtime/process_runtime_state.h"
#include "agent/runtime/shim_processes.h"

namespace nodeagent::runtime {
namespace {

// Waits until the process of each of `items` (its pidfd: `pidfd_of(item)`) has ended or `timeout`
// passed, reaping those that are this process's children; the ended ones are dropped from `items`.
template <class T, class PidfdOf>
void waitUntilEnded(std::vector<T>& items, PidfdOf pidfd_of, base::Clock& clock,
                    base::Duration timeout) {
  const auto deadline = clock.now() + timeout;
  while (!items.empty()) {
    std::vector<pollfd> fds;
    for (const auto& item : items) fds.push_back({pidfd_of(item), POLLIN, 0});
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock.now());
    const int rc =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, left.count())));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return;
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      siginfo_t info{};
      // Reap it when it is our child (the agent process survived, e.g. tests).
      ::waitid(kPPidfd, static_cast<id_t>(fds[i].fd), &info, WEXITED | WNOHANG);
      items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

// The state file says what the live shim is (same boot, same shim, same container process).
bool stateMatches(const ShimState& state, const LiveShim& shim) {
  if (state.boot_id != currentBootId() || state.shim_pid != shim.pid ||
      state.shim_start_ticks != shim.start_ticks) {
    return false;
  }
  if (state.status != ShimStatus::kRunning || shim.container_pid == 0) return true;
  return state.pid == shim.container_pid && state.pid_start_ticks == shim.container_start_ticks;
}

// What a live shim's state file would say, from /proc. No container child: the shim has not started
// it yet or it has just ended; "created" until the shim's own file tells more.
ShimState stateFromShim(const LiveShim& shim) {
  ShimState st;
  st.shim_pid = shim.pid;
  st.shim_start_ticks = shim.start_ticks;
  st.boot_id = currentBootId();
  if (shim.container_pid > 0) {
    st.status = ShimStatus::kRunning;
    st.pid = shim.container_pid;
    st.pid_start_ticks = shim.container_start_ticks;
    st.started_at = processStartNanos(shim.container_start_ticks);
  }
  return st;
}

// The cgroup the live process `pid` (started at `start_ticks`) runs in, read from the kernel
// (/proc/<pid>/cgroup: v2's "0::" line, v1's freezer line, else its memory line), when it is
// named as the runtime names a container's: `<cgroup_parent>/<id>`. Empty without a cgroup
// manager, when the process is gone, or in any other cgroup (never a pod's, a hierarchy's root or
// another container's).
cm::CgroupPaths containerCgroupOf(const cm::CgroupManager* cgroups, int pid, uint64_t start_ticks,
                                  const std::string& id) {
  if (cgroups == nullptr || pid <= 0 || id.empty()) return {};
  std::string text;
  if (!cm::readSmallFile("/proc/" + std::to_string(pid) + "/cgroup", text)) return {};
  // Read from the process that was recorded, not one that reused its pid.
  if (!processAlive(pid, start_ticks)) return {};
  std::map<std::string, std::string> by_controller;  // "" : the v2 line
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) {
      by_controller[""] = path;
      continue;
    }
    size_t start = 0;
    while (start <= controllers.size()) {
      size_t comma = controllers.find(',', start);
      if (comma == std::string::npos) comma = controllers.size();
      by_controller[controllers.substr(start, comma - start)] = path;
      start = comma + 1;
    }
  }
  std::string path;
  if (cgroups->version() == cm::CgroupVersion::kV2) {
    path = by_controller[""];
  } else {
    path = by_controller.contains("freezer") ? by_controller["freezer"] : by_controller["memory"];
  }
  const cm::CgroupName name = cm::parseCgroupPath(path);
  if (name.empty() || name.back() != id) return {};
  return cgroups->paths(name);
}

}  // namespace

void ProcessRuntime::State::saveState(const std::string& id, const ShimState& st) {
  std::string error;
  if (!writeFileAtomic((containerDir(id) / kStateFileName).string(), encodeShimState(st), error)) {
    log()->warn("Cannot record container exit id={} error={}", id, error);
  }
}

void ProcessRuntime::State::adopt(const std::string& id, ShimConfig config, ShimState state) {
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
      log()->info("Adopted container pod={}/{} container={} id={} pid={}", ns, name, container, id,
                  state.pid);
      return;
    }
    if (!same_boot) {
      r.state.status = ShimStatus::kExited;
      r.state.finished_at = r.state.finished_at ? r.state.finished_at : r.state.started_at;
      r.state.exit_code = 255;
      r.state.reason = "Error";
      r.state.message = "the node rebooted while the container ran";
      saveState(id, r.state);
    } else {
      r.state = settleDeadShim(id, state, r.config.cgroup);
    }
  }
  std::lock_guard lock(mu_);
  putRecordLocked(id, std::move(r));
}

// SIGTERM through each shim (it forwards it to its container's process group), up to the minimum
// grace period; then SIGKILL to the container's group and to the shim, and to every process of the
// container's cgroup when it is known. Returns once they ended, or after a bounded wait (logged).
//
// The cgroup: an unadoptable shim's config is unreadable or unusable (or its directory is gone),
// so no recorded cgroup can be trusted. The kernel's is: the cgroup the container's live main
// process runs in (/proc/<pid>/cgroup), taken only when it is named as the runtime names a
// container's (`<cgroup_parent>/<id>`) and the agent has a cgroup manager to find its directories.
// Otherwise (no cgroup manager, the main process already gone, a cgroup named otherwise) only the
// process group is killed, as before: a child of the container in a session of its own may then
// survive, and the pod's cgroup cleanup is what kills it.
void ProcessRuntime::State::killUnadoptable(const std::vector<Unadoptable>& shims) {
  struct Target {
    const Unadoptable* u;
    std::unique_ptr<Fd> pidfd;
  };
  std::vector<Target> targets;
  // Found before any signal, while the container's main process still runs in its cgroup.
  std::vector<std::pair<std::string, cm::CgroupPaths>> cgroups;
  for (const auto& u : shims) {
    cm::CgroupPaths cgroup = containerCgroupOf(options_.cgroups.get(), u.shim.container_pid,
                                               u.shim.container_start_ticks, u.id);
    if (!cgroup.empty()) cgroups.emplace_back(u.id, std::move(cgroup));
  }
  for (const auto& u : shims) {
    log()->warn("Killing a container shim that cannot be adopted id={} shimPid={} pid={} reason={}",
                u.id, u.shim.pid, u.shim.container_pid, u.reason);
    auto pidfd = std::make_unique<Fd>(pidfdOpen(u.shim.pid));
    // Checked with the pidfd held, as in adopt: the pid is the shim's, not a reused one.
    if (pidfd->fd < 0 || !processAlive(u.shim.pid, u.shim.start_ticks)) continue;
    pidfdSendSignal(pidfd->fd, SIGTERM);
    targets.push_back({&u, std::move(pidfd)});
  }
  auto waitEnded = [&](base::Duration timeout) {
    waitUntilEnded(
        targets, [](const Target& t) { return t.pidfd->fd; }, clock_, timeout);
  };
  waitEnded(seconds(options_.minimum_grace_seconds));
  for (const auto& t : targets) {
    const LiveShim& shim = t.u->shim;
    if (shim.container_pid > 0 && processAlive(shim.container_pid, shim.container_start_ticks)) {
      ::kill(-shim.container_pid, SIGKILL);
    }
    pidfdSendSignal(t.pidfd->fd, SIGKILL);
  }
  // What the containers left in their cgroups (a child in a session of its own), also of shims
  // that ended on SIGTERM: the shim kills its cgroup as its container ends, unless it is killed
  // first.
  for (const auto& [id, cgroup] : cgroups) killContainerCgroup(id, cgroup);
  // The container processes SIGKILLed above end soon after (the kernel has yet to run them):
  // recovery returns once they are gone, so that a container is never running twice.
  std::vector<std::unique_ptr<Fd>> killed;
  for (const auto& t : targets) {
    const LiveShim& shim = t.u->shim;
    if (shim.container_pid <= 0) continue;
    auto pidfd = std::make_unique<Fd>(pidfdOpen(shim.container_pid));
    // Checked with the pidfd held: the pid is still the container's, not a reused one.
    if (pidfd->fd >= 0 && processAlive(shim.container_pid, shim.container_start_ticks)) {
      killed.push_back(std::move(pidfd));
    }
  }
  waitEnded(seconds(options_.minimum_grace_seconds));
  for (const auto& t : targets) {
    log()->error("A container shim that cannot be adopted survived SIGKILL id={} shimPid={}",
                 t.u->id, t.u->shim.pid);
  }
  waitUntilEnded(
      killed, [](const std::unique_ptr<Fd>& fd) { return fd->fd; }, clock_,
      seconds(options_.minimum_grace_seconds));
}

base::Status ProcessRuntime::State::recover() {
  const fs::path root = options_.root_dir / "containers";
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return base::internalError("create " + root.string() + ": " + ec.message());
  std::map<std::string, LiveShim> shims = findLiveShims(root);
  Recovery recovery;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.is_directory()) recoverContainer(entry.path(), shims, recovery);
  }
  if (ec) return base::internalError("list " + root.string() + ": " + ec.message());
  for (const auto& [id, shim] : shims) {
    recovery.unadoptable.push_back({id, shim, "its container directory is missing"});
  }
  killUnadoptable(recovery.unadoptable);
  for (const auto& dir : recovery.incomplete) fs::remove_all(dir, ec);
  log()->info("Recovered containers running={} exited={} killed={}", recovery.adopted,
              recovery.exited, recovery.unadoptable.size());
  return base::okStatus();
}

// Adopts the container of `dir` unless this instance has its record already.
void ProcessRuntime::State::recoverContainer(const fs::path& dir,
                                             std::map<std::string, LiveShim>& shims,
                                             Recovery& recovery) {
  const std::string id = dir.filename().string();
  {
    std::lock_guard lock(mu_);
    if (records_.count(id)) return;
  }
  std::optional<LiveShim> live;
  if (auto it = shims.find(id); it != shims.end()) {
    live = it->second;
    shims.erase(it);
  }
  std::optional<ShimConfig> config = recoverConfig(dir, id, live, recovery);
  if (!config) return;
  ShimState state = recoverState(dir, id, live, config->cgroup);
  adopt(id, std::move(*config), std::move(state));
  std::lock_guard lock(mu_);
  if (records_[id].state.status == ShimStatus::kExited) {
    ++recovery.exited;
  } else {
    ++recovery.adopted;
  }
}

// The container's config file, decoded; nullopt when it is unreadable (the directory is removed
// once recovery ends) or unusable (the directory is skipped), its live shim then unadoptable.
std::optional<ShimConfig> ProcessRuntime::State::recoverConfig(const fs::path& dir,
                                                               const std::string& id,
                                                               const std::optional<LiveShim>& live,
                                                               Recovery& recovery) {
  std::string text, error;
  ShimConfig config;
  const fs::path config_path = dir / kConfigFileName;
  if (!readWholeFile(config_path.string(), text, error)) {
    // Created but never configured: the agent stopped in the middle of a start (or the file was
    // removed under a running shim, which then cannot be adopted).
    if (live)
      recovery.unadoptable.push_back({id, *live, "its config file is unreadable: " + error});
    log()->warn("Removing incomplete container directory path={}", dir.string());
    recovery.incomplete.push_back(dir);
    return std::nullopt;
  }
  if (!decodeShimConfig(text, config, error)) {
    if (live) recovery.unadoptable.push_back({id, *live, "its config file is unusable: " + error});
    log()->warn("Skipping container with an unreadable config path={} error={}",
                config_path.string(), error);
    return std::nullopt;
  }
  return config;
}

// The container's state: its state file when that is usable (and describes its live shim, if
// any), else rebuilt from the live shim, else settled as a container that never started (no
// state file) or whose exit is unknown (an unusable one), and recorded so. Settled ones have what
// runs in their cgroup `cgroup` (from their config) killed: nothing supervises it any more.
ShimState ProcessRuntime::State::recoverState(const fs::path& dir, const std::string& id,
                                              const std::optional<LiveShim>& live,
                                              const cm::CgroupPaths& cgroup) {
  std::string text, error;
  ShimState state;
  const fs::path state_path = dir / kStateFileName;
  std::error_code exists_ec;
  const bool state_present = fs::exists(state_path, exists_ec) || exists_ec;
  bool usable =
      readWholeFile(state_path.string(), text, error) && decodeShimState(text, state, error);
  if (usable && live && !stateMatches(state, *live)) {
    usable = false;
    error = "it does not describe the running shim (pid " + std::to_string(live->pid) + ")";
  }
  if (usable) return state;
  if (live) {
    log()->warn("Container state file is unusable, rebuilt from its running shim id={} error={}",
                id, error);
    // Written back, so that the operator's commands (nodeagent ps, stop-all) and the next agent
    // find the running container again.
    auto rebuilt = stateFromShim(*live);
    saveState(id, rebuilt);
    return rebuilt;
  }
  state = ShimState{};
  state.boot_id = currentBootId();
  // No shim ever recorded anything: it never started.
  if (!state_present) return settleDeadShim(id, state, cgroup);
  // The container may still run (its pid is not known: only its cgroup tells).
  const int killed = killContainerCgroup(id, cgroup);
  state.status = ShimStatus::kExited;
  state.finished_at = toNanos(clock_.wallNow());
  state.exit_code = kUnknownExitCode;
  state.reason = "ContainerStatusUnknown";
  state.message = "the container's state file is unusable (" + error +
                  ") and its shim is gone: its exit code is unknown";
  log()->warn("Container state file is unusable and its shim is gone id={} killed={} error={}", id,
              killed, error);
  saveState(id, state);
  return state;
}

}  // namespace nodeagent::runtime
