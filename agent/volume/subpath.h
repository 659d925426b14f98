// subPath volume mounts for a runtime that bind-mounts what it is given (the CRI runtime), made
// safe as kubelet makes them against CVE-2017-1002101: a container that can write to a volume may
// plant a symlink in it, and a later mount of a subPath through that symlink would reach anywhere
// on the node.
//
//   resolveSubPath   the subPath with its symlinks resolved, refused when it leaves its volume;
//   bindSubPath      that path opened one component at a time without following a symlink, and
//                    the opened descriptor bind-mounted at <pod-dir>/volume-subpaths/<volume>/
//                    <container>/<index> (kubelet's doSafeOpen and prepareSubpathTarget): what
//                    the runtime mounts is the directory or file that was checked, even if a
//                    component is replaced by a symlink after the check;
//   cleanSubPaths    those bind mounts undone and their directory removed when the pod's
//                    volumes are torn down (kubelet's CleanSubPaths); a pod directory with a
//                    subPath still mounted in it is never removed (the removal would reach
//                    through the mount into the volume, perhaps a hostPath).
//
// Threading: blocking (stat, open, mount), on the blocking pool. bindSubPath and cleanSubPaths
// need the right to mount (root).
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"

namespace nodeagent::agent {

// Returns `path` (below `volume_root`) with every symlink resolved, when it stays within
// `volume_root` (itself resolved); what is missing of it is made, one directory at a time with
// the volume's mode, each from its parent's descriptor without following a symlink (kubelet's
// SafeMakeDir). Symlinks that stay inside are allowed, as kubelet
// allows them. InvalidArgument naming both paths otherwise (the container's start then fails
// with CreateContainerConfigError, as kubelet's does).
base::StatusOr<std::filesystem::path> resolveSubPath(const std::filesystem::path& volume_root,
                                                     const std::filesystem::path& path);

// Where the `index`th volumeMount of `container` is bound for its subPath.
std::filesystem::path subPathTarget(const std::filesystem::path& pod_dir, const std::string& volume,
                                    const std::string& container, size_t index);

// resolveSubPath, then the bind mount described above (a slave mount: its unmount never reaches
// back into a shared volume); returns the bind mount's path (resolved), the one to give the
// runtime. A target already bound to the same file or directory (the container's restart) is
// kept; one bound to something else is replaced. InvalidArgument when the subPath
// leaves its volume or a symlink appeared in it after the check; Internal when the mount fails.
base::StatusOr<std::filesystem::path> bindSubPath(const std::filesystem::path& volume_root,
                                                  const std::filesystem::path& path,
                                                  const std::filesystem::path& pod_dir,
                                                  const std::string& volume,
                                                  const std::string& container, size_t index);

// Unmounts each <pod_dir>/volume-subpaths/<volume>/<container>/<index> and removes them and
// that directory, one level at a time with rmdir and unlink (never a recursive removal, which
// would reach through a mount into the volume). An error naming what stays (still mounted, not
// empty, or the mount table unreadable); what is left is never removed then.
base::Status cleanSubPaths(const std::filesystem::path& pod_dir);

// The mount points at or below `dir` (from /proc/self/mountinfo, resolved paths), deepest first;
// none when the mount table cannot be read. Bind mounts of the same filesystem count, unlike
// isMountPoint's device comparison.
std::vector<std::filesystem::path> mountPointsBelow(const std::filesystem::path& dir);

}  // namespace nodeagent::agent
