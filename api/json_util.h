// Helpers shared by the api/ codecs (pod_json.cpp, objects.cpp): typed field readers that name
// the field path in their errors, and the ObjectMeta codec. Includes nlohmann/json: for api/ .cpp
// files only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::api::json_util {

using nlohmann::json;

// A field path built on the stack and rendered only for an error message
// ("spec.containers[0].ports[1].containerPort").
struct Path {
  const Path* parent = nullptr;
  std::string_view key;
  int64_t index = -1;

  Path field(std::string_view k) const { return Path{this, k, -1}; }
  Path at(size_t i) const { return Path{this, {}, static_cast<int64_t>(i)}; }
  std::string str() const;
};

// "<path>: <message>" as InvalidArgument.
base::Status fieldError(const Path& path, const std::string& message);
// "expected <what>, got <type of j>".
base::Status typeError(const Path& path, const char* what, const json& j);

// Readers of one member of `obj` (an object). An absent or null member leaves *out untouched.
base::Status readString(const json& obj, const Path& p, std::string_view key, std::string* out);
base::Status readBool(const json& obj, const Path& p, std::string_view key, bool* out);
base::Status readBool(const json& obj, const Path& p, std::string_view key,
                      std::optional<bool>* out);
base::Status readInt32(const json& obj, const Path& p, std::string_view key, int32_t* out);
base::Status readInt32(const json& obj, const Path& p, std::string_view key,
                       std::optional<int32_t>* out);
base::Status readInt64(const json& obj, const Path& p, std::string_view key, int64_t* out);
base::Status readInt64(const json& obj, const Path& p, std::string_view key,
                       std::optional<int64_t>* out);
base::Status readStringList(const json& obj, const Path& p, std::string_view key,
                            std::vector<std::string>* out);
base::Status readInt64List(const json& obj, const Path& p, std::string_view key,
                           std::vector<int64_t>* out);
base::Status readStringMap(const json& obj, const Path& p, std::string_view key, StringMap* out);
base::Status readStringMap(const json& obj, const Path& p, std::string_view key,
                           StringTable* out);
base::Status readTime(const json& obj, const Path& p, std::string_view key,
                      std::optional<Timestamp>* out);
base::Status readQuantity(const json& obj, const Path& p, std::string_view key,
                          std::optional<Quantity>* out);
base::Status readQuantityMap(const json& obj, const Path& p, std::string_view key,
                             std::map<std::string, Quantity>* out);

// The member `key` when it is present and not null, else nullptr; `want_object`/`want_array`
// turn a wrong type into an error.
base::StatusOr<const json*> member(const json& obj, const Path& p, std::string_view key);
base::StatusOr<const json*> objectMember(const json& obj, const Path& p, std::string_view key);
base::StatusOr<const json*> arrayMember(const json& obj, const Path& p, std::string_view key);

base::Status checkObject(const json& j, const Path& p);

base::StatusOr<ObjectMeta> decodeObjectMeta(const json& j, const Path& p);
// Omits empty fields like Kubernetes' omitempty.
json encodeObjectMeta(const ObjectMeta& meta);

// Checks `kind` and `apiVersion` when present.
base::Status checkKind(const json& obj, std::string_view kind, std::string_view api_version);

// Decodes the array member `key` of `obj` into `out` (cleared first), one object per item with
// `decode_one(item, path, &value)`; a missing key leaves `out` empty.
template <typename T, typename Fn>
base::Status readList(const nlohmann::json& obj, const Path& p, std::string_view key,
                      std::vector<T>* out, Fn decode_one) {
  ASSIGN_OR_RETURN(const nlohmann::json* arr, arrayMember(obj, p, key));
  out->clear();
  if (arr == nullptr) return base::okStatus();
  Path lp = p.field(key);
  out->reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    Path ip = lp.at(i);
    const nlohmann::json& e = (*arr)[i];
    RETURN_IF_ERROR(checkObject(e, ip));
    T item;
    RETURN_IF_ERROR(decode_one(e, ip, &item));
    out->push_back(std::move(item));
  }
  return base::okStatus();
}

}  // namespace nodeagent::api::json_util
