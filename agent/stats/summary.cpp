#include "agent/stats/summary.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "agent/cm/cgroup_fs.h"
#include "agent/eviction/signal_source.h"
#include "agent/runtime/runtime.h"
#include "api/time.h"
#include "base/blocking.h"
#include "base/log.h"
#include "base/path_component.h"

namespace nodeagent::stats {
namespace {

NODEAGENT_LOGGER("stats")

namespace fs = std::filesystem;

// The node's cumulative CPU time from /proc/stat's "cpu" line (every state but idle and iowait),
// in nanoseconds.
std::optional<uint64_t> nodeCpuNanos(const std::string& proc_root) {
  std::istringstream in(cm::readSmallFile(proc_root + "/stat"));
  std::string label;
  if (!(in >> label) || label != "cpu") return std::nullopt;
  uint64_t v[8] = {};
  for (auto& x : v) {
    if (!(in >> x)) break;
  }
  // user nice system idle iowait irq softirq steal
  const uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  const long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) return std::nullopt;
  return busy * (1000000000ULL / static_cast<uint64_t>(hz));
}

// The boot time (btime of /proc/stat), the node's startTime.
std::optional<api::Timestamp> bootTime(const std::string& proc_root) {
  std::istringstream in(cm::readSmallFile(proc_root + "/stat"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("btime ", 0) == 0) {
      int64_t secs = std::strtoll(line.c_str() + 6, nullptr, 10);
      return api::Timestamp(std::chrono::seconds(secs));
    }
  }
  return std::nullopt;
}

std::string containerId(const std::string& id) {
  auto pos = id.find("://");
  return pos == std::string::npos ? id : id.substr(pos + 3);
}

nlohmann::json fsJson(const std::string& time, const std::optional<eviction::FsInfo>& node_fs,
                      std::optional<DirUsage> used) {
  nlohmann::json j = {{"time", time}};
  if (node_fs) {
    j["availableBytes"] = node_fs->available_bytes;
    j["capacityBytes"] = node_fs->capacity_bytes;
    j["inodesFree"] = node_fs->inodes_free;
    j["inodes"] = node_fs->inodes;
  }
  if (used) {
    j["usedBytes"] = used->bytes;
    j["inodesUsed"] = used->inodes;
  }
  return j;
}

nlohmann::json memoryJson(const std::string& time, const cm::CgroupStats& s) {
  nlohmann::json j = {{"time", time}};
  if (s.memory_usage_bytes) j["usageBytes"] = *s.memory_usage_bytes;
  if (s.memory_working_set_bytes) j["workingSetBytes"] = *s.memory_working_set_bytes;
  if (s.memory_rss_bytes) j["rssBytes"] = *s.memory_rss_bytes;
  return j;
}

}  // namespace

DirUsage dirUsage(const std::string& path) {
  DirUsage u;
  std::error_code ec;
  struct stat st {};
  if (path.empty() || ::lstat(path.c_str(), &st) != 0) return u;
  u.bytes += static_cast<int64_t>(st.st_blocks) * 512;
  u.inodes += 1;
  if (!S_ISDIR(st.st_mode)) return u;
  fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    u.bytes += static_cast<int64_t>(st.st_blocks) * 512;
    u.inodes += 1;
  }
  return u;
}

SummaryProvider::SummaryProvider(asio::any_io_executor executor, base::Clock& clock,
                                 SummaryOptions options)
    : strand_(asio::make_strand(executor)), clock_(clock), options_(std::move(options)) {
  if (!options_.blocking_executor) options_.blocking_executor = executor;
  if (!options_.cgroup_stats && options_.container_manager) {
    auto cm = options_.container_manager;
    options_.cgroup_stats = [cm](const cm::CgroupName& name) -> std::optional<cm::CgroupStats> {
      auto s = cm->cgroups().stats(name);
      if (!s.ok()) return std::nullopt;
      return *s;
    };
  }
  if (!options_.kubepods && options_.container_manager) {
    options_.kubepods = options_.container_manager->kubepods();
  }
  if (!options_.pod_cgroup && options_.container_manager &&
      options_.container_manager->options().cgroups_per_qos) {
    // Without per-QoS cgroups every pod's containers share the cgroup root: no pod figures.
    auto cm = options_.container_manager;
    options_.pod_cgroup = [cm](const api::Pod& pod) -> std::optional<cm::CgroupName> {
      return cm->podCgroupName(pod);
    };
  }
}

