#include "api/api_errors.h"

#include <charconv>

#include <nlohmann/json.hpp>

namespace nodeagent::api {
namespace {

constexpr std::string_view kMarker = " [apiserver code=";
constexpr size_t kMaxBodyInMessage = 512;

}  // namespace

std::string statusReasonForCode(int http_code) {
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
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return http_code >= 500 ? "InternalError" : "Unknown";
  }
}

namespace {

// Reasons end up in a space-separated tail: keep them to one token.
std::string sanitizeReason(std::string_view reason) {
  std::string out;
  for (char c : reason) {
    if (c != ' ' && c != ']' && c != '=' && c >= 0x21 && c < 0x7f) out += c;
  }
  return out;
}

std::optional<int> parseInt(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

ApiError errorFromObject(int http_code, const nlohmann::json& obj) {
  ApiError e;
  e.http_code = http_code;
  if (obj.is_object()) {
    if (auto it = obj.find("code"); it != obj.end() && it->is_number_integer()) {
      int code = it->get<int>();
      if (code >= 100 && code < 600) e.http_code = code;
    }
    if (auto it = obj.find("reason"); it != obj.end() && it->is_string()) {
      e.reason = it->get<std::string>();
    }
    if (auto it = obj.find("message"); it != obj.end() && it->is_string()) {
      e.message = it->get<std::string>();
    }
    if (auto d = obj.find("details"); d != obj.end() && d->is_object()) {
      if (auto r = d->find("retryAfterSeconds"); r != d->end() && r->is_number_integer()) {
        e.retry_after = std::chrono::seconds(r->get<int64_t>());
      }
    }
  }
  return e;
}

}  // namespace

base::StatusCode statusCodeForApiError(int http_code, std::string_view reason) {
  using base::StatusCode;
  if (reason == "AlreadyExists") return StatusCode::kAlreadyExists;
  if (reason == "Expired" || reason == "Gone") return StatusCode::kOutOfRange;
  switch (http_code) {
    case 400:
    case 406:
    case 415:
    case 422:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 405:
      return StatusCode::kUnimplemented;
    case 409:
      return StatusCode::kAborted;
    case 410:
      return StatusCode::kOutOfRange;
    case 429:
      return StatusCode::kResourceExhausted;
    case 500:
      return StatusCode::kInternal;
    case 504:
      return StatusCode::kDeadlineExceeded;
    default:
      break;
  }
  if (http_code >= 500) return StatusCode::kUnavailable;
  if (http_code >= 400) return StatusCode::kFailedPrecondition;
  return StatusCode::kUnknown;
}

base::Status makeApiErrorStatus(std::string_view what, const ApiError& error) {
  std::string reason = sanitizeReason(error.reason);
  if (reason.empty()) reason = statusReasonForCode(error.http_code);
  std::string msg(what);
  if (!msg.empty()) msg += ": ";
  msg += error.message.empty() ? ("HTTP " + std::to_string(error.http_code)) : error.message;
  msg += kMarker;
  msg += std::to_string(error.http_code);
  msg += " reason=" + reason;
  if (error.retry_after) msg += " retryAfter=" + std::to_string(error.retry_after->count());
  msg += "]";
  return base::Status(statusCodeForApiError(error.http_code, reason), std::move(msg));
}

base::Status apiErrorStatus(std::string_view what, int http_code, std::string_view body,
                            std::optional<std::chrono::seconds> retry_after) {
  ApiError e;
  e.http_code = http_code;
  auto parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  auto kind = parsed.is_object() ? parsed.find("kind") : parsed.end();
  if (parsed.is_object() && kind != parsed.end() && kind->is_string() && *kind == "Status") {
    e = errorFromObject(http_code, parsed);
    e.http_code = http_code;  // the transport status is what the client saw
  } else {
    std::string text(body.substr(0, kMaxBodyInMessage));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    e.message = text.empty() ? ("HTTP " + std::to_string(http_code))
                             : "HTTP " + std::to_string(http_code) + ": " + text;
  }
  if (retry_after) e.retry_after = retry_after;
  return makeApiErrorStatus(what, e);
}

base::Status apiErrorStatusFromObject(std::string_view what, const nlohmann::json& status_object) {
  ApiError e = errorFromObject(500, status_object);
  return makeApiErrorStatus(what, e);
}

std::optional<ApiError> apiErrorOf(const base::Status& status) {
  if (status.ok()) return std::nullopt;
  const std::string& msg = status.message();
  auto pos = msg.rfind(kMarker);
  if (pos == std::string::npos || msg.empty() || msg.back() != ']') return std::nullopt;
  std::string_view tail(msg);
  tail = tail.substr(pos + 2, tail.size() - pos - 3);  // "apiserver code=... reason=..."
  ApiError e;
  bool have_code = false;
  size_t start = 0;
  while (start < tail.size()) {
    size_t end = tail.find(' ', start);
    if (end == std::string_view::npos) end = tail.size();
    std::string_view tok = tail.substr(start, end - start);
    start = end + 1;
    auto eq = tok.find('=');
    if (eq == std::string_view::npos) continue;
    auto key = tok.substr(0, eq);
    auto val = tok.substr(eq + 1);
    if (key == "code") {
      auto v = parseInt(val);
      if (!v) return std::nullopt;
      e.http_code = *v;
      have_code = true;
    } else if (key == "reason") {
      e.reason = std::string(val);
    } else if (key == "retryAfter") {
      if (auto v = parseInt(val)) e.retry_after = std::chrono::seconds(*v);
    }
  }
  if (!have_code) return std::nullopt;
  // The server's message: between the last ": " before the marker... keep the whole prefix;
  // callers wanting the text use Status::message().
  e.message = msg.substr(0, pos);
  return e;
}

namespace {
bool hasCode(const base::Status& s, int code) {
  auto e = apiErrorOf(s);
  return e && e->http_code == code;
}
bool hasReason(const base::Status& s, std::string_view reason) {
  auto e = apiErrorOf(s);
  return e && e->reason == reason;
}
}  // namespace

bool isNotFound(const base::Status& s) { return hasCode(s, 404); }
bool isAlreadyExists(const base::Status& s) { return hasReason(s, "AlreadyExists"); }
bool isConflict(const base::Status& s) { return hasCode(s, 409) && !isAlreadyExists(s); }
bool isGone(const base::Status& s) {
  auto e = apiErrorOf(s);
  return e && (e->http_code == 410 || e->reason == "Expired" || e->reason == "Gone");
}
bool isUnauthorized(const base::Status& s) { return hasCode(s, 401); }
bool isForbidden(const base::Status& s) { return hasCode(s, 403); }
bool isTooManyRequests(const base::Status& s) { return hasCode(s, 429); }
bool isInvalid(const base::Status& s) { return hasCode(s, 422) || hasCode(s, 400); }
bool isServerError(const base::Status& s) {
  auto e = apiErrorOf(s);
  return e && e->http_code >= 500 && e->http_code < 600;
}
bool isConnectionFailure(const base::Status& s) {
  return !apiErrorOf(s) && (s.code() == base::StatusCode::kUnavailable ||
                            s.code() == base::StatusCode::kDeadlineExceeded);
}
std::optional<std::chrono::seconds> retryAfterOf(const base::Status& s) {
  auto e = apiErrorOf(s);
  if (!e) return std::nullopt;
  return e->retry_after;
}

}  // namespace nodeagent::api
