// The three patch formats kube-apiserver accepts for built-in types: JSON merge patch (RFC 7386),
// strategic merge patch (maps merged, `null` deletes a key, lists with a merge key merged element
// by element, other lists replaced; `$patch`, `$setElementOrder/`, `$retainKeys` and
// `$deleteFromPrimitiveList/` directives) and JSON patch (RFC 6902).
#pragma once

#include <optional>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

enum class PatchType { kJsonPatch, kMergePatch, kStrategicMergePatch };

// From a Content-Type header value (parameters ignored); nullopt when not a patch type we serve.
std::optional<PatchType> patchTypeFromContentType(std::string_view content_type);

// The merge key of a list field in the pod/node/lease/event/serviceaccount schema ("conditions" ->
// "type", "containers" -> "name"...), nullopt when the list has no merge strategy (replaced whole).
std::optional<std::string_view> strategicMergeKey(std::string_view field);

// All return InvalidArgument for a malformed patch (naming the problem); `target` is untouched.
base::StatusOr<nlohmann::json> applyMergePatch(const nlohmann::json& target,
                                               const nlohmann::json& patch);
base::StatusOr<nlohmann::json> applyStrategicMergePatch(const nlohmann::json& target,
                                                        const nlohmann::json& patch);
base::StatusOr<nlohmann::json> applyJsonPatch(const nlohmann::json& target,
                                              const nlohmann::json& patch);
base::StatusOr<nlohmann::json> applyPatch(PatchType type, const nlohmann::json& target,
                                          const nlohmann::json& patch);

}  // namespace nodeagent::testapiserver
