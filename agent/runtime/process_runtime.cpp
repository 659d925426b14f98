#include "agent/runtime/process_runtime.h"

// GCC 12 reports a false -Wmismatched-new-delete on Asio's awaitable frames (their class-level
// operator new/delete pair with a recycling allocator) for some coroutine shapes.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "agent/runtime/state_file.h"
#include "base/log.h"
#include "base/readable_wait.h"

namespace nodeagent::runtime {
namespace {

namespace fs = std::filesystem;
using std::chrono::duration_cast;
using std::chrono::nanoseconds;
using std::chrono::seconds;

// waitid's P_PIDFD (Linux 5.4); spelled out for libc headers that lack it.
constexpr auto kPPidfd = static_cast<idtype_t>(3);
// How long to wait for a process to go after SIGKILL before giving up with an error.
constexpr seconds kKillTimeout{60};
// How long an exec'd command's output may still arrive after the command exited.
constexpr std::chrono::milliseconds kExecOutputGrace{200};

int pidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

int pidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// An owned file descriptor, shared by whoever may still signal through it.
struct Fd {
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int fd = -1;
};

base::SystemTime fromNanos(int64_t ns) {
  if (ns == 0) return {};
  return base::SystemTime(duration_cast<base::SystemTime::duration>(nanoseconds(ns)));
}

int64_t toNanos(base::SystemTime t) {
  return duration_cast<nanoseconds>(t.time_since_epoch()).count();
}

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

ContainerState containerState(ShimStatus status) {
  switch (status) {
    case ShimStatus::kCreated: return ContainerState::kCreated;
    case ShimStatus::kRunning: return ContainerState::kRunning;
    case ShimStatus::kExited: return ContainerState::kExited;
  }
  return ContainerState::kUnknown;
}

std::vector<std::string> preStopCommand(const api::Container& c) {
  if (c.lifecycle && c.lifecycle->pre_stop && c.lifecycle->pre_stop->exec) {
    return c.lifecycle->pre_stop->exec->command;
  }
  return {};
}

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

}  // namespace

// Everything handlers and coroutines touch; shared so that it outlives the ProcessRuntime while
// handlers are pending.
class ProcessRuntime::State : public std::enable_shared_from_this<State> {
 public:
  State(asio::any_io_executor ex, base::Clock& clock, ProcessRuntimeOptions options)
      : strand_(asio::make_strand(ex)),
        clock_(clock),
        options_(std::move(options)),
        log_(base::logger("runtime")) {
    if (options_.shim_path.empty()) {
      std::error_code ec;
      auto self = fs::read_symlink("/proc/self/exe", ec);
      options_.shim_path = (ec ? fs::path(".") : self.parent_path()) / "nodeagent-shim";
    }
  }

  struct Record {
    ShimConfig config;
    ShimState state;
    bool starting = false;  // a startContainer call of this instance still owns the record
    int shim_pid = 0;
    std::shared_ptr<Fd> pidfd;  // null once the shim is gone
    // The shim's pid: the one this agent started, else the one its state file recorded.
    int shimPid() const { return shim_pid != 0 ? shim_pid : state.shim_pid; }
    std::vector<std::function<void()>> exit_waiters;
  };

  fs::path containerDir(const std::string& id) const {
    return options_.root_dir / "containers" / id;
  }

  // records_ and its per-pod index change together (mu_ held).
  void putRecordLocked(const std::string& id, Record r) {
    ids_by_pod_[r.config.pod_uid].insert(id);
    records_[id] = std::move(r);
    ++version_;
  }
  void eraseRecordLocked(std::map<std::string, Record>::iterator it) {
    auto pod = ids_by_pod_.find(it->second.config.pod_uid);
    if (pod != ids_by_pod_.end()) {
      pod->second.erase(it->first);
      if (pod->second.empty()) ids_by_pod_.erase(pod);
    }
    records_.erase(it);
    ++version_;
  }
  void eraseRecordLocked(const std::string& id) {
    if (auto it = records_.find(id); it != records_.end()) eraseRecordLocked(it);
  }

