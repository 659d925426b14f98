// What lets housekeeping (kubelet's HandlePodCleanups, every 2 s) skip its O(pods) pass: the
// inputs it looks at, and whether they changed since a pass that found nothing to do. Container
// exits of wanted pods leave dead containers for its container GC, which kubelet runs every
// minute: they bring the pass back once that long after the last one, not at the next tick.
#pragma once

#include <cstdint>
#include <optional>

#include "base/clock.h"

namespace nodeagent::agent {

// Generations of what a housekeeping pass reads: the pod manager, the pod workers, and PLEG
// events of pods the pod manager does not know.
struct HousekeepingInputs {
  uint64_t pods = 0;
  uint64_t workers = 0;
  uint64_t unknown_pod_events = 0;
  uint64_t container_exits = 0;  // ContainerDied events of pods the pod manager knows
  bool operator==(const HousekeepingInputs&) const = default;
};

// Saves a large node its housekeeping pass while nothing changed: a pass may be skipped when the
// last one acted on nothing, its inputs are the same (container exits aside while it is less than
// `gc_period` old), and it is less than `full_period` old (the safety net). Not thread-safe (the
// sync loop's strand).
class HousekeepingSkip {
 public:
  HousekeepingSkip(base::Duration full_period, base::Duration gc_period)
      : full_period_(full_period), gc_period_(gc_period) {}

  bool canSkip(const HousekeepingInputs& inputs, base::MonotonicTime now) const {
    if (!last_ || last_->acted || now - last_->at >= full_period_) return false;
    HousekeepingInputs others = inputs;
    others.container_exits = last_->inputs.container_exits;
    if (others != last_->inputs) return false;
    return inputs.container_exits == last_->inputs.container_exits || now - last_->at < gc_period_;
  }
  // A pass that read `inputs` (before it looked at anything) at `at` finished.
  void passDone(const HousekeepingInputs& inputs, base::MonotonicTime at, bool acted) {
    last_ = Pass{inputs, at, acted};
  }

 private:
  struct Pass {
    HousekeepingInputs inputs;
    base::MonotonicTime at;
    bool acted = false;
  };
  base::Duration full_period_;
  base::Duration gc_period_;
  std::optional<Pass> last_;
};

}  // namespace nodeagent::agent
