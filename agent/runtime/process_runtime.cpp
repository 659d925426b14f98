#include "agent/runtime/process_runtime.h"

#include <sys/random.h>

#include "agent/runtime/process_runtime_state.h"
#include "agent/runtime/security_context.h"
#include "base/blocking.h"

namespace nodeagent::runtime {
namespace {

std::string newContainerId() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      NA_CHECK(errno == EINTR, "getrandom failed");
      continue;
    }
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

// The effective security context, checked and turned into what the shim applies. A process
// container has no image user: without runAsUser it runs as the agent's uid.
base::StatusOr<ProcessCredentials> containerCredentials(const api::Pod& pod,
                                                        const api::Container& container,
                                                        const StartContainerOptions& options) {
  const uint32_t agent_uid = ::geteuid();
  const auto sc = determineEffectiveSecurityContext(pod, container);
  RETURN_IF_ERROR(verifyRunAsNonRoot(pod, container, sc, int64_t{agent_uid}));
  if (options.refuse_root) RETURN_IF_ERROR(checkNonRootPolicy(pod, container, sc, agent_uid));
  return processCredentials(pod, container, sc, agent_uid, passwdPrimaryGroup);
}

}  // namespace

// Runs `tasks` concurrently on the current executor; completes with every result once all end.
asio::awaitable<std::vector<base::Status>> runAll(
    std::vector<asio::awaitable<base::Status>> tasks) {
  if (tasks.empty()) co_return std::vector<base::Status>{};
  auto ex = co_await asio::this_coro::executor;
  // GCC 12 destroys the captures of a temporary lambda inside a co_await expression twice:
  // the initiation lives in a named variable.
  auto initiation = [&tasks, ex](auto handler) {
    using Handler = decltype(handler);
    struct Join {
      std::mutex mu;
      size_t remaining = 0;
      std::vector<base::Status> results;
      std::unique_ptr<Handler> handler;
    };
    auto join = std::make_shared<Join>();
    join->remaining = tasks.size();
    join->results.resize(tasks.size());
    join->handler = std::make_unique<Handler>(std::move(handler));
    for (size_t i = 0; i < tasks.size(); ++i) {
      asio::co_spawn(ex, std::move(tasks[i]), [join, i, ex](std::exception_ptr e, base::Status s) {
        std::unique_ptr<Handler> done;
        std::vector<base::Status> results;
        {
          std::lock_guard lock(join->mu);
          join->results[i] = e ? base::internalError("unexpected exception") : std::move(s);
          if (--join->remaining > 0) return;
          done = std::move(join->handler);
          results = std::move(join->results);
        }
        asio::post(ex,
                   [h = std::move(done), r = std::move(results)]() mutable { (*h)(std::move(r)); });
      });
    }
  };
  auto results =
      co_await asio::async_initiate<decltype(asio::use_awaitable), void(std::vector<base::Status>)>(
          initiation, asio::use_awaitable);
  co_return results;
}

int spawnShimProcess(std::vector<std::string> args,
                     const std::function<void(posix_spawn_file_actions_t&)>& fds, pid_t& pid) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  fds(fa);
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
  return rc;
}

