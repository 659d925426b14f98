#include "base/backoff.h"

#include <algorithm>

namespace nodeagent::base {

Random& defaultRandom() {
  static DefaultRandom random;
  return random;
}

Duration jitter(Duration d, double max_factor, Random& random) {
  if (max_factor <= 0.0) return d;
  auto extra = static_cast<double>(d.count()) * max_factor * random.uniform();
  return d + Duration(static_cast<Duration::rep>(extra));
}

Duration Backoff::next() {
  if (current_ == Duration::zero()) {
    current_ = options_.initial;
  } else {
    auto grown = static_cast<double>(current_.count()) * options_.factor;
    auto cap = static_cast<double>(options_.max.count());
    current_ = Duration(static_cast<Duration::rep>(std::min(grown, cap)));
  }
  current_ = std::min(current_, options_.max);
  ++attempts_;
  return jitter(current_, options_.jitter, random_);
}

}  // namespace nodeagent::base
