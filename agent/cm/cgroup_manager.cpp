#include "agent/cm/cgroup_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <system_error>

#include "base/make_dirs.h"

namespace nodeagent::cm {
namespace {

namespace fs = std::filesystem;

// The v1 controllers the agent manages (cpuset is left alone: a new v1 cpuset cgroup has empty
// cpus and mems, and no process could join it).
constexpr std::array<std::string_view, 5> kV1Controllers = {"cpu", "cpuacct", "freezer", "memory",
                                                            "pids"};
// What a v2 cgroup's parents enable for it, in this order.
constexpr std::array<std::string_view, 3> kV2Controllers = {"cpu", "memory", "pids"};

// destroy(): rmdir attempts while the killed processes finish exiting (about 0.5 s in all).
constexpr int kRemoveAttempts = 30;

// v1 memory.limit_in_bytes reads PAGE_COUNTER_MAX pages when unlimited (9223372036854771712
// with 4 KiB pages); anything this large is "no limit".
constexpr int64_t kV1UnlimitedMemory = int64_t{1} << 62;

bool isV1Controller(std::string_view c) {
  return std::find(kV1Controllers.begin(), kV1Controllers.end(), c) != kV1Controllers.end();
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescapeMountField(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string errnoText(int err) { return std::strerror(err); }

base::Status errnoStatus(int err, std::string message) {
  switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
      return base::permissionDeniedError(std::move(message));
    case ENOENT:
      return base::notFoundError(std::move(message));
    case EBUSY:
      return base::unavailableError(std::move(message));
    case EINVAL:
      return base::invalidArgumentError(std::move(message));
    default:
      return base::internalError(std::move(message));
  }
}

std::string cgroupLabel(const CgroupName& name) { return "cgroup " + cgroupNameToPath(name); }

std::string trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return std::string(s);
}

template <typename T>
std::optional<T> parseNumber(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::string> readTrimmed(const std::string& dir, std::string_view file) {
  std::string text;
  if (!readSmallFile(dir + "/" + std::string(file), text)) return std::nullopt;
  return trim(text);
}

std::optional<uint64_t> readU64(const std::string& dir, std::string_view file) {
  if (dir.empty()) return std::nullopt;
  auto text = readTrimmed(dir, file);
  if (!text) return std::nullopt;
  return parseNumber<uint64_t>(*text);
}

// A "key value" line of a flat-keyed file (memory.stat, cpu.stat).
std::optional<uint64_t> readKeyed(const std::string& dir, std::string_view file,
                                  std::string_view key) {
  if (dir.empty()) return std::nullopt;
  std::string text;
  if (!readSmallFile(dir + "/" + std::string(file), text)) return std::nullopt;
  for (auto line : split(text, '\n')) {
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ') {
      return parseNumber<uint64_t>(line.substr(key.size() + 1));
    }
  }
  return std::nullopt;
}

// Writes one control file in one write(2). A test's fake hierarchy (plain directories, not a
// cgroupfs) gets the file made; on a real cgroupfs a missing file is an error (the controller is
// not there), never something to create.
base::Status writeControl(const CgroupName& name, const std::string& dir, std::string_view file,
                          const std::string& value) {
  const std::string path = dir + "/" + std::string(file);
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && fs::is_directory(dir) && !onCgroupFs(dir)) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd < 0) {
    int err = errno;
    return errnoStatus(err, cgroupLabel(name) + ": open " + path + ": " + errnoText(err));
  }
  ssize_t n;
  do {
    n = ::write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n < 0) {
    return errnoStatus(
        err, cgroupLabel(name) + ": write \"" + value + "\" to " + path + ": " + errnoText(err));
  }
  if (static_cast<size_t>(n) != value.size()) {
    return base::internalError(cgroupLabel(name) + ": short write of \"" + value + "\" to " + path);
  }
  return base::okStatus();
}

// Writes `value` unless the file already reads `current_form` (the value as the kernel prints it
// back; nullopt: always write). For the CFS bandwidth files: each write of cpu.cfs_period_us,
// cpu.cfs_quota_us or cpu.max checks the bandwidth of every cgroup of the cpu hierarchy
// (tg_set_cfs_bandwidth walks the whole task-group tree under a global lock), so on a node with
// many cgroups a write costs far more than the read that finds a fresh cgroup already at the
// value (a new cgroup starts at the kernel's 100 ms period and no quota, the values kubelet
// writes for a container without a CPU limit). A skipped write is not checked against the
// hierarchy again.
base::Status writeControlIfChanged(const CgroupName& name, const std::string& dir,
                                   std::string_view file, const std::string& value,
                                   std::optional<std::string_view> current_form) {
  if (current_form && readTrimmed(dir, file) == *current_form) return base::okStatus();
  return writeControl(name, dir, file, value);
}