  fs::path logPath(std::string_view ns, std::string_view name, std::string_view uid,
                   std::string_view container, int restart_count) const {
    std::string pod_dir;
    pod_dir.append(ns).append("_").append(name).append("_").append(uid);
    return options_.pod_log_dir / pod_dir / std::string(container) /
           (std::to_string(restart_count) + ".log");
  }

  ContainerStatus toStatus(const std::string& id, const Record& r) const {
    ContainerStatus s;
    s.id = ContainerId{"process", id};
    s.name = r.config.container_name;
    s.state = containerState(r.state.status);
    s.created_at = fromNanos(r.config.created_at);
    s.started_at = fromNanos(r.state.started_at);
    s.finished_at = fromNanos(r.state.finished_at);
    s.exit_code = r.state.exit_code;
    s.signal = r.state.signal;
    s.reason = r.state.reason;
    s.message = r.state.message;
    s.image = r.config.image;
    s.hash = hashFromHex(r.config.hash);
    s.restart_count = r.config.attempt;
    s.pid = s.state == ContainerState::kRunning ? r.state.pid : 0;
    s.log_path = r.config.log_path;
    return s;
  }

  // Adopted records still "created" may have started since: the shim's file knows.
  void refreshCreatedLocked(const std::string& id, Record& r) {
    if (r.starting || r.state.status != ShimStatus::kCreated) return;
    std::string text, error;
    ShimState st;
    if (readWholeFile((containerDir(id) / kStateFileName).string(), text, error) &&
        decodeShimState(text, st, error) && st.status == ShimStatus::kRunning) {
      r.state = st;
      ++version_;
    }
  }

  void emit(ContainerEvent event) {
    ContainerEventHandler handler;
    {
      std::lock_guard lock(mu_);
      handler = handler_;
    }
    if (!handler || stopped_) return;
    asio::post(strand_,
               [self = shared_from_this(), handler = std::move(handler), event = std::move(event)] {
                 if (!self->stopped_) handler(event);
               });
  }

  // Watches the shim's pidfd on the strand; onShimExit runs when it ends. The wait checks each
  // wake-up (base::asyncWaitReadable): a pidfd polls readable only once its process ended, and
  // the reactor can wake a wait with a stale event of another, just closed descriptor (seen
  // during start bursts, where start pipes are closed as fast as new shims are watched).
  void watch(const std::string& id, const std::shared_ptr<Fd>& pidfd) {
    int dup = ::fcntl(pidfd->fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) {
      log_->error("Cannot watch container shim id={} error={}", id, std::strerror(errno));
      return;
    }
    asio::post(strand_, [self = shared_from_this(), id, dup] {
      auto sd = std::make_shared<asio::posix::stream_descriptor>(self->strand_, dup);
      if (self->stopped_) return;  // sd closes the fd
      self->watchers_[id] = sd;
      base::asyncWaitReadable(sd, [self, id, fd = dup](const boost::system::error_code& ec) {
        if (ec || self->stopped_) return;
        self->onShimExit(id, fd);
        self->watchers_.erase(id);
      });
    });
  }

  // On the strand: the shim `id` ended (its pidfd is readable).
  void onShimExit(const std::string& id, int pidfd) {
    siginfo_t info{};
    // Reap it when it is our child; an adopted shim belongs to init (ECHILD).
    ::waitid(kPPidfd, static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG);
    std::string text, error;
    ShimState st;
    bool have_state = readWholeFile((containerDir(id) / kStateFileName).string(), text, error) &&
                      decodeShimState(text, st, error);
    if (!have_state || st.status != ShimStatus::kExited) {
      ShimState previous;
      {
        std::lock_guard lock(mu_);
        auto it = records_.find(id);
        if (it == records_.end()) return;
        previous = it->second.state;
      }
      st = settleDeadShim(id, have_state ? st : previous);
    }
    finishExit(id, st);
  }

