// What DueQueue and IntrusiveDueQueue share: their time buckets (of `granularity`, one second by
// default) and the cached time of the first key, recomputed only after the first key may have
// gone or moved. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "base/clock.h"

namespace nodeagent::base::detail {

class DueTimes {
 public:
  explicit DueTimes(Duration granularity)
      : granularity_(std::max(granularity.count(), Duration::rep{1})) {}

  // The bucket of `at`: its time divided by the granularity, rounded down.
  int64_t bucketOf(MonotonicTime at) const {
    const auto t = at.time_since_epoch().count();
    return t >= 0 ? t / granularity_ : -((-t - 1) / granularity_) - 1;  // floor
  }

  // A key was scheduled at `at`.
  void scheduled(MonotonicTime at) {
    if (next_valid_) next_ = next_ ? std::min(*next_, at) : at;
  }
  // A key due at `at` moved or was dropped.
  void left(MonotonicTime at) {
    if (next_ && at == *next_) next_valid_ = false;
  }
  // Keys were taken.
  void taken() { next_valid_ = false; }
  // Every key was dropped.
  void cleared() {
    next_.reset();
    next_valid_ = true;
  }
  // The first key's time, from `first_time()` when the cached one may be stale.
  template <typename FirstTime>
  std::optional<MonotonicTime> next(FirstTime first_time) const {
    if (!next_valid_) {
      next_ = first_time();
      next_valid_ = true;
    }
    return next_;
  }

 private:
  Duration::rep granularity_;
  mutable std::optional<MonotonicTime> next_;
  mutable bool next_valid_ = true;
};

}  // namespace nodeagent::base::detail
