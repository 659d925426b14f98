// Exponential backoff with jitter (client-go's wait.Backoff / kubelet's flowcontrol.Backoff
// shape): base delay doubling up to a cap, optional jitter as a fraction of the delay, and a reset.
#pragma once

#include <chrono>

#include "base/clock.h"
#include "base/random.h"

namespace nodeagent::base {

// Returns d plus a random extra in [0, max_factor * d).
Duration jitter(Duration d, double max_factor, Random& random);

class Backoff {
 public:
  struct Options {
    Duration initial = std::chrono::seconds(1);
    Duration max = std::chrono::seconds(30);
    double factor = 2.0;
    double jitter = 0.0;  // extra fraction in [0, jitter) added to each delay
  };
  Backoff(Options options, Random& random) : options_(options), random_(random) {}

  // The delay to wait now; the next call returns the following step.
  Duration next();
  // The un-jittered delay `next()` would base its answer on.
  Duration current() const { return current_ == Duration::zero() ? options_.initial : current_; }
  void reset() { current_ = Duration::zero(); }
  // Number of next() calls since the last reset.
  int attempts() const { return attempts_; }

 private:
  Options options_;
  Random& random_;
  Duration current_ = Duration::zero();
  int attempts_ = 0;
};

}  // namespace nodeagent::base
