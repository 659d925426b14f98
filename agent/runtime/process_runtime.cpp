// ProcessRuntime's public interface over its State (process_runtime_state.h): pods, statuses and
// sandboxes here; starts, kills, execs and recovery in the other process_runtime*.cpp files.
#include "agent/runtime/process_runtime.h"

#include "agent/runtime/process_runtime_state.h"
#include "base/blocking.h"

namespace nodeagent::runtime {

// Runs `tasks` concurrently on the current executor; completes with every result once all end.
ProcessRuntime::ProcessRuntime(asio::any_io_executor executor, base::Clock& clock,
                               ProcessRuntimeOptions options)
    : state_(std::make_shared<State>(std::move(executor), clock, options)) {
  if (options.file_executor) {
    files_ = options.file_executor;
  } else {
    files_ = own_files_.emplace(2).get_executor();
  }
  state_->setFiles(files_);
}

ProcessRuntime::~ProcessRuntime() { state_->stop(); }

base::Status ProcessRuntime::recover() { return state_->recover(); }

void ProcessRuntime::setPreStopHookRunner(PreStopHookRunner runner) {
  std::lock_guard lock(state_->mu_);
  state_->pre_stop_runner_ = std::move(runner);
}

void ProcessRuntime::setEventHandler(ContainerEventHandler handler) {
  std::lock_guard lock(state_->mu_);
  state_->handler_ = std::move(handler);
}

std::optional<uint64_t> ProcessRuntime::podsVersion() const {
  std::lock_guard lock(state_->mu_);
  // An adopted container still "created" may have started since: only reading its state file
  // tells, so relists must keep looking until it did.
  for (const auto& [id, r] : state_->records_) {
    if (!r.starting && r.state.status == ShimStatus::kCreated) return std::nullopt;
  }
  return state_->version_;
}

asio::awaitable<base::StatusOr<std::vector<Pod>>> ProcessRuntime::getPods(bool all) {
  auto state = state_;
  std::vector<Pod> out;
  {
    std::lock_guard lock(state->mu_);
    out.reserve(state->ids_by_pod_.size());
    for (const auto& [uid, ids] : state->ids_by_pod_) {
      Pod pod;
      for (const auto& id : ids) {
        auto& r = state->records_.at(id);
        state->refreshCreatedLocked(id, r);
        const ContainerState cs = containerState(r.state.status);
        if (!all && cs != ContainerState::kRunning) continue;
        pod.containers.push_back(Container{ContainerId{std::string(ProcessRuntime::kType), id},
                                           r.config.container_name, r.config.image,
                                           hashFromHex(r.config.hash), cs, ""});
        if (pod.uid.empty()) {
          pod.uid = uid;
          pod.name = r.config.pod_name;
          pod.namespace_ = r.config.pod_namespace;
        }
      }
      if (!pod.containers.empty()) out.push_back(std::move(pod));
    }
  }
  co_return out;
}

asio::awaitable<base::StatusOr<PodStatus>> ProcessRuntime::getPodStatus(std::string uid,
                                                                        std::string name,
                                                                        std::string namespace_) {
  auto state = state_;
  PodStatus status{uid, std::move(name), std::move(namespace_), {}, {}, {}};
  {
    std::lock_guard lock(state->mu_);
    if (auto ids = state->ids_by_pod_.find(uid); ids != state->ids_by_pod_.end()) {
      for (const auto& id : ids->second) {
        auto& r = state->records_.at(id);
        state->refreshCreatedLocked(id, r);
        status.container_statuses.push_back(state->toStatus(id, r));
      }
    }
    if (auto sandbox = state->sandboxes_.find(uid); sandbox != state->sandboxes_.end()) {
      status.sandbox_statuses.push_back(sandbox->second);
    } else if (!status.container_statuses.empty()) {
      // Containers adopted from a previous agent: their pod's sandbox is the one they run in.
      status.sandbox_statuses.push_back({uid, SandboxState::kReady, 0, {}});
    }
  }
  std::sort(status.container_statuses.begin(), status.container_statuses.end(),
            [](const ContainerStatus& a, const ContainerStatus& b) {
              if (a.created_at != b.created_at) return a.created_at > b.created_at;
              return a.restart_count > b.restart_count;
            });
  co_return status;
}

asio::awaitable<base::StatusOr<std::string>> ProcessRuntime::runPodSandbox(
    PodSandboxConfig config) {
  auto state = state_;
  auto make_log_dir = [dir = config.log_directory]() -> base::Status {
    std::error_code ec;
    if (!dir.empty()) fs::create_directories(dir, ec);
    if (ec)
      return base::internalError("create pod log directory " + dir.string() + ": " + ec.message());
    return base::okStatus();
  };
  auto made = co_await base::runBlocking(files_, std::move(make_log_dir));
  if (!made.ok()) co_return made;
  std::lock_guard lock(state->mu_);
  state->sandboxes_[config.uid] =
      PodSandboxStatus{config.uid, SandboxState::kReady, config.attempt, state->clock_.wallNow()};
  co_return config.uid;
}

asio::awaitable<base::Status> ProcessRuntime::stopPodSandbox(std::string id) {
  std::lock_guard lock(state_->mu_);
  auto it = state_->sandboxes_.find(id);
  if (it == state_->sandboxes_.end()) {
    it = state_->sandboxes_.emplace(id, PodSandboxStatus{id, SandboxState::kReady, 0, {}}).first;
  }
  it->second.state = SandboxState::kNotReady;
  co_return base::okStatus();
}

asio::awaitable<base::Status> ProcessRuntime::removePodSandbox(std::string id) {
  std::lock_guard lock(state_->mu_);
  state_->sandboxes_.erase(id);
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<ContainerId>> ProcessRuntime::startContainer(
    api::PodPtr pod, api::Container container, int attempt, StartContainerOptions options) {
  auto state = state_;
  auto launch = [state, pod, container, attempt, options = std::move(options)] {
    return state->launch(*pod, container, attempt, options);
  };
  auto launched = co_await base::runBlocking(files_, std::move(launch));
  co_return co_await state->start(std::move(launched), std::move(pod), container.name, attempt);
}

asio::awaitable<base::Status> ProcessRuntime::killContainer(api::PodPtr pod, ContainerId id,
                                                            KillOptions options,
                                                            std::string reason) {
  auto state = state_;
  co_return co_await state->kill(std::move(pod), std::move(id), options, std::move(reason));
}

asio::awaitable<base::Status> ProcessRuntime::killPod(api::PodPtr pod, Pod running_pod,
                                                      std::optional<int64_t> grace_override) {
  auto state = state_;
  auto kill = [state, pod, grace_override](const ContainerId& id) {
    return state->kill(pod, id, KillOptions::graceOverride(grace_override), "killing pod");
  };
  auto killing = killPodContainers(running_pod, kill);
  co_return co_await std::move(killing);
}

asio::awaitable<base::StatusOr<ExecResult>> ProcessRuntime::execInContainer(
    ContainerId id, std::vector<std::string> command, base::Duration timeout) {
  auto state = state_;
  auto task = state->exec(std::move(id.id), std::move(command), timeout);
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> ProcessRuntime::removeContainer(ContainerId id) {
  auto state = state_;
  ShimConfig config;
  {
    std::lock_guard lock(state->mu_);
    auto it = state->records_.find(id.id);
    if (it == state->records_.end()) {
      co_return base::notFoundError("container " + id.toString() + " not found");
    }
    if (it->second.state.status != ShimStatus::kExited) {
      co_return base::failedPreconditionError("container " + id.toString() + " is still running");
    }
    config = it->second.config;
    state->eraseRecordLocked(it);
  }
  auto remove = [state, id = id.id, config = std::move(config)]() -> base::Status {
    state->removeFiles(id, config);
    return base::okStatus();
  };
  co_return co_await base::runBlocking(files_, std::move(remove));
}

void ProcessRuntime::State::removeFiles(const std::string& id, const ShimConfig& config) {
  // The shim removed the cgroup when the container ended, unless it could not (or died first).
  removeContainerCgroup(id, config.cgroup_name, config.cgroup);
  const std::string& log_path = config.log_path;
  std::error_code ec;
  fs::remove_all(containerDir(id), ec);
  if (!log_path.empty()) {
    fs::path log(log_path);
    const std::string prefix = log.filename().string() + ".";
    fs::remove(log, ec);
    for (const auto& entry : fs::directory_iterator(log.parent_path(), ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) == 0) fs::remove(entry.path(), ec);
    }
    // Only removes directories that became empty.
    fs::remove(log.parent_path(), ec);
    fs::remove(log.parent_path().parent_path(), ec);
  }
}

void ProcessRuntime::State::removeContainerCgroup(const std::string& id, const std::string& name,
                                                  const cm::CgroupPaths& paths) {
  if (paths.empty()) return;
  std::error_code ec;
  bool exists = false;
  for (const auto& dir : paths.dirs()) exists = exists || fs::exists(dir, ec);
  if (!exists) return;
  if (options_.cgroups && !name.empty()) {
    if (auto s = options_.cgroups->destroy(cm::parseCgroupPath(name)); !s.ok()) {
      log()->warn("Cannot remove container cgroup id={} cgroup={} error={}", id, name, s.message());
    }
    return;
  }
  // Recorded by an agent that had a cgroup manager: the directories themselves, retried briefly
  // while the kernel finishes the kills.
  std::string error;
  if (cm::killCgroup(paths, error) >= 0 && cm::removeCgroupWaiting(paths, 60, error)) return;
  log()->warn("Cannot remove container cgroup id={} cgroup={} error={}", id, name, error);
}

std::filesystem::path ProcessRuntime::podLogsDirectory(std::string_view pod_namespace,
                                                       std::string_view pod_name,
                                                       std::string_view pod_uid) const {
  return buildPodLogsDirectory(state_->options_.pod_log_dir, pod_namespace, pod_name, pod_uid);
}

std::filesystem::path ProcessRuntime::containerLogsPath(std::string_view pod_namespace,
                                                        std::string_view pod_name,
                                                        std::string_view pod_uid,
                                                        std::string_view container_name,
                                                        int restart_count) const {
  return state_->logPath(pod_namespace, pod_name, pod_uid, container_name, restart_count);
}

int ProcessRuntime::shimPidForTest(const ContainerId& id) const {
  std::lock_guard lock(state_->mu_);
  auto it = state_->records_.find(id.id);
  if (it == state_->records_.end()) return 0;
  return it->second.shimPid();
}

}  // namespace nodeagent::runtime
