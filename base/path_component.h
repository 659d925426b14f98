// The one check every name goes through before it becomes a path component (DESIGN.md): a pod's
// namespace, name and UID, a container's name, a volume's name. A valid component is non-empty,
// holds no '/' and no NUL, is not "." or "..", and fits in one file name (NAME_MAX, 255 bytes), so
// `dir / component` always names an entry directly inside `dir`. Pure functions: any thread.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "base/status.h"

namespace nodeagent::base {

inline constexpr size_t kMaxPathComponentBytes = 255;

// Why `name` cannot be a single path component ("must not contain '/'"...), or "" when it can.
std::string pathComponentProblem(std::string_view name);

// okStatus() when `name` is a valid component, else InvalidArgument naming `what` ("container
// name") and the quoted name.
Status checkPathComponent(std::string_view what, std::string_view name);

// `dir / name` once `name` passed checkPathComponent.
StatusOr<std::filesystem::path> childPath(const std::filesystem::path& dir, std::string_view what,
                                          std::string_view name);

}  // namespace nodeagent::base
