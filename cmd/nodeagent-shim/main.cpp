// nodeagent-shim: holds one container process for ProcessRuntime, like conmon or
// containerd-shim. It outlives the agent (the agent spawns it in its own session), so containers
// keep running across agent restarts.
//
//   nodeagent-shim run <state-dir>            (fd 3: a pipe to report the start to the agent)
//     Reads <state-dir>/config, starts the container in a new session and process group with the
//     configured env, working dir and credentials, relays its stdout/stderr into the CRI log file
//     (rotating it by size), forwards SIGTERM (as SIGTERM, to the container's process group) and
//     SIGUSR1 (as SIGKILL, to every process of the container) from the agent, and records the
//     start, the exit code or signal and the times in <state-dir>/state, replaced atomically. It
//     writes "ok <pid>\n" or "error <msg>\n" on fd 3 once the container has started (exec
//     succeeded) or failed to start.
//     It serves attaches on <state-dir>/attach.sock (attach.h): clients get the output as it is
//     read, and with stdin: true in the config they write to the container's stdin pipe, whose
//     write end the shim keeps (stdin_once: closed after the first client's input ended).
//   nodeagent-shim spawner                    (fd 3: the agent's spawn socket)
//     The agent's spawn helper (spawner.cpp, agent/runtime/spawn.h): starts the `run` shims for
//     the agent from a small descriptor table and hands it their pidfds.
//   nodeagent-shim exec <state-dir> <argv...>
//     Runs argv with the container's env, working dir, credentials and cgroup (exec hooks and
//     probes, kubelet's exec). When its stdin is a terminal (an interactive exec with a TTY), it
//     becomes the command's controlling terminal in a session of its own.
//
// The container's cgroup (config: cgroup_unified / cgroup_v1, made by the agent): the forked child
// joins it before exec, so that no process of the container ever runs outside it (a join failure
// fails the start, ContainerCannotRun). Every process of the container is then in it, including
// ones that called setsid or double-forked: a SIGKILL from the agent, and the end of the main
// process, kill the whole cgroup (agent/cm/cgroup_fs.h: cgroup.kill, or freeze, kill, thaw), not
// only the process group. The cgroup's OOM-kill count, read before the start and again at the
// exit, tells an OOM kill: the exit is recorded with reason OOMKilled (exit code 137 when a signal
// ended the main process), as kubelet reports it. The empty cgroup is removed at the end (a few
// short retries while the kernel finishes the kills; else the agent removes it later). Without a
// cgroup, kills go to the process group as before. The configured oom_score_adj (kubelet's) is
// written before exec; when that is refused, an inherited negative value is reset to 0.
//
// When the container exits, its termination message (the file
// <state-dir>/termination-log, given to it as NODEAGENT_TERMINATION_MESSAGE_PATH, or the tail of
// its log under FallbackToLogsOnError) goes into the state's message.
//
// Single-threaded by design (so fork is safe here), and small: it links only the pure runtime and
// cgroup files (cri_log, state_file, cgroup_fs), no Asio and no logging library. It reads the real
// wall clock itself, as it is a separate program outside the agent's injected-clock domain.
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "agent/cm/cgroup_fs.h"
#include "agent/runtime/cri_log.h"
#include "agent/runtime/spawn.h"
#include "agent/runtime/state_file.h"
#include "cmd/nodeagent-shim/attach.h"
#include "cmd/nodeagent-shim/spawner.h"

namespace cm = nodeagent::cm;
namespace rt = nodeagent::runtime;

