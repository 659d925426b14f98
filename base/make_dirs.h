// Making a directory the cheap way on a hot path: a node making tens of thousands of pod, cgroup
// and container directories at its start pays one mkdir(2) for each, where
// std::filesystem::create_directories stats every level of the path first.
#pragma once

#include <filesystem>

namespace nodeagent::base {

// Makes `dir` (mode 0777 less the umask, as create_directories) with one mkdir(2); its missing
// parents are made only when that fails with ENOENT. An existing directory is fine. Returns 0 or
// the errno: ENOTDIR when `dir` exists and is not a directory.
int makeDirs(const std::filesystem::path& dir);

}  // namespace nodeagent::base