SummaryProvider::~SummaryProvider() = default;

void SummaryProvider::start() { started_ = true; }

void SummaryProvider::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    if (self->timer_) self->timer_->cancel();
  });
}

void SummaryProvider::schedule(base::Duration d) {
  if (stopped_ || !timer_) return;
  timer_->asyncWaitFor(d, [self = shared_from_this()] { self->tick(); });
}

void SummaryProvider::tick() {
  if (stopped_) return;
  // Idle first, then look: a request in between either sees idle_ and starts a refresh itself,
  // or is seen here.
  idle_ = true;
  const auto since = clock_.now().time_since_epoch().count() - last_request_ns_.load();
  if (since > options_.idle_after.count() || !idle_.exchange(false)) return;
  refresh();
}

void SummaryProvider::refresh() {
  if (stopped_) return;
  if (!timer_) timer_ = clock_.makeTimer(strand_);
  asio::co_spawn(
      strand_,
      [](std::shared_ptr<SummaryProvider> s) -> asio::awaitable<void> {
        SummaryProvider* raw = s.get();
        co_await base::runBlocking(raw->options_.blocking_executor, [raw] {
          try {
            raw->collect();
          } catch (const std::exception& e) {
            log()->warn("Collecting the stats summary failed err={}", e.what());
          }
          return true;
        });
        s->schedule(s->options_.refresh_period);
      }(shared_from_this()),
      asio::detached);
}

std::string SummaryProvider::json() {
  const auto now = clock_.now();
  last_request_ns_ = now.time_since_epoch().count();
  if (started_ && !stopped_ && idle_.exchange(false)) {
    asio::post(strand_, [self = shared_from_this()] { self->refresh(); });
  }
  std::lock_guard lock(mu_);
  if (json_.empty() || now - collected_at_ > 2 * options_.refresh_period) return "";
  return json_;
}

std::optional<cm::CgroupStats> SummaryProvider::cgroupStats(const cm::CgroupName& name) const {
  if (!options_.cgroup_stats) return std::nullopt;
  return options_.cgroup_stats(name);
}

nlohmann::json SummaryProvider::cpuJson(const std::string& key, uint64_t usage_nanos,
                                        const std::string& time, std::set<std::string>& seen) {
  seen.insert(key);
  nlohmann::json j = {{"time", time}, {"usageCoreNanoSeconds", usage_nanos}};
  const auto now = clock_.now();
  std::lock_guard lock(mu_);
  auto it = cpu_prev_.find(key);
  if (it != cpu_prev_.end() && now > it->second.at && usage_nanos >= it->second.usage_nanos) {
    const double dt = std::chrono::duration<double, std::nano>(now - it->second.at).count();
    const double du = static_cast<double>(usage_nanos - it->second.usage_nanos);
    j["usageNanoCores"] = static_cast<uint64_t>(du / dt * 1e9);
  }
  if (it == cpu_prev_.end() || now > it->second.at) cpu_prev_[key] = CpuSample{usage_nanos, now};
  return j;
}

std::optional<cm::CgroupName> SummaryProvider::podCgroup(const api::Pod& pod) const {
  if (!options_.pod_cgroup) return std::nullopt;
  return options_.pod_cgroup(pod);
}

std::map<std::string, std::optional<api::PodStatus>> SummaryProvider::statusesByUid() const {
  std::map<std::string, std::optional<api::PodStatus>> out;
  if (!options_.pods) return out;
  for (auto& p : options_.pods()) {
    if (p.pod) out[p.pod->metadata.uid] = std::move(p.status);
  }
  return out;
}

// One collection's shared inputs: its time, the node's start and filesystem, and the CPU samples
// it took (those of cgroups gone since are dropped at the end).
struct SummaryProvider::Collection {
  std::string time;
  std::string start_time;
  std::optional<eviction::FsInfo> node_fs;
  std::set<std::string> cpu_seen;
};

