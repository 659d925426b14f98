// Memory-backed volume directories: kubelet puts secret and projected volumes on a tmpfs so that
// their contents (passwords, service account tokens) never reach the node's disk, and emptyDir
// volumes of medium Memory on one of their own, as large as their sizeLimit.
//
// Threading: blocking (mount, stat).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "base/status.h"

namespace nodeagent::agent {

// Mounts a tmpfs (mode 0755, nosuid, nodev, noexec) at `dir`, made when missing, unless one is
// there already. False, without an error, when the agent may not mount (an unprivileged run): the
// directory then stays on the disk.
base::StatusOr<bool> ensureTmpfs(const std::filesystem::path& dir);

// The same for an emptyDir of medium Memory: nosuid and nodev (programs in it may run), at most
// `size_bytes` large when given (the kernel's default, half the memory, otherwise); the volume's
// mode is set by the caller.
base::StatusOr<bool> ensureEmptyDirTmpfs(const std::filesystem::path& dir,
                                         std::optional<int64_t> size_bytes);

// Whether `dir` is a mount point (on another device than its parent).
bool isMountPoint(const std::filesystem::path& dir);

// Detaches every mount at <pod_dir>/volumes/<plugin>/<volume>, so that the pod's directory can
// be removed without reaching into (or failing on) a mounted volume.
void unmountPodVolumes(const std::filesystem::path& pod_dir);

}  // namespace nodeagent::agent
