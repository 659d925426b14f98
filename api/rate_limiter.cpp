#include "api/rate_limiter.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace nodeagent::api {

RateLimiter::RateLimiter(double qps, int burst, base::Clock& clock)
    : qps_(qps), burst_(std::max(burst, 1)), clock_(clock), tokens_(burst_), last_(clock.now()) {}

void RateLimiter::refillLocked() {
  auto now = clock_.now();
  if (now <= last_) return;
  double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(static_cast<double>(burst_), tokens_ + elapsed * qps_);
  last_ = now;
}

bool RateLimiter::tryAccept() {
  if (qps_ <= 0) return true;
  std::lock_guard lock(mu_);
  refillLocked();
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return true;
  }
  return false;
}

base::Duration RateLimiter::reserve() {
  if (qps_ <= 0) return base::Duration::zero();
  std::lock_guard lock(mu_);
  refillLocked();
  tokens_ -= 1.0;
  if (tokens_ >= 0.0) return base::Duration::zero();
  // The deficit is paid back at qps tokens per second.
  double wait_s = -tokens_ / qps_;
  return std::chrono::duration_cast<base::Duration>(std::chrono::duration<double>(wait_s));
}

void RateLimiter::cancelReservation() {
  if (qps_ <= 0) return;
  std::lock_guard lock(mu_);
  refillLocked();
  tokens_ = std::min(static_cast<double>(burst_), tokens_ + 1.0);
}

double RateLimiter::tokens() {
  std::lock_guard lock(mu_);
  refillLocked();
  return tokens_;
}

}  // namespace nodeagent::api
