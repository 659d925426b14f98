#include "agent/volume/tmpfs.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace nodeagent::agent {

bool isMountPoint(const std::filesystem::path& dir) {
  struct stat self {};
  struct stat parent {};
  if (::lstat(dir.c_str(), &self) != 0 || !S_ISDIR(self.st_mode)) return false;
  if (::stat(dir.parent_path().c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev;
}

base::StatusOr<bool> ensureTmpfs(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return base::internalError("cannot create " + dir.string() + ": " + ec.message());
  if (isMountPoint(dir)) return true;
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") == 0) {
    return true;
  }
  if (errno == EPERM || errno == EACCES) return false;
  return base::internalError("cannot mount a tmpfs at " + dir.string() + ": " +
                             std::strerror(errno));
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
