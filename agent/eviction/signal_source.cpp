#include "agent/eviction/signal_source.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <fstream>
#include <sstream>

#include "agent/cm/cgroup_fs.h"
#include "base/log.h"

namespace nodeagent::eviction {
namespace {

NODEAGENT_LOGGER("eviction")

}  // namespace

std::optional<MemInfo> parseMemInfo(std::string_view text) {
  MemInfo m;
  bool have_total = false;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    int64_t kib = 0;
    if (!(ls >> key >> kib)) continue;
    const int64_t bytes = kib * 1024;
    if (key == "MemTotal:") {
      m.total = bytes;
      have_total = true;
    } else if (key == "MemFree:") {
      m.free = bytes;
    } else if (key == "MemAvailable:") {
      m.available = bytes;
    } else if (key == "Inactive(file):") {
      m.inactive_file = bytes;
    }
  }
  if (!have_total) return std::nullopt;
  return m;
}

int64_t memInfoWorkingSet(const MemInfo& m) {
  int64_t usage = m.total - m.free;
  int64_t ws = usage - m.inactive_file;
  return ws < 0 ? 0 : ws;
}

std::optional<FsInfo> statFs(const std::string& path) {
  struct statvfs fs {};
  if (path.empty() || ::statvfs(path.c_str(), &fs) != 0) return std::nullopt;
  struct stat st {};
  FsInfo info;
  if (::stat(path.c_str(), &st) == 0) info.device = static_cast<uint64_t>(st.st_dev);
  const auto frsize = static_cast<int64_t>(fs.f_frsize);
  info.available_bytes = static_cast<int64_t>(fs.f_bavail) * frsize;
  info.capacity_bytes = static_cast<int64_t>(fs.f_blocks) * frsize;
  info.inodes_free = static_cast<int64_t>(fs.f_ffree);
  info.inodes = static_cast<int64_t>(fs.f_files);
  return info;
}

Observations RealSignalSource::observe() {
  Observations out;
  const auto& o = options_;

  auto meminfo = parseMemInfo(cm::readSmallFile(o.proc_root + "/meminfo"));
  if (meminfo) {
    std::optional<int64_t> ws;
    if (o.root_working_set) ws = o.root_working_set();
    if (!ws) ws = memInfoWorkingSet(*meminfo);
    int64_t available = meminfo->total - *ws;
    out[Signal::kMemoryAvailable] = {available < 0 ? 0 : available, meminfo->total};
  } else {
    log()->warn("Cannot read memory signal path={}/meminfo", o.proc_root);
  }

  if (o.kubepods_working_set && o.allocatable_memory_bytes > 0) {
    if (auto ws = o.kubepods_working_set()) {
      int64_t available = o.allocatable_memory_bytes - *ws;
      out[Signal::kAllocatableMemoryAvailable] = {available < 0 ? 0 : available,
                                                  o.allocatable_memory_bytes};
    }
  }

  auto root = statFs(o.root_dir);
  auto logs = statFs(o.pod_log_dir);
  std::optional<FsInfo> bytes_fs = root;
  std::optional<FsInfo> inode_fs = root;
  if (logs && (!root || logs->device != root->device)) {
    if (!bytes_fs || logs->available_bytes < bytes_fs->available_bytes) bytes_fs = logs;
    if (!inode_fs || (logs->inodes > 0 && logs->inodes_free < inode_fs->inodes_free)) {
      inode_fs = logs;
    }
  }
  if (bytes_fs && bytes_fs->capacity_bytes > 0) {
    out[Signal::kNodeFsAvailable] = {bytes_fs->available_bytes, bytes_fs->capacity_bytes};
  }
  // Some filesystems (btrfs) report no inode counts: nothing to judge.
  if (inode_fs && inode_fs->inodes > 0) {
    out[Signal::kNodeFsInodesFree] = {inode_fs->inodes_free, inode_fs->inodes};
  }

  if (o.image_fs_path) {
    if (auto path = o.image_fs_path(); path && !path->empty()) {
      if (auto fs = statFs(*path); fs && fs->capacity_bytes > 0) {
        out[Signal::kImageFsAvailable] = {fs->available_bytes, fs->capacity_bytes};
        if (fs->inodes > 0) out[Signal::kImageFsInodesFree] = {fs->inodes_free, fs->inodes};
      }
    }
  }

  int64_t pid_max = 0;
  {
    std::ifstream in(o.proc_root + "/sys/kernel/pid_max");
    if (!(in >> pid_max)) pid_max = 0;
  }
  std::string loadavg = cm::readSmallFile(o.proc_root + "/loadavg");
  // "0.00 0.01 0.05 1/234 5678": running/total tasks.
  std::istringstream ls(loadavg);
  std::string a, b, c, tasks;
  if (pid_max > 0 && (ls >> a >> b >> c >> tasks)) {
    auto slash = tasks.find('/');
    if (slash != std::string::npos) {
      int64_t total = std::strtoll(tasks.c_str() + slash + 1, nullptr, 10);
      out[Signal::kPidAvailable] = {pid_max - total, pid_max};
    }
  }
  return out;
}

}  // namespace nodeagent::eviction
