// kubelet's CgroupManager for the cgroupfs driver, on cgroup v2 (unified) and cgroup v1 (one
// hierarchy per controller): finds the hierarchies from /proc/self/mountinfo, and creates,
// updates, reads, kills and destroys cgroups by name. Names are kubelet's CgroupName: a list of
// components, "/kubepods/burstable/pod<uid>" as a cgroupfs path below each hierarchy's root.
//
// Controllers used: memory, cpu, cpuacct, pids, and on v1 freezer (to kill without escapes).
// cpuset and hugetlb are not managed (hugepages limits are left out); blkio/io not either.
// On v2 a cgroup's parents get "+cpu +memory +pids" in cgroup.subtree_control as it is made.
//
// Threading: const methods and the mutating ones may run on any thread concurrently (they are
// file operations on distinct cgroups); they block on the filesystem: call them on a blocking
// pool, never on a strand.
//
// Errors of a failed file operation carry a status code from its errno (cgroupErrnoStatus):
//   PermissionDenied   EACCES, EPERM, EROFS: the cgroupfs cannot be written at all by this
//                      process (unprivileged, a read-only mount, a container without delegation)
//   Unavailable        EBUSY (say, a memory limit below what the cgroup uses now)
//   InvalidArgument    EINVAL (a value the kernel refuses)
//   NotFound           ENOENT (a controller's file or a parent that is not there)
//   Internal           anything else
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cm/cgroup_fs.h"
#include "agent/cm/resources.h"
#include "base/status.h"

namespace nodeagent::cm {

enum class CgroupVersion { kV1, kV2 };
std::string_view cgroupVersionName(CgroupVersion v);  // "v1", "v2"

// Where the hierarchies are mounted.
struct CgroupMounts {
  CgroupVersion version = CgroupVersion::kV2;
  std::string unified_root;                     // v2: the cgroup2 mount point
  std::map<std::string, std::string> v1_roots;  // v1: controller -> mount point
};

// Reads the hierarchies from a /proc/self/mountinfo text (the first mount of each wins; only the
// controllers above are recorded). v1 when any of them is mounted as a cgroup v1 hierarchy (a
// hybrid system's controller-less cgroup2 mount is then ignored), else v2 on the cgroup2 mount.
// FailedPrecondition when neither is mounted. Pure: it reads no file.
base::StatusOr<CgroupMounts> parseCgroupMounts(std::string_view mountinfo);
// parseCgroupMounts of the file, except that a system with the memory controller on no v1 hierarchy
// is v2 when the cgroup2 mount's cgroup.controllers lists memory (say, a v1 freezer hierarchy next
// to a v2 memory controller). Errors name the file.
base::StatusOr<CgroupMounts> detectCgroupMounts(
    const std::string& mountinfo_path = "/proc/self/mountinfo");

// The status of a cgroup file operation that failed with errno `err` (table above).
base::Status cgroupErrnoStatus(int err, std::string message);

// kubelet's CgroupName.
using CgroupName = std::vector<std::string>;
// "/a/b/c" (the root is "/"); ParseCgroupfsToCgroupName is its inverse.
std::string cgroupNameToPath(const CgroupName& name);
// The directory of the node agents' cgroup-root locks, and the lock file of one cgroup root
// ("/a", "/a/" and "//a" are one root): <dir>/cgroup-root-<root, '/' and '%' escaped>.lock.
inline constexpr const char* kCgroupRootLockDir = "/run/nodeagent";
std::string cgroupRootLockPath(std::string_view cgroup_root);
CgroupName parseCgroupPath(std::string_view path);

// What a cgroup's counters say now (unset when the controller is missing).
struct CgroupStats {
  std::optional<uint64_t> memory_usage_bytes;        // v2 memory.current; v1 usage_in_bytes
  std::optional<uint64_t> memory_working_set_bytes;  // usage minus inactive_file (cadvisor's)
  std::optional<uint64_t> memory_rss_bytes;          // anon (v2) / total_rss (v1)
  std::optional<uint64_t> cpu_usage_nanos;  // v2 cpu.stat usage_usec*1000; v1 cpuacct.usage
  std::optional<uint64_t> pids_current;
  std::optional<uint64_t> oom_kills;
};

class CgroupManager {
 public:
  explicit CgroupManager(CgroupMounts mounts);

  CgroupVersion version() const { return mounts_.version; }
  const CgroupMounts& mounts() const { return mounts_; }

  // The cgroup's directory in every hierarchy (whether or not it exists).
  CgroupPaths paths(const CgroupName& name) const;
  // True when the cgroup's directory exists in every hierarchy it needs.
  bool exists(const CgroupName& name) const;
  // Makes the cgroup (and missing parents) in every hierarchy, then applies `config`.
  // Error names the cgroup and the file that could not be written.
  base::Status create(const CgroupName& name, const ResourceConfig& config);
  // Writes the set fields of `config` (v1: memory.limit_in_bytes, cpu.shares, cpu.cfs_quota_us,
  // cpu.cfs_period_us, pids.max; v2: memory.max, cpu.weight, cpu.max, pids.max). A memory limit
  // also forbids swap, as containerd and runc do for kubelet (swap = limit), where the kernel
  // accounts swap: v1 memory.memsw.limit_in_bytes = the limit (kept >= memory.limit_in_bytes
  // throughout: raised first, lowered last), v2 memory.swap.max = 0; no limit (-1) writes -1 /
  // "max" there too. Without those files (swap accounting off) only the limit is written.
  base::Status update(const CgroupName& name, const ResourceConfig& config);
  // Kills every process in the cgroup and its children (killCgroup), then removes them
  // (deepest first), retrying briefly while the kernel finishes the kills. OK when it is gone
  // (or was never there); Unavailable when a directory stays busy. InvalidArgument, touching
  // nothing, for the root (an empty name) or a component "", ".", ".." or with a '/'; Internal
  // when a directory is the root of a mount (killCgroup refuses it).
  base::Status destroy(const CgroupName& name);
  // The names of its child cgroups (directory names, the union over its hierarchies), sorted.
  std::vector<std::string> children(const CgroupName& name) const;
  std::vector<int> pids(const CgroupName& name) const;
  base::StatusOr<CgroupStats> stats(const CgroupName& name) const;
  // The limits the cgroup has now (what update would have written), for tests and /stats; unset
  // where the file is missing. "No limit" reads as -1 (v1's huge memory.limit_in_bytes, "max").
  // v2: cpu_shares is the smallest shares value whose weight is cpu.weight (v1 -> v2 is lossy).
  // NotFound when the cgroup does not exist.
  base::StatusOr<ResourceConfig> readConfig(const CgroupName& name) const;

 private:
  CgroupMounts mounts_;
};

}  // namespace nodeagent::cm
