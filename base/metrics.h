// Prometheus building blocks: a lock-free histogram, a scoped timer observing into one, and the
// HELP/TYPE header lines of the text exposition format.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string_view>
#include <vector>

#include "base/clock.h"

namespace nodeagent::base {

// prometheus' DefBuckets, in seconds.
inline const std::vector<double> kDefaultBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    0.5,   1,    2.5,   5,    10};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds = kDefaultBuckets);
  // Any thread.
  void observe(double seconds);
  // Appends the _bucket, _sum and _count samples of `name`; `labels` is "" or `k="v",...`.
  void write(std::ostream& out, std::string_view name, std::string_view labels = {}) const;
  uint64_t count() const { return count_.load(); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (not cumulative), +Inf last
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

// Observes, when it goes out of scope, the time since it was made.
class ScopedTimer {
 public:
  ScopedTimer(Histogram& histogram, Clock& clock)
      : histogram_(histogram), clock_(clock), began_(clock.now()) {}
  ~ScopedTimer() {
    histogram_.observe(std::chrono::duration<double>(clock_.now() - began_).count());
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Histogram& histogram_;
  Clock& clock_;
  MonotonicTime began_;
};

// HELP and TYPE lines.
void writeMetricHeader(std::ostream& out, std::string_view name, std::string_view type,
                       std::string_view help);

}  // namespace nodeagent::base
