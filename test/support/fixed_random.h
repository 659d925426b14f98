// A Random that always draws the same number, for tests that pin jitter.
#pragma once

#include <cstdint>

#include "base/random.h"

namespace nodeagent::testing {

class FixedRandom final : public base::Random {
 public:
  explicit FixedRandom(double value, uint64_t next = 0) : value_(value), next_(next) {}
  double uniform() override { return value_; }
  uint64_t next64() override { return next_; }

 private:
  double value_;
  uint64_t next_;
};

}  // namespace nodeagent::testing
