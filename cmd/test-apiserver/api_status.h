// Kubernetes `Status` objects and the mapping from base::Status codes to HTTP codes and reasons.
// The store reports errors as base::Status with the message kube-apiserver would use; the codes
// mean: InvalidArgument 400 BadRequest, Unauthenticated 401, PermissionDenied 403, NotFound 404,
// Unimplemented 405 MethodNotAllowed, AlreadyExists 409 AlreadyExists, Aborted 409 Conflict,
// OutOfRange 410 Expired, FailedPrecondition 422 Invalid, ResourceExhausted 429 TooManyRequests,
// DeadlineExceeded 504 Timeout, Unavailable 503 ServiceUnavailable, anything else 500.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

int httpCodeFor(base::StatusCode code);
// The Status reason kube-apiserver uses for an HTTP code ("NotFound", "Conflict"...); "" for 2xx.
std::string reasonForHttpCode(int http_code);

// {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",...}. `reason` defaults to
// reasonForHttpCode(code); `details` is omitted when null.
nlohmann::json statusObject(int code, const std::string& message, std::string reason = "",
                            nlohmann::json details = nullptr);
// A Failure Status for an error from the store; `name`/`kind` (plural) fill `details`.
nlohmann::json statusFromError(const base::Status& error, std::string_view name = "",
                               std::string_view kind = "");
nlohmann::json successStatus(nlohmann::json details = nullptr);

// A 422 Invalid error as the store reports it: `<Kind> "<name>" is invalid: <field error>`
// (`field_error` is "field: Invalid value: ..." as config::FieldError::toString() words it), which
// statusFromError turns into details naming the kind and name with the field error as a cause.
base::Status invalidObjectError(std::string_view kind, std::string_view name,
                                const std::string& field_error);

}  // namespace nodeagent::testapiserver
