// The on-disk contract between ProcessRuntime and nodeagent-shim, per container, in
// `<root-dir>/containers/<container-id>/`:
//   config   written once by the agent before it spawns the shim: identity (pod, container,
//            attempt, spec hash, image), the exact argv/env/cwd/credentials, log file and limits,
//            the preStop command and grace period (so a restarted agent can kill without the pod),
//            the container's cgroup (its name and its directory in each hierarchy) and OOM score
//   state    written by the shim (and by the agent only when it finds a dead shim): shim pid and
//            start time, container pid, created/running/exited, times, exit code, signal, reason
//            ("OOMKilled" when the kernel's OOM killer ended it)
//   shim.log the shim's own stderr (diagnostics only)
//   termination-log  the container's termination message file (created by the shim, owned by
//            the container's user), read when it exits
// Files are `key=value` lines (values escaped: `\\`, `\n`), repeated keys for lists, unknown keys
// ignored, and are replaced atomically (write a temp file, rename it over the file). Exits are
// also durable (the temp file fsynced before the rename, the directory after); `config` and the
// shim's created and running states are only atomic: a machine crash that loses them has also
// ended the container.
//
// Configs written before a field existed decode with its default (containers adopted after an
// agent upgrade keep working): no cgroup, no OOM score adjustment.
//
// Pure code with no dependency beyond the C++ standard library and libc: nodeagent-shim compiles
// it too (with agent/cm/cgroup_fs.cpp, which is as pure).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cm/cgroup_fs.h"