// Makes one cgroup directory. Its parent nearly always exists (kubepods, the QoS cgroup, the pod
// cgroup), so one mkdir(2) is tried first (base::makeDirs).
base::Status makeCgroupDir(const CgroupName& name, const std::string& dir) {
  const int err = base::makeDirs(dir);
  if (err == 0) return base::okStatus();
  return errnoStatus(err, cgroupLabel(name) + ": mkdir " + dir + ": " + errnoText(err));
}

bool controlFileExists(const std::string& dir, std::string_view file) {
  return ::access((dir + "/" + std::string(file)).c_str(), F_OK) == 0;
}

// v1 memory.limit_in_bytes = `limit` (-1: none) and, where swap is accounted
// (memory.memsw.limit_in_bytes exists: swapaccount on), memory+swap = the same: the container
// cannot swap past its limit (containerd's and runc's default with kubelet: swap = limit). The
// kernel keeps memsw >= memory limit (EINVAL otherwise): raising, memsw goes first; lowering, the
// memory limit does. The order comes from memsw's current value; should that be stale (another
// writer), EINVAL retries in the other order.
base::Status writeV1MemoryLimit(const CgroupName& name, const std::string& dir, int64_t limit) {
  const std::string value = limit < 0 ? std::string("-1") : std::to_string(limit);
  constexpr std::string_view kMemory = "memory.limit_in_bytes";
  constexpr std::string_view kMemsw = "memory.memsw.limit_in_bytes";
  if (!controlFileExists(dir, kMemsw)) return writeControl(name, dir, kMemory, value);
  const uint64_t target = limit < 0 ? UINT64_MAX : static_cast<uint64_t>(limit);
  std::optional<uint64_t> current;
  if (auto text = readTrimmed(dir, "memory.memsw.limit_in_bytes")) {
    current = parseNumber<uint64_t>(*text);
    if (!current && *text == "-1") current = UINT64_MAX;
  }
  const bool raising = current && target > *current;
  const std::string_view first = raising ? kMemsw : kMemory;
  const std::string_view second = raising ? kMemory : kMemsw;
  base::Status s = writeControl(name, dir, first, value);
  if (s.code() == base::StatusCode::kInvalidArgument) {
    RETURN_IF_ERROR(writeControl(name, dir, second, value));
    return writeControl(name, dir, first, value);
  }
  RETURN_IF_ERROR(s);
  return writeControl(name, dir, second, value);
}

std::string joinDir(const std::string& root, const std::string& cgroupfs_path) {
  if (cgroupfs_path == "/") return root;
  std::string out = root;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out + cgroupfs_path;
}

// The smallest v1 shares that convert to `weight`, so that readConfig followed by update writes
// the same weight back.
uint64_t weightToShares(uint64_t weight) {
  if (weight <= 1) return static_cast<uint64_t>(kMinShares);
  uint64_t num = (weight - 1) * 262142;
  return 2 + (num + 9998) / 9999;
}

using MemoryProbe = std::function<bool(const std::string& unified_root)>;

base::StatusOr<CgroupMounts> parseMounts(std::string_view mountinfo, const MemoryProbe& probe) {
  CgroupMounts mounts;
  std::string unified;
  for (auto line : split(mountinfo, '\n')) {
    if (line.empty()) continue;
    auto fields = split(line, ' ');
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    auto sep = std::find(fields.begin(), fields.end(), std::string_view("-"));
    if (fields.size() < 5 || sep == fields.end() || fields.end() - sep < 4) continue;
    std::string_view fstype = sep[1];
    std::string mount_point = unescapeMountField(fields[4]);
    if (fstype == "cgroup2") {
      if (unified.empty()) unified = mount_point;
    } else if (fstype == "cgroup") {
      for (auto opt : split(sep[3], ',')) {
        if (isV1Controller(opt)) mounts.v1_roots.emplace(std::string(opt), mount_point);
      }
    }
  }
  // A controller lives in one hierarchy only: memory mounted as v1 means the v1 driver, and a
  // hybrid system's cgroup2 mount then holds no controller of ours.
  const bool memory_v1 = mounts.v1_roots.contains("memory");
  bool use_v2 =
      !unified.empty() && (mounts.v1_roots.empty() || (!memory_v1 && probe && probe(unified)));
  if (use_v2) {
    mounts.version = CgroupVersion::kV2;
    mounts.unified_root = unified;
    mounts.v1_roots.clear();
    return mounts;
  }
  if (mounts.v1_roots.empty()) {
    return base::failedPreconditionError(
        "no cgroup hierarchy is mounted (neither cgroup2 nor a cgroup v1 controller among "
        "cpu, cpuacct, freezer, memory, pids)");
  }
  mounts.version = CgroupVersion::kV1;
  return mounts;
}

}  // namespace

