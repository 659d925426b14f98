// ASCII string helpers for protocol text (HTTP header names and tokens, URL schemes, flags):
// case-insensitive comparison and lower-casing as Go's strings.EqualFold / ToLower do for ASCII,
// and the comma-separated lists of flags.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nodeagent::base {

// `a` and `b` are equal ignoring ASCII case.
bool iequals(std::string_view a, std::string_view b);

// `s` with ASCII letters lower-cased.
std::string asciiLower(std::string_view s);

// "a, b,,c " -> {"a", "b", "c"}: the entries of a comma-separated list without the blanks (spaces
// and tabs) around them; empty entries are dropped.
std::vector<std::string> splitCommaList(std::string_view text);

}  // namespace nodeagent::base
