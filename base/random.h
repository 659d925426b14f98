// Injected randomness for jitter and backoff, so tests can pin it.
#pragma once

#include <cstdint>
#include <mutex>
#include <random>

namespace nodeagent::base {

class Random {
 public:
  virtual ~Random() = default;
  // Uniform in [0, 1).
  virtual double uniform() = 0;
  virtual uint64_t next64() = 0;
};

// Thread-safe Mersenne Twister; seeded from std::random_device unless a seed is given.
class DefaultRandom final : public Random {
 public:
  DefaultRandom() : gen_(std::random_device{}()) {}
  explicit DefaultRandom(uint64_t seed) : gen_(seed) {}
  double uniform() override {
    std::lock_guard lock(mu_);
    return std::uniform_real_distribution<double>(0.0, 1.0)(gen_);
  }
  uint64_t next64() override {
    std::lock_guard lock(mu_);
    return gen_();
  }

 private:
  std::mutex mu_;
  std::mt19937_64 gen_;
};

// The process-wide default source.
Random& defaultRandom();

}  // namespace nodeagent::base
