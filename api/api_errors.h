// Typed apiserver errors. A failed call returns a base::Status whose code follows the HTTP status
// (404 -> NotFound, 409 AlreadyExists -> AlreadyExists, 409 Conflict -> Aborted, 410 -> OutOfRange,
// 401 -> Unauthenticated, 403 -> PermissionDenied, 429 -> ResourceExhausted, 5xx -> Unavailable or
// Internal...) and whose message carries a machine-readable tail "[apiserver code=404
// reason=NotFound retryAfter=3]". apiErrorOf() reads the tail back, so the detail survives
// withContext() and copies across threads; isNotFound() and friends are the usual predicates
// (client-go's apierrors.IsNotFound).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::api {

struct ApiError {
  int http_code = 0;    // the HTTP status (for an in-stream ERROR: the Status `code`)
  std::string reason;   // metav1.StatusReason: "NotFound", "Conflict", "Expired", ...
  std::string message;  // the Status body's message, or a short text
  std::optional<std::chrono::seconds> retry_after;  // Retry-After header or details
  bool operator==(const ApiError&) const = default;
};

// The base::StatusCode for an HTTP status and reason.
base::StatusCode statusCodeForApiError(int http_code, std::string_view reason);

// metav1.StatusReason of an HTTP code as kube-apiserver names it ("NotFound" for 404, ...;
// "InternalError" for another 5xx, "Unknown" otherwise).
std::string statusReasonForCode(int http_code);

// Builds the Status for an error response. `body` may be a metav1.Status JSON, any other text or
// empty; `what` names the request ("GET /api/v1/pods") and prefixes the message.
base::Status apiErrorStatus(std::string_view what, int http_code, std::string_view body,
                            std::optional<std::chrono::seconds> retry_after = std::nullopt);
// The same from an already-parsed metav1.Status object (an in-stream watch ERROR event).
base::Status apiErrorStatusFromObject(std::string_view what, const nlohmann::json& status_object);
// A Status carrying `error` (for fakes and tests).
base::Status makeApiErrorStatus(std::string_view what, const ApiError& error);

// The ApiError a Status carries, if it came from an apiserver response.
std::optional<ApiError> apiErrorOf(const base::Status& status);

bool isNotFound(const base::Status& status);
bool isAlreadyExists(const base::Status& status);
bool isConflict(const base::Status& status);  // 409 other than AlreadyExists
// 410 Gone / reason Expired or Gone: the resourceVersion is too old; relist.
bool isGone(const base::Status& status);
bool isUnauthorized(const base::Status& status);
bool isForbidden(const base::Status& status);
bool isTooManyRequests(const base::Status& status);
bool isInvalid(const base::Status& status);      // 422 or 400
bool isServerError(const base::Status& status);  // 5xx
// No answer from the apiserver: the connection was refused, dropped or timed out (Unavailable or
// DeadlineExceeded without an ApiError).
bool isConnectionFailure(const base::Status& status);
// The server-suggested delay for 429/5xx answers, if any.
std::optional<std::chrono::seconds> retryAfterOf(const base::Status& status);

}  // namespace nodeagent::api
