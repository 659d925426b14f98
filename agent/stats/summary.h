// kubelet's /stats/summary (pkg/kubelet/server/stats/summary.go; the JSON shape of
// pkg/kubelet/apis/stats/v1alpha1 Summary), for metrics-server-style consumers:
//
//   {"node": {"nodeName", "startTime", "cpu": {"time", "usageNanoCores", "usageCoreNanoSeconds"},
//             "memory": {"time", "availableBytes", "usageBytes", "workingSetBytes", "rssBytes",
//                        "pageFaults", "majorPageFaults"},
//             "fs": {"time", "availableBytes", "capacityBytes", "usedBytes", "inodesFree",
//                    "inodes", "inodesUsed"},
//             "rlimit": {"time", "maxpid", "curproc"},
//             "systemContainers": [{"name": "pods", "startTime", "cpu", "memory"}]},
//    "pods": [{"podRef": {"name", "namespace", "uid"}, "startTime",
//              "containers": [{"name", "startTime", "cpu", "memory", "logs"}],
//              "cpu", "memory", "volume": [{"name", ...fs}], "ephemeral-storage": {...fs},
//              "process_stats": {"process_count"}}]}
//
// Sources: the node's cpu from /proc/stat, memory from /proc/meminfo (the same working set the
// eviction manager's memory.available uses, so the two agree), fs from statvfs of --root-dir,
// rlimit from kernel.pid_max and /proc/loadavg; kubepods ("pods"), each pod and each container
// from their cgroups (cm) when cgroups are enforced; logs and emptyDir volumes by walking their
// directories (bytes are allocated blocks, as du). usageNanoCores needs two samples: the
// previous cpu sample of each cgroup is kept and the rate is over the time between them (absent
// on the first sample). A figure that cannot be read is left out, as kubelet leaves it nil.
//
// The provider refreshes the summary every `refresh_period` on the blocking pool and serves the
// last one (kubelet's cadvisor also serves cached stats), so the HTTP handler never blocks. It
// refreshes only while someone reads it: the first request starts it, after `idle_after`
// without a request it stops (a node of thousands of pods pays nothing for a summary nobody
// reads), and the next request starts it again. Until a fresh summary is there (a summary older
// than two refresh periods is not served) a request gets none: the server answers 503.
// It also answers the eviction manager's per-pod usage (podUsage).
//
// Threading: start/stop/json from any thread; collect() and podUsage() block (blocking pool).
// Create with std::make_shared; the Clock must outlive it.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/cm/cgroup_manager.h"
#include "agent/cm/container_manager.h"
#include "agent/eviction/eviction_manager.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::stats {

// A pod as the summary needs it: the pod and its live status (container IDs and start times).
struct SummaryPod {
  api::PodPtr pod;
  std::optional<api::PodStatus> status;
};

// Bytes and inodes a directory tree takes (du: allocated blocks; every entry is an inode).
struct DirUsage {
  int64_t bytes = 0;
  int64_t inodes = 0;
};
DirUsage dirUsage(const std::string& path);

// What a runtime's images use of their filesystem (CRI ImageFsInfo): node.runtime.imageFs.
struct ImageFsUsage {
  std::string mountpoint;
  uint64_t used_bytes = 0;
  uint64_t inodes_used = 0;
};

struct SummaryOptions {
  std::string node_name;
  std::string proc_root = "/proc";
  std::string root_dir;  // --root-dir: the node fs, and pods' volumes (<root>/pods/<uid>/volumes)
  std::string pod_log_dir;  // --pod-log-dir (<dir>/<ns>_<name>_<uid>/<container>/)
  // Pod and container cgroups; null: no cgroup figures (pods then report fs figures only).
  std::shared_ptr<const cm::ContainerManager> container_manager;
  // The pods to report (the agent's desired pods with their statuses). Any thread, must not block.
  std::function<std::vector<SummaryPod>()> pods;
  base::Duration refresh_period = std::chrono::seconds(10);
  // Refreshing stops this long after the last json() request.
  base::Duration idle_after = std::chrono::minutes(5);
  // Where collect() runs; empty: the executor given to the constructor (tests).
  asio::any_io_executor blocking_executor;
  // Reads a cgroup's counters; default: container_manager->cgroups().stats(name). Tests give a
  // fake. Blocking.
  std::function<std::optional<cm::CgroupStats>(const cm::CgroupName&)> cgroup_stats;
  // The kubepods cgroup and a pod's cgroup (nullopt: none); default: the container manager's
  // (kubepods(), podCgroupName() with per-QoS cgroups, else none). Any thread, pure.
  std::optional<cm::CgroupName> kubepods;
  std::function<std::optional<cm::CgroupName>(const api::Pod&)> pod_cgroup;
  // The runtime's image filesystem (a CRI runtime's; nullopt: none, or not known yet). Any
  // thread, must not block.
  std::function<std::optional<ImageFsUsage>()> image_fs;
};

class SummaryProvider : public std::enable_shared_from_this<SummaryProvider> {
 public:
  SummaryProvider(asio::any_io_executor executor, base::Clock& clock, SummaryOptions options);
  ~SummaryProvider();

  // From now on a json() request starts the refreshing (nothing is collected before the first).
  // Any thread.
  void start();
  void stop();

  // The last summary's JSON text; "" before the first, or when it is older than two refresh
  // periods (refreshing had stopped: this request starts it again). Any thread.
  std::string json();

  // Builds the summary now (and keeps it for json()). Blocking; thread-safe.
  nlohmann::json collect();

  // The eviction manager's pod_usage: each pod's cgroup working set and pids, its logs and
  // emptyDir/hostPath volumes' bytes and inodes, per container its working set and logs.
  // Blocking; thread-safe.
  eviction::PodUsageMap podUsage(const std::vector<api::PodPtr>& pods);

  // How many CPU samples (node, kubepods, pod and container cgroups) are kept for the next
  // usageNanoCores: those of the latest collect() only. Any thread.
  size_t cpuSamples() const;

 private:
  struct CpuSample {
    uint64_t usage_nanos = 0;
    base::MonotonicTime at;
  };
  // {"time", "usageNanoCores"?, "usageCoreNanoSeconds"} for a cumulative usage of `key`; adds
  // `key` to `seen` (the collection's keys: the others' samples are dropped at its end).
  nlohmann::json cpuJson(const std::string& key, uint64_t usage_nanos, const std::string& time,
                         std::set<std::string>& seen);
  struct Collection;
  nlohmann::json nodeJson(Collection& run);
  nlohmann::json podJson(const SummaryPod& sp, Collection& run);
  std::optional<cm::CgroupStats> cgroupStats(const cm::CgroupName& name) const;
  std::optional<cm::CgroupName> podCgroup(const api::Pod& pod) const;
  std::map<std::string, std::optional<api::PodStatus>> statusesByUid() const;
  void schedule(base::Duration d);
  void refresh();  // strand only
  // The timer's turn: refresh when read lately, else go idle.
  void tick();  // strand only

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  SummaryOptions options_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> busy_{false};
  base::TimerPtr timer_;  // strand only
  // The last json() request (monotonic nanoseconds), and whether refreshing stopped for want of
  // requests.
  std::atomic<int64_t> last_request_ns_{0};
  std::atomic<bool> idle_{true};
  std::atomic<bool> started_{false};

  mutable std::mutex mu_;
  std::string json_;                    // guarded by mu_
  base::MonotonicTime collected_at_{};  // guarded by mu_
  // The latest collection's samples by cgroup path ("node" for /proc/stat).
  std::map<std::string, CpuSample> cpu_prev_;  // guarded by mu_
};

}  // namespace nodeagent::stats
