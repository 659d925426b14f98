#include "api/watch_decoder.h"

#include <nlohmann/json.hpp>

namespace nodeagent::api {

std::string_view watchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
    case WatchEventType::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

bool parseWatchEventType(std::string_view name, WatchEventType& out) {
  if (name == "ADDED")
    out = WatchEventType::kAdded;
  else if (name == "MODIFIED")
    out = WatchEventType::kModified;
  else if (name == "DELETED")
    out = WatchEventType::kDeleted;
  else if (name == "BOOKMARK")
    out = WatchEventType::kBookmark;
  else if (name == "ERROR")
    out = WatchEventType::kError;
  else
    return false;
  return true;
}

WatchDecoder::WatchDecoder(EventCallback on_event, size_t max_event_bytes)
    : on_event_(std::move(on_event)), max_event_bytes_(max_event_bytes) {}

WatchDecoder::~WatchDecoder() = default;

namespace {
bool isBlank(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  }
  return true;
}
}  // namespace

base::Status WatchDecoder::decodeLine(std::string_view line, size_t line_offset) {
  if (isBlank(line)) return base::okStatus();
  auto fail = [&](const std::string& why) {
    finished_ = true;
    error_ = base::dataLossError("watch stream: malformed event at byte " +
                                 std::to_string(line_offset) + ": " + why);
    return error_;
  };
  auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return fail("not valid JSON");
  if (!parsed.is_object()) return fail("not a JSON object");
  auto type_it = parsed.find("type");
  if (type_it == parsed.end() || !type_it->is_string())
    return fail("type: missing or not a string");
  RawWatchEvent ev;
  if (!parseWatchEventType(type_it->get_ref<const std::string&>(), ev.type)) {
    return fail("type: unknown event type \"" + type_it->get<std::string>() + "\"");
  }
  auto obj_it = parsed.find("object");
  if (obj_it == parsed.end() || !obj_it->is_object())
    return fail("object: missing or not an object");
  ev.object = std::make_shared<nlohmann::json>(std::move(*obj_it));
  if (!on_event_(std::move(ev))) finished_ = true;
  return base::okStatus();
}

base::Status WatchDecoder::feed(std::string_view chunk) {
  if (finished_) return error_;
  while (!chunk.empty()) {
    auto nl = chunk.find('\n');
    if (nl == std::string_view::npos) {
      if (buffer_.size() + chunk.size() > max_event_bytes_) {
        finished_ = true;
        error_ = base::resourceExhaustedError("watch stream: event at byte " +
                                              std::to_string(consumed_) + " exceeds " +
                                              std::to_string(max_event_bytes_) + " bytes");
        return error_;
      }
      buffer_.append(chunk);
      return base::okStatus();
    }
    std::string_view piece = chunk.substr(0, nl);
    chunk.remove_prefix(nl + 1);
    size_t line_offset = consumed_;
    base::Status st;
    if (buffer_.empty()) {
      if (piece.size() > max_event_bytes_) {
        finished_ = true;
        error_ = base::resourceExhaustedError("watch stream: event at byte " +
                                              std::to_string(consumed_) + " exceeds " +
                                              std::to_string(max_event_bytes_) + " bytes");
        return error_;
      }
      consumed_ += piece.size() + 1;
      st = decodeLine(piece, line_offset);
    } else {
      if (buffer_.size() + piece.size() > max_event_bytes_) {
        finished_ = true;
        error_ = base::resourceExhaustedError("watch stream: event at byte " +
                                              std::to_string(consumed_) + " exceeds " +
                                              std::to_string(max_event_bytes_) + " bytes");
        return error_;
      }
      buffer_.append(piece);
      consumed_ += buffer_.size() + 1;
      std::string line;
      line.swap(buffer_);
      st = decodeLine(line, line_offset);
    }
    if (!st.ok()) return st;
    if (finished_) return base::okStatus();
  }
  return base::okStatus();
}

base::Status WatchDecoder::finish() {
  if (finished_) return error_;
  if (buffer_.empty() || isBlank(buffer_)) {
    finished_ = true;
    return base::okStatus();
  }
  std::string line;
  line.swap(buffer_);
  size_t off = consumed_;
  consumed_ += line.size();
  auto st = decodeLine(line, off);
  finished_ = true;
  return st;
}

}  // namespace nodeagent::api
