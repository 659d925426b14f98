// The node's eviction signals as kubelet derives them from its summary (makeSignalObservations):
//
//   memory.available   = MemTotal - working set of the node. kubelet takes the working set of
//                        the root cgroup from cadvisor (usage - inactive_file). cadvisor on cgroup
//                        v2, where the root has no memory.current, computes it from /proc/meminfo
//                        as (MemTotal - MemFree) - inactive file. That formula is used here on
//                        every node (with or without cgroups, v1 or v2): it needs no cgroup access
//                        and agrees with cadvisor's root figure to within what the kernel accounts
//                        outside cgroups. `root_working_set` may supply the root cgroup's
//                        figure instead (v1 memory.usage_in_bytes - total_inactive_file).
//   allocatableMemory.available = allocatable memory - working set of kubepods (when given).
//   nodefs.available / nodefs.inodesFree = statvfs of --root-dir: f_bavail * f_frsize of
//                        f_blocks * f_frsize, f_ffree of f_files. When --pod-log-dir is on
//                        another filesystem, the one with less room available is reported
//                        (both hold what pods write).
//   imagefs.available / imagefs.inodesFree = statvfs of the runtime's image filesystem (a CRI
//                        runtime's ImageFsInfo mountpoint), when there is one: as kubelet, also
//                        when it is the node's filesystem.
//   pid.available      = kernel.pid_max - the number of tasks (the 4th field of /proc/loadavg,
//                        what sysinfo()'s procs, kubelet's figure, counts).
//
// Blocking: call observe() on the blocking pool. Thread-compatible.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "agent/eviction/eviction_manager.h"

namespace nodeagent::eviction {

struct MemInfo {
  int64_t total = 0;
  int64_t free = 0;
  int64_t available = 0;
  int64_t inactive_file = 0;
};
// /proc/meminfo's MemTotal, MemFree, MemAvailable, Inactive(file), in bytes; nullopt without
// MemTotal.
std::optional<MemInfo> parseMemInfo(std::string_view text);
// The node working set from meminfo: (MemTotal - MemFree) - Inactive(file), at least 0.
int64_t memInfoWorkingSet(const MemInfo& m);

struct FsInfo {
  int64_t available_bytes = 0;
  int64_t capacity_bytes = 0;
  int64_t inodes_free = 0;
  int64_t inodes = 0;
  uint64_t device = 0;
};
// statvfs + stat of `path`; nullopt when it cannot be read.
std::optional<FsInfo> statFs(const std::string& path);

struct RealSignalSourceOptions {
  std::string proc_root = "/proc";
  std::string root_dir;     // --root-dir (nodefs)
  std::string pod_log_dir;  // --pod-log-dir
  // Optional: the root cgroup's working set in bytes; nullopt falls back to /proc/meminfo.
  std::function<std::optional<int64_t>()> root_working_set;
  // Optional: kubepods' working set and the allocatable memory it may use
  // (allocatableMemory.available); both needed.
  std::function<std::optional<int64_t>()> kubepods_working_set;
  int64_t allocatable_memory_bytes = 0;
  // Optional: the directory of the runtime's image filesystem (imagefs.available and
  // imagefs.inodesFree, statvfs of it); nullopt while unknown.
  std::function<std::optional<std::string>()> image_fs_path;
};

class RealSignalSource final : public SignalSource {
 public:
  explicit RealSignalSource(RealSignalSourceOptions options) : options_(std::move(options)) {}
  Observations observe() override;

 private:
  RealSignalSourceOptions options_;
};

}  // namespace nodeagent::eviction
