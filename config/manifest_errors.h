// ManifestErrors: what is wrong right now with the manifests the file and HTTP sources read, by
// source ("file", "http") and location (file path or URL). A manifest that fails to parse keeps
// its last good pod running (DESIGN.md), so without this registry a broken edit would only show
// in the log; the agent's endpoints display it. Sources set an entry when a problem appears and
// clear it when the manifest is good again (or gone). A listener (the agent's FailedValidation
// events) hears of each new content problem without config/ knowing who listens.
// Thread-safe: every method, any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"

namespace nodeagent::config {

// The pod a bad manifest defines, when its name could be read (defaults applied: name-<node>,
// namespace, static UID). Empty name: unknown.
struct ManifestPodRef {
  std::string namespace_;
  std::string name;
  std::string uid;
  bool operator==(const ManifestPodRef&) const = default;
};

// What set() knows beyond the message.
struct ManifestErrorDetail {
  // The part of the message about the manifest's content (decode, validation, duplicate pod
  // name); "" when the problem is only that the file or URL could not be read.
  std::string invalid;
  ManifestPodRef pod;
};

struct ManifestError {
  std::string source;        // "file" or "http"
  std::string location;      // the file path or URL
  std::string message;       // why, naming the field where there is one
  base::SystemTime since{};  // when this message was first recorded
  std::string invalid;       // see ManifestErrorDetail
  ManifestPodRef pod;
  bool operator==(const ManifestError&) const = default;
};

class ManifestErrors {
 public:
  // Records the problem with (source, location), replacing any earlier one. Setting the same
  // message again keeps its `since` and changes nothing.
  void set(std::string_view source, std::string_view location, std::string message,
           base::SystemTime now, ManifestErrorDetail detail = {});

  // Called when a content problem appears for a location, or its `invalid` text changes; not
  // when set() repeats it (periodic relists), nor when only a read failure comes and goes. Runs
  // on the thread that called set(), outside the lock; must not block or call back into this
  // object's setters. Set it before the sources start.
  using Listener = std::function<void(const ManifestError&)>;
  void setListener(Listener listener);
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
  Listener listener_;
};

}  // namespace nodeagent::config
