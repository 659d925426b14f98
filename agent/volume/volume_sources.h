// The files of the volume types that carry data from the apiserver or the pod itself (kubelet's
// configMap, secret, downwardAPI and projected volume plugins), as a payload for writeAtomically.
//
// Threading: configMap, secret and projected sources read through the ApiObjectSource, which
// blocks; call on the blocking pool.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "agent/runtime/resource_field.h"
#include "agent/volume/api_objects.h"
#include "agent/volume/atomic_writer.h"
#include "api/pod.h"

namespace nodeagent::agent {

// Whether a volume of this source type ("configMap", "secret", "downwardAPI", "projected") is
// one of these: written by the agent and always mounted read-only, as kubelet mounts them.
bool isApiDataVolume(std::string_view source_type);

// The payload of a volume of `pod` whose source (the value under `source_type` in
// the pod's JSON) is `source`. `objects` may be null when no apiserver is configured: a volume
// that needs one then fails, saying so. `node`: what a resourceFieldRef item of a limit the
// container does not set reads as. Errors are worded as kubelet's ("configmap \"app\" not
// found", "configmap references non-existent config key: k").
base::StatusOr<VolumePayload> apiDataVolumePayload(
    const api::Pod& pod, const std::string& source_type, const nlohmann::json& source,
    ApiObjectSource* objects, const runtime::NodeAllocatableResources& node = {});

// kubelet's fieldpath.FormatMap: `key="value"` lines (Go quoting), sorted by key.
std::string formatDownwardMap(const api::StringTable& map);

}  // namespace nodeagent::agent
