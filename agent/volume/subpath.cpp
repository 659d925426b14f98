#include "agent/volume/subpath.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "base/path_component.h"

namespace nodeagent::agent {
namespace {

namespace fs = std::filesystem;

// Whether `path` is `root` or below it, compared by whole components (both resolved).
bool within(const fs::path& root, const fs::path& path) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// A descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

std::string errnoText() { return std::strerror(errno); }

// kubelet's doSafeOpen: `resolved` (below `root`, both resolved) opened with O_PATH from `root`
// down, one component at a time, none of them followed if it is a symlink: one met on the way was
// put there after resolveSubPath looked.
base::Status safeOpen(const fs::path& root, const fs::path& resolved, Fd& out) {
  Fd fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    return base::invalidArgumentError("cannot open volume directory " + root.string() + ": " +
                                      errnoText());
  }
  fs::path at = root;
  for (const auto& part : resolved.lexically_relative(root)) {
    if (part == ".") continue;
    at /= part;
    Fd child(::openat(fd.get(), part.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (child.get() < 0) {
      return base::invalidArgumentError("cannot open " + at.string() + ": " + errnoText());
    }
    struct stat st {};
    if (::fstat(child.get(), &st) != 0) {
      return base::invalidArgumentError("cannot stat " + at.string() + ": " + errnoText());
    }
    if (S_ISLNK(st.st_mode)) {
      return base::invalidArgumentError("subPath component " + at.string() +
                                        " became a symlink after it was checked");
    }
    fd.reset(child.release());
  }
  out.reset(fd.release());
  return base::okStatus();
}

// A mountinfo path with its octal escapes ("\040" for a space, ...) undone.
std::string unescapeMountPath(const std::string& in) {
  std::string out;
  const auto digit = [&](size_t i) { return i < in.size() && in[i] >= '0' && in[i] <= '7'; };
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\\' && digit(i + 1) && digit(i + 2) && digit(i + 3)) {
      out.push_back(
          static_cast<char>((in[i + 1] - '0') * 64 + (in[i + 2] - '0') * 8 + (in[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

bool sameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// The mount points at or below `dir`, deepest first; an error when the mount table cannot be read
// (then nothing may be taken as unmounted).
base::StatusOr<std::vector<fs::path>> readMountPointsBelow(const fs::path& dir) {
  std::error_code ec;
  fs::path base = fs::weakly_canonical(dir, ec);
  if (ec) base = dir;
  std::ifstream mountinfo("/proc/self/mountinfo");
  if (!mountinfo) return base::internalError("cannot read /proc/self/mountinfo");
  std::vector<fs::path> out;
  std::string line;
  while (std::getline(mountinfo, line)) {
    // "<id> <parent> <major:minor> <root> <mount point> <options> ..."
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    if (!(fields >> id >> parent >> device >> root >> point)) continue;
    fs::path mount(unescapeMountPath(point));
    if (within(base, mount)) out.push_back(std::move(mount));
  }
  const auto depth = [](const fs::path& p) { return std::distance(p.begin(), p.end()); };
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) {
    const auto da = depth(a);
    const auto db = depth(b);
    return da != db ? da > db : a < b;
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The pod directory resolved, as the mount table names the mounts below it; an error, never a
// path relative to the working directory, when it cannot be resolved.
base::StatusOr<fs::path> resolvedPodDir(const fs::path& pod_dir) {
  std::error_code ec;
  fs::path pod = fs::weakly_canonical(pod_dir, ec);
  if (ec || pod.empty()) {
    return base::internalError("pod directory " + pod_dir.string() + ": " + ec.message());
  }
  return pod;
}

// Whether `path` (resolved) is itself a mount point.
base::StatusOr<bool> isMounted(const fs::path& path) {
  auto mounts = readMountPointsBelow(path);
  if (!mounts.ok()) return mounts.status();
  return std::find(mounts->begin(), mounts->end(), path) != mounts->end();
}

// kubelet's doSafeMakeDir: `missing` (relative, no "..") made below `existing` (resolved, inside
// `root`), each directory made with mkdirat and opened again without following a symlink from its
// parent's descriptor, then given `mode` through that descriptor: a directory swapped for a
// symlink meanwhile fails the call, and nothing outside the volume is made or changed.
base::Status safeMakeDirs(const fs::path& root, const fs::path& existing, const fs::path& missing,
                          mode_t mode) {
  Fd dir;
  RETURN_IF_ERROR(safeOpen(root, existing, dir));
  fs::path at = existing;
  for (const auto& part : missing) {
    if (part == ".") continue;
    if (part == "..") return base::invalidArgumentError("subPath may not contain \"..\"");
    at /= part;
    const bool made = ::mkdirat(dir.get(), part.c_str(), 0700) == 0;
    if (!made && errno != EEXIST) {
      return base::invalidArgumentError("cannot create " + at.string() + ": " + errnoText());
    }
    Fd child(::openat(dir.get(), part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (child.get() < 0) {
      return base::invalidArgumentError("cannot open " + at.string() +
                                        " (a symlink or not a directory?): " + errnoText());
    }
    if (made && ::fchmod(child.get(), mode) != 0) {
      return base::invalidArgumentError("cannot set the mode of " + at.string() + ": " +
                                        errnoText());
    }
    dir.reset(child.release());
  }
  return base::okStatus();
}

}  // namespace

base::StatusOr<fs::path> resolveSubPath(const fs::path& volume_root, const fs::path& path) {
  std::error_code ec;
  const auto root = fs::canonical(volume_root, ec);
  if (ec) {
    return base::invalidArgumentError("volume directory " + volume_root.string() + ": " +
                                      ec.message());
  }
  const auto outside = [&](const fs::path& resolved) {
    return base::invalidArgumentError("subPath " + path.string() + " resolves to " +
                                      resolved.string() + ", outside of its volume " +
                                      root.string());
  };
  // The part of the subPath that exists, resolved, must be inside; what is missing is made below
  // it with the volume's mode, one directory at a time (kubelet's SafeMakeDir).
  const fs::path relative = path.lexically_relative(volume_root);
  if (relative.empty() || *relative.begin() == "..") {
    return base::invalidArgumentError("subPath " + path.string() + " is not below its volume " +
                                      volume_root.string());
  }
  fs::path at = root;
  auto part = relative.begin();
  for (; part != relative.end(); ++part) {
    if (*part == ".") continue;
    const fs::path next = at / *part;
    if (!fs::exists(fs::symlink_status(next, ec))) break;
    at = fs::canonical(next, ec);
    if (ec) return base::invalidArgumentError("subPath " + path.string() + ": " + ec.message());
    if (!within(root, at)) return outside(at);
  }
  if (part != relative.end()) {
    struct stat root_stat {};
    if (::stat(root.c_str(), &root_stat) != 0) {
      return base::invalidArgumentError("volume directory " + root.string() + ": " + errnoText());
    }
    fs::path missing;
    for (; part != relative.end(); ++part) missing /= *part;
    auto made = safeMakeDirs(root, at, missing, root_stat.st_mode & 07777);
    if (!made.ok()) {
      return base::invalidArgumentError("subPath " + path.string() + ": " + made.message());
    }
    // Made or not by this call (another start may have raced it), it must still be inside.
    at = fs::canonical(path, ec);
    if (ec) return base::invalidArgumentError("subPath " + path.string() + ": " + ec.message());
    if (!within(root, at)) return outside(at);
  }
  return at;
}

fs::path subPathTarget(const fs::path& pod_dir, const std::string& volume,
                       const std::string& container, size_t index) {
  return pod_dir / "volume-subpaths" / volume / container / std::to_string(index);
}

base::StatusOr<fs::path> bindSubPath(const fs::path& volume_root, const fs::path& path,
                                     const fs::path& pod_dir, const std::string& volume,
                                     const std::string& container, size_t index) {
  if (pod_dir.empty()) {
    return base::invalidArgumentError("subPath " + path.string() +
                                      ": no pod directory to bind it in");
  }
  RETURN_IF_ERROR(base::checkPathComponent("volume name", volume));
  RETURN_IF_ERROR(base::checkPathComponent("container name", container));
  auto resolved = resolveSubPath(volume_root, path);
  if (!resolved.ok()) return resolved.status();
  std::error_code ec;
  const auto root = fs::canonical(volume_root, ec);
  if (ec) {
    return base::invalidArgumentError("volume directory " + volume_root.string() + ": " +
                                      ec.message());
  }
  Fd source;
  RETURN_IF_ERROR(safeOpen(root, *resolved, source));
  struct stat opened {};
  if (::fstat(source.get(), &opened) != 0) {
    return base::internalError("cannot stat " + resolved->string() + ": " + errnoText());
  }
  auto pod = resolvedPodDir(pod_dir);
  if (!pod.ok()) return pod.status();
  const fs::path target = subPathTarget(*pod, volume, container, index);
  fs::create_directories(target.parent_path(), ec);
  if (ec) {
    return base::internalError("cannot create " + target.parent_path().string() + ": " +
                               ec.message());
  }
  auto mounted = isMounted(target);
  if (!mounted.ok()) return mounted.status();
  if (*mounted) {
    struct stat bound {};
    if (::stat(target.c_str(), &bound) == 0 && sameFile(bound, opened)) return target;
    if (::umount2(target.c_str(), MNT_DETACH) != 0) {
      return base::internalError("cannot unmount the stale subPath mount " + target.string() +
                                 ": " + errnoText());
    }
    // Its mount point may be of the other kind (a file where a directory is bound now).
    if (::rmdir(target.c_str()) != 0) ::unlink(target.c_str());
  }
  // The mount point is of the source's kind: a directory for a directory, a file otherwise.
  if (S_ISDIR(opened.st_mode)) {
    if (::mkdir(target.c_str(), 0750) != 0 && errno != EEXIST) {
      return base::internalError("cannot create " + target.string() + ": " + errnoText());
    }
  } else {
    Fd made(::open(target.c_str(), O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0640));
    if (made.get() < 0) {
      return base::internalError("cannot create " + target.string() + ": " + errnoText());
    }
  }
  const std::string proc_path = "/proc/self/fd/" + std::to_string(source.get());
  if (::mount(proc_path.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return base::internalError("cannot bind-mount subPath " + resolved->string() + " at " +
                               target.string() + ": " + errnoText());
  }
  // A bind of a shared mount joins its peer group: as a slave it still sees what is mounted in
  // the volume later, but its own unmount (cleanSubPaths) never reaches back into the volume.
  if (::mount(nullptr, target.c_str(), nullptr, MS_SLAVE, nullptr) != 0) {
    const std::string why = errnoText();
    ::umount2(target.c_str(), MNT_DETACH);
    return base::internalError("cannot make the subPath mount " + target.string() +
                               " a slave: " + why);
  }
  return target;
}

base::Status cleanSubPaths(const fs::path& pod_dir) {
  auto pod = resolvedPodDir(pod_dir);
  if (!pod.ok()) return pod.status();
  std::error_code ec;
  const fs::path dir = *pod / "volume-subpaths";
  if (!fs::exists(fs::symlink_status(dir, ec))) return base::okStatus();
  // kubelet's CleanSubPaths: each <volume>/<container>/<index> is unmounted (a mount stacked on
  // another takes one more round) and removed, then its directories, one level at a time with
  // rmdir and unlink, which never remove what is in a directory: what stays mounted, or holds
  // anything, stays and is an error.
  for (const auto& volume : fs::directory_iterator(dir, ec)) {
    for (const auto& container : fs::directory_iterator(volume.path(), ec)) {
      for (const auto& index : fs::directory_iterator(container.path(), ec)) {
        const fs::path target = index.path();
        for (int round = 0;; ++round) {
          auto mounted = isMounted(target);
          if (!mounted.ok()) return mounted.status();
          if (!*mounted) break;
          if (round == 8 || ::umount2(target.c_str(), MNT_DETACH) != 0) {
            return base::internalError("subPath mount " + target.string() +
                                       " cannot be unmounted: " + errnoText());
          }
        }
        if (::rmdir(target.c_str()) != 0 && ::unlink(target.c_str()) != 0) {
          return base::internalError("cannot remove " + target.string() + ": " + errnoText());
        }
      }
      if (::rmdir(container.path().c_str()) != 0) {
        return base::internalError("cannot remove " + container.path().string() + ": " +
                                   errnoText());
      }
    }
    if (::rmdir(volume.path().c_str()) != 0) {
      return base::internalError("cannot remove " + volume.path().string() + ": " + errnoText());
    }
  }
  if (ec) return base::internalError("cannot list " + dir.string() + ": " + ec.message());
  if (::rmdir(dir.c_str()) != 0) {
    return base::internalError("cannot remove " + dir.string() + ": " + errnoText());
  }
  return base::okStatus();
}

std::vector<fs::path> mountPointsBelow(const fs::path& dir) {
  auto mounts = readMountPointsBelow(dir);
  return mounts.ok() ? *std::move(mounts) : std::vector<fs::path>();
}

}  // namespace nodeagent::agent
