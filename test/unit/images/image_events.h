// The events an ImageManager records, kept for a test to compare.
#pragma once

#include <string>
#include <vector>

#include "agent/images/image_manager.h"

namespace nodeagent::testing {

struct ImageEvent {
  std::string type, reason, message, field_path;
  bool operator==(const ImageEvent&) const = default;
};

// An EventSink appending to `events`, which must outlive the manager.
inline agent::images::ImageManager::EventSink recordInto(std::vector<ImageEvent>& events) {
  return [&events](const api::Pod&, const std::string& type, const std::string& reason,
                   const std::string& message, const std::string& field_path) {
    events.push_back({type, reason, message, field_path});
  };
}

inline std::vector<std::string> reasonsOf(const std::vector<ImageEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.reason);
  return out;
}

}  // namespace nodeagent::testing
