// Status and StatusOr<T>: the error currency of nodeagent. Recoverable errors (bad manifest, HTTP
// failure, apiserver errors, spawn failures) travel as values; exceptions never cross a module
// boundary. Codes are the canonical ones (Abseil / gRPC).
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace nodeagent::base {

enum class StatusCode {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status okStatus() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: message" (or "OK").
  std::string toString() const;

  // Prefixes the message with context: "ctx: message". No-op on OK.
  Status withContext(std::string_view context) const&;
  Status withContext(std::string_view context) &&;

  // Explicitly ignore a status (for best-effort calls).
  void ignoreError() const {}

  bool operator==(const Status& other) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status okStatus() { return Status(); }
Status cancelledError(std::string message);
Status unknownError(std::string message);
Status invalidArgumentError(std::string message);
Status deadlineExceededError(std::string message);
Status notFoundError(std::string message);
Status alreadyExistsError(std::string message);
Status permissionDeniedError(std::string message);
Status resourceExhaustedError(std::string message);
Status failedPreconditionError(std::string message);
Status abortedError(std::string message);
Status outOfRangeError(std::string message);
Status unimplementedError(std::string message);
Status internalError(std::string message);
Status unavailableError(std::string message);
Status dataLossError(std::string message);
Status unauthenticatedError(std::string message);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor): implicit from an error, like absl::StatusOr.
  StatusOr(Status status) : v_(std::move(status)) {
    assert(!std::get<Status>(v_).ok() && "StatusOr built from an OK status");
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "StatusOr built from OK");
  }
  // NOLINTNEXTLINE(google-explicit-constructor)
  StatusOr(T value) : v_(std::move(value)) {}
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, T> &&
           !std::is_same_v<std::decay_t<U>, Status> && !std::is_same_v<std::decay_t<U>, StatusOr>)
      // NOLINTNEXTLINE(google-explicit-constructor)
      StatusOr(U&& value)
      : v_(T(std::forward<U>(value))) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  const T& value() const& { return checked(); }
  T& value() & { return checked(); }
  T&& value() && { return std::move(checked()); }
  const T& operator*() const& { return checked(); }
  T& operator*() & { return checked(); }
  T&& operator*() && { return std::move(checked()); }
  const T* operator->() const { return &checked(); }
  T* operator->() { return &checked(); }

  template <typename U>
  T valueOr(U&& fallback) const& {
    return ok() ? std::get<T>(v_) : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  T& checked() {
    if (!ok()) dieOnBadAccess(std::get<Status>(v_));
    return std::get<T>(v_);
  }
  const T& checked() const {
    if (!ok()) dieOnBadAccess(std::get<Status>(v_));
    return std::get<T>(v_);
  }
  [[noreturn]] static void dieOnBadAccess(const Status& s);

  std::variant<Status, T> v_;
};

[[noreturn]] void dieOnBadStatusOrAccess(const Status& s);

template <typename T>
void StatusOr<T>::dieOnBadAccess(const Status& s) {
  dieOnBadStatusOrAccess(s);
}

// Aborts with a message when an invariant is broken (never for external input).
[[noreturn]] void checkFailed(const char* file, int line, const char* cond, std::string_view msg);

}  // namespace nodeagent::base

#define NA_CHECK(cond, msg)                                                        \
  do {                                                                             \
    if (!(cond)) ::nodeagent::base::checkFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

#define NA_CONCAT_INNER(a, b) a##b
#define NA_CONCAT(a, b) NA_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::nodeagent::base::Status na_status_ = (expr); \
    if (!na_status_.ok()) return na_status_;       \
  } while (0)

// RETURN_IF_ERROR for coroutines: `expr` may be a co_await expression.
#define CO_RETURN_IF_ERROR(expr)                   \
  do {                                             \
    ::nodeagent::base::Status na_status_ = (expr); \
    if (!na_status_.ok()) co_return na_status_;    \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(*tmp)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(NA_CONCAT(na_statusor_, __LINE__), lhs, expr)
