// Memory-backed volume directories: kubelet puts secret and projected volumes on a tmpfs so that
// their contents (passwords, service account tokens) never reach the node's disk.
//
// Threading: blocking (mount, stat).
#pragma once

#include <filesystem>

#include "base/status.h"

namespace nodeagent::agent {

// Mounts a tmpfs (mode 0755, nosuid, nodev, noexec) at `dir`, made when missing, unless one is
// there already. False, without an error, when the agent may not mount (an unprivileged run): the
// directory then stays on the disk.
base::StatusOr<bool> ensureTmpfs(const std::filesystem::path& dir);

// Whether `dir` is a mount point (on another device than its parent).
bool isMountPoint(const std::filesystem::path& dir);

// Detaches every mount at <pod_dir>/volumes/<plugin>/<volume>, so that the pod's directory can
// be removed without reaching into (or failing on) a mounted volume.
void unmountPodVolumes(const std::filesystem::path& pod_dir);

}  // namespace nodeagent::agent