nlohmann::json SummaryProvider::collect() {
  const auto& o = options_;
  Collection c;
  c.time = api::formatTime(api::Timestamp(clock_.wallNow().time_since_epoch()));
  const auto boot = bootTime(o.proc_root);
  c.start_time = boot ? api::formatTime(*boot) : c.time;
  c.node_fs = eviction::statFs(o.root_dir);
  nlohmann::json node = nodeJson(c);
  nlohmann::json pods = nlohmann::json::array();
  std::vector<SummaryPod> summary_pods = o.pods ? o.pods() : std::vector<SummaryPod>{};
  for (const auto& sp : summary_pods) {
    if (sp.pod) pods.push_back(podJson(sp, c));
  }
  nlohmann::json summary = {{"node", std::move(node)}, {"pods", std::move(pods)}};
  std::string text = summary.dump();
  {
    std::lock_guard lock(mu_);
    json_ = std::move(text);
    collected_at_ = clock_.now();
    std::erase_if(cpu_prev_, [&](const auto& entry) { return !c.cpu_seen.contains(entry.first); });
  }
  return summary;
}

nlohmann::json SummaryProvider::nodeJson(Collection& run) {
  const auto& o = options_;
  const std::string& time = run.time;
  auto& cpu_seen = run.cpu_seen;
  const auto& node_fs = run.node_fs;
  nlohmann::json node = {{"nodeName", o.node_name}, {"startTime", run.start_time}};
  if (auto cpu = nodeCpuNanos(o.proc_root)) node["cpu"] = cpuJson("node", *cpu, time, cpu_seen);
  if (auto mem = eviction::parseMemInfo(cm::readSmallFile(o.proc_root + "/meminfo"))) {
    const int64_t ws = eviction::memInfoWorkingSet(*mem);
    node["memory"] = {{"time", time},
                      {"availableBytes", std::max<int64_t>(0, mem->total - ws)},
                      {"usageBytes", mem->total - mem->free},
                      {"workingSetBytes", ws}};
    // rssBytes: anonymous memory (AnonPages).
    std::istringstream in(cm::readSmallFile(o.proc_root + "/meminfo"));
    std::string key;
    int64_t kib = 0;
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      if ((ls >> key >> kib) && key == "AnonPages:") node["memory"]["rssBytes"] = kib * 1024;
    }
  }
  if (node_fs) {
    node["fs"] = {{"time", time},
                  {"availableBytes", node_fs->available_bytes},
                  {"capacityBytes", node_fs->capacity_bytes},
                  {"inodesFree", node_fs->inodes_free},
                  {"inodes", node_fs->inodes}};
  }
  if (auto images = o.image_fs ? o.image_fs() : std::nullopt) {
    // kubelet's CRI stats provider: the size of the filesystem holding the images, and what the
    // runtime says its images use of it.
    if (auto fs = eviction::statFs(images->mountpoint)) {
      node["runtime"]["imageFs"] = {{"time", time},
                                    {"availableBytes", fs->available_bytes},
                                    {"capacityBytes", fs->capacity_bytes},
                                    {"usedBytes", images->used_bytes},
                                    {"inodesFree", fs->inodes_free},
                                    {"inodes", fs->inodes},
                                    {"inodesUsed", images->inodes_used}};
    }
  }
  {
    // usedBytes / inodesUsed of the node fs (f_blocks - f_bfree as df counts).
    struct ::statvfs s {};
    if (!o.root_dir.empty() && ::statvfs(o.root_dir.c_str(), &s) == 0 && node.contains("fs")) {
      node["fs"]["usedBytes"] =
          static_cast<int64_t>(s.f_blocks - s.f_bfree) * static_cast<int64_t>(s.f_frsize);
      node["fs"]["inodesUsed"] = static_cast<int64_t>(s.f_files - s.f_ffree);
    }
  }
  {
    int64_t pid_max = 0;
    std::ifstream in(o.proc_root + "/sys/kernel/pid_max");
    if (in >> pid_max) {
      nlohmann::json rl = {{"time", time}, {"maxpid", pid_max}};
      std::istringstream ls(cm::readSmallFile(o.proc_root + "/loadavg"));
      std::string a, b, c, tasks;
      if ((ls >> a >> b >> c >> tasks) && tasks.find('/') != std::string::npos) {
        rl["curproc"] = std::strtoll(tasks.c_str() + tasks.find('/') + 1, nullptr, 10);
      }
      node["rlimit"] = rl;
    }
  }
  if (o.kubepods) {
    const auto& kubepods = *o.kubepods;
    if (auto s = cgroupStats(kubepods)) {
      nlohmann::json pods_container = {{"name", "pods"}, {"startTime", run.start_time}};
      if (s->cpu_usage_nanos) {
        pods_container["cpu"] =
            cpuJson(cm::cgroupNameToPath(kubepods), *s->cpu_usage_nanos, time, cpu_seen);
      }
      pods_container["memory"] = memoryJson(time, *s);
      node["systemContainers"] = nlohmann::json::array({pods_container});
    }
  }

  return node;
}

