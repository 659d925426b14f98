// ManifestErrors: what is wrong right now with the manifests the file and HTTP sources read, by
// source ("file", "http") and location (file path or URL). A manifest that fails to parse keeps
// its last good pod running (DESIGN.md), so without this registry a broken edit would only show
// in the log; the agent's endpoints display it. Sources set an entry when a problem appears and
// clear it when the manifest is good again (or gone). Thread-safe: every method, any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <map>
#include <vector>

#include "base/clock.h"

namespace nodeagent::config {

struct ManifestError {
  std::string source;    // "file" or "http"
  std::string location;  // the file path or URL
  std::string message;   // why, naming the field where there is one
  base::SystemTime since{};  // when this message was first recorded
  bool operator==(const ManifestError&) const = default;
};

class ManifestErrors {
 public:
  // Records the problem with (source, location), replacing any earlier one. Setting the same
  // message again keeps its `since`.
  void set(std::string_view source, std::string_view location, std::string message,
           base::SystemTime now);
  // Forgets the problem with (source, location), if any.
  void clear(std::string_view source, std::string_view location);
  // Forgets every problem of `source`.
  void clearSource(std::string_view source);

  std::optional<ManifestError> get(std::string_view source, std::string_view location) const;
  // Every current problem, sorted by (source, location).
  std::vector<ManifestError> list() const;
  std::vector<ManifestError> list(std::string_view source) const;
  size_t size() const;
  // Grows on every change, so a display can tell cheaply whether anything moved.
  uint64_t generation() const;

 private:
  using Key = std::pair<std::string, std::string>;
  mutable std::mutex mu_;
  std::map<Key, ManifestError> errors_;
  uint64_t generation_ = 0;
};

}  // namespace nodeagent::config
