#include "cmd/test-apiserver/protobuf.h"

#include <cstdint>
#include <functional>

#include <nlohmann/json.hpp>

namespace nodeagent::testapiserver {

using nlohmann::json;

namespace {

// Calls `on_field(number, bytes)` for each length-delimited field; skips scalar fields.
base::Status forEachField(std::string_view msg,
                          const std::function<base::Status(int, std::string_view)>& on_field) {
  size_t pos = 0;
  auto varint = [&](uint64_t& out) {
    out = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= msg.size()) return false;
      const uint8_t b = static_cast<uint8_t>(msg[pos++]);
      out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (pos < msg.size()) {
    uint64_t key = 0;
    if (!varint(key)) return base::invalidArgumentError("protobuf: truncated field key");
    const int field = static_cast<int>(key >> 3);
    switch (key & 7) {
      case 0: {
        uint64_t ignored = 0;
        if (!varint(ignored)) return base::invalidArgumentError("protobuf: truncated varint");
        break;
      }
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2: {
        uint64_t len = 0;
        if (!varint(len) || len > msg.size() - pos) {
          return base::invalidArgumentError("protobuf: truncated length-delimited field");
        }
        RETURN_IF_ERROR(on_field(field, msg.substr(pos, len)));
        pos += len;
        break;
      }
      default:
        return base::invalidArgumentError("protobuf: unsupported wire type");
    }
    if (pos > msg.size()) return base::invalidArgumentError("protobuf: truncated message");
  }
  return base::okStatus();
}

base::Status decodeMapEntry(std::string_view entry, json& into) {
  std::string key, value;
  RETURN_IF_ERROR(forEachField(entry, [&](int f, std::string_view v) {
    if (f == 1) key = v;
    if (f == 2) value = v;
    return base::okStatus();
  }));
  into[key] = value;
  return base::okStatus();
}

}  // namespace

base::StatusOr<json> decodeProtobufObject(std::string_view body) {
  static constexpr std::string_view kMagic("k8s\0", 4);
  if (!body.starts_with(kMagic)) {
    return base::invalidArgumentError("protobuf body does not start with the k8s magic prefix");
  }
  std::string api_version, kind;
  std::string_view raw;
  RETURN_IF_ERROR(forEachField(body.substr(4), [&](int f, std::string_view v) {
    if (f == 1) {
      return forEachField(v, [&](int tf, std::string_view tv) {
        if (tf == 1) api_version = tv;
        if (tf == 2) kind = tv;
        return base::okStatus();
      });
    }
    if (f == 2) raw = v;
    return base::okStatus();
  }));
  if (kind != "Namespace") {
    return base::unimplementedError("protobuf bodies are only understood for Namespace, not " +
                                    (kind.empty() ? std::string("(no kind)") : kind) +
                                    "; send application/json");
  }
  json meta = json::object();
  RETURN_IF_ERROR(forEachField(raw, [&](int f, std::string_view v) {
    if (f != 1) return base::okStatus();  // spec and status of a Namespace: nothing we keep
    return forEachField(v, [&](int mf, std::string_view mv) {
      switch (mf) {
        case 1:
          if (!mv.empty()) meta["name"] = mv;
          break;
        case 2:
          if (!mv.empty()) meta["generateName"] = mv;
          break;
        case 11:
          return decodeMapEntry(mv, meta["labels"]);
        case 12:
          return decodeMapEntry(mv, meta["annotations"]);
        default:
          break;
      }
      return base::okStatus();
    });
  }));
  return json{
      {"apiVersion", api_version.empty() ? "v1" : api_version}, {"kind", kind}, {"metadata", meta}};
}

}  // namespace nodeagent::testapiserver