base::Status cgroupErrnoStatus(int err, std::string message) {
  return errnoStatus(err, std::move(message));
}

std::string_view cgroupVersionName(CgroupVersion v) {
  return v == CgroupVersion::kV1 ? "v1" : "v2";
}

base::StatusOr<CgroupMounts> parseCgroupMounts(std::string_view mountinfo) {
  return parseMounts(mountinfo, nullptr);
}

base::StatusOr<CgroupMounts> detectCgroupMounts(const std::string& mountinfo_path) {
  std::string text;
  if (!readSmallFile(mountinfo_path, text)) {
    int err = errno;
    return errnoStatus(err, "read " + mountinfo_path + ": " + errnoText(err));
  }
  auto probe = [](const std::string& unified_root) {
    auto controllers = readTrimmed(unified_root, "cgroup.controllers");
    if (!controllers) return false;
    for (auto c : split(*controllers, ' ')) {
      if (c == "memory") return true;
    }
    return false;
  };
  auto mounts = parseMounts(text, probe);
  if (!mounts.ok()) return mounts.status().withContext(mountinfo_path);
  return mounts;
}

std::string cgroupNameToPath(const CgroupName& name) {
  if (name.empty()) return "/";
  std::string out;
  for (const auto& c : name) {
    out += '/';
    out += c;
  }
  return out;
}

std::string cgroupRootLockPath(std::string_view cgroup_root) {
  std::string path = std::string(kCgroupRootLockDir) + "/cgroup-root-";
  for (char c : cgroupNameToPath(parseCgroupPath(cgroup_root))) {
    if (c == '/') {
      path += "%2F";
    } else if (c == '%') {
      path += "%25";
    } else {
      path += c;
    }
  }
  return path + ".lock";
}

CgroupName parseCgroupPath(std::string_view path) {
  CgroupName name;
  for (auto c : split(path, '/')) {
    if (!c.empty()) name.emplace_back(c);
  }
  return name;
}

CgroupManager::CgroupManager(CgroupMounts mounts) : mounts_(std::move(mounts)) {}

CgroupPaths CgroupManager::paths(const CgroupName& name) const {
  const std::string path = cgroupNameToPath(name);
  CgroupPaths out;
  if (mounts_.version == CgroupVersion::kV2) {
    out.unified_dir = joinDir(mounts_.unified_root, path);
    return out;
  }
  for (const auto& [controller, root] : mounts_.v1_roots) {
    if (isV1Controller(controller)) out.v1.emplace(controller, joinDir(root, path));
  }
  return out;
}

bool CgroupManager::exists(const CgroupName& name) const {
  auto p = paths(name);
  if (p.empty()) return false;
  std::error_code ec;
  for (const auto& dir : p.dirs()) {
    if (!fs::is_directory(dir, ec)) return false;
  }
  return true;
}

base::Status CgroupManager::create(const CgroupName& name, const ResourceConfig& config) {
  const auto p = paths(name);
  if (p.empty()) return base::failedPreconditionError(cgroupLabel(name) + ": no hierarchy");
  if (p.unified()) {
    // A v2 controller's files appear in a cgroup only when its parent enables it in
    // cgroup.subtree_control, which needs the grandparent to have enabled it, and so on.
    auto offered = readTrimmed(mounts_.unified_root, "cgroup.controllers");
    if (!offered) {
      int err = errno;
      return errnoStatus(err, cgroupLabel(name) + ": read " + mounts_.unified_root +
                                  "/cgroup.controllers: " + errnoText(err));
    }
    std::set<std::string_view> available;
    for (auto c : split(*offered, ' ')) available.insert(c);
    CgroupName parent;
    for (size_t depth = 0; depth < name.size(); ++depth) {
      if (depth > 0) parent.push_back(name[depth - 1]);
      const std::string dir = joinDir(mounts_.unified_root, cgroupNameToPath(parent));
      if (depth > 0) {
        std::error_code ec;
        fs::create_directory(dir, ec);
        if (ec) {
          return errnoStatus(ec.value(),
                             cgroupLabel(name) + ": mkdir " + dir + ": " + ec.message());
        }
      }
      std::string enabled = readTrimmed(dir, "cgroup.subtree_control").value_or("");
      std::set<std::string_view> have;
      for (auto c : split(enabled, ' ')) have.insert(c.starts_with('+') ? c.substr(1) : c);
      std::string add;
      for (auto c : kV2Controllers) {
        if (!available.contains(c) || have.contains(c)) continue;
        if (!add.empty()) add += ' ';
        add += "+" + std::string(c);
      }
      if (!add.empty()) RETURN_IF_ERROR(writeControl(name, dir, "cgroup.subtree_control", add));
    }
  }
  for (const auto& dir : p.dirs()) RETURN_IF_ERROR(makeCgroupDir(name, dir));
  return update(name, config);
}