base::StatusOr<ProcessRuntime::State::Launched> ProcessRuntime::State::launch(
    const api::Pod& pod, const api::Container& container, int attempt,
    const StartContainerOptions& options) {
  const std::string where = "container \"" + container.name + "\" of pod " + api::podRef(pod);
  if (auto s = checkPathNames(pod, container); !s.ok()) {
    return base::invalidArgumentError(where + ": " + s.message());
  }
  if (container.command.empty()) {
    return base::invalidArgumentError(
        where +
        ": spec.containers[].command is empty; nodeagent runs containers as host processes and "
        "does not pull images, so the command must be given (nodeagent validate reports this)");
  }
  auto creds = containerCredentials(pod, container, options);
  if (!creds.ok()) return creds.status();
  const std::string id = newContainerId();
  ShimConfig config;
  // The container has no filesystem of its own: its terminationMessagePath cannot be mounted, so
  // it gets a file in its state directory, named by an environment variable.
  StartContainerOptions with_message = options;
  if (!container.termination_message_path.empty()) {
    config.termination_message_path =
        (containerDir(id) / std::string(kTerminationMessageFileName)).string();
    with_message.extra_env.emplace_back(std::string(kTerminationMessagePathEnv),
                                        config.termination_message_path);
  }
  config.termination_message_fallback =
      container.termination_message_policy == "FallbackToLogsOnError";
  auto env = buildContainerEnv(pod, container, with_message);
  if (!env.ok()) return env.status();
  for (const auto& a : container.command) config.argv.push_back(expandVars(a, *env));
  for (const auto& a : container.args) config.argv.push_back(expandVars(a, *env));
  for (const auto& [k, v] : *env) config.env.push_back(k + "=" + v);

  config.container_id = id;
  config.pod_uid = pod.metadata.uid;
  config.pod_name = pod.metadata.name;
  config.pod_namespace = pod.metadata.namespace_;
  config.container_name = container.name;
  config.attempt = attempt;
  config.hash = hashToHex(container.hash);
  config.image = container.image;
  config.created_at = toNanos(clock_.wallNow());
  fs::path pod_dir =
      options.pod_dir.empty() ? options_.root_dir / "pods" / pod.metadata.uid : options.pod_dir;
  std::error_code ec;
  if (container.working_dir.empty()) {
    fs::create_directories(pod_dir, ec);
    config.working_dir = pod_dir.string();
  } else {
    config.working_dir = container.working_dir;
  }
  config.uid = creds->uid;
  config.gid = creds->gid;
  config.set_groups = creds->set_groups;
  config.groups = creds->groups;
  config.capabilities = creds->capabilities;
  config.ambient_capabilities = creds->ambient;
  config.no_new_privs = creds->no_new_privs;
  fs::path log = logPath(pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid,
                         container.name, attempt);
  config.log_path = log.string();
  config.log_max_size = options_.log_max_size;
  config.log_max_files = options_.log_max_files;
  config.pre_stop = preStopCommand(container);
  config.grace_period_seconds = podGracePeriodSeconds(pod);

  fs::path dir = containerDir(id);
  fs::create_directories(dir, ec);
  if (ec) return base::internalError(where + ": create " + dir.string() + ": " + ec.message());
  fs::create_directories(log.parent_path(), ec);
  if (ec) {
    fs::remove_all(dir, ec);
    return base::internalError(where + ": create log directory " + log.parent_path().string() +
                               ": " + ec.message());
  }
  std::string error;
  // Atomic, not durable: an fsync here would cost a disk flush per container start, serially
  // (about 11 ms each on an ext4 disk, 1,000 starts: 11 s instead of 0.4 s), and a machine crash
  // that loses the file also ends the container (a new boot adopts nothing).
  if (!writeFileAtomic((dir / kConfigFileName).string(), encodeShimConfig(config), error,
                       Durability::kAtomic)) {
    fs::remove_all(dir, ec);
    return base::internalError(where + ": " + error);
  }

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    fs::remove_all(dir, ec);
    return base::internalError(where + ": pipe: " + std::strerror(errno));
  }
  {
    std::lock_guard lock(mu_);
    Record r;
    r.config = std::move(config);
    // The command, environment and directory are the shim's business (its config file has
    // them); the record keeps what statuses and kills need.
    r.config.argv = {};
    r.config.env = {};
    r.config.working_dir = {};
    r.starting = true;
    putRecordLocked(id, std::move(r));
  }
  auto pid = spawnShim(dir, pipe_fds[1]);
  ::close(pipe_fds[1]);
  if (!pid.ok()) {
    ::close(pipe_fds[0]);
    {
      std::lock_guard lock(mu_);
      eraseRecordLocked(id);
    }
    fs::remove_all(dir, ec);
    return pid.status().withContext(where);
  }
  auto pidfd = std::make_shared<Fd>(pidfdOpen(*pid));
  if (pidfd->fd < 0) {
    // Without a pidfd its exit would go unnoticed: do not run it at all.
    int err = errno;
    ::kill(*pid, SIGKILL);
    ::waitpid(*pid, nullptr, 0);
    ::close(pipe_fds[0]);
    {
      std::lock_guard lock(mu_);
      eraseRecordLocked(id);
    }
    fs::remove_all(dir, ec);
    return base::internalError(where + ": pidfd_open: " + std::strerror(err));
  }
  {
    std::lock_guard lock(mu_);
    auto& r = records_[id];
    r.shim_pid = *pid;
    r.pidfd = pidfd;
  }
  watch(id, pidfd);

  return Launched{id, pipe_fds[0]};
}

asio::awaitable<base::StatusOr<ContainerId>> ProcessRuntime::State::start(
    base::StatusOr<Launched> launched, api::PodPtr pod, std::string container_name, int attempt) {
  auto self = shared_from_this();  // handlers of this start may outlive the ProcessRuntime
  if (!launched.ok()) co_return launched.status();
  // The shim answers "ok <pid>" once exec succeeded, or "error <message>".
  asio::posix::stream_descriptor ready(co_await asio::this_coro::executor, launched->ready_fd);
  std::string line;
  boost::system::error_code read_ec;
  co_await asio::async_read_until(ready, asio::dynamic_buffer(line), '\n',
                                  asio::redirect_error(asio::use_awaitable, read_ec));
  ready.close(read_ec);
  co_return finishStart(launched->id, line, *pod, container_name, attempt);
}

