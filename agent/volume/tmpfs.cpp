#include "agent/volume/tmpfs.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace nodeagent::agent {

bool isMountPoint(const std::filesystem::path& dir) {
  struct stat self {};
  struct stat parent {};
  if (::lstat(dir.c_str(), &self) != 0 || !S_ISDIR(self.st_mode)) return false;
  if (::stat(dir.parent_path().c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev;
}

namespace {

base::StatusOr<bool> mountTmpfs(const std::filesystem::path& dir, unsigned long flags,
                                const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return base::internalError("cannot create " + dir.string() + ": " + ec.message());
  if (isMountPoint(dir)) return true;
  if (::mount("tmpfs", dir.c_str(), "tmpfs", flags, data.empty() ? nullptr : data.c_str()) == 0) {
    return true;
  }
  if (errno == EPERM || errno == EACCES) return false;
  return base::internalError("cannot mount a tmpfs at " + dir.string() + ": " +
                             std::strerror(errno));
}

}  // namespace

base::StatusOr<bool> ensureTmpfs(const std::filesystem::path& dir) {
  return mountTmpfs(dir, MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755");
}

base::StatusOr<bool> ensureEmptyDirTmpfs(const std::filesystem::path& dir,
                                         std::optional<int64_t> size_bytes) {
  std::string data;
  if (size_bytes && *size_bytes > 0) data = "size=" + std::to_string(*size_bytes);
  return mountTmpfs(dir, MS_NOSUID | MS_NODEV, data);
}

void unmountPodVolumes(const std::filesystem::path& pod_dir) {
  std::error_code ec;
  for (const auto& plugin : std::filesystem::directory_iterator(pod_dir / "volumes", ec)) {
    std::error_code inner;
    for (const auto& volume : std::filesystem::directory_iterator(plugin.path(), inner)) {
      if (isMountPoint(volume.path())) ::umount2(volume.path().c_str(), MNT_DETACH);
    }
  }
}

}  // namespace nodeagent::agent
