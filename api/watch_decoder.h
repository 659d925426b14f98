// Incremental decoder for the apiserver's watch stream: newline-delimited JSON objects
// {"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}} arriving in arbitrary chunks.
// Bytes go in with feed(); each complete event comes out through the callback, in order. Garbage
// (a line that is not such an object) and oversized events (more than max_event_bytes without a
// newline) are errors that end the stream: the caller drops the watch and relists. Never throws.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::api {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };
std::string_view watchEventTypeName(WatchEventType type);  // "ADDED", ...

// One decoded watch frame. `object` is the event's object (a Status for kError); never null.
struct RawWatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  std::shared_ptr<nlohmann::json> object;
};

inline constexpr size_t kDefaultMaxWatchEventBytes = 16 * 1024 * 1024;

class WatchDecoder {
 public:
  // Returns false to stop decoding (feed() then returns OK without looking further).
  using EventCallback = std::function<bool(RawWatchEvent&&)>;

  explicit WatchDecoder(EventCallback on_event,
                        size_t max_event_bytes = kDefaultMaxWatchEventBytes);
  ~WatchDecoder();

  // Consumes a chunk. Returns an error (DataLoss for garbage, ResourceExhausted for an event over
  // the cap) naming the byte offset; after an error or a stop from the callback, the decoder stays
  // finished and ignores further input.
  base::Status feed(std::string_view chunk);
  // The stream ended: OK unless a partial event (non-whitespace bytes without a newline) is left.
  // A final event without a trailing newline is accepted and delivered.
  base::Status finish();

  bool finished() const { return finished_; }
  // Bytes consumed so far (for messages and tests).
  size_t offset() const { return consumed_; }

 private:
  base::Status decodeLine(std::string_view line, size_t line_offset);

  EventCallback on_event_;
  size_t max_event_bytes_;
  std::string buffer_;   // bytes of the current, incomplete line
  size_t consumed_ = 0;  // stream offset of buffer_[0]
  bool finished_ = false;
  base::Status error_;
};

// Parses a watch event type name; nullopt for unknown names.
bool parseWatchEventType(std::string_view name, WatchEventType& out);

}  // namespace nodeagent::api