  // The shim ended without recording an exit: kill what it left (nothing supervises it any
  // more) and record the loss so that later agents see it too.
  ShimState settleDeadShim(const std::string& id, ShimState st) {
    bool killed = false;
    if (st.pid > 0 && st.boot_id == currentBootId() && processAlive(st.pid, st.pid_start_ticks)) {
      ::kill(-st.pid, SIGKILL);
      killed = true;
    }
    st.status = ShimStatus::kExited;
    st.finished_at = toNanos(clock_.wallNow());
    if (st.started_at == 0) {
      st.exit_code = 128;
      st.reason = "ContainerCannotRun";
      st.message = "the container shim ended before the container started (see " +
                   (containerDir(id) / kShimLogFileName).string() + ")";
    } else {
      st.exit_code = killed ? exitCodeForSignal(SIGKILL) : 255;
      st.signal = killed ? SIGKILL : 0;
      st.reason = "Error";
      st.message = killed ? "the container shim died; the container was killed"
                          : "the container shim died; the exit code was lost";
    }
    std::string error;
    if (!writeFileAtomic((containerDir(id) / kStateFileName).string(), encodeShimState(st),
                         error)) {
      log_->warn("Cannot record container exit id={} error={}", id, error);
    }
    log_->warn("Container shim ended without recording an exit id={} killed={}", id, killed);
    return st;
  }

  // Records the exit once: wakes kill waiters and emits the died event.
  void finishExit(const std::string& id, const ShimState& st) {
    std::vector<std::function<void()>> waiters;
    ContainerEvent event;
    {
      std::lock_guard lock(mu_);
      auto it = records_.find(id);
      if (it == records_.end()) return;
      Record& r = it->second;
      r.pidfd.reset();
      if (r.state.status == ShimStatus::kExited) return;
      r.state = st;
      ++version_;
      waiters.swap(r.exit_waiters);
      event = ContainerEvent{ContainerEvent::Type::kDied, r.config.pod_uid,
                             ContainerId{"process", id}, r.config.container_name};
      log_->info("Container exited pod={}/{} container={} id={} exitCode={} signal={} reason={}",
                 r.config.pod_namespace, r.config.pod_name, r.config.container_name, id,
                 st.exit_code, st.signal, st.reason);
    }
    for (auto& w : waiters) w();
    emit(std::move(event));
  }

  // Completes with true when the container `id` has exited, false when `timeout` passes first.
  asio::awaitable<bool> waitExit(std::string id, base::Duration timeout) {
    auto ex = co_await asio::this_coro::executor;
    auto self = shared_from_this();
    // A named initiation: see runAll.
    auto initiation = [self, id, ex, timeout](auto handler) {
      using Handler = decltype(handler);
      struct Op {
        std::mutex mu;
        std::unique_ptr<Handler> handler;
        base::TimerPtr timer;  // touched on `ex` only
      };
      auto op = std::make_shared<Op>();
      op->handler = std::make_unique<Handler>(std::move(handler));
      auto complete = [op, ex](bool exited) {
        std::unique_ptr<Handler> h;
        {
          std::lock_guard lock(op->mu);
          if (!op->handler) return;
          h = std::move(op->handler);
        }
        asio::post(ex, [op, h = std::move(h), exited]() mutable {
          op->timer.reset();  // breaks the op -> timer -> callback -> op cycle
          (*h)(exited);
        });
      };
      bool exited = false;
      {
        std::lock_guard lock(self->mu_);
        auto it = self->records_.find(id);
        if (it == self->records_.end() || it->second.state.status == ShimStatus::kExited) {
          exited = true;
        } else {
          it->second.exit_waiters.push_back([complete] { complete(true); });
        }
      }
      if (exited) {
        complete(true);
        return;
      }
      op->timer = self->clock_.makeTimer(ex);
      op->timer->asyncWaitFor(timeout, [complete] { complete(false); });
    };
    bool exited = co_await asio::async_initiate<decltype(asio::use_awaitable), void(bool)>(
        initiation, asio::use_awaitable);
    co_return exited;
  }

