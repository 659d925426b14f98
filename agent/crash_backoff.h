// Container restart backoff (kubelet's flowcontrol.Backoff keyed per container): 10 s doubling to
// 300 s; an entry untouched for twice the maximum (10 minutes: the container ran that long)
// starts over. Thread-safe: pod strands share one instance.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "base/clock.h"

namespace nodeagent::agent {

class CrashBackoff {
 public:
  CrashBackoff(base::Clock& clock, base::Duration initial, base::Duration max)
      : clock_(clock), initial_(initial), max_(max) {}

  // True while `key`'s backoff, counted from `event_time` (the container's finish), has not run
  // out. Returns the remaining wait in `remaining` when true.
  bool isInBackOffSince(const std::string& key, base::SystemTime event_time,
                        base::Duration* remaining = nullptr);
  // Records a restart: the next backoff for `key` doubles (or starts at the initial value).
  void next(const std::string& key);
  // The current backoff of `key` (zero when none).
  base::Duration get(const std::string& key);
  // Drops entries that expired (kubelet's backOff.GC, run by housekeeping).
  void gc();
  // Drops every entry whose key starts with `prefix` (a pod that went away).
  void forgetPrefix(const std::string& prefix);

 private:
  struct Entry {
    base::Duration backoff{};
    base::SystemTime last_update{};
  };
  bool expired(const Entry& e, base::SystemTime now) const {
    return now - e.last_update > 2 * max_;
  }

  base::Clock& clock_;
  base::Duration initial_;
  base::Duration max_;
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace nodeagent::agent
