// kubelet's ImageGCPolicy: when image garbage collection (image_gc_manager.h) removes images.
#pragma once

#include <chrono>
#include <cstdint>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::agent::images {

struct ImageGcPolicy {
  // Image filesystem usage, in percent, at or above which unused images are removed
  // (--image-gc-high-threshold; 100 turns the periodic collection off).
  int64_t high_threshold_percent = 85;
  // The usage that a collection frees down to (--image-gc-low-threshold).
  int64_t low_threshold_percent = 80;
  // How long an image is kept at least after it was first seen (--minimum-image-ttl-duration).
  base::Duration min_age = std::chrono::minutes(2);
  // How long an image may stay unused before it is removed whatever the usage
  // (imageMaximumGCAge, --image-maximum-gc-age); zero turns it off (the default).
  base::Duration max_age = base::Duration::zero();
};

// kubelet's validation of the policy, the error naming the flags: each threshold within
// [0, 100], the low one below the high one, a min age not negative, a max age not negative and,
// when set, above the min age.
base::Status validateImageGcPolicy(const ImageGcPolicy& policy);

}  // namespace nodeagent::agent::images
