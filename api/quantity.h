// Kubernetes resource quantities ("100m", "128Mi", "1G", "1e3", "0.5"). Parsed exactly into
// nano-units (enough for every value Kubernetes accepts on a node); printed as given.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace nodeagent::api {

class Quantity {
 public:
  Quantity() = default;
  // Accepts Kubernetes' grammar: sign, digits with optional fraction, then one of the decimal SI
  // suffixes (n u m "" k M G T P E), binary suffixes (Ki Mi Gi Ti Pi Ei) or a decimal exponent
  // (e3, E-2). Values beyond what nano-units in 128 bits hold are OutOfRange.
  static base::StatusOr<Quantity> parse(std::string_view text);
  // A quantity of whole units / milli-units printed in canonical form ("2", "500m").
  static Quantity fromValue(int64_t value);
  static Quantity fromMilli(int64_t milli);
  // Binary-suffixed canonical form for byte counts ("128Mi", or plain digits when not a multiple).
  static Quantity fromBytes(int64_t bytes);

  // The text this quantity was parsed from (or built as).
  const std::string& toString() const { return text_; }
  // Rounded up, like resource.Quantity.Value()/MilliValue().
  int64_t value() const;
  int64_t milliValue() const;
  __int128 nanoValue() const { return nanos_; }
  bool isZero() const { return nanos_ == 0; }

  std::strong_ordering operator<=>(const Quantity& other) const { return nanos_ <=> other.nanos_; }
  // Equal values compare equal whatever their spelling ("1" == "1000m").
  bool operator==(const Quantity& other) const { return nanos_ == other.nanos_; }

 private:
  __int128 nanos_ = 0;
  std::string text_ = "0";
};

}  // namespace nodeagent::api