namespace {

constexpr int kReadyFd = 3;
// After the container's main process ends, how long to keep draining output that its leftover
// children (killed with the group) may still flush.
constexpr int kDrainTimeoutMs = 500;
// Removing the container's cgroup after the kill: the kernel may still be ending the killed
// processes (EBUSY), so up to this many tries (about a second in all).
constexpr int kCgroupRemoveAttempts = 60;
// The exec-stage report of a cgroup join failure; its exit code (runc's for a container that
// could not be set up).
constexpr const char* kCgroupStage = "cgroup";
constexpr int kCgroupJoinExitCode = 128;

int64_t wallNanos() {
  struct timespec ts {};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void logf(const char* fmt, const char* a = "", const char* b = "") {
  std::fprintf(stderr, fmt, a, b);
  std::fflush(stderr);
}

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void reportReady(const std::string& line) {
  writeAll(kReadyFd, line.data(), line.size());
  ::close(kReadyFd);
}

std::string lookupEnv(const std::vector<std::string>& env, const char* name) {
  size_t len = std::strlen(name);
  for (const auto& e : env) {
    if (e.size() > len && e.compare(0, len, name) == 0 && e[len] == '=') return e.substr(len + 1);
  }
  return "";
}

bool isSet(uint64_t set, int cap) { return ((set >> cap) & 1) != 0; }

// Drops from the bounding set every capability `c.capabilities` lacks (before the identity
// changes: it needs CAP_SETPCAP). Capabilities this kernel does not have give EINVAL.
bool dropBoundingSet(const rt::ShimConfig& c, const char*& stage) {
  if (!c.capabilities) return true;
  stage = "prctl(PR_CAPBSET_DROP)";
  for (int cap = 0; cap < 64; ++cap) {
    if (isSet(*c.capabilities, cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return false;
  }
  return true;
}

// After the identity change: cuts the effective, permitted and inheritable sets down to
// `c.capabilities` and makes the ambient set exactly `c.ambient_capabilities` (which a non-root
// process keeps across exec; PR_SET_KEEPCAPS kept them permitted across setuid).
bool applyCapabilitySets(const rt::ShimConfig& c, const char*& stage) {
  if (!c.capabilities && c.ambient_capabilities == 0) return true;
  const uint64_t ceiling = c.capabilities.value_or(~uint64_t{0});
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  stage = "capget";
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  auto get = [&](uint32_t __user_cap_data_struct::*field) {
    return (uint64_t{data[1].*field} << 32) | data[0].*field;
  };
  auto put = [&](uint32_t __user_cap_data_struct::*field, uint64_t value) {
    data[0].*field = static_cast<uint32_t>(value);
    data[1].*field = static_cast<uint32_t>(value >> 32);
  };
  const bool non_root = c.uid && *c.uid != 0;
  const uint64_t ambient = c.ambient_capabilities & ceiling;
  if (non_root && ambient != 0) {
    // Only what the container asked for stays, in every set.
    put(&__user_cap_data_struct::permitted, get(&__user_cap_data_struct::permitted) & ambient);
    put(&__user_cap_data_struct::effective, get(&__user_cap_data_struct::permitted));
    put(&__user_cap_data_struct::inheritable, get(&__user_cap_data_struct::permitted));
  } else {
    put(&__user_cap_data_struct::permitted, get(&__user_cap_data_struct::permitted) & ceiling);
    put(&__user_cap_data_struct::effective, get(&__user_cap_data_struct::effective) & ceiling);
    put(&__user_cap_data_struct::inheritable, get(&__user_cap_data_struct::inheritable) & ceiling);
  }
  stage = "capset";
  if (::syscall(SYS_capset, &header, data) != 0) return false;
  stage = "prctl(PR_CAP_AMBIENT)";
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return false;
  if (!non_root) return true;
  for (int cap = 0; cap < 64; ++cap) {
    if (isSet(ambient, cap) && ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) {
      return false;
    }
  }
  return true;
}

// The agent runs protected from the OOM killer (its unit's OOMScoreAdjust=-999), and children
// inherit that: a container gets back to the default, 0, so that it and not the node's services
// is what the OOM killer takes. Raising the value needs no privilege; a positive one is kept.
void resetOomScoreAdj() {
  const int fd = ::open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  char buf[16] = {};
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  if (n > 0 && buf[0] == '-') (void)::pwrite(fd, "0", 1, 0);
  ::close(fd);
}

// kubelet's OOM score for the container (-998 for Guaranteed pods, up to 1000 for BestEffort),
// before the identity changes: lowering it below the inherited value needs CAP_SYS_RESOURCE. Best
// effort: when it is refused, resetOomScoreAdj's default.
void applyOomScoreAdj(const rt::ShimConfig& c) {
  if (!c.oom_score_adj) {
    resetOomScoreAdj();
    return;
  }
  const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  const std::string value = std::to_string(*c.oom_score_adj);
  const bool written =
      fd >= 0 && ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  if (fd >= 0) ::close(fd);
  if (!written) resetOomScoreAdj();
}

// The agent runs with a raised RLIMIT_NOFILE soft limit; the container gets the one the agent was
// started with (programs that close every descriptor up to the limit stay fast). Never above the
// hard limit; best effort.
void applyOpenFileLimit(const rt::ShimConfig& c) {
  rlimit lim{};
  if (!c.open_files || ::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  lim.rlim_cur = std::min<rlim_t>(*c.open_files, lim.rlim_max);
  (void)::setrlimit(RLIMIT_NOFILE, &lim);
}

// Applies the capability bounding set, groups, gid, uid, the other capability sets and
// no_new_privs, in that order: each step needs the privileges the next one removes. Returns false
// on failure, with errno set and `stage` naming the step that failed.
bool switchIdentity(const rt::ShimConfig& c, const char*& stage) {
  if (!dropBoundingSet(c, stage)) return false;
  if (c.ambient_capabilities != 0 && c.uid && *c.uid != 0) {
    stage = "prctl(PR_SET_KEEPCAPS)";
    if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) return false;
  }
  if (c.set_groups) {
    stage = "setgroups";
    if (::setgroups(c.groups.size(), c.groups.empty() ? nullptr : c.groups.data()) != 0) {
      return false;
    }
  } else if (c.gid) {
    stage = "setgroups";
    if (::setgroups(0, nullptr) != 0 && errno != EPERM) return false;
  }
  if (c.gid) {
    stage = "setgid";
    if (::setgid(*c.gid) != 0) return false;
  }
  if (c.uid) {
    stage = "setuid";
    if (::setuid(*c.uid) != 0) return false;
  }
  if (!applyCapabilitySets(c, stage)) return false;
  if (c.no_new_privs) {
    stage = "prctl(PR_SET_NO_NEW_PRIVS)";
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  }
  return true;
}

// Like execvp, but a bare name is resolved against the container's PATH (`env`), not the
// shim's. Returns only on failure, with errno set.
void execSearchingPath(const std::string& file, char* const* args, char* const* envp,
                       const std::vector<std::string>& env) {
  if (file.find('/') != std::string::npos) {
    ::execve(file.c_str(), args, envp);
    return;
  }
  std::string path = lookupEnv(env, "PATH");
  if (path.empty()) path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  int saved = ENOENT;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + file;
    ::execve(candidate.c_str(), args, envp);
    // Like execvp: remember a permission problem, keep looking past missing files.
    if (errno == EACCES)
      saved = EACCES;
    else if (errno != ENOENT && errno != ENOTDIR)
      saved = errno;
    start = end + 1;
  }
  errno = saved;
}

// Joins the container's cgroup, sets its OOM score, applies the capability bounding set, groups,
// gid, uid, the other capability sets, no_new_privs and the working dir (in that order: each step
// needs the privileges the next one removes), then execs argv resolving a bare name against the
// container's PATH (not the shim's). Returns only on failure, with errno set, `stage` naming the
// step that failed and `detail` saying more when it can (the cgroup file). Probes and hooks (exec
// mode) go through the same steps, so they run as the container does, in its cgroup.
void execContainer(const rt::ShimConfig& c, const std::vector<std::string>& argv,
                   const char*& stage, std::string& detail, bool in_cgroup = false) {
  if (!c.cgroup.empty() && !in_cgroup) {
    stage = kCgroupStage;
    errno = 0;
    if (!cm::joinCgroup(c.cgroup, detail)) {
      if (errno == 0) errno = EIO;
      return;
    }
  }
  applyOomScoreAdj(c);
  applyOpenFileLimit(c);
  if (!switchIdentity(c, stage)) return;
  if (!c.working_dir.empty()) {
    stage = "chdir";
    if (::chdir(c.working_dir.c_str()) != 0) return;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : c.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  stage = "exec";
  execSearchingPath(argv[0], args.data(), envp.data(), c.env);
}

// In the forked child: the container gets default signal handling, its own session and process
// group, its cgroup, and fds 0-2 only (stdin: /dev/null or its stdin pipe) (plus `report_fd` as fd
// 3, close-on-exec, to tell the shim why exec failed as "<stage>:<errno>[:<detail>]"). Never
// returns.
[[noreturn]] void runContainerChild(const rt::ShimConfig& config, const sigset_t& old_mask,
                                    int in_fd, int out_fd, int err_fd, int report_fd,
                                    bool in_cgroup) {
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::setsid();
  ::dup2(in_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  int report = report_fd;
  if (report != 3) {
    ::dup2(report, 3);  // dup2 clears close-on-exec: set it again below
    report = 3;
  }
  ::fcntl(report, F_SETFD, FD_CLOEXEC);
  ::syscall(SYS_close_range, 4U, ~0U, 0U);
  const char* stage = "exec";
  std::string detail;
  execContainer(config, config.argv, stage, detail, in_cgroup);
  int err = errno;
  std::string msg = std::string(stage) + ":" + std::to_string(err);
  if (!detail.empty()) msg += ":" + detail;
  writeAll(report, msg.data(), msg.size());
  _exit(err == ENOENT ? 127 : 126);
}

struct ExecFailure {
  std::string message;
  int exit_code = 0;
};

// Reads the child's exec report and closes the pipe. EOF on the close-on-exec pipe means exec
// succeeded (nullopt); otherwise the failure in the runtime's words, with the exit code a shell
// would give (127: not found, 126: could not run; 128 when the cgroup could not be joined).
std::optional<ExecFailure> readExecFailure(int exec_fd, const std::string& argv0) {
  char ebuf[1024];
  ssize_t en;
  do {
    en = ::read(exec_fd, ebuf, sizeof ebuf - 1);
  } while (en < 0 && errno == EINTR);
  ::close(exec_fd);
  if (en <= 0) return std::nullopt;
  const std::string report(ebuf, static_cast<size_t>(en));
  const size_t colon = report.find(':');
  const std::string stage = report.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : report.substr(colon + 1);
  const int err = std::atoi(rest.c_str());
  const size_t detail_at = rest.find(':');
  const std::string detail = detail_at == std::string::npos ? "" : rest.substr(detail_at + 1);
  if (stage == kCgroupStage) {
    return ExecFailure{"cannot put the container into its cgroup: " +
                           (detail.empty() ? std::string(std::strerror(err)) : detail),
                       kCgroupJoinExitCode};
  }
  std::string what = stage == "exec" ? "exec: \"" + argv0 + "\": " +
                                           (err == ENOENT ? std::string("executable file not found")
                                                          : std::string(std::strerror(err)))
                                     : stage + ": " + std::strerror(err);
  return ExecFailure{std::move(what), err == ENOENT ? 127 : 126};
}

class Shim {
 public:
  Shim(std::string dir, rt::ShimConfig config) : dir_(std::move(dir)), config_(std::move(config)) {}

  int run();

 private:
  // The exit is written durably. The created and running states are only atomic: they are on
  // every container's start path, where an fsync each would cost a disk flush per start, and
  // after a crash that loses them the node has rebooted and the container is gone either way.
  void saveState() {
    std::string error;
    const auto durability = state_.status == rt::ShimStatus::kExited ? rt::Durability::kDurable
                                                                     : rt::Durability::kAtomic;
    if (!rt::writeFileAtomic(dir_ + "/state", rt::encodeShimState(state_), error, durability)) {
      logf("nodeagent-shim: %s\n", error.c_str());
    }
  }
  void openLog();
  void createTerminationLog();
  void recordTerminationMessage();
  void writeRecord(rt::LogStream stream, std::string_view text, bool partial);
  void rotate();
  bool pumpStream(int idx);  // false at EOF
  void onChildExit(int wstatus);
  void recordShimIdentity();
  int blockSignals(sigset_t& old_mask);
  void failStart(const std::string& message, int exit_code);
  pid_t forkContainer(const sigset_t& old_mask, const int out_pipe[2], const int err_pipe[2],
                      const int exec_pipe[2]);
  // The attach socket and, for a stdin: true container, its stdin pipe (the read end, for the
  // child, in `in_fd`; -1: /dev/null). Without a socket the container runs, unattachable.
  void setUpAttach(int& in_fd);
  void markRunning(pid_t pid);
  void relayUntilExit(int sfd, int out_fd, int err_fd);
  bool handleSignals(int sfd);
  bool reapContainer();
  void recordOomKill();
  void finish();
  void removeCgroup();
  // SIGTERM: the whole process group; the main process alone if it moved to a group of its own.
  // SIGKILL: with a cgroup, every process in it, then the group as well (call it before the main
  // process is reaped: until then its group id cannot be reused).
  void signalContainer(int sig) {
    if (sig == SIGKILL && !config_.cgroup.empty()) {
      std::string error;
      if (cm::killCgroup(config_.cgroup, error) < 0) {
        logf("nodeagent-shim: kill the container's cgroup: %s\n", error.c_str());
      }
    }
    if (::kill(-child_, sig) != 0) ::kill(child_, sig);
  }

  std::string dir_;
  rt::ShimConfig config_;
  rt::ShimState state_;
  int log_fd_ = -1;
  int64_t log_size_ = 0;
  int fds_[2] = {-1, -1};  // stdout, stderr read ends
  rt::LineSplitter splitters_[2];
  std::string out_;
  pid_t child_ = -1;
  bool child_done_ = false;
  nodeagent::shim::AttachServer attach_;
  // The cgroup's OOM-kill count before the container started (nullopt: no cgroup, or a kernel
  // that does not count).
  std::optional<uint64_t> oom_kills_before_;
};

void Shim::openLog() {
  if (config_.log_path.empty()) return;
  log_fd_ = ::open(config_.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (log_fd_ < 0) {
    logf("nodeagent-shim: open log %s: %s\n", config_.log_path.c_str(), std::strerror(errno));
    return;
  }
  struct stat st {};
  log_size_ = ::fstat(log_fd_, &st) == 0 ? st.st_size : 0;
}

// An empty file the container may write its termination message to, owned by its user.
void Shim::createTerminationLog() {
  const std::string& path = config_.termination_message_path;
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    logf("nodeagent-shim: create %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  if ((config_.uid || config_.gid) &&
      ::fchown(fd, config_.uid ? *config_.uid : static_cast<uid_t>(-1),
               config_.gid ? *config_.gid : static_cast<gid_t>(-1)) != 0) {
    logf("nodeagent-shim: chown %s: %s\n", path.c_str(), std::strerror(errno));
  }
  ::close(fd);
}

// kubelet appends the termination message to the exited status' message.
void Shim::recordTerminationMessage() {
  if (config_.termination_message_path.empty() && !config_.termination_message_fallback) return;
  const bool fallback = config_.termination_message_fallback && state_.exit_code != 0;
  std::string message =
      rt::readTerminationMessage(config_.termination_message_path, fallback, config_.log_path);
  if (message.empty()) return;
  if (!state_.message.empty()) state_.message += ": ";
  state_.message += message;
}

void Shim::rotate() {
  const std::string& log = config_.log_path;
  std::string rotated;
  if (!rt::rotateLogFile(log, wallNanos(), rotated)) {
    logf("nodeagent-shim: rotate %s: %s\n", log.c_str(), std::strerror(errno));
    return;  // keep appending to the current file rather than lose output
  }
  ::close(log_fd_);
  log_fd_ = -1;
  openLog();
  rt::pruneRotatedLogs(log, config_.log_max_files);
}

void Shim::writeRecord(rt::LogStream stream, std::string_view text, bool partial) {
  if (log_fd_ < 0) return;
  out_.clear();
  rt::appendCriRecord(out_, wallNanos(), stream, partial, text);
  auto size = static_cast<int64_t>(out_.size());
  if (rt::shouldRotate(log_size_, size, config_.log_max_size)) rotate();
  if (log_fd_ < 0) return;
  writeAll(log_fd_, out_.data(), out_.size());
  log_size_ += size;
}

bool Shim::pumpStream(int idx) {
  char buf[16 * 1024];
  ssize_t n = ::read(fds_[idx], buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  auto stream = idx == 0 ? rt::LogStream::kStdout : rt::LogStream::kStderr;
  auto sink = [&](std::string_view text, bool partial) { writeRecord(stream, text, partial); };
  if (n <= 0) {
    splitters_[idx].finish(sink);
    ::close(fds_[idx]);
    fds_[idx] = -1;
    return false;
  }
  splitters_[idx].feed(std::string_view(buf, static_cast<size_t>(n)), sink);
  attach_.broadcast(idx == 0 ? rt::kAttachStdout : rt::kAttachStderr, buf, static_cast<size_t>(n));
  return true;
}

void Shim::onChildExit(int wstatus) {
  state_.finished_at = wallNanos();
  state_.status = rt::ShimStatus::kExited;
  if (WIFSIGNALED(wstatus)) {
    state_.signal = WTERMSIG(wstatus);
    state_.exit_code = rt::exitCodeForSignal(state_.signal);
  } else {
    state_.exit_code = WEXITSTATUS(wstatus);
  }
  state_.reason = rt::exitReason(state_.exit_code);
  child_done_ = true;
}

// Identifies this shim in the state, so that a reused pid or a reboot is told from it.
void Shim::recordShimIdentity() {
  state_.shim_pid = ::getpid();
  if (auto st = rt::readProcStat(state_.shim_pid)) state_.shim_start_ticks = st->start_ticks;
  state_.boot_id = rt::currentBootId();
  saveState();
}

// The agent's signals and the child's exit arrive on a signalfd that the relay loop polls.
// Returns it (-1 on failure) and the mask the child restores.
int Shim::blockSignals(sigset_t& old_mask) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGUSR1);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  int sfd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  ::signal(SIGPIPE, SIG_IGN);
  return sfd;
}

// The container could not start: records it as exited and tells the agent why.
void Shim::failStart(const std::string& message, int exit_code) {
  state_.status = rt::ShimStatus::kExited;
  state_.exit_code = exit_code;
  state_.reason = "ContainerCannotRun";
  state_.message = message;
  state_.finished_at = wallNanos();
  saveState();
  reportReady("error " + message + "\n");
}

// On cgroup v2: forks straight into the container's cgroup (clone3 with CLONE_INTO_CGROUP), so
// the child never moves between cgroups. A move (writing cgroup.procs) waits for the kernel's RCU
// grace period when no other move happened just before: 10-20 ms of a lone start. -1 with errno
// when the kernel cannot (older than 5.7, or the cgroup is not on cgroup2): the caller forks and
// the child joins as on v1. Like fork(): 0 in the child.
pid_t forkIntoCgroup(const cm::CgroupPaths& cgroup) {
#ifdef CLONE_INTO_CGROUP
  if (!cgroup.unified()) {
    errno = EINVAL;
    return -1;
  }
  const int dir = ::open(cgroup.unified_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  struct clone_args args {};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(dir);
  // The shim is single-threaded: the raw syscall is as safe here as fork() (no atfork handlers
  // are needed).
  const long pid = ::syscall(SYS_clone3, &args, sizeof args);
  const int err = errno;
  if (pid != 0) ::close(dir);  // the child closes it with every fd above 3 before exec
  errno = err;
  return static_cast<pid_t>(pid);
#else
  (void)cgroup;
  errno = ENOSYS;
  return -1;
#endif
}

// Forks the container (see runContainerChild) and closes the parent's copies of the child's
// ends. Returns fork's result.
pid_t Shim::forkContainer(const sigset_t& old_mask, const int out_pipe[2], const int err_pipe[2],
                          const int exec_pipe[2]) {
  int in_fd = -1;
  setUpAttach(in_fd);
  if (in_fd < 0) in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t pid = forkIntoCgroup(config_.cgroup);
  const bool in_cgroup = pid >= 0;
  if (pid < 0) pid = ::fork();
  if (pid == 0) {
    runContainerChild(config_, old_mask, in_fd, out_pipe[1], err_pipe[1], exec_pipe[1], in_cgroup);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::close(exec_pipe[1]);
  if (in_fd >= 0) ::close(in_fd);
  return pid;
}

void Shim::setUpAttach(int& in_fd) {
  std::string error;
  if (!attach_.listen(dir_, error)) {
    logf("nodeagent-shim: %s\n", error.c_str());
    return;
  }
  int stdin_pipe[2];
  if (!config_.stdin) return;
  if (::pipe2(stdin_pipe, O_CLOEXEC) != 0) {
    logf("nodeagent-shim: %s\n", errnoText("stdin pipe").c_str());
    return;
  }
  in_fd = stdin_pipe[0];
  attach_.setStdin(stdin_pipe[1], config_.stdin_once);
}

void Shim::markRunning(pid_t pid) {
  state_.pid = pid;
  if (auto st = rt::readProcStat(pid)) state_.pid_start_ticks = st->start_ticks;
  state_.started_at = wallNanos();
  state_.status = rt::ShimStatus::kRunning;
  saveState();
  reportReady("ok " + std::to_string(pid) + "\n");
}

// Relays the container's output into the log and the agent's signals to the container until
// the container has exited and its output is drained (or the drain timeout has passed).
void Shim::relayUntilExit(int sfd, int out_fd, int err_fd) {
  fds_[0] = out_fd;
  fds_[1] = err_fd;
  splitters_[0] = rt::LineSplitter();
  splitters_[1] = rt::LineSplitter();
  int64_t drain_deadline = 0;
  std::vector<pollfd> pfds;
  while (true) {
    if (child_done_ && fds_[0] < 0 && fds_[1] < 0) break;
    // The signals, the two output pipes (a closed one, -1, is skipped by poll), the attaches.
    pfds.assign({{sfd, POLLIN, 0}, {fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}});
    attach_.addPollFds(pfds);
    int timeout = -1;
    if (child_done_) {
      int64_t left_ms = (drain_deadline - wallNanos()) / 1'000'000;
      if (left_ms <= 0) break;
      timeout = static_cast<int>(left_ms);
    }
    int r = ::poll(pfds.data(), static_cast<nfds_t>(pfds.size()), timeout);
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (pfds[1 + i].fd >= 0 && (pfds[1 + i].revents & (POLLIN | POLLHUP | POLLERR))) {
        pumpStream(i);
      }
    }
    attach_.handle(pfds, 3);
    if ((pfds[0].revents & POLLIN) && handleSignals(sfd)) {
      drain_deadline = wallNanos() + int64_t{kDrainTimeoutMs} * 1'000'000;
    }
  }
}

// Forwards SIGTERM (as SIGTERM) and SIGUSR1 (as SIGKILL) to the container and reaps it on
// SIGCHLD. Returns true when the container has just exited.
bool Shim::handleSignals(int sfd) {
  bool exited = false;
  struct signalfd_siginfo si;
  while (::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGTERM && !child_done_) {
      signalContainer(SIGTERM);
    } else if (si.ssi_signo == SIGUSR1 && !child_done_) {
      signalContainer(SIGKILL);
    } else if (si.ssi_signo == SIGCHLD && !child_done_) {
      if (reapContainer()) exited = true;
    }
  }
  return exited;
}

// Reaps the container's main process if it has exited, killing what is left of the container
// first (its cgroup, else its process group).
bool Shim::reapContainer() {
  siginfo_t info{};
  // Peek first: while the exited leader is unreaped its process group id cannot be
  // reused, so killing the rest of the group cannot hit a stranger.
  if (::waitid(P_PID, static_cast<id_t>(child_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != child_) {
    return false;
  }
  signalContainer(SIGKILL);
  int wstatus = 0;
  ::waitpid(child_, &wstatus, 0);
  onChildExit(wstatus);
  recordOomKill();
  return true;
}

// An OOM kill in the container's cgroup while it ran, and an exit that is not a success: kubelet's
// OOMKilled, exit code 137 when a signal (the OOM killer's SIGKILL) ended the main process. An OOM
// kill of another of its processes that made the main process fail counts too (as containerd
// reports it).
void Shim::recordOomKill() {
  if (!oom_kills_before_ || state_.exit_code == 0) return;
  const std::optional<uint64_t> now = cm::oomKillCount(config_.cgroup);
  if (!now || *now <= *oom_kills_before_) return;
  state_.reason = std::string(rt::kOomKilledReason);
  if (state_.signal != 0) state_.exit_code = rt::exitCodeForSignal(SIGKILL);
}

// Writes what is left of partial lines and the final state.
void Shim::finish() {
  auto flush = [&](int i) {
    auto stream = i == 0 ? rt::LogStream::kStdout : rt::LogStream::kStderr;
    splitters_[i].finish([&](std::string_view t, bool p) { writeRecord(stream, t, p); });
  };
  flush(0);
  flush(1);
  attach_.close();
  recordTerminationMessage();
  saveState();
}

// Removes the container's cgroup once its processes are gone (killed: the kernel may take a moment
// to end them). One that stays is the agent's to remove (with the container, or the pod's cgroup).
void Shim::removeCgroup() {
  if (config_.cgroup.empty()) return;
  std::string error;
  if (cm::removeCgroupWaiting(config_.cgroup, kCgroupRemoveAttempts, error)) return;
  logf("nodeagent-shim: remove the container's cgroup: %s\n", error.c_str());
}

int Shim::run() {
  recordShimIdentity();
  sigset_t old_mask;
  const int sfd = blockSignals(old_mask);
  openLog();
  createTerminationLog();
  int out_pipe[2], err_pipe[2], exec_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0 ||
      ::pipe2(exec_pipe, O_CLOEXEC) != 0 || sfd < 0) {
    failStart(errnoText("pipe"), 128);
    removeCgroup();
    return 1;
  }
  // The cgroup is the container's alone (new, made by the agent): OOM kills from here on are its.
  if (!config_.cgroup.empty()) oom_kills_before_ = cm::oomKillCount(config_.cgroup);
  const pid_t pid = forkContainer(old_mask, out_pipe, err_pipe, exec_pipe);
  if (pid < 0) {
    failStart(errnoText("fork"), 128);
    removeCgroup();
    return 1;
  }
  child_ = pid;
  if (std::optional<ExecFailure> failure = readExecFailure(exec_pipe[0], config_.argv[0])) {
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    failStart(failure->message, failure->exit_code);
    removeCgroup();
    return 0;
  }
  markRunning(pid);
  relayUntilExit(sfd, out_pipe[0], err_pipe[0]);
  finish();
  removeCgroup();
  return 0;
}

int runMode(const std::string& dir) {
  ::syscall(SYS_close_range, 4U, ~0U, 0U);
  std::string text, error;
  rt::ShimConfig config;
  if (!rt::readWholeFile(dir + "/config", text, error) ||
      !rt::decodeShimConfig(text, config, error)) {
    logf("nodeagent-shim: %s/config: %s\n", dir.c_str(), error.c_str());
    reportReady("error " + dir + "/config: " + error + "\n");
    return 2;
  }
  Shim shim(dir, std::move(config));
  return shim.run();
}

int execMode(const std::string& dir, std::vector<std::string> argv) {
  ::syscall(SYS_close_range, 3U, ~0U, 0U);
  std::string text, error;
  rt::ShimConfig config;
  if (!rt::readWholeFile(dir + "/config", text, error) ||
      !rt::decodeShimConfig(text, config, error)) {
    logf("nodeagent-shim: %s/config: %s\n", dir.c_str(), error.c_str());
    return 126;
  }
  const char* stage = "exec";
  std::string detail;
  // A terminal on stdin (the agent's pseudo-terminal of an exec with a TTY): the command's
  // controlling terminal, in a session of its own (the agent spawned the shim in one already).
  if (::isatty(0)) {
    ::setsid();
    if (::ioctl(0, TIOCSCTTY, 0) != 0) {
      std::fprintf(stderr, "nodeagent-shim exec: TIOCSCTTY: %s\n", std::strerror(errno));
    }
  }
  execContainer(config, argv, stage, detail);
  const int err = errno;
  std::fprintf(stderr, "nodeagent-shim exec: %s %s: %s\n", stage, argv[0].c_str(),
               detail.empty() ? std::strerror(err) : detail.c_str());
  // 127 only for a command that is not there (a missing cgroup is not a missing command).
  return err == ENOENT && std::strcmp(stage, kCgroupStage) != 0 ? 127 : 126;
}

}  // namespace

int main(int argc, char** argv) {
  // No signal stays ignored that the agent's spawn left ignored: the container starts from here.
  rt::resetSignalDispositions();
  if (argc >= 3 && std::strcmp(argv[1], "run") == 0) return runMode(argv[2]);
  if (argc == 2 && std::strcmp(argv[1], "spawner") == 0) return nodeagent::shim::spawnerMode();
  if (argc >= 4 && std::strcmp(argv[1], "exec") == 0) {
    return execMode(argv[2], std::vector<std::string>(argv + 3, argv + argc));
  }
  std::fprintf(stderr,
               "usage: nodeagent-shim run <state-dir>\n"
               "       nodeagent-shim exec <state-dir> <command> [args...]\n"
               "       nodeagent-shim spawner   (fd 3: the agent's spawn socket)\n");
  return 2;
}