  // SIGTERM or SIGKILL to the container's process group, through its shim (which knows whether
  // the container still exists); directly when the shim is gone.
  void signalContainer(const std::string& id, int sig) {
    std::shared_ptr<Fd> pidfd;
    ShimState st;
    {
      std::lock_guard lock(mu_);
      auto it = records_.find(id);
      if (it == records_.end()) return;
      pidfd = it->second.pidfd;
      st = it->second.state;
    }
    if (pidfd && pidfdSendSignal(pidfd->fd, sig == SIGKILL ? SIGUSR1 : SIGTERM) == 0) return;
    if (st.pid > 0 && processAlive(st.pid, st.pid_start_ticks)) ::kill(-st.pid, sig);
  }

  base::StatusOr<int> spawnShim(const fs::path& dir, int ready_fd) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    std::string shim_log = (dir / kShimLogFileName).string();
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, shim_log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0640);
    posix_spawn_file_actions_adddup2(&fa, ready_fd, 3);
    sigset_t none;
    sigset_t all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    // Its own session: the agent's terminal, process group and death do not reach it.
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::string shim = options_.shim_path.string();
    std::string dir_s = dir.string();
    char run[] = "run";
    char* argv[] = {shim.data(), run, dir_s.data(), nullptr};
    char* envp[] = {nullptr};
    pid_t pid = 0;
    int rc = ::posix_spawn(&pid, shim.c_str(), &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      return base::unavailableError("cannot start the container shim " + shim + ": " +
                                    std::strerror(rc));
    }
    return static_cast<int>(pid);
  }

  // A container start in two parts: launch() (synchronous) writes the config and spawns the shim;
  // start() waits for the shim's answer. Split so that the coroutine frame, alive for every
  // container starting at once, stays small (its locals are not the launch's paths and config).
  struct Launched {
    std::string id;
    int ready_fd = -1;  // the shim writes "ok <pid>" or "error <message>" here
  };
  base::StatusOr<Launched> launch(const api::Pod& pod, const api::Container& container, int attempt,
                                  const StartContainerOptions& options);
  asio::awaitable<base::StatusOr<ContainerId>> start(base::StatusOr<Launched> launched,
                                                     api::PodPtr pod, std::string container_name,
                                                     int attempt);
  base::StatusOr<ContainerId> finishStart(const std::string& id, const std::string& line,
                                          const api::Pod& pod, const std::string& container_name,
                                          int attempt);
  asio::awaitable<base::Status> kill(api::PodPtr pod, ContainerId id, KillOptions options,
                                     std::string reason);
  asio::awaitable<void> runHook(std::string id, std::vector<std::string> command,
                                base::Duration timeout);
  asio::awaitable<base::StatusOr<ExecResult>> exec(std::string id,
                                                   std::vector<std::string> command,
                                                   base::Duration timeout);
  asio::awaitable<std::optional<base::StatusOr<ExecResult>>> execOnStrand(
      std::string id, std::vector<std::string> command, base::Duration timeout);
  base::Status recover();
  void adopt(const std::string& id, ShimConfig config, ShimState state);
  void stop() {
    stopped_ = true;
    asio::post(strand_, [self = shared_from_this()] {
      for (auto& [id, sd] : self->watchers_) {
        boost::system::error_code ec;
        sd->close(ec);
      }
      self->watchers_.clear();
    });
  }

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  ProcessRuntimeOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::atomic<bool> stopped_{false};
  mutable std::mutex mu_;
  ContainerEventHandler handler_;
  PreStopHookRunner pre_stop_runner_;  // guarded by mu_
  // Changes whenever what getPods answers may change (guarded by mu_): see podsVersion.
  uint64_t version_ = 0;
  std::map<std::string, Record> records_;
  std::map<std::string, std::set<std::string>> ids_by_pod_;  // pod UID -> ids of its records
  // Strand only.
  std::map<std::string, std::shared_ptr<asio::posix::stream_descriptor>> watchers_;
};

