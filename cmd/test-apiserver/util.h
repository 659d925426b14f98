// Small helpers of the test apiserver: Kubernetes timestamps, kubectl's human durations, base64.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::testapiserver {

// metav1.Time: "2024-05-01T12:00:00Z" (whole seconds, UTC).
std::string formatTime(base::SystemTime t);
// metav1.MicroTime: "2024-05-01T12:00:00.123456Z".
std::string formatMicroTime(base::SystemTime t);
// Accepts "Z" or a numeric offset and an optional fraction; nullopt when malformed.
std::optional<base::SystemTime> parseTime(std::string_view text);

// k8s.io/apimachinery duration.HumanDuration ("5s", "3m2s", "10m", "2h3m", "5d"), the AGE column.
std::string humanDuration(base::Duration d);

// The string member `key` of `obj`; "" when `obj` is no object or the member is missing or no
// string.
std::string stringAt(const nlohmann::json& obj, const char* key);
// ASCII lower case.
std::string asciiLower(std::string text);

// Every part of `text` between `separator`s, empty ones included (Go's strings.Split).
std::vector<std::string> splitString(std::string_view text, char separator);

// Whether a JSON (or YAML flow) text nests arrays and objects deeper than `max_depth` (brackets
// inside double-quoted strings do not count). Such bodies are refused before parsing: their
// recursive printing and copying would exhaust a request thread's stack.
bool nestedDeeperThan(std::string_view text, int max_depth);
inline constexpr int kMaxBodyNesting = 1000;

std::string base64Encode(std::string_view data);
std::optional<std::string> base64Decode(std::string_view text);
// base64url without padding (RFC 4648 section 5, Go's base64.RawURLEncoding), as in JWTs.
std::string base64UrlEncode(std::string_view data);
// Only the URL alphabet and no padding; nullopt otherwise.
std::optional<std::string> base64UrlDecode(std::string_view text);
// Go's base64.StdEncoding, which kube-apiserver decodes JSON []byte fields with: the standard
// alphabet, padding required, '\r' and '\n' skipped, trailing bits ignored. InvalidArgument
// "illegal base64 data at input byte N" (Go's CorruptInputError) otherwise.
base::StatusOr<std::string> base64DecodeStd(std::string_view text);

}  // namespace nodeagent::testapiserver
