// Client-side token bucket for apiserver calls (client-go's flowcontrol.NewTokenBucketRateLimiter):
// `qps` tokens per second refill a bucket of `burst` tokens, full at start. Time comes from the
// injected Clock, so the limiter is tested with a fake clock. kubelet's defaults (--kube-api-qps,
// --kube-api-burst) are QPS 50, burst 100; qps <= 0 disables limiting.
#pragma once

#include <mutex>

#include "base/clock.h"

namespace nodeagent::api {

inline constexpr double kDefaultKubeApiQps = 50.0;
inline constexpr int kDefaultKubeApiBurst = 100;

class RateLimiter {
 public:
  RateLimiter(double qps, int burst, base::Clock& clock);

  // Takes a token now if one is available. Any thread.
  bool tryAccept();
  // Takes a token, going into debt if needed, and returns how long the caller must wait before
  // using it (zero when a token was available). Callers that wait that long stay within qps:
  // reservations queue up in order. Any thread.
  base::Duration reserve();
  // Returns a reservation that was not used (the caller gave up waiting). Any thread.
  void cancelReservation();

  double qps() const { return qps_; }
  int burst() const { return burst_; }
  // Tokens available now (negative while reservations are pending). For tests and metrics.
  double tokens();

 private:
  void refillLocked();

  const double qps_;
  const int burst_;
  base::Clock& clock_;
  std::mutex mu_;
  double tokens_;
  base::MonotonicTime last_;
};

}  // namespace nodeagent::api
