// RFC 3339 timestamps as Kubernetes writes them: metav1.Time (seconds, "2024-01-02T03:04:05Z"),
// MicroTime (6 fraction digits) and RFC3339Nano (up to 9 digits, trailing zeros trimmed).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "base/status.h"

namespace nodeagent::api {

using Timestamp = std::chrono::sys_time<std::chrono::nanoseconds>;

// Accepts "Z" or a numeric offset, any fraction length up to 9 digits.
base::StatusOr<Timestamp> parseTime(std::string_view text);
// metav1.Time: whole seconds, UTC, "Z".
std::string formatTime(Timestamp t);
// metav1.MicroTime: exactly 6 fraction digits.
std::string formatMicroTime(Timestamp t);
// Go's time.RFC3339Nano: fraction with trailing zeros removed (none when zero).
std::string formatNanoTime(Timestamp t);

}  // namespace nodeagent::api
