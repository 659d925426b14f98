// kube-apiserver's pod validation (pkg/apis/core/validation, ValidatePod) for the part of the pod
// that nodeagent models, with the same field paths and wording, so an operator who knows
// `kubectl apply` errors recognises ours. Every problem is reported, in kube-apiserver's order.
//
// Pure functions of their arguments: any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/pod.h"
#include "config/field_validation.h"
#include "config/static_pod.h"

namespace nodeagent::config {

// Validates a decoded pod. `pod_json` is the JSON the pod was decoded from (or null): with it,
// the checks that need fields the typed model keeps only in raw form (how many volume sources or
// env valueFrom sources are set) are made too.
std::vector<FieldError> validatePodWithJson(const api::Pod& pod, const nlohmann::json* pod_json);

// Only the names a node turns into paths, by kube-apiserver's rules (metadata.name a DNS-1123
// subdomain, metadata.namespace and every container and volume name a DNS-1123 label) plus
// metadata.uid present and a single path component. The apiserver source refuses pods that fail
// it: an apiserver that validated them would never have served them.
std::vector<FieldError> validatePodNames(const api::Pod& pod);

}  // namespace nodeagent::config
