// apimachinery's validation helpers (k8s.io/apimachinery/pkg/util/validation and its field
// package): name and value format checks and field.ErrorList constructors, worded as
// kube-apiserver words them. Pure functions: any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/printable.h"
#include "config/static_pod.h"

namespace nodeagent::config {

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
std::vector<std::string> isConfigMapKey(std::string_view value);
std::vector<std::string> isHttpHeaderName(std::string_view value);

// Go's %q of a string (strconv.Quote), which field errors use to print bad values.
using base::goQuote;

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