base::StatusOr<ProcessRuntime::State::Launched> ProcessRuntime::State::launch(
    const api::Pod& pod, const api::Container& container, int attempt,
    const StartContainerOptions& options) {
  const std::string where = "container \"" + container.name + "\" of pod " + api::podRef(pod);
  if (container.command.empty()) {
    return base::invalidArgumentError(
        where +
        ": spec.containers[].command is empty; nodeagent runs containers as host processes and "
        "does not pull images, so the command must be given");
  }
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
  if (::geteuid() == 0 && container.security_context) {
    const auto& sc = *container.security_context;
    if (sc.run_as_user) config.uid = static_cast<uint32_t>(*sc.run_as_user);
    if (sc.run_as_group) config.gid = static_cast<uint32_t>(*sc.run_as_group);
  }
  config.no_new_privs =
      container.security_context && container.security_context->allow_privilege_escalation == false;
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
  if (!writeFileAtomic((dir / kConfigFileName).string(), encodeShimConfig(config), error)) {
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
                          ContainerId{"process", id}, container_name});
    }
    if (st.status == ShimStatus::kExited) finishExit(id, st);
    return ContainerId{"process", id};
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


asio::awaitable<void> ProcessRuntime::State::runHook(std::string id,
                                                     std::vector<std::string> command,
                                                     base::Duration timeout) {
  auto task = exec(id, std::move(command), timeout);
  auto result = co_await std::move(task);
  if (!result.ok()) {
    log_->warn("PreStop hook failed to start id={} error={}", id, result.status().toString());
  } else if (result->timed_out) {
    log_->warn("PreStop hook did not finish within the grace period id={}", id);
  } else if (result->exit_code != 0) {
    log_->warn("PreStop hook failed id={} exitCode={}", id, result->exit_code);
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
  int out_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0) {
    co_return base::internalError(std::string("pipe: ") + std::strerror(errno));
  }
  std::string shim = options_.shim_path.string();
  std::string dir = containerDir(id).string();
  std::vector<std::string> args{shim, "exec", dir};
  args.insert(args.end(), command.begin(), command.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out_fds[1], 2);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, shim.c_str(), &fa, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out_fds[1]);
  if (rc != 0) {
    ::close(out_fds[0]);
    co_return base::unavailableError("cannot start " + shim + ": " + std::strerror(rc));
  }
  int pidfd = pidfdOpen(pid);
  if (pidfd < 0) {
    int err = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(out_fds[0]);
    co_return base::internalError(std::string("pidfd_open: ") + std::strerror(err));
  }
  ::fcntl(out_fds[0], F_SETFL, ::fcntl(out_fds[0], F_GETFL) | O_NONBLOCK);
  auto ex = co_await asio::this_coro::executor;
  auto pipe = std::make_shared<ExecPipe>(ex, out_fds[0]);
  asio::co_spawn(ex, readExecOutput(pipe), asio::detached);
  asio::posix::stream_descriptor sd(ex, pidfd);
  auto timer = clock_.makeTimer(ex);
  bool timed_out = false;
  // The command is our unreaped child until waitid below, so its pid (= its process group) is
  // ours.
  timer->asyncWaitFor(timeout, [pid, &timed_out] {
    timed_out = true;
    ::kill(-pid, SIGKILL);
  });
  boost::system::error_code ec = co_await base::waitReadable(sd);
  timer->cancel();
  siginfo_t info{};
  // WNOHANG: after an aborted wait (shutdown) the command may still run; never block here.
  ::waitid(kPPidfd, static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG);
  if (!pipe->done) {
    // The rest of the output is normally in flight; children left in the background may hold
    // the pipe open for ever, so the wait for its end is short.
    auto grace = clock_.makeTimer(ex);
    grace->asyncWaitFor(kExecOutputGrace, [pipe] { pipe->eof.cancel(); });
    co_await pipe->eof.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    grace->cancel();
  }
  pipe->drain();
  pipe->sd.close(ec);
  ExecResult result;
  result.timed_out = timed_out;
  result.exit_code = info.si_code == CLD_EXITED ? info.si_status : exitCodeForSignal(info.si_status);
  result.output = std::move(pipe->out);
  co_return result;
}

