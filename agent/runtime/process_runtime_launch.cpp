// ProcessRuntime's container starts: the checks and the shim's config (command, environment,
// identity, log), the container's cgroup, its state directory, the shim process and its answer.
#include <poll.h>
#include <sys/random.h>

#include <system_error>

#include "agent/runtime/process_runtime_state.h"
#include "agent/runtime/security_context.h"
#include "agent/runtime/spec_extras.h"
#include "base/make_dirs.h"
#include "base/path_component.h"

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
  const DefaultUser agent_user{int64_t{agent_uid}, "",
                               "a process container runs as the agent's user"};
  RETURN_IF_ERROR(verifyRunAsNonRoot(pod, container, sc, agent_user));
  if (options.refuse_root) RETURN_IF_ERROR(checkNonRootPolicy(pod, container, sc, agent_user));
  return processCredentials(pod, container, sc, agent_uid, passwdPrimaryGroup);
}

// What a process container needs to start at all (path names a host process can use, a command),
// then its credentials. `where` names the container in errors.
base::StatusOr<ProcessCredentials> checkStartable(const api::Pod& pod,
                                                  const api::Container& container,
                                                  const StartContainerOptions& options,
                                                  const std::string& where) {
  if (auto s = checkPathNames(pod, container); !s.ok()) {
    return base::invalidArgumentError(where + ": " + s.message());
  }
  if (container.command.empty()) {
    return base::invalidArgumentError(
        where +
        ": spec.containers[].command is empty; nodeagent runs containers as host processes and "
        "does not pull images, so the command must be given (nodeagent validate reports this)");
  }
  if (options.seccomp.type != SecurityProfile::Type::kUnconfined) {
    return base::invalidArgumentError(
        where + ": seccompProfile " +
        (options.seccomp.type == SecurityProfile::Type::kLocalhost ? "Localhost"
                                                                   : "RuntimeDefault") +
        " cannot be honoured by the process runtime (it does not filter a host process's system "
        "calls); remove it or use a container runtime");
  }
  // Without SELinux on the node the labels mean nothing, and are ignored as containerd does.
  if (seLinuxOptionsFor(pod, container.name) && seLinuxEnabled()) {
    return base::invalidArgumentError(
        where +
        ": seLinuxOptions cannot be honoured by the process runtime (it does not label a host "
        "process); remove them or use a container runtime");
  }
  return containerCredentials(pod, container, options);
}

