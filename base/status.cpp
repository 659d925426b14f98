#include "base/status.h"

#include <cstdio>
#include <cstdlib>

namespace nodeagent::base {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kUnknown:
      return "UNKNOWN";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

std::string Status::toString() const {
  if (ok()) return "OK";
  std::string out(statusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::withContext(std::string_view context) const& {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Status Status::withContext(std::string_view context) && {
  if (ok()) return std::move(*this);
  message_ = std::string(context) + ": " + message_;
  return std::move(*this);
}

#define NA_DEFINE_ERROR(fn, code) \
  Status fn(std::string message) { return Status(StatusCode::code, std::move(message)); }
NA_DEFINE_ERROR(cancelledError, kCancelled)
NA_DEFINE_ERROR(unknownError, kUnknown)
NA_DEFINE_ERROR(invalidArgumentError, kInvalidArgument)
NA_DEFINE_ERROR(deadlineExceededError, kDeadlineExceeded)
NA_DEFINE_ERROR(notFoundError, kNotFound)
NA_DEFINE_ERROR(alreadyExistsError, kAlreadyExists)
NA_DEFINE_ERROR(permissionDeniedError, kPermissionDenied)
NA_DEFINE_ERROR(resourceExhaustedError, kResourceExhausted)
NA_DEFINE_ERROR(failedPreconditionError, kFailedPrecondition)
NA_DEFINE_ERROR(abortedError, kAborted)
NA_DEFINE_ERROR(outOfRangeError, kOutOfRange)
NA_DEFINE_ERROR(unimplementedError, kUnimplemented)
NA_DEFINE_ERROR(internalError, kInternal)
NA_DEFINE_ERROR(unavailableError, kUnavailable)
NA_DEFINE_ERROR(dataLossError, kDataLoss)
NA_DEFINE_ERROR(unauthenticatedError, kUnauthenticated)
#undef NA_DEFINE_ERROR

void dieOnBadStatusOrAccess(const Status& s) {
  std::fprintf(stderr, "fatal: value() of a StatusOr holding an error: %s\n", s.toString().c_str());
  std::abort();
}

void checkFailed(const char* file, int line, const char* cond, std::string_view msg) {
  std::fprintf(stderr, "fatal: %s:%d: check failed: %s: %.*s\n", file, line, cond,
               static_cast<int>(msg.size()), msg.data());
  std::abort();
}

}  // namespace nodeagent::base
