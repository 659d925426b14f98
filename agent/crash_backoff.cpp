#include "agent/crash_backoff.h"

#include <algorithm>

namespace nodeagent::agent {

bool CrashBackoff::isInBackOffSince(const std::string& key, base::SystemTime event_time,
                                    base::Duration* remaining) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  auto now = clock_.wallNow();
  if (expired(it->second, now)) return false;
  auto since = now - event_time;
  if (since >= it->second.backoff) return false;
  if (remaining != nullptr) {
    *remaining = std::chrono::duration_cast<base::Duration>(it->second.backoff - since);
  }
  return true;
}

void CrashBackoff::next(const std::string& key) {
  std::lock_guard lock(mu_);
  auto now = clock_.wallNow();
  auto it = entries_.find(key);
  if (it == entries_.end() || expired(it->second, now)) {
    entries_[key] = Entry{initial_, now};
    return;
  }
  it->second.backoff = std::min(it->second.backoff * 2, max_);
  it->second.last_update = now;
}

base::Duration CrashBackoff::get(const std::string& key) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? base::Duration::zero() : it->second.backoff;
}

void CrashBackoff::gc() {
  std::lock_guard lock(mu_);
  auto now = clock_.wallNow();
  std::erase_if(entries_, [&](const auto& kv) { return expired(kv.second, now); });
}

void CrashBackoff::forgetPrefix(const std::string& prefix) {
  std::lock_guard lock(mu_);
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = entries_.erase(it);
  }
}

}  // namespace nodeagent::agent
