// YAML or JSON bytes -> JSON, with limits for hostile input: at most one document, bounded depth
// and size, no alias expansion bombs, duplicate keys rejected, invalid UTF-8 rejected.
#pragma once

#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::api {

inline constexpr size_t kMaxConfigLength = 10 * 1024 * 1024;  // kubelet's maxConfigLength
inline constexpr int kMaxNestingDepth = 100;

// Errors are InvalidArgument with a line/column where the parser gives one.
base::StatusOr<nlohmann::json> yamlToJson(std::string_view bytes);

}  // namespace nodeagent::api