nlohmann::json SummaryProvider::podJson(const SummaryPod& sp, Collection& run) {
  const auto& o = options_;
  const std::string& time = run.time;
  auto& cpu_seen = run.cpu_seen;
  const auto& node_fs = run.node_fs;
  const api::Pod& pod = *sp.pod;
  const auto& meta = pod.metadata;
  nlohmann::json p = {
      {"podRef", {{"name", meta.name}, {"namespace", meta.namespace_}, {"uid", meta.uid}}}};
  if (sp.status && sp.status->start_time) {
    p["startTime"] = api::formatTime(*sp.status->start_time);
  } else if (meta.creation_timestamp) {
    p["startTime"] = api::formatTime(*meta.creation_timestamp);
  }
  std::optional<cm::CgroupName> pod_cgroup = podCgroup(pod);
  if (pod_cgroup) {
    if (auto s = cgroupStats(*pod_cgroup)) {
      if (s->cpu_usage_nanos) {
        p["cpu"] = cpuJson(cm::cgroupNameToPath(*pod_cgroup), *s->cpu_usage_nanos, time, cpu_seen);
      }
      p["memory"] = memoryJson(time, *s);
      if (s->pids_current) p["process_stats"] = {{"process_count", *s->pids_current}};
    }
  }
  std::filesystem::path pod_logs;
  if (!o.pod_log_dir.empty()) {
    pod_logs = runtime::buildPodLogsDirectory(o.pod_log_dir, meta.namespace_, meta.name, meta.uid);
  }
  DirUsage total;
  nlohmann::json containers = nlohmann::json::array();
  for (const auto& c : pod.spec->containers) {
    nlohmann::json cj = {{"name", c.name}};
    const api::ContainerStatus* cs = nullptr;
    if (sp.status) {
      for (const auto& s : sp.status->container_statuses) {
        if (s.name == c.name) cs = &s;
      }
    }
    if (cs && cs->state.running && cs->state.running->started_at) {
      cj["startTime"] = api::formatTime(*cs->state.running->started_at);
    } else if (p.contains("startTime")) {
      cj["startTime"] = p["startTime"];
    }
    if (pod_cgroup && cs && !cs->container_id.empty()) {
      auto name = *pod_cgroup;
      name.push_back(containerId(cs->container_id));
      if (auto s = cgroupStats(name)) {
        if (s->cpu_usage_nanos) {
          cj["cpu"] = cpuJson(cm::cgroupNameToPath(name), *s->cpu_usage_nanos, time, cpu_seen);
        }
        cj["memory"] = memoryJson(time, *s);
      }
    }
    if (!pod_logs.empty()) {
      auto dir = base::childPath(pod_logs, "container name", c.name);
      if (dir.ok()) {
        DirUsage logs = dirUsage(dir->string());
        total.bytes += logs.bytes;
        total.inodes += logs.inodes;
        cj["logs"] = fsJson(time, node_fs, logs);
      }
    }
    containers.push_back(std::move(cj));
  }
  p["containers"] = std::move(containers);
  nlohmann::json volumes = nlohmann::json::array();
  if (!o.root_dir.empty()) {
    for (const auto& v : pod.spec->volumes) {
      if (v.source_type != "emptyDir") continue;
      auto pod_dir = base::childPath(fs::path(o.root_dir) / "pods", "pod UID", meta.uid);
      if (!pod_dir.ok()) break;
      auto dir =
          base::childPath(*pod_dir / "volumes" / "kubernetes.io~empty-dir", "volume name", v.name);
      if (!dir.ok()) continue;
      DirUsage used = dirUsage(dir->string());
      total.bytes += used.bytes;
      total.inodes += used.inodes;
      auto vj = fsJson(time, node_fs, used);
      vj["name"] = v.name;
      volumes.push_back(std::move(vj));
    }
  }
  if (!volumes.empty()) p["volume"] = std::move(volumes);
  p["ephemeral-storage"] = fsJson(time, node_fs, total);
  return p;
}

