#include "agent/cm/cgroup_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

namespace nodeagent::cm {
namespace {

// Bounds of the waits below: a freezer that never reports FROZEN (a task stuck in the kernel)
// must not hang the caller; the kill then proceeds without the freeze.
constexpr int kFreezePolls = 200;  // x 1 ms
constexpr int kKillRounds = 50;    // without a freezer: rounds of reading procs + SIGKILL

void sleepMillis(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

std::string errnoText(int err) { return std::strerror(err); }

std::string joinPath(const std::string& dir, std::string_view name) {
  std::string p = dir;
  if (p.empty() || p.back() != '/') p += '/';
  p.append(name.data(), name.size());
  return p;
}

bool readSmallFileImpl(const std::string& path, std::string& out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      errno = err;
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// One write(2) of `value` (cgroupfs takes a control value in a single write); errno on failure.
bool writeOnce(const std::string& path, std::string_view value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n;
  do {
    n = ::write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  int err = errno;
  ::close(fd);
  if (n < 0 || static_cast<size_t>(n) != value.size()) {
    errno = n < 0 ? err : EIO;
    return false;
  }
  return true;
}

bool isDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Names of the subdirectories of `dir` (child cgroups), sorted; empty when unreadable.
std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) is_dir = isDir(joinPath(dir, name));
    if (is_dir) out.emplace_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// `dir` and every cgroup below it, parents before children.
void collectTree(const std::string& dir, std::vector<std::string>& out) {
  out.push_back(dir);
  for (const auto& child : subdirs(dir)) collectTree(joinPath(dir, child), out);
}

void appendPids(const std::string& dir, std::vector<int>& out) {
  std::string text;
  if (!readSmallFileImpl(joinPath(dir, "cgroup.procs"), text)) return;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    char* end = nullptr;
    long v = std::strtol(line.c_str(), &end, 10);
    if (end != line.c_str() && v > 0) out.push_back(static_cast<int>(v));
  }
}

std::vector<int> treePids(const std::string& dir) {
  std::vector<int> pids;
  std::vector<std::string> tree;
  collectTree(dir, tree);
  for (const auto& d : tree) appendPids(d, pids);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

// The directory whose cgroup.procs lists the cgroup's processes (see cgroupPids).
std::string procsDir(const CgroupPaths& paths) {
  if (paths.unified()) return paths.unified_dir;
  std::string freezer = paths.dirFor("freezer");
  if (!freezer.empty()) return freezer;
  auto dirs = paths.dirs();
  return dirs.empty() ? std::string() : dirs.front();
}

// Value of the `key` line ("key N") of a flat-keyed file such as memory.events.
std::optional<uint64_t> keyedValue(const std::string& text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      std::string num(line.substr(key.size() + 1));
      char* end = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(num.c_str(), &end, 10);
      if (end == num.c_str() || errno != 0) return std::nullopt;
      return static_cast<uint64_t>(v);
    }
  }
  return std::nullopt;
}

int killPids(const std::vector<int>& pids, std::set<int>& signalled) {
  int n = 0;
  for (int pid : pids) {
    if (pid <= 1) continue;  // never init, never a process group
    if (::kill(pid, SIGKILL) == 0 || errno == EPERM) {
      if (signalled.insert(pid).second) ++n;
    }
  }
  return n;
}

// Signals rounds of cgroup.procs until it is empty (or only holds processes already signalled
// that the kernel has not finished removing), bounded.
int killInRounds(const std::string& dir, std::set<int>& signalled) {
  int total = 0;
  for (int round = 0; round < kKillRounds; ++round) {
    auto pids = treePids(dir);
    bool fresh = false;
    for (int pid : pids) fresh = fresh || !signalled.contains(pid);
    if (pids.empty() || (!fresh && round > 0)) break;
    total += killPids(pids, signalled);
    sleepMillis(1);
  }
  return total;
}

// Writes `thawed` to `file` in every cgroup below `dir` (best effort).
void thawDescendants(const std::string& dir, const char* file, const char* thawed) {
  std::vector<std::string> tree;
  collectTree(dir, tree);
  for (size_t i = 1; i < tree.size(); ++i) (void)writeOnce(joinPath(tree[i], file), thawed);
}

// v1: freeze (FROZEN), kill each process, thaw. A frozen task cannot fork, so none escapes; the
// SIGKILLs take effect on thaw.
int killV1Frozen(const std::string& freezer_dir, std::string& error) {
  std::string state_file = joinPath(freezer_dir, "freezer.state");
  // Nothing to freeze when no process is left (the usual case when a container's main process
  // has exited: an exited, unreaped process is not listed). Freezing costs about a millisecond,
  // reading the lists far less; with no process left, none can fork into the cgroup either. A
  // tree left frozen (a shim killed in the middle of its own kill) is still thawed, so that the
  // cgroup is never handed on frozen.
  if (treePids(freezer_dir).empty()) {
    std::string state;
    if (readSmallFileImpl(state_file, state) && state.rfind("THAWED", 0) != 0) {
      (void)writeOnce(state_file, "THAWED");
      thawDescendants(freezer_dir, "freezer.state", "THAWED");
    }
    return 0;
  }
  if (!writeOnce(state_file, "FROZEN")) {
    if (errno == ENOENT && !isDir(freezer_dir)) return 0;
    error = "write FROZEN to " + state_file + ": " + errnoText(errno);
    return -1;
  }
  std::string state;
  for (int i = 0; i < kFreezePolls; ++i) {
    if (readSmallFileImpl(state_file, state) && state.rfind("FROZEN", 0) == 0) break;
    // Writing FROZEN again makes the kernel retry tasks that were busy the first time.
    sleepMillis(1);
    (void)writeOnce(state_file, "FROZEN");
  }
  std::set<int> signalled;
  int n = killPids(treePids(freezer_dir), signalled);
  if (!writeOnce(state_file, "THAWED")) {
    error = "write THAWED to " + state_file + ": " + errnoText(errno);
    return -1;
  }
  // A cgroup below that was frozen by itself (a shim killed in the middle of its own kill) stays
  // frozen when its parent thaws, and its killed tasks with it: thaw every one.
  thawDescendants(freezer_dir, "freezer.state", "THAWED");
  // Processes that escaped the freeze (it never completed) are caught by further rounds.
  n += killInRounds(freezer_dir, signalled);
  return n;
}

int killV2(const std::string& dir, std::string& error) {
  auto before = treePids(dir);
  std::string kill_file = joinPath(dir, "cgroup.kill");
  if (writeOnce(kill_file, "1")) return static_cast<int>(before.size());
  if (errno != ENOENT) {
    error = "write 1 to " + kill_file + ": " + errnoText(errno);
    return -1;
  }
  if (!isDir(dir)) return 0;
  // Before 5.14: freeze, kill, thaw.
  std::string freeze_file = joinPath(dir, "cgroup.freeze");
  bool frozen = writeOnce(freeze_file, "1");
  if (frozen) {
    std::string events;
    for (int i = 0; i < kFreezePolls; ++i) {
      if (readSmallFileImpl(joinPath(dir, "cgroup.events"), events) &&
          keyedValue(events, "frozen") == std::optional<uint64_t>(1)) {
        break;
      }
      sleepMillis(1);
    }
  }
  std::set<int> signalled;
  int n = killPids(treePids(dir), signalled);
  if (frozen && !writeOnce(freeze_file, "0")) {
    error = "write 0 to " + freeze_file + ": " + errnoText(errno);
    return -1;
  }
  if (frozen) thawDescendants(dir, "cgroup.freeze", "0");
  n += killInRounds(dir, signalled);
  return n;
}

// Removes `dir` and what is below it, deepest first. On a real cgroupfs only directories exist
// to remove (their control files go with them); elsewhere (a test's fake hierarchy) files are
// unlinked too.
bool removeTree(const std::string& dir, bool real_cgroupfs, std::string& error, bool& busy) {
  std::vector<std::string> tree;
  collectTree(dir, tree);
  for (auto it = tree.rbegin(); it != tree.rend(); ++it) {
    if (!real_cgroupfs) {
      DIR* d = ::opendir(it->c_str());
      if (d != nullptr) {
        while (dirent* e = ::readdir(d)) {
          std::string_view name = e->d_name;
          if (name == "." || name == "..") continue;
          std::string p = joinPath(*it, name);
          if (!isDir(p)) ::unlink(p.c_str());
        }
        ::closedir(d);
      }
    }
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT) {
      busy = errno == EBUSY;
      error = "rmdir " + *it + ": " + errnoText(errno);
      return false;
    }
  }
  return true;
}

// A cgroup whose directory is the root of a mount (a hierarchy's root cgroup, "/", ...) is never
// a container's or a pod's: killing it would kill every process of the host, removing it every
// empty cgroup. False with `error` naming the directory and `what` was refused.
bool refuseMountRoots(const CgroupPaths& paths, std::string_view what, std::string& error) {
  for (const auto& dir : paths.dirs()) {
    if (isMountRoot(dir)) {
      error = "refusing to " + std::string(what) + " " + dir +
              ": it is the root of a mounted file system (a cgroup hierarchy's root), not a "
              "container's or pod's cgroup";
      return false;
    }
  }
  return true;
}

// removeCgroup; `busy` tells whether what failed was EBUSY (processes not yet gone).
bool removeAll(const CgroupPaths& paths, std::string& error, bool& busy) {
  bool ok = true;
  busy = false;
  if (!refuseMountRoots(paths, "remove", error)) return false;
  for (const auto& dir : paths.dirs()) {
    if (!isDir(dir)) continue;
    std::string err;
    bool dir_busy = false;
    if (!removeTree(dir, onCgroupFs(dir), err, dir_busy)) {
      if (ok) error = err;
      ok = false;
      busy = busy || dir_busy;
    }
  }
  return ok;
}

}  // namespace

