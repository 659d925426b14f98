// ASCII string helpers for protocol text (HTTP header names and tokens, URL schemes, flags):
// case-insensitive comparison and lower-casing as Go's strings.EqualFold / ToLower do for ASCII.
#pragma once

#include <string>
#include <string_view>

namespace nodeagent::base {

// `a` and `b` are equal ignoring ASCII case.
bool iequals(std::string_view a, std::string_view b);

// `s` with ASCII letters lower-cased.
std::string asciiLower(std::string_view s);

}  // namespace nodeagent::base