namespace nodeagent::runtime {

inline constexpr std::string_view kConfigFileName = "config";
inline constexpr std::string_view kStateFileName = "state";
inline constexpr std::string_view kShimLogFileName = "shim.log";

struct ShimConfig {
  std::string container_id;
  std::string pod_uid;
  std::string pod_name;
  std::string pod_namespace;
  std::string container_name;
  int attempt = 0;
  std::string hash;  // the container spec hash, 32 hex digits
  std::string image;
  int64_t created_at = 0;  // unix nanoseconds
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value"
  std::string working_dir;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  bool no_new_privs = false;
  // When set, the supplementary groups become exactly `groups` (else the shim's are kept).
  bool set_groups = false;
  std::vector<uint32_t> groups;
  // The capability bounding set (bit n = capability n); the effective, permitted, inheritable
  // and ambient sets are cut down to it. Absent: no change.
  std::optional<uint64_t> capabilities;
  // Capabilities raised as ambient for a non-root uid (kept across setuid and exec).
  uint64_t ambient_capabilities = 0;
  std::string log_path;
  int64_t log_max_size = 0;
  int log_max_files = 0;
  std::vector<std::string> pre_stop;  // exec preStop command, empty when none
  int64_t grace_period_seconds = 30;
  // The host file the container may write its termination message to (exported to it as
  // NODEAGENT_TERMINATION_MESSAGE_PATH); empty when its terminationMessagePath is empty.
  std::string termination_message_path;
  // terminationMessagePolicy FallbackToLogsOnError.
  bool termination_message_fallback = false;
  // The container's own cgroup, which the agent made before spawning the shim: its cgroupfs name
  // ("/kubepods/burstable/pod<uid>/<container-id>") and its directories. The container's process
  // joins it before exec (so do exec'd probes and hooks), kills go through it, and its OOM-kill
  // count tells an OOM kill. Empty: the container stays in the shim's cgroups.
  //   config lines: cgroup=<name>, cgroup_unified=<dir>, cgroup_v1=<controller>:<dir> (repeated)
  std::string cgroup_name;
  cm::CgroupPaths cgroup;
  // Written to the container's /proc/<pid>/oom_score_adj before exec (kubelet's value). Absent:
  // an inherited negative value is reset to 0.
  std::optional<int> oom_score_adj;
  // The container's RLIMIT_NOFILE soft limit (the hard limit stays): the agent raises its own at
  // start and gives its containers the limit it was started with. Absent: inherited.
  std::optional<uint64_t> open_files;
  // The container's stdin (spec stdin: true): a pipe whose write end the shim keeps for attached
  // clients (else /dev/null); with stdin_once (stdinOnce: true) the shim closes it once the first
  // client that attached with stdin has ended its input or detached.
  bool stdin = false;
  bool stdin_once = false;
};

// The socket in the container's state directory where nodeagent-shim serves attaches (mode 0600).
// A client first sends one byte of flags (kAttachWantsStdin), then, when it asked for stdin, the
// bytes for the container's stdin; closing its sending side ends its input. The shim sends every
// piece of the container's output read after it connected, after writing it to the log, as frames:
// one byte kAttachStdout or kAttachStderr, the length as 4 bytes big-endian, the bytes. A client
// that lets more than kAttachClientBuffer bytes queue up is dropped; the shim closes every client
// once the container exited and its output was read.
inline constexpr std::string_view kAttachSocketName = "attach.sock";
inline constexpr unsigned char kAttachWantsStdin = 1;
inline constexpr unsigned char kAttachStdout = 1;
inline constexpr unsigned char kAttachStderr = 2;
inline constexpr size_t kAttachFrameHeader = 5;
inline constexpr size_t kAttachClientBuffer = 1 << 20;

enum class ShimStatus { kCreated, kRunning, kExited };

struct ShimState {
  ShimStatus status = ShimStatus::kCreated;
  int shim_pid = 0;
  uint64_t shim_start_ticks = 0;  // /proc/<pid>/stat starttime, to tell a reused pid apart
  std::string boot_id;
  int pid = 0;  // the container process (also its process group and session)
  uint64_t pid_start_ticks = 0;
  int64_t started_at = 0;   // unix nanoseconds, 0 when it never ran
  int64_t finished_at = 0;  // unix nanoseconds, 0 while running
  int exit_code = 0;
  int signal = 0;  // the signal that ended it, 0 if it exited
  // kubelet's: "Completed", "Error", "ContainerCannotRun", "OOMKilled" (exit code 137 when the
  // OOM killer took the main process), ...
  std::string reason;
  std::string message;
};

std::string encodeShimConfig(const ShimConfig& config);
// False with `error` naming the field on malformed input. A config with a cgroup must name the
// container's own: `cgroup`, `cgroup_unified` and every `cgroup_v1` directory end with
// "/<container_id>" (the agent names it `<cgroup_parent>/<container-id>`), are absolute and have
// no "." or ".." component; anything else (say cgroup=/ or cgroup_unified=/sys/fs/cgroup, whose
// kill would hit every process of the host) makes the config unusable.
bool decodeShimConfig(std::string_view text, ShimConfig& config, std::string& error);
std::string encodeShimState(const ShimState& state);
bool decodeShimState(std::string_view text, ShimState& state, std::string& error);

enum class Durability {
  kDurable,  // fsync the file before the rename and the directory after it
  kAtomic,   // readers see the old or the new content; a crash of the machine may lose it
};
// Writes `<path>.tmp.<pid>`, fsyncs it, renames it over `path` and fsyncs the directory, so that
// after a crash `path` holds the old or the new content (kAtomic skips both fsyncs). False with
// `error` naming the step that failed (the temp file is removed; a failed directory fsync leaves
// the new content in place).
bool writeFileAtomic(const std::string& path, std::string_view content, std::string& error,
                     Durability durability = Durability::kDurable);
bool readWholeFile(const std::string& path, std::string& out, std::string& error);

struct ProcStat {
  char state = '?';  // R, S, D, Z (zombie), ...
  int ppid = 0;
  int session = 0;
  uint64_t utime_ticks = 0;  // CPU time in user and kernel mode, clock ticks
  uint64_t stime_ticks = 0;
  uint64_t start_ticks = 0;  // clock ticks after boot
  uint64_t vsize_bytes = 0;  // 0 when the line ends before these two
  uint64_t rss_pages = 0;
};
// The text of a /proc/<pid>/stat file; nullopt when it is malformed.
std::optional<ProcStat> parseProcStat(std::string_view text);
// /proc/<pid>/stat, nullopt when the process does not exist.
std::optional<ProcStat> readProcStat(int pid);
// True when `pid` is a live (non-zombie) process started at `start_ticks`.
bool processAlive(int pid, uint64_t start_ticks);
// /proc/sys/kernel/random/boot_id ("" if unreadable).
std::string currentBootId();
// The container process `state` records is alive: its pid, in this boot, started at the
// recorded time.
bool containerProcessAlive(const ShimState& state);

// Kubelet's reasons: "Completed" for exit code 0, "Error" otherwise; exit code 128+signal for a
// signal death.
int exitCodeForSignal(int signal);
std::string exitReason(int exit_code);
// The reason of a container the kernel's OOM killer hit (kubelet's and containerd's).
inline constexpr std::string_view kOomKilledReason = "OOMKilled";

}  // namespace nodeagent::runtime