std::vector<std::string> CgroupPaths::dirs() const {
  std::vector<std::string> out;
  if (!unified_dir.empty()) out.push_back(unified_dir);
  for (const auto& [controller, dir] : v1) {
    if (std::find(out.begin(), out.end(), dir) == out.end()) out.push_back(dir);
  }
  return out;
}

std::string CgroupPaths::dirFor(std::string_view controller) const {
  if (!unified_dir.empty()) return unified_dir;
  auto it = v1.find(std::string(controller));
  return it == v1.end() ? std::string() : it->second;
}

bool onCgroupFs(const std::string& path) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) return false;
  return st.f_type == CGROUP_SUPER_MAGIC || st.f_type == CGROUP2_SUPER_MAGIC;
}

bool isMountRoot(const std::string& dir) {
  if (dir.empty()) return false;
  struct stat self;
  if (::stat(dir.c_str(), &self) != 0) return false;
  struct stat parent;
  // Unreadable parent: say "root", so that kills and removals refuse rather than guess.
  if (::stat(joinPath(dir, "..").c_str(), &parent) != 0) return true;
  if (self.st_dev != parent.st_dev) return true;
  if (self.st_ino == parent.st_ino) return true;  // "/": its own parent
#ifdef STATX_ATTR_MOUNT_ROOT
  struct statx sx;
  if (::statx(AT_FDCWD, dir.c_str(), AT_NO_AUTOMOUNT, STATX_BASIC_STATS, &sx) == 0 &&
      (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 &&
      (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0) {
    return true;
  }
#endif
  return false;
}

bool joinCgroup(const CgroupPaths& paths, std::string& error) {
  for (const auto& dir : paths.dirs()) {
    std::string file = joinPath(dir, "cgroup.procs");
    if (!writeOnce(file, "0")) {
      error = "write 0 to " + file + ": " + errnoText(errno);
      return false;
    }
  }
  return true;
}

std::vector<int> cgroupPids(const CgroupPaths& paths) {
  std::string dir = procsDir(paths);
  if (dir.empty()) return {};
  return treePids(dir);
}

int killCgroup(const CgroupPaths& paths, std::string& error) {
  if (!refuseMountRoots(paths, "kill the processes of", error)) return -1;
  std::string dir = procsDir(paths);
  // A missing cgroup has nothing to kill. Outside a cgroupfs (a test's fake hierarchy)
  // cgroup.procs is just a file: its numbers are never signalled.
  if (dir.empty() || !isDir(dir) || !onCgroupFs(dir)) return 0;
  if (paths.unified()) return killV2(dir, error);
  if (!paths.dirFor("freezer").empty()) return killV1Frozen(dir, error);
  std::set<int> signalled;
  return killInRounds(dir, signalled);
}

std::optional<uint64_t> oomKillCount(const CgroupPaths& paths) {
  std::string dir = paths.dirFor("memory");
  if (dir.empty()) return std::nullopt;
  std::string text;
  if (!readSmallFileImpl(joinPath(dir, paths.unified() ? "memory.events" : "memory.oom_control"), text)) {
    return std::nullopt;
  }
  return keyedValue(text, "oom_kill");
}

bool removeCgroup(const CgroupPaths& paths, std::string& error) {
  bool busy = false;
  return removeAll(paths, error, busy);
}

bool removeCgroupWaiting(const CgroupPaths& paths, int attempts, std::string& error) {
  long delay_ms = 1;
  for (int i = 0;; ++i) {
    bool busy = false;
    if (removeAll(paths, error, busy)) return true;
    if (!busy || i + 1 >= attempts) return false;
    // Killed processes leave their cgroup only once they have exited; until then rmdir says
    // EBUSY.
    sleepMillis(delay_ms);
    delay_ms = std::min(delay_ms * 2, 20L);
    error.clear();
  }
}

bool readSmallFile(const std::string& path, std::string& out) {
  return readSmallFileImpl(path, out);
}

std::string readSmallFile(const std::string& path) {
  std::string out;
  if (!readSmallFileImpl(path, out)) out.clear();
  return out;
}

}  // namespace nodeagent::cm