base::StatusOr<ContainerId> ProcessRuntime::State::finishStart(const std::string& id,
                                                               const std::string& line,
                                                               const api::Pod& pod,
                                                               const std::string& container_name,
                                                               int attempt) {
  const std::string where = "container \"" + container_name + "\" of pod " + api::podRef(pod);
  const fs::path dir = containerDir(id);
  std::string error;
  ShimState st;
  std::string text;
  const bool have_state = readWholeFile((dir / kStateFileName).string(), text, error) &&
                          decodeShimState(text, st, error);
  if (line.rfind("ok ", 0) == 0 && have_state && st.status != ShimStatus::kCreated) {
    // A quick container may have ended already: report it running first, then its exit.
    ShimState running = st;
    running.status = ShimStatus::kRunning;
    running.finished_at = 0;
    running.exit_code = 0;
    running.signal = 0;
    running.reason.clear();
    bool emit_started = false;
    {
      std::lock_guard lock(mu_);
      auto it = records_.find(id);
      if (it != records_.end()) {
        it->second.starting = false;
        if (it->second.state.status == ShimStatus::kCreated) {
          it->second.state = running;
          ++version_;
          emit_started = true;
        }
      }
    }
    log_->info("Started container pod={} container={} id={} pid={} attempt={}", api::podRef(pod),
               container_name, id, st.pid, attempt);
    if (emit_started) {
      emit(ContainerEvent{ContainerEvent::Type::kStarted, pod.metadata.uid,
                          ContainerId{std::string(ProcessRuntime::kType), id}, container_name});
    }
    if (st.status == ShimStatus::kExited) finishExit(id, st);
    return ContainerId{std::string(ProcessRuntime::kType), id};
  }
  std::string message;
  if (line.rfind("error ", 0) == 0) {
    message = line.substr(6);
    while (!message.empty() && message.back() == '\n') message.pop_back();
  } else {
    message = "the container shim ended before starting the container (see " +
              (dir / kShimLogFileName).string() + ")";
  }
  {
    std::lock_guard lock(mu_);
    auto it = records_.find(id);
    if (it != records_.end()) it->second.starting = false;
  }
  if (have_state && st.status == ShimStatus::kExited) finishExit(id, st);
  log_->warn("Container failed to start pod={} container={} id={} error={}", api::podRef(pod),
             container_name, id, message);
  return base::unknownError(where + ": " + message);
}

ProcessRuntime::ProcessRuntime(asio::any_io_executor executor, base::Clock& clock,
                               ProcessRuntimeOptions options)
    : state_(std::make_shared<State>(std::move(executor), clock, options)) {
  if (options.file_executor) {
    files_ = options.file_executor;
  } else {
    files_ = own_files_.emplace(2).get_executor();
  }
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
                                           hashFromHex(r.config.hash), cs});
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
  std::vector<asio::awaitable<base::Status>> tasks;
  for (const auto& c : running_pod.containers) {
    tasks.push_back(
        state->kill(pod, c.id, KillOptions::graceOverride(grace_override), "killing pod"));
  }
  auto results = co_await runAll(std::move(tasks));
  std::string errors;
  for (const auto& s : results) {
    if (!s.ok() && s.code() != base::StatusCode::kNotFound) {
      errors += (errors.empty() ? "" : "; ") + s.message();
    }
  }
  if (!errors.empty()) {
    co_return base::unknownError("killing pod " + running_pod.namespace_ + "/" + running_pod.name +
                                 ": " + errors);
  }
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<ExecResult>> ProcessRuntime::execInContainer(
    ContainerId id, std::vector<std::string> command, base::Duration timeout) {
  auto state = state_;
  auto task = state->exec(std::move(id.id), std::move(command), timeout);
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> ProcessRuntime::removeContainer(ContainerId id) {
  auto state = state_;
  std::string log_path;
  {
    std::lock_guard lock(state->mu_);
    auto it = state->records_.find(id.id);
    if (it == state->records_.end()) {
      co_return base::notFoundError("container " + id.toString() + " not found");
    }
    if (it->second.state.status != ShimStatus::kExited) {
      co_return base::failedPreconditionError("container " + id.toString() + " is still running");
    }
    log_path = it->second.config.log_path;
    state->eraseRecordLocked(it);
  }
  auto remove = [state, id = id.id, log_path]() -> base::Status {
    state->removeFiles(id, log_path);
    return base::okStatus();
  };
  co_return co_await base::runBlocking(files_, std::move(remove));
}

void ProcessRuntime::State::removeFiles(const std::string& id, const std::string& log_path) {
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
