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
#include "config/static_pod.h"

namespace nodeagent::config {

// Validates a decoded pod. `pod_json` is the JSON the pod was decoded from (or null): with it,
// the checks that need fields the typed model keeps only in raw form (how many volume sources or
// env valueFrom sources are set) are made too.
std::vector<FieldError> validatePodWithJson(const api::Pod& pod, const nlohmann::json* pod_json);

namespace validation {

// apimachinery's string checks; each returns the list of problems (empty when valid), worded as
// kube-apiserver words them.
std::vector<std::string> isDns1123Label(std::string_view value);
std::vector<std::string> isDns1123Subdomain(std::string_view value);
std::vector<std::string> isQualifiedName(std::string_view value);
std::vector<std::string> isValidLabelValue(std::string_view value);
std::vector<std::string> isValidPortName(std::string_view value);
std::vector<std::string> isValidPortNum(int64_t port);
std::vector<std::string> isEnvVarName(std::string_view value);
std::vector<std::string> isHttpHeaderName(std::string_view value);

// Go's %q of a string (strconv.Quote), which field errors use to print bad values.
std::string goQuote(std::string_view value);

// field.ErrorList constructors, in kube-apiserver's wording.
FieldError required(std::string field, std::string_view detail = {});
FieldError invalid(std::string field, std::string_view value, std::string_view detail);
FieldError invalid(std::string field, int64_t value, std::string_view detail);
FieldError duplicate(std::string field, std::string_view value);
FieldError notFound(std::string field, std::string_view value);
FieldError forbidden(std::string field, std::string_view detail);
FieldError tooLong(std::string field, int64_t max_bytes);
FieldError notSupported(std::string field, std::string_view value,
                        const std::vector<std::string_view>& supported);

}  // namespace validation
}  // namespace nodeagent::config