size_t SummaryProvider::cpuSamples() const {
  std::lock_guard lock(mu_);
  return cpu_prev_.size();
}

eviction::PodUsageMap SummaryProvider::podUsage(const std::vector<api::PodPtr>& pods) {
  eviction::PodUsageMap out;
  const auto statuses = statusesByUid();
  const auto& o = options_;
  for (const auto& pod_ptr : pods) {
    if (!pod_ptr) continue;
    const api::Pod& pod = *pod_ptr;
    const auto& meta = pod.metadata;
    eviction::PodUsage u;
    std::optional<cm::CgroupName> pod_cgroup = podCgroup(pod);
    if (pod_cgroup) {
      if (auto s = cgroupStats(*pod_cgroup)) {
        if (s->memory_working_set_bytes) {
          u.memory_working_set_bytes = static_cast<int64_t>(*s->memory_working_set_bytes);
        }
        if (s->pids_current) u.processes = static_cast<int64_t>(*s->pids_current);
      }
    }
    const api::PodStatus* status = nullptr;
    if (auto it = statuses.find(meta.uid); it != statuses.end() && it->second)
      status = &*it->second;
    DirUsage total;
    std::filesystem::path pod_logs;
    if (!o.pod_log_dir.empty()) {
      pod_logs =
          runtime::buildPodLogsDirectory(o.pod_log_dir, meta.namespace_, meta.name, meta.uid);
    }
    for (const auto& c : pod.spec->containers) {
      eviction::ContainerUsage cu;
      cu.name = c.name;
      if (pod_cgroup && status) {
        for (const auto& cs : status->container_statuses) {
          if (cs.name != c.name || cs.container_id.empty()) continue;
          auto name = *pod_cgroup;
          name.push_back(containerId(cs.container_id));
          if (auto s = cgroupStats(name); s && s->memory_working_set_bytes) {
            cu.memory_working_set_bytes = static_cast<int64_t>(*s->memory_working_set_bytes);
          }
        }
      }
      if (!pod_logs.empty()) {
        if (auto dir = base::childPath(pod_logs, "container name", c.name); dir.ok()) {
          DirUsage logs = dirUsage(dir->string());
          cu.disk_bytes = logs.bytes;
          total.bytes += logs.bytes;
          total.inodes += logs.inodes;
        }
      }
      u.containers.push_back(std::move(cu));
    }
    // kubelet's local volumes: emptyDir not backed by memory. (hostPath counts too, but kubelet
    // has no metrics for it: it adds nothing.)
    if (!o.root_dir.empty()) {
      for (const auto& v : pod.spec->volumes) {
        if (v.source_type != "emptyDir" || v.empty_dir_medium == "Memory") continue;
        auto pod_dir = base::childPath(fs::path(o.root_dir) / "pods", "pod UID", meta.uid);
        if (!pod_dir.ok()) break;
        auto dir = base::childPath(*pod_dir / "volumes" / "kubernetes.io~empty-dir", "volume name",
                                   v.name);
        if (!dir.ok()) continue;
        DirUsage used = dirUsage(dir->string());
        total.bytes += used.bytes;
        total.inodes += used.inodes;
      }
    }
    u.disk_bytes = total.bytes;
    u.inodes_used = total.inodes;
    out[meta.uid] = std::move(u);
  }
  return out;
}

}  // namespace nodeagent::stats