asio::awaitable<base::Status> ProcessRuntime::State::kill(api::PodPtr pod, ContainerId id,
                                                          KillOptions options,
                                                          std::string reason) {
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
  const bool has_hook = spec ? spec->lifecycle && spec->lifecycle->pre_stop : !config.pre_stop.empty();
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
      log_->warn("Skipping a preStop hook that is not exec pod={}/{} container={}",
                 config.pod_namespace, config.pod_name, config.container_name);
    }
    hook_time = clock_.now() - started;
  }
  const int64_t grace =
      graceAfterPreStopSeconds(hook_grace, hook_time, options, options_.minimum_grace_seconds);
  log_->info("Killing container pod={}/{} container={} id={} gracePeriod={} reason={}",
             config.pod_namespace, config.pod_name, config.container_name, id.id, grace, reason);

  signalContainer(id.id, grace == 0 ? SIGKILL : SIGTERM);
  if (grace > 0 && co_await waitExit(id.id, seconds(grace))) co_return base::okStatus();
  signalContainer(id.id, SIGKILL);
  if (co_await waitExit(id.id, kKillTimeout)) co_return base::okStatus();
  co_return base::deadlineExceededError("container " + id.toString() + " is still running " +
                                        std::to_string(kKillTimeout.count()) + "s after SIGKILL");
}

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

ProcessRuntime::ProcessRuntime(asio::any_io_executor executor, base::Clock& clock,
                               ProcessRuntimeOptions options)
    : state_(std::make_shared<State>(std::move(executor), clock, std::move(options))) {}

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
        pod.containers.push_back(Container{ContainerId{"process", id}, r.config.container_name,
                                           r.config.image, hashFromHex(r.config.hash), cs});
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
  PodStatus status{uid, std::move(name), std::move(namespace_), {}, {}};
  {
    std::lock_guard lock(state->mu_);
    if (auto ids = state->ids_by_pod_.find(uid); ids != state->ids_by_pod_.end()) {
      for (const auto& id : ids->second) {
        auto& r = state->records_.at(id);
        state->refreshCreatedLocked(id, r);
        status.container_statuses.push_back(state->toStatus(id, r));
      }
    }
  }
  std::sort(status.container_statuses.begin(), status.container_statuses.end(),
            [](const ContainerStatus& a, const ContainerStatus& b) {
              if (a.created_at != b.created_at) return a.created_at > b.created_at;
              return a.restart_count > b.restart_count;
            });
  co_return status;
}

asio::awaitable<base::StatusOr<ContainerId>> ProcessRuntime::startContainer(
    api::PodPtr pod, const api::Container& container, int attempt, StartContainerOptions options) {
  // Not a coroutine: the launch runs now, and only the wait for the shim is suspended (see
  // State::launch).
  auto launched = state_->launch(*pod, container, attempt, options);
  return state_->start(std::move(launched), std::move(pod), container.name, attempt);
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
    tasks.push_back(state->kill(pod, c.id, KillOptions::graceOverride(grace_override),
                                "killing pod"));
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
  std::error_code ec;
  fs::remove_all(state->containerDir(id.id), ec);
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
  co_return base::okStatus();
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
