// Rendering untrusted names (file names, pod and container names from an apiserver or a manifest)
// where they are printed, so that no name can break the format it is printed in: a log line
// (control characters would forge lines or drive the terminal), JSON (nlohmann's dump throws on
// invalid UTF-8), or a Prometheus label value. Pure functions: any thread.
#pragma once

#include <string>
#include <string_view>

namespace nodeagent::base {

// Go's %q of a string (strconv.Quote): double-quoted, with quotes and backslashes escaped,
// control characters as \n, \t, \xNN or \u00NN, and bytes that are not valid UTF-8 as \xNN. The
// result is printable ASCII plus well-formed non-control UTF-8. Logs print names through it.
std::string goQuote(std::string_view value);

// `value` with every byte that is not part of well-formed UTF-8 replaced by U+FFFD, so it can go
// into JSON (what nlohmann's error_handler_t::replace does, for strings built before a dump).
std::string validUtf8(std::string_view value);

// A Prometheus text-format label value (without the quotes): backslash, double quote and newline
// escaped, invalid UTF-8 replaced by U+FFFD.
std::string prometheusLabelValue(std::string_view value);

}  // namespace nodeagent::base
