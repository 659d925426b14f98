// What a pod source (file, HTTP, apiserver, checkpoint) gives PodConfig: kubelet's per-source
// channel, as a callback. A source pushes PodUpdates for its own source name, in order.
#pragma once

#include <functional>

#include "api/pod_update.h"

namespace nodeagent::config {

// Any thread; never blocks; updates from one source are merged in the order they were pushed.
using PodUpdateSink = std::function<void(api::PodUpdate)>;

class PodSource {
 public:
  virtual ~PodSource() = default;
  // Starts watching/polling; the first update (a SET) follows as soon as the source has read its
  // input. Any thread, once.
  virtual void start() = 0;
  // Stops all work; no update is pushed after stop() returns. Any thread, idempotent.
  virtual void stop() = 0;
};

}  // namespace nodeagent::config
