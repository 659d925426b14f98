// A lost apiserver state: etcd restored from an older backup, or a new store behind the same
// address. The objects the agent created there (its Node, its Lease, mirror pods, pod statuses)
// are gone while the agent's clients still hold them, and a watch resumed from a resourceVersion
// the new store has reached again never says so. Whichever client meets the loss first reports it
// here: the api source's reflector seeing the resourceVersion go backwards, the Node or the Lease
// answering 404 after the agent created them. Every listener then starts over (the api source
// relists, the Node registers again, the lease is re-created, every pod status is re-sent).
// Reports within `quiet_period` of the last one are the same loss seen by another client and are
// only logged.
//
// Threading: subscribe() before the first report; report() from any thread, it runs the listeners
// on the caller's thread (they must only post work). The Clock must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/clock.h"

namespace nodeagent::agent {

class ApiStateLoss {
 public:
  using Listener = std::function<void(const std::string& reason)>;

  explicit ApiStateLoss(base::Clock& clock, base::Duration quiet_period = std::chrono::seconds(5));

  void subscribe(Listener listener);
  // Returns true when the listeners ran (a new loss), false inside the quiet period.
  bool report(const std::string& reason);
  // Losses acted on so far. Any thread.
  uint64_t losses() const { return losses_.load(); }

 private:
  base::Clock& clock_;
  const base::Duration quiet_period_;
  std::vector<Listener> listeners_;
  std::mutex mu_;
  std::optional<base::MonotonicTime> last_;
  std::atomic<uint64_t> losses_{0};
};

}  // namespace nodeagent::agent