base::Status CgroupManager::update(const CgroupName& name, const ResourceConfig& config) {
  const auto p = paths(name);
  if (p.unified()) {
    const std::string& dir = p.unified_dir;
    if (config.memory_limit) {
      RETURN_IF_ERROR(writeControl(
          name, dir, "memory.max",
          *config.memory_limit < 0 ? std::string("max") : std::to_string(*config.memory_limit)));
      // No swap with a limit (containerd's and runc's default with kubelet: swap = limit), so
      // that the limit holds; only where the kernel accounts swap (the file exists).
      if (controlFileExists(dir, "memory.swap.max")) {
        RETURN_IF_ERROR(writeControl(name, dir, "memory.swap.max",
                                     *config.memory_limit < 0 ? std::string("max") : "0"));
      }
    }
    if (config.cpu_shares) {
      uint64_t weight = cpuSharesToWeight(*config.cpu_shares);
      if (weight != 0)
        RETURN_IF_ERROR(writeControl(name, dir, "cpu.weight", std::to_string(weight)));
    }
    if (config.cpu_quota || config.cpu_period) {
      std::string value = config.cpu_quota && *config.cpu_quota > 0
                              ? std::to_string(*config.cpu_quota)
                              : std::string("max");
      if (config.cpu_period) value += " " + std::to_string(*config.cpu_period);
      // cpu.max reads "<quota|max> <period>"; a value without a period changes the quota only.
      RETURN_IF_ERROR(writeControlIfChanged(
          name, dir, "cpu.max", value,
          config.cpu_period ? std::optional<std::string_view>(value) : std::nullopt));
    }
    if (config.pids_limit) {
      RETURN_IF_ERROR(writeControl(
          name, dir, "pids.max",
          *config.pids_limit < 0 ? std::string("max") : std::to_string(*config.pids_limit)));
    }
    return base::okStatus();
  }
  // v1: a limit whose controller is not mounted cannot be enforced; it is left out.
  const std::string memory = p.dirFor("memory");
  const std::string cpu = p.dirFor("cpu");
  const std::string pids = p.dirFor("pids");
  if (config.memory_limit && !memory.empty()) {
    RETURN_IF_ERROR(writeV1MemoryLimit(name, memory, *config.memory_limit));
  }
  if (!cpu.empty()) {
    if (config.cpu_shares) {
      RETURN_IF_ERROR(writeControl(name, cpu, "cpu.shares", std::to_string(*config.cpu_shares)));
    }
    // The period first: the kernel checks the quota against it.
    if (config.cpu_period) {
      const std::string period = std::to_string(*config.cpu_period);
      RETURN_IF_ERROR(writeControlIfChanged(name, cpu, "cpu.cfs_period_us", period, period));
    }
    if (config.cpu_quota) {
      const std::string quota = std::to_string(*config.cpu_quota > 0 ? *config.cpu_quota : -1);
      RETURN_IF_ERROR(writeControlIfChanged(name, cpu, "cpu.cfs_quota_us", quota, quota));
    }
  }
  if (config.pids_limit && !pids.empty()) {
    RETURN_IF_ERROR(writeControl(
        name, pids, "pids.max",
        *config.pids_limit < 0 ? std::string("max") : std::to_string(*config.pids_limit)));
  }
  return base::okStatus();
}

base::Status CgroupManager::destroy(const CgroupName& name) {
  // The root of each hierarchy holds every process of the host: never a kill target. Nor is a
  // name that climbs back up to it (or anywhere else).
  if (name.empty()) {
    return base::invalidArgumentError(
        "refusing to destroy the root cgroup \"/\" (it holds every process of the host)");
  }
  for (const auto& component : name) {
    if (component.empty() || component == "." || component == ".." ||
        component.find('/') != std::string::npos) {
      return base::invalidArgumentError("refusing to destroy " + cgroupLabel(name) +
                                        ": component \"" + component + "\" is not a cgroup name");
    }
  }
  const auto p = paths(name);
  std::string error;
  if (killCgroup(p, error) < 0) {
    return base::internalError(cgroupLabel(name) + ": kill: " + error);
  }
  if (!removeCgroupWaiting(p, kRemoveAttempts, error)) {
    return base::unavailableError(cgroupLabel(name) + ": remove: " + error);
  }
  return base::okStatus();
}

