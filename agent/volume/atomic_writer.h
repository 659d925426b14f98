// kubelet's AtomicWriter: the files of a configMap, secret, downwardAPI or projected volume,
// replaced all at once so that a container never sees half of an update.
//
// The target directory holds a hidden directory per version ("..2026_12_04_08_30_00.123456789"),
// a symlink "..data" to the current one, and for each top-level name of the payload a symlink
// "<name>" -> "..data/<name>". An update writes a new version, points "..data_tmp" at it and
// renames that over "..data" (atomic), then fixes the visible symlinks and removes the old
// version. Nothing is written when the payload equals what is there.
//
// Threading: blocking file I/O.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "base/status.h"

namespace nodeagent::agent {

struct FileProjection {
  std::string data;
  mode_t mode = 0644;
  bool operator==(const FileProjection&) const = default;
};
// Relative path in the volume -> content.
using VolumePayload = std::map<std::string, FileProjection>;

// InvalidArgument naming the path when a payload path is absolute, has a ".." component, starts
// with "..", is empty or longer than 4096 bytes (a component longer than 255).
base::Status checkPayloadPath(const std::string& path);

// Writes `payload` into `target_dir` (created 0755 when missing). With `fs_group` the files and
// version directories get that group and group read permission (kubelet's SetVolumeOwnership).
// Returns whether anything changed.
base::StatusOr<bool> writeAtomically(const std::filesystem::path& target_dir,
                                     const VolumePayload& payload, std::optional<gid_t> fs_group);

}  // namespace nodeagent::agent
