#include "config/manifest_errors.h"

namespace nodeagent::config {

void ManifestErrors::set(std::string_view source, std::string_view location, std::string message,
                         base::SystemTime now) {
  std::lock_guard lock(mu_);
  Key key{std::string(source), std::string(location)};
  auto it = errors_.find(key);
  if (it != errors_.end()) {
    if (it->second.message == message) return;
    it->second.message = std::move(message);
    it->second.since = now;
  } else {
    errors_.emplace(key, ManifestError{key.first, key.second, std::move(message), now});
  }
  ++generation_;
}

void ManifestErrors::clear(std::string_view source, std::string_view location) {
  std::lock_guard lock(mu_);
  if (errors_.erase(Key{std::string(source), std::string(location)}) > 0) ++generation_;
}

void ManifestErrors::clearSource(std::string_view source) {
  std::lock_guard lock(mu_);
  auto it = errors_.lower_bound(Key{std::string(source), std::string()});
  bool changed = false;
  while (it != errors_.end() && it->first.first == source) {
    it = errors_.erase(it);
    changed = true;
  }
  if (changed) ++generation_;
}

std::optional<ManifestError> ManifestErrors::get(std::string_view source,
                                                 std::string_view location) const {
  std::lock_guard lock(mu_);
  auto it = errors_.find(Key{std::string(source), std::string(location)});
  if (it == errors_.end()) return std::nullopt;
  return it->second;
}

std::vector<ManifestError> ManifestErrors::list() const {
  std::lock_guard lock(mu_);
  std::vector<ManifestError> out;
  out.reserve(errors_.size());
  for (const auto& [key, error] : errors_) out.push_back(error);
  return out;
}

std::vector<ManifestError> ManifestErrors::list(std::string_view source) const {
  std::lock_guard lock(mu_);
  std::vector<ManifestError> out;
  for (auto it = errors_.lower_bound(Key{std::string(source), std::string()});
       it != errors_.end() && it->first.first == source; ++it) {
    out.push_back(it->second);
  }
  return out;
}

size_t ManifestErrors::size() const {
  std::lock_guard lock(mu_);
  return errors_.size();
}

uint64_t ManifestErrors::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

}  // namespace nodeagent::config