std::vector<std::string> CgroupManager::children(const CgroupName& name) const {
  std::set<std::string> names;
  for (const auto& dir : paths(name).dirs()) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code ec2;
      if (it->is_directory(ec2)) names.insert(it->path().filename().string());
    }
  }
  return {names.begin(), names.end()};
}

std::vector<int> CgroupManager::pids(const CgroupName& name) const {
  return cgroupPids(paths(name));
}

base::StatusOr<CgroupStats> CgroupManager::stats(const CgroupName& name) const {
  if (!exists(name)) return base::notFoundError(cgroupLabel(name) + ": does not exist");
  const auto p = paths(name);
  CgroupStats s;
  const std::string memory = p.dirFor("memory");
  std::optional<uint64_t> inactive_file;
  if (p.unified()) {
    s.memory_usage_bytes = readU64(memory, "memory.current");
    inactive_file = readKeyed(memory, "memory.stat", "inactive_file");
    s.memory_rss_bytes = readKeyed(memory, "memory.stat", "anon");
    if (auto usec = readKeyed(p.unified_dir, "cpu.stat", "usage_usec")) {
      s.cpu_usage_nanos = *usec * 1000;
    }
  } else {
    s.memory_usage_bytes = readU64(memory, "memory.usage_in_bytes");
    inactive_file = readKeyed(memory, "memory.stat", "total_inactive_file");
    s.memory_rss_bytes = readKeyed(memory, "memory.stat", "total_rss");
    s.cpu_usage_nanos = readU64(p.dirFor("cpuacct"), "cpuacct.usage");
  }
  if (s.memory_usage_bytes) {
    uint64_t inactive = inactive_file.value_or(0);
    s.memory_working_set_bytes =
        *s.memory_usage_bytes > inactive ? *s.memory_usage_bytes - inactive : 0;
  }
  s.pids_current = readU64(p.dirFor("pids"), "pids.current");
  s.oom_kills = oomKillCount(p);
  return s;
}

base::StatusOr<ResourceConfig> CgroupManager::readConfig(const CgroupName& name) const {
  if (!exists(name)) return base::notFoundError(cgroupLabel(name) + ": does not exist");
  const auto p = paths(name);
  ResourceConfig c;
  auto limitOrMax = [](const std::optional<std::string>& text) -> std::optional<int64_t> {
    if (!text) return std::nullopt;
    if (*text == "max") return -1;
    return parseNumber<int64_t>(*text);
  };
  if (p.unified()) {
    const std::string& dir = p.unified_dir;
    c.memory_limit = limitOrMax(readTrimmed(dir, "memory.max"));
    if (auto w = readU64(dir, "cpu.weight")) c.cpu_shares = weightToShares(*w);
    if (auto max = readTrimmed(dir, "cpu.max")) {
      auto parts = split(*max, ' ');
      c.cpu_quota = parts[0] == "max" ? std::optional<int64_t>(-1) : parseNumber<int64_t>(parts[0]);
      if (parts.size() > 1) c.cpu_period = parseNumber<uint64_t>(parts[1]);
    }
    c.pids_limit = limitOrMax(readTrimmed(dir, "pids.max"));
    return c;
  }
  if (auto memory = p.dirFor("memory"); !memory.empty()) {
    if (auto text = readTrimmed(memory, "memory.limit_in_bytes")) {
      if (auto v = parseNumber<int64_t>(*text)) c.memory_limit = *v >= kV1UnlimitedMemory ? -1 : *v;
    }
  }
  if (auto cpu = p.dirFor("cpu"); !cpu.empty()) {
    c.cpu_shares = readU64(cpu, "cpu.shares");
    if (auto text = readTrimmed(cpu, "cpu.cfs_quota_us")) c.cpu_quota = parseNumber<int64_t>(*text);
    c.cpu_period = readU64(cpu, "cpu.cfs_period_us");
  }
  if (auto pids = p.dirFor("pids"); !pids.empty()) {
    c.pids_limit = limitOrMax(readTrimmed(pids, "pids.max"));
  }
  return c;
}

}  // namespace nodeagent::cm
