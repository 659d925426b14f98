// The cgroup operations a container's own processes need, shared by the agent's cgroup manager
// and nodeagent-shim: which directories one cgroup has (one per hierarchy), joining it before
// exec, killing every process in it, and the kernel's OOM-kill count.
//
// Pure code with no dependency beyond the C++ standard library and libc: nodeagent-shim
// compiles it too (the shim is single-threaded and links no Asio or logging library).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nodeagent::cm {

// One cgroup in every hierarchy it lives in.
//   cgroup v2 (unified): `unified_dir` is its directory, `v1` is empty.
//   cgroup v1: `v1` maps each controller the agent uses (memory, cpu, cpuacct, pids, freezer)
//   to the cgroup's directory in that controller's hierarchy; controllers mounted together
//   ("cpu,cpuacct") map to the same directory.
struct CgroupPaths {
  std::string unified_dir;
  std::map<std::string, std::string> v1;

  bool unified() const { return !unified_dir.empty(); }
  bool empty() const { return unified_dir.empty() && v1.empty(); }
  // Every directory once (v2: one; v1: one per distinct hierarchy), in a stable order.
  std::vector<std::string> dirs() const;
  // The directory holding `controller`'s files: the unified one, or the v1 controller's; "" when
  // that controller is not there.
  std::string dirFor(std::string_view controller) const;
  bool operator==(const CgroupPaths&) const = default;
};

// The calling process joins the cgroup in every hierarchy (writes "0" to each cgroup.procs).
// It allocates: call it from a single-threaded process (the shim's forked child before exec).
// False with `error` naming the file and the errno text.
bool joinCgroup(const CgroupPaths& paths, std::string& error);

// Every process in the cgroup and its descendants, read from cgroup.procs (v2: the unified dir,
// recursively; v1: the freezer's, else the first hierarchy's, recursively). Empty when gone.
std::vector<int> cgroupPids(const CgroupPaths& paths);

// Kills every process of the cgroup and its descendants with SIGKILL, so that none can escape by
// forking meanwhile: v2 writes "1" to cgroup.kill (kernel 5.14+; older kernels: freeze through
// cgroup.freeze, SIGKILL each pid, thaw); v1 freezes through the freezer controller
// (freezer.state FROZEN, waiting until it reads FROZEN), SIGKILLs each pid of cgroup.procs, and
// thaws; without a freezer it SIGKILLs in rounds until cgroup.procs is empty. Returns the number
// of processes signalled (v2 cgroup.kill: the count seen before), or -1 with `error`. Waits
// (bounded, about 200 ms) for the freezer. A cgroup that is missing, or not on a cgroupfs, has
// nothing to kill: 0. Refuses (-1, nothing signalled) when any directory of `paths` is the root
// of a mount (see isMountRoot): a hierarchy's root cgroup holds every process of the host.
int killCgroup(const CgroupPaths& paths, std::string& error);

// The kernel's count of OOM kills in this cgroup (v2: memory.events `oom_kill`; v1:
// memory.oom_control `oom_kill`); nullopt without a memory controller or on older kernels.
std::optional<uint64_t> oomKillCount(const CgroupPaths& paths);

// Reads a whole small file (a cgroup control file, a /proc file) into `out`; false, with errno
// kept, when it cannot be opened or read.
bool readSmallFile(const std::string& path, std::string& out);
// The same, "" when it cannot be read.
std::string readSmallFile(const std::string& path);

// Removes the cgroup's directories (rmdir; child cgroups first, deepest first). A cgroup that
// still has processes stays (EBUSY): false with `error`. Missing directories are fine. Outside a
// cgroupfs (a test's fake hierarchy of plain directories) the files in them are removed too.
// Refuses (false, nothing removed) when any directory is the root of a mount (see isMountRoot):
// it would remove every empty cgroup of the hierarchy.
bool removeCgroup(const CgroupPaths& paths, std::string& error);

// removeCgroup, tried up to `attempts` times a few milliseconds apart (1, 2, 4... capped at
// 20 ms) while a directory is EBUSY: processes just killed leave their cgroup only once they have
// exited. Blocks the calling thread.
bool removeCgroupWaiting(const CgroupPaths& paths, int attempts, std::string& error);

// True when `path` is on a cgroup (v1) or cgroup2 file system (statfs magic). killCgroup never
// signals pids read from anywhere else.
bool onCgroupFs(const std::string& path);

// True when the directory `dir` is the root of a mounted file system, such as a cgroup
// hierarchy's root (/sys/fs/cgroup/memory, /sys/fs/cgroup on v2) or "/": it is on another device
// than `dir`/.. (a different superblock; ".." of "/" is "/" itself, which counts too), or statx
// reports STATX_ATTR_MOUNT_ROOT (Linux 5.8+; also catches a bind mount of a directory of the same
// file system). Two stats and a statx, no /proc/self/mountinfo parse: cheap enough for every kill
// and removal. The path is taken as written, ".." components resolved by the kernel, so
// "<root>/kubepods/.." counts as the root. False when `dir` cannot be stat'ed (missing).
bool isMountRoot(const std::string& dir);

}  // namespace nodeagent::cm
