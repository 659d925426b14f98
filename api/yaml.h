// YAML or JSON bytes -> JSON, with limits for hostile input: at most one document, bounded depth
// and size, no alias expansion bombs, duplicate keys rejected, invalid UTF-8 rejected.
//
// Plain YAML scalars are typed like Go's gopkg.in/yaml.v2 (what kubelet's sigs.k8s.io/yaml uses):
// true/false/yes/no/on/off/y/n in any of their spellings are booleans; null, ~ and empty are null;
// decimal, 0x, 0o, 0b and leading-zero octal are integers; YAML-style floats are floats; quoted
// and block scalars are always strings. Mapping keys become strings the way sigs.k8s.io/yaml
// writes them (true -> "true", 1 -> "1"). Merge keys ("<<") are applied. Infinite and NaN numbers
// are errors (JSON cannot hold them). Unquoted timestamps stay strings as written.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::api {

inline constexpr size_t kMaxConfigLength = 10 * 1024 * 1024;  // kubelet's maxConfigLength
inline constexpr int kMaxNestingDepth = 100;
// Nodes visited while converting one YAML document (aliases count each time they are expanded).
inline constexpr size_t kMaxYamlNodes = 1000000;

// Errors are InvalidArgument with a line/column where the parser gives one. Input that starts
// with '{' (after white space) is parsed as JSON. Input with no YAML document at all (empty, only
// comments) gives a JSON null: the caller decides what an empty manifest means. Never throws.
// Thread-safe (no shared state).
base::StatusOr<nlohmann::json> yamlToJson(std::string_view bytes);

// How yamlToJson types a plain (unquoted, untagged) scalar: a boolean, null, an integer, a float
// or the string itself; an error for infinity and NaN. Never throws.
base::StatusOr<nlohmann::json> resolvePlainScalar(std::string_view text);

// Strict JSON text -> JSON with the same limits: size, UTF-8, depth, duplicate keys rejected,
// numbers that do not fit a double rejected, no trailing content. Any JSON value is accepted at
// the top level. Never throws. Thread-safe.
base::StatusOr<nlohmann::json> parseJson(std::string_view text);

}  // namespace nodeagent::api
