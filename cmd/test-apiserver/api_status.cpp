#include "cmd/test-apiserver/api_status.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

int httpCodeFor(base::StatusCode code) {
  switch (code) {
    case base::StatusCode::kOk:
      return 200;
    case base::StatusCode::kInvalidArgument:
      return 400;
    case base::StatusCode::kUnauthenticated:
      return 401;
    case base::StatusCode::kPermissionDenied:
      return 403;
    case base::StatusCode::kNotFound:
      return 404;
    case base::StatusCode::kUnimplemented:
      return 405;
    case base::StatusCode::kAlreadyExists:
    case base::StatusCode::kAborted:
      return 409;
    case base::StatusCode::kOutOfRange:
      return 410;
    case base::StatusCode::kFailedPrecondition:
      return 422;
    case base::StatusCode::kResourceExhausted:
      return 429;
    case base::StatusCode::kUnavailable:
      return 503;
    case base::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string reasonForHttpCode(int http_code) {
  switch (http_code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return http_code >= 500 ? "InternalError" : (http_code >= 400 ? "BadRequest" : "");
  }
}

json statusObject(int code, const std::string& message, std::string reason, json details) {
  if (reason.empty()) reason = reasonForHttpCode(code);
  json s = {{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason},
            {"code", code}};
  if (!details.is_null()) s["details"] = std::move(details);
  return s;
}

json statusFromError(const base::Status& error, std::string_view name, std::string_view kind) {
  const int code = httpCodeFor(error.code());
  std::string reason = reasonForHttpCode(code);
  if (error.code() == base::StatusCode::kAlreadyExists) reason = "AlreadyExists";
  json details = nullptr;
  if (!name.empty() || !kind.empty()) {
    details = json::object();
    if (!name.empty()) details["name"] = name;
    if (!kind.empty()) details["kind"] = kind;
  }
  // "Pod \"web\" is invalid: spec.containers: Required value": like kube-apiserver, the details
  // name the Kind and carry the field error as a cause.
  const std::string& message = error.message();
  const auto invalid_at = message.find(" is invalid: ");
  if (code == 422 && invalid_at != std::string::npos) {
    const std::string kind_name = message.substr(0, invalid_at);
    const std::string rest = message.substr(invalid_at + 13);
    const auto colon = rest.find(": ");
    if (!details.is_object()) details = json::object();
    const auto space = kind_name.find(" \"");
    details["kind"] = kind_name.substr(0, space);
    if (space != std::string::npos && kind_name.size() > space + 3) {
      details["name"] = kind_name.substr(space + 2, kind_name.size() - space - 3);
    }
    if (colon != std::string::npos) {
      const std::string detail = rest.substr(colon + 2);
      const char* cause = detail.starts_with("Required value")      ? "FieldValueRequired"
                          : detail.starts_with("Duplicate value")   ? "FieldValueDuplicate"
                          : detail.starts_with("Forbidden")         ? "FieldValueForbidden"
                          : detail.starts_with("Too long")          ? "FieldValueTooLong"
                          : detail.starts_with("Unsupported value") ? "FieldValueNotSupported"
                                                                    : "FieldValueInvalid";
      details["causes"] = {
          {{"reason", cause}, {"message", detail}, {"field", rest.substr(0, colon)}}};
    }
  }
  return statusObject(code, message, reason, std::move(details));
}

base::Status invalidObjectError(std::string_view kind, std::string_view name,
                                const std::string& field_error) {
  return base::failedPreconditionError(std::string(kind) + " \"" + std::string(name) +
                                       "\" is invalid: " + field_error);
}

json successStatus(json details) {
  json s = {{"kind", "Status"},
            {"apiVersion", "v1"},
            {"metadata", json::object()},
            {"status", "Success"}};
  if (!details.is_null()) s["details"] = std::move(details);
  return s;
}

}  // namespace nodeagent::testapiserver