// The container's argv and environment ($(VAR) references expanded) and its termination message
// file; `dir` is its state directory.
base::Status setCommand(ShimConfig& config, const fs::path& dir, const api::Pod& pod,
                        const api::Container& container, const StartContainerOptions& options) {
  // The container has no filesystem of its own: its terminationMessagePath cannot be mounted, so
  // it gets a file in its state directory, named by an environment variable.
  StartContainerOptions with_message = options;
  if (!container.termination_message_path.empty()) {
    config.termination_message_path = (dir / std::string(kTerminationMessageFileName)).string();
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
  return base::okStatus();
}

void setCredentials(ShimConfig& config, const ProcessCredentials& creds) {
  config.uid = creds.uid;
  config.gid = creds.gid;
  config.set_groups = creds.set_groups;
  config.groups = creds.groups;
  config.capabilities = creds.capabilities;
  config.ambient_capabilities = creds.ambient;
  config.no_new_privs = creds.no_new_privs;
}

// The directories the container needs (its working directory when it is the pod's, its state
// directory and its log directory) and its config file. On an error the state directory is
// gone again.
base::Status makeContainerFiles(const fs::path& dir, const api::Container& container,
                                const ShimConfig& config, const std::string& where) {
  std::error_code ec;
  if (container.working_dir.empty()) (void)base::makeDirs(config.working_dir);
  if (const int err = base::makeDirs(dir); err != 0) {
    return base::internalError(where + ": create " + dir.string() + ": " +
                               std::generic_category().message(err));
  }
  const fs::path log_dir = fs::path(config.log_path).parent_path();
  if (const int err = base::makeDirs(log_dir); err != 0) {
    fs::remove_all(dir, ec);
    return base::internalError(where + ": create log directory " + log_dir.string() + ": " +
                               std::generic_category().message(err));
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
  return base::okStatus();
}

// A start that failed for want of descriptors (EMFILE, ENFILE: in the agent or its shim) says
// which limit to raise.
base::Status withDescriptorHint(const base::Status& s) {
  if (s.message().find(std::strerror(ENFILE)) != std::string::npos) {
    return base::Status(s.code(),
                        s.message() + " (the system's open-file limit fs.file-max is reached)");
  }
  if (s.message().find(std::strerror(EMFILE)) != std::string::npos) {
    return base::Status(s.code(), s.message() +
                                      " (the open-file limit RLIMIT_NOFILE is reached: each "
                                      "running container holds one of the agent's descriptors; "
                                      "raise the hard limit, e.g. LimitNOFILE= in the systemd "
                                      "unit)");
  }
  return s;
}

}  // namespace

base::StatusOr<ProcessRuntime::State::Launched> ProcessRuntime::State::launch(
    const api::Pod& pod, const api::Container& container, int attempt,
    const StartContainerOptions& options) {
  const std::string where = "container \"" + container.name + "\" of pod " + api::podRef(pod);
  auto creds = checkStartable(pod, container, options, where);
  if (!creds.ok()) return creds.status();
  const std::string id = newContainerId();
  auto config = shimConfig(id, pod, container, attempt, options);
  if (!config.ok()) return config.status();
  setCredentials(*config, *creds);
  const fs::path dir = containerDir(id);
  RETURN_IF_ERROR(makeContainerCgroup(id, *config, options, where));
  // On a failure from here on, the cgroup goes again (with any process the shim had put in it).
  const std::string cgroup_name = config->cgroup_name;
  const cm::CgroupPaths cgroup = config->cgroup;
  auto launched = [&]() -> base::StatusOr<Launched> {
    RETURN_IF_ERROR(makeContainerFiles(dir, container, *config, where));
    return spawnContainerShim(id, dir, std::move(*config), where);
  }();
  if (launched.ok()) return launched;
  removeContainerCgroup(id, cgroup_name, cgroup);
  return withDescriptorHint(launched.status());
}

base::Status ProcessRuntime::State::makeContainerCgroup(const std::string& id, ShimConfig& config,
                                                        const StartContainerOptions& options,
                                                        const std::string& where) {
  if (!options_.cgroups || options.cgroup_parent.empty()) return base::okStatus();
  cm::CgroupName name = cm::parseCgroupPath(options.cgroup_parent);
  for (const auto& component : name) {
    if (auto s = base::checkPathComponent("cgroup parent component", component); !s.ok()) {
      return base::invalidArgumentError(where + ": cgroup parent \"" + options.cgroup_parent +
                                        "\": " + s.message());
    }
  }
  name.push_back(id);
  const std::string path = cm::cgroupNameToPath(name);
  if (auto s = options_.cgroups->create(name, cm::toResourceConfig(options.resources)); !s.ok()) {
    // What create made of it goes (the pod's cgroup stays: the agent's pod cleanup owns it).
    if (auto d = options_.cgroups->destroy(name); !d.ok()) {
      log()->warn("Cannot remove a container cgroup after a failed start cgroup={} error={}", path,
                  d.message());
    }
    return base::internalError(where + ": cannot create the container cgroup " + path + ": " +
                               s.message());
  }
  config.cgroup_name = path;
  config.cgroup = options_.cgroups->paths(name);
  return base::okStatus();
}

base::StatusOr<ShimConfig> ProcessRuntime::State::shimConfig(
    const std::string& id, const api::Pod& pod, const api::Container& container, int attempt,
    const StartContainerOptions& options) const {
  ShimConfig config;
  RETURN_IF_ERROR(setCommand(config, containerDir(id), pod, container, options));
  config.container_id = id;
  config.pod_uid = pod.metadata.uid;
  config.pod_name = pod.metadata.name;
  config.pod_namespace = pod.metadata.namespace_;
  config.container_name = container.name;
  config.attempt = attempt;
  config.hash = hashToHex(container.hash);
  config.image = container.image;
  config.created_at = toNanos(clock_.wallNow());
  // Without a working directory of its own, the container runs in its pod's directory.
  const fs::path pod_dir =
      options.pod_dir.empty() ? options_.root_dir / "pods" / pod.metadata.uid : options.pod_dir;
  config.working_dir = container.working_dir.empty() ? pod_dir.string() : container.working_dir;
  config.log_path =
      logPath(pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid, container.name, attempt)
          .string();
  config.log_max_size = options_.log_max_size;
  config.log_max_files = options_.log_max_files;
  config.pre_stop = preStopCommand(container);
  config.grace_period_seconds = podGracePeriodSeconds(pod);
  config.stdin = container.stdin;
  config.stdin_once = container.stdin && container.stdin_once;
  if (options.resources.oom_score_adj != 0) {
    config.oom_score_adj = static_cast<int>(options.resources.oom_score_adj);
  }
  config.open_files = options_.container_open_files;
  return config;
}

void ProcessRuntime::State::addStartingRecord(const std::string& id, ShimConfig config) {
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

void ProcessRuntime::State::abandonStart(const std::string& id, const fs::path& dir) {
  {
    std::lock_guard lock(mu_);
    eraseRecordLocked(id);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

base::StatusOr<ProcessRuntime::State::Launched> ProcessRuntime::State::spawnContainerShim(
    const std::string& id, const fs::path& dir, ShimConfig config, const std::string& where) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    std::error_code ec;
    fs::remove_all(dir, ec);
    return base::internalError(where + ": pipe: " + std::strerror(err));
  }
  addStartingRecord(id, std::move(config));
  auto child = spawnShim(dir, pipe_fds[1]);
  ::close(pipe_fds[1]);
  if (!child.ok() && child.status().code() == base::StatusCode::kAborted) {
    child = findLostShim(id, pipe_fds[0], child.status());
  }
  if (!child.ok()) {
    ::close(pipe_fds[0]);
    abandonStart(id, dir);
    return child.status().withContext(where);
  }
  auto pidfd = std::make_shared<Fd>(child->pidfd);
  {
    std::lock_guard lock(mu_);
    auto& r = records_[id];
    r.shim_pid = child->pid;
    r.pidfd = pidfd;
  }
  watch(id, pidfd);
  return Launched{id, pipe_fds[0]};
}

base::StatusOr<ShimSpawner::Child> ProcessRuntime::State::spawnShim(const fs::path& dir,
                                                                    int ready_fd) {
  const std::string shim = options_.shim_path.string();
  const std::string shim_log = (dir / kShimLogFileName).string();
  const int log_fd =
      ::open(shim_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0640);
  if (log_fd < 0) {
    return base::internalError("cannot open the shim log " + shim_log + ": " +
                               std::strerror(errno));
  }
  // stdin and stdout on /dev/null, stderr the shim's log, fd 3 the start report.
  const int fds[] = {-1, -1, log_fd, ready_fd};
  ShimSpawner::Child child;
  const int rc = spawner_->spawn({shim, "run", dir.string()}, fds, child);
  ::close(log_fd);
  if (rc == ShimSpawner::kAnswerLost) {
    return base::abortedError("the spawn helper ended while it started the container shim " + shim);
  }
  if (rc != 0) {
    return base::unavailableError("cannot start the container shim " + shim + ": " +
                                  std::strerror(rc));
  }
  return child;
}

base::StatusOr<ShimSpawner::Child> ProcessRuntime::State::findLostShim(const std::string& id,
                                                                       int ready_fd,
                                                                       base::Status lost) {
  // Only the shim (if there is one) still holds the write end of its start pipe: the pipe hangs
  // up empty when there is none, and carries its report once it runs. A child that has not
  // reported within the wait is looked for all the same.
  pollfd p{ready_fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, 10000);
  } while (rc < 0 && errno == EINTR);
  if (rc == 1 && (p.revents & POLLIN) == 0) return lost;
  auto shims = findLiveShims(options_.root_dir / "containers");
  auto it = shims.find(id);
  if (it == shims.end()) return lost;
  const int pidfd = pidfdOpen(it->second.pid);
  if (pidfd < 0) return lost;
  if (!processAlive(it->second.pid, it->second.start_ticks)) {
    ::close(pidfd);
    return lost;
  }
  log()->warn("Adopted the container shim the spawn helper started before it ended id={} pid={}",
              id, it->second.pid);
  return ShimSpawner::Child{it->second.pid, pidfd};
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
    recordStarted(id, st, pod, container_name, attempt);
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
  log()->warn("Container failed to start pod={} container={} id={} error={}", api::podRef(pod),
              container_name, id, message);
  return withDescriptorHint(base::unknownError(where + ": " + message));
}

void ProcessRuntime::State::recordStarted(const std::string& id, const ShimState& st,
                                          const api::Pod& pod, const std::string& container_name,
                                          int attempt) {
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
  log()->info("Started container pod={} container={} id={} pid={} attempt={}", api::podRef(pod),
              container_name, id, st.pid, attempt);
  if (emit_started) {
    emit(ContainerEvent{ContainerEvent::Type::kStarted, pod.metadata.uid,
                        ContainerId{std::string(ProcessRuntime::kType), id}, container_name});
  }
  if (st.status == ShimStatus::kExited) finishExit(id, st);
}

}  // namespace nodeagent::runtime
