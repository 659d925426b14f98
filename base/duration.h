// Durations in Go's time.ParseDuration form ("20s", "1m", "500ms", "1h30m", "1.5h"), the form
// kubelet's flags and KubeletConfiguration use for every period.
#pragma once

#include <string>
#include <string_view>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::base {

// Parses a possibly signed sequence of decimal numbers, each with an optional fraction and a
// unit: "ns", "us" (or "µs"/"μs"), "ms", "s", "m", "h". "0" alone needs no unit. Out-of-range
// values and malformed text are InvalidArgument errors that quote the input. Any thread.
StatusOr<Duration> parseDuration(std::string_view text);

// Go's Duration.String(): "1h30m0s", "20s", "500ms", "1.5µs", "0s".
std::string formatDuration(Duration d);

}  // namespace nodeagent::base
