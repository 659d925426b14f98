// ProcessRuntime's state, shared by its parts (agent/runtime/process_runtime*.cpp: the public
// interface, starts, kills and exec, recovery) and private to them: the container records, the
// shim watchers, and the helpers more than one part uses.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "agent/runtime/exec_process.h"
#include "agent/runtime/process_runtime.h"
#include "agent/runtime/shim_processes.h"
#include "agent/runtime/shim_spawner.h"
#include "agent/runtime/spawn.h"
#include "agent/runtime/state_file.h"
#include "base/log.h"
#include "base/readable_wait.h"

namespace nodeagent::runtime {

// Helpers shared by the parts of ProcessRuntime (this header is private to them).

NODEAGENT_LOGGER("runtime")

namespace fs = std::filesystem;
using std::chrono::duration_cast;
using std::chrono::nanoseconds;
using std::chrono::seconds;

// The exit code of a container whose end was not recorded (kubelet's, for ContainerStatusUnknown).
constexpr int kUnknownExitCode = 137;

// waitid's P_PIDFD (Linux 5.4); spelled out for libc headers that lack it.
constexpr auto kPPidfd = static_cast<idtype_t>(3);

inline int pidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

inline int pidfdSendSignal(int pidfd, int sig) {
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

// A wait for a shim's pidfd on the reactor without a descriptor of its own: the stream
// descriptor borrows `pidfd`'s and gives it back (release) before `pidfd` may close it, so a
// container costs the agent one descriptor, not two, and the record's signals and the watch
// share it.
struct PidfdWatch {
  PidfdWatch(const asio::any_io_executor& ex, std::shared_ptr<Fd> fd)
      : pidfd(std::move(fd)), sd(ex, pidfd->fd) {}
  ~PidfdWatch() { sd.release(); }
  PidfdWatch(const PidfdWatch&) = delete;
  PidfdWatch& operator=(const PidfdWatch&) = delete;
  std::shared_ptr<Fd> pidfd;
  asio::posix::stream_descriptor sd;
};

inline base::SystemTime fromNanos(int64_t ns) {
  if (ns == 0) return {};
  return base::SystemTime(duration_cast<base::SystemTime::duration>(nanoseconds(ns)));
}

inline int64_t toNanos(base::SystemTime t) {
  return duration_cast<nanoseconds>(t.time_since_epoch()).count();
}

inline ContainerState containerState(ShimStatus status) {
  switch (status) {
    case ShimStatus::kCreated:
      return ContainerState::kCreated;
    case ShimStatus::kRunning:
      return ContainerState::kRunning;
    case ShimStatus::kExited:
      return ContainerState::kExited;
  }
  return ContainerState::kUnknown;
}

// Everything handlers and coroutines touch; shared so that it outlives the ProcessRuntime while
// handlers are pending.
class ProcessRuntime::State : public std::enable_shared_from_this<State> {
 public:
  State(asio::any_io_executor ex, base::Clock& clock, ProcessRuntimeOptions options)
      : strand_(asio::make_strand(ex)), clock_(clock), options_(std::move(options)) {
    // Shims are found again by the directory in their command line (see shim_processes.h): it is
    // absolute, whatever the agent's working directory.
    std::error_code ec;
    if (auto root = fs::absolute(options_.root_dir, ec); !ec) options_.root_dir = root;
    if (options_.shim_path.empty()) {
      auto self = fs::read_symlink("/proc/self/exe", ec);
      options_.shim_path = (ec ? fs::path(".") : self.parent_path()) / "nodeagent-shim";
    }
    spawner_ = std::make_unique<ShimSpawner>(options_.shim_path);
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
    return buildContainerLogPath(buildPodLogsDirectory(options_.pod_log_dir, ns, name, uid),
                                 container, restart_count);
  }

  ContainerStatus toStatus(const std::string& id, const Record& r) const {
    ContainerStatus s;
    s.id = ContainerId{std::string(ProcessRuntime::kType), id};
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
    asio::post(strand_, [self = shared_from_this(), id, pidfd] {
      if (self->stopped_) return;
      auto watch = std::make_shared<PidfdWatch>(self->strand_, pidfd);
      self->watchers_[id] = watch;
      // The wait keeps the watch (and so the pidfd) alive until its handler has run.
      std::shared_ptr<asio::posix::stream_descriptor> sd(watch, &watch->sd);
      base::asyncWaitReadable(sd, [self, id, pidfd](const boost::system::error_code& ec) {
        if (ec || self->stopped_) return;
        self->onShimExit(id, pidfd->fd);
        self->watchers_.erase(id);
      });
    });
  }

  // On the strand: the shim `id` ended (its pidfd is readable). It is reaped here; what the
  // exit needs then blocks (its state file, and for a shim that died without recording an exit,
  // the kill of its cgroup: a v1 freeze waits up to ~200 ms) and runs on the file pool, which
  // records the exit back on the strand (finishExit).
  void onShimExit(const std::string& id, int pidfd) {
    siginfo_t info{};
    // Reap it when it is our child; an adopted shim belongs to init (ECHILD).
    ::waitid(kPPidfd, static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG);
    postBlocking([self = shared_from_this(), id] {
      std::optional<ShimState> st = self->readExit(id);
      if (!st) return;
      asio::post(self->strand_, [self, id, st = *st] { self->finishExit(id, st); });
    });
  }

  // Blocking: how the container `id` whose shim ended exited: its state file, or, when the shim
  // recorded no exit, settleDeadShim's. nullopt when its record is gone.
  std::optional<ShimState> readExit(const std::string& id) {
    std::string text, error;
    ShimState st;
    bool have_state = readWholeFile((containerDir(id) / kStateFileName).string(), text, error) &&
                      decodeShimState(text, st, error);
    if (have_state && st.status == ShimStatus::kExited) return st;
    ShimState previous;
    cm::CgroupPaths cgroup;
    {
      std::lock_guard lock(mu_);
      auto it = records_.find(id);
      if (it == records_.end()) return std::nullopt;
      previous = it->second.state;
      cgroup = it->second.config.cgroup;
    }
    return settleDeadShim(id, have_state ? st : previous, cgroup);
  }

  // Blocking (the cgroup kill, the state file): never on the strand. The shim ended without
  // recording an exit: kill what it left (nothing supervises it any more: every process of its
  // cgroup `cgroup`, if it has one, and its process group) and record the loss so that later
  // agents see it too.
  ShimState settleDeadShim(const std::string& id, ShimState st, const cm::CgroupPaths& cgroup) {
    bool killed = killContainerCgroup(id, cgroup) > 0;
    if (containerProcessAlive(st)) {
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
    saveState(id, st);
    log()->warn("Container shim ended without recording an exit id={} killed={}", id, killed);
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
                             ContainerId{std::string(ProcessRuntime::kType), id},
                             r.config.container_name};
      log()->info("Container exited pod={}/{} container={} id={} exitCode={} signal={} reason={}",
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

  // SIGKILL to every process of a container's cgroup (none: nothing to do), without its shim.
  // Returns how many were signalled (-1 on an error, logged). Blocks (a v1 cgroup is frozen for
  // the kill, up to ~200 ms; kill rounds sleep): on the file pool or in recovery, never on a
  // strand.
  int killContainerCgroup(const std::string& id, const cm::CgroupPaths& cgroup) {
    if (cgroup.empty() || cm::cgroupPids(cgroup).empty()) return 0;
    std::string error;
    const int n = cm::killCgroup(cgroup, error);
    if (n < 0) log()->warn("Cannot kill the container's cgroup id={} error={}", id, error);
    return n;
  }

  // SIGTERM to the container's process group or SIGKILL to all of it (its cgroup when it has
  // one), through its shim (which knows whether the container still exists); directly when the
  // shim is gone, the cgroup kill then on the file pool (it blocks).
  asio::awaitable<void> signalContainer(std::string id, int sig) {
    std::shared_ptr<Fd> pidfd;
    ShimState st;
    cm::CgroupPaths cgroup;
    {
      std::lock_guard lock(mu_);
      auto it = records_.find(id);
      if (it == records_.end()) co_return;
      pidfd = it->second.pidfd;
      st = it->second.state;
      cgroup = it->second.config.cgroup;
    }
    if (pidfd && pidfdSendSignal(pidfd->fd, sig == SIGKILL ? SIGUSR1 : SIGTERM) == 0) co_return;
    if (sig == SIGKILL && !cgroup.empty()) {
      auto kill_cgroup = [self = shared_from_this(), id, cgroup] {
        return self->killContainerCgroup(id, cgroup);
      };
      co_await runOnFiles(std::move(kill_cgroup));
    }
    if (st.pid > 0 && processAlive(st.pid, st.pid_start_ticks)) ::kill(-st.pid, sig);
  }

  // The runtime's file pool (ProcessRuntime's files_), for blocking work that must stay off the
  // strands. Cleared by stop(), before the runtime's own pool is destroyed: work then runs
  // inline (posting to a destroyed pool is not an option).
  void setFiles(asio::any_io_executor files) {
    std::lock_guard lock(files_mu_);
    files_ = std::move(files);
  }
  // Runs `fn` on the file pool (inline once the runtime is gone).
  template <typename F>
  void postBlocking(F fn) {
    std::unique_lock lock(files_mu_);
    if (files_) {
      asio::post(files_, std::move(fn));
      return;
    }
    lock.unlock();
    fn();
  }
  // base::runBlocking on the file pool: `fn()` there, the awaiting coroutine resumed on its own
  // executor with the result.
  template <typename F>
  auto runOnFiles(F fn) -> asio::awaitable<std::invoke_result_t<F&>> {
    using R = std::invoke_result_t<F&>;
    auto init = [self = shared_from_this(), fn = std::move(fn)](auto handler) mutable {
      auto ex = asio::get_associated_executor(handler);
      self->postBlocking([ex, fn = std::move(fn), handler = std::move(handler)]() mutable {
        R result = fn();
        asio::post(ex, [handler = std::move(handler), result = std::move(result)]() mutable {
          std::move(handler)(std::move(result));
        });
      });
    };
    return asio::async_initiate<decltype(asio::use_awaitable), void(R)>(std::move(init),
                                                                        asio::use_awaitable);
  }

  // A container start in two parts: launch() (synchronous) writes the config and spawns the shim;
  // start() waits for the shim's answer. Split so that the coroutine frame, alive for every
  // container starting at once, stays small (its locals are not the launch's paths and config).
  struct Launched {
    std::string id;
    int ready_fd = -1;  // the shim writes "ok <pid>" or "error <message>" here
  };
  // Blocking (directories, the config file, posix_spawn): on the runtime's file pool.
  base::StatusOr<Launched> launch(const api::Pod& pod, const api::Container& container, int attempt,
                                  const StartContainerOptions& options);
  // The launch's steps: the shim's config of a new container `id` (all but its credentials), ...
  base::StatusOr<ShimConfig> shimConfig(const std::string& id, const api::Pod& pod,
                                        const api::Container& container, int attempt,
                                        const StartContainerOptions& options) const;
  // ... and, once its state directory `dir` holds the config, its shim started and watched, with
  // a record that says it is starting. `where` names the container in errors.
  base::StatusOr<Launched> spawnContainerShim(const std::string& id, const fs::path& dir,
                                              ShimConfig config, const std::string& where);
  // With a cgroup manager and a cgroup parent: makes the container's cgroup
  // `<cgroup_parent>/<id>` with its resources as limits and puts it in `config`. The error
  // names the container and the cgroup.
  base::Status makeContainerCgroup(const std::string& id, ShimConfig& config,
                                   const StartContainerOptions& options, const std::string& where);
  // Blocking: kills what is left in the container cgroup `name` (`paths`; none: nothing to do)
  // and removes it; logs a failure (the pod's cgroup cleanup removes it later).
  void removeContainerCgroup(const std::string& id, const std::string& name,
                             const cm::CgroupPaths& paths);
  void addStartingRecord(const std::string& id, ShimConfig config);
  // A start that failed before its shim ran: its record and state directory go.
  void abandonStart(const std::string& id, const fs::path& dir);
  // Starts `nodeagent-shim run dir` (through the spawn helper) with `ready_fd` as its descriptor
  // 3 and its stderr appended to the shim log; returns its pid and pidfd.
  base::StatusOr<ShimSpawner::Child> spawnShim(const fs::path& dir, int ready_fd);
  // Blocking: after the spawn helper ended with the start of container `id`'s shim unanswered
  // (`lost`), the shim it may have started, found by its report on the start pipe (`ready_fd`,
  // left unread) and its command line; `lost` when there is none.
  base::StatusOr<ShimSpawner::Child> findLostShim(const std::string& id, int ready_fd,
                                                  base::Status lost);
  // Blocking: the container's cgroup (when it still exists), state directory and log files.
  void removeFiles(const std::string& id, const ShimConfig& config);
  asio::awaitable<base::StatusOr<ContainerId>> start(base::StatusOr<Launched> launched,
                                                     api::PodPtr pod, std::string container_name,
                                                     int attempt);
  base::StatusOr<ContainerId> finishStart(const std::string& id, const std::string& line,
                                          const api::Pod& pod, const std::string& container_name,
                                          int attempt);
  // The shim ran the container (`st`, its state, is past "created"): its record leaves
  // "starting" and, when it still says created, says running and the started event goes out.
  void recordStarted(const std::string& id, const ShimState& st, const api::Pod& pod,
                     const std::string& container_name, int attempt);
  asio::awaitable<base::Status> kill(api::PodPtr pod, ContainerId id, KillOptions options,
                                     std::string reason);
  asio::awaitable<void> runHook(std::string id, std::vector<std::string> command,
                                base::Duration timeout);
  asio::awaitable<base::StatusOr<ExecResult>> exec(std::string id, std::vector<std::string> command,
                                                   base::Duration timeout);
  asio::awaitable<std::optional<base::StatusOr<ExecResult>>> execOnStrand(
      std::string id, std::vector<std::string> command, base::Duration timeout);
  // Starts `nodeagent-shim exec` for container `id` on the file pool (posix_spawn blocks).
  asio::awaitable<base::StatusOr<ExecChild>> spawnExec(std::string id,
                                                       std::vector<std::string> command,
                                                       ExecStdio stdio);
  asio::awaitable<base::StatusOr<StreamSessionPtr>> execStream(std::string id,
                                                               std::vector<std::string> command,
                                                               StreamOptions options);
  asio::awaitable<base::StatusOr<StreamSessionPtr>> attach(std::string id, StreamOptions options);
  // The container `id` runs (FailedPrecondition when not, NotFound when unknown); its config.
  base::StatusOr<ShimConfig> runningConfig(const std::string& id) const;
  base::Status recover();
  void adopt(const std::string& id, ShimConfig config, ShimState state);
  // A live shim of this root dir that recover() cannot adopt (its config is unusable or its
  // directory gone), and why.
  struct Unadoptable {
    std::string id;
    LiveShim shim;
    std::string reason;
  };
  // What recover() found so far.
  struct Recovery {
    std::vector<Unadoptable> unadoptable;
    std::vector<fs::path> incomplete;  // directories of starts that never wrote their config
    int adopted = 0;
    int exited = 0;
  };
  // recover()'s steps for the container directory `dir`; `shims` are the live shims not yet
  // matched with a directory.
  void recoverContainer(const fs::path& dir, std::map<std::string, LiveShim>& shims,
                        Recovery& recovery);
  std::optional<ShimConfig> recoverConfig(const fs::path& dir, const std::string& id,
                                          const std::optional<LiveShim>& live, Recovery& recovery);
  ShimState recoverState(const fs::path& dir, const std::string& id,
                         const std::optional<LiveShim>& live, const cm::CgroupPaths& cgroup);
  void killUnadoptable(const std::vector<Unadoptable>& shims);
  // Writes the state file of `id` (an exit the agent records itself); logs a failure.
  void saveState(const std::string& id, const ShimState& st);
  void stop() {
    stopped_ = true;
    setFiles({});
    asio::post(strand_, [self = shared_from_this()] {
      // The waits end (operation_aborted); each pidfd closes with its last holder.
      for (auto& [id, watch] : self->watchers_) {
        boost::system::error_code ec;
        watch->sd.cancel(ec);
      }
      self->watchers_.clear();
    });
  }

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  ProcessRuntimeOptions options_;
  // Starts the container shims (set once the shim's path is known).
  std::unique_ptr<ShimSpawner> spawner_;
  std::atomic<bool> stopped_{false};
  mutable std::mutex mu_;
  ContainerEventHandler handler_;
  PreStopHookRunner pre_stop_runner_;  // guarded by mu_
  // Changes whenever what getPods answers may change (guarded by mu_): see podsVersion.
  uint64_t version_ = 0;
  std::map<std::string, Record> records_;
  std::map<std::string, std::set<std::string>> ids_by_pod_;  // pod UID -> ids of its records
  // Pod UID -> the sandbox runPodSandbox made (guarded by mu_).
  std::map<std::string, PodSandboxStatus> sandboxes_;
  // Strand only.
  std::map<std::string, std::shared_ptr<PidfdWatch>> watchers_;
  std::mutex files_mu_;
  asio::any_io_executor files_;  // guarded by files_mu_; see setFiles
};

}  // namespace nodeagent::runtime
