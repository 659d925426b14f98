#include "config/manifest_errors.h"

namespace nodeagent::config {

void ManifestErrors::set(std::string_view source, std::string_view location, std::string message,
                         base::SystemTime now, ManifestErrorDetail detail) {
  std::optional<ManifestError> announce;
  Listener listener;
  {
    std::lock_guard lock(mu_);
    Key key{std::string(source), std::string(location)};
    auto it = errors_.find(key);
    std::string previous_invalid;
    if (it != errors_.end()) {
      if (it->second.message == message) return;
      previous_invalid = it->second.invalid;
      it->second.message = std::move(message);
      it->second.since = now;
      it->second.invalid = std::move(detail.invalid);
      it->second.pod = std::move(detail.pod);
    } else {
      it = errors_
               .emplace(key, ManifestError{key.first, key.second, std::move(message), now,
                                           std::move(detail.invalid), std::move(detail.pod)})
               .first;
    }
    ++generation_;
    if (!it->second.invalid.empty() && it->second.invalid != previous_invalid && listener_) {
      announce = it->second;
      listener = listener_;
    }
  }
  if (announce) listener(*announce);
}

void ManifestErrors::setListener(Listener listener) {
  std::lock_guard lock(mu_);
  listener_ = std::move(listener);
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
