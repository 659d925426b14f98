#include "cmd/test-apiserver/protobuf.h"

#include <cstdint>
#include <functional>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

namespace {

using BytesField = std::function<base::Status(int, std::string_view)>;
using VarintField = std::function<void(int, uint64_t)>;

// Calls `on_field(number, bytes)` for each length-delimited field and `on_varint(number, value)`
// (when given) for each varint field; skips fixed-size fields.
base::Status forEachField(std::string_view msg, const BytesField& on_field,
                          const VarintField& on_varint = nullptr) {
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
        uint64_t value = 0;
        if (!varint(value)) return base::invalidArgumentError("protobuf: truncated varint");
        if (on_varint) on_varint(field, value);
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

// One entry of a map<string, string> (or map<string, bytes> with `base64` set: JSON carries
// bytes as base64).
base::Status decodeMapEntry(std::string_view entry, json& into, bool base64 = false) {
  std::string key, value;
  RETURN_IF_ERROR(forEachField(entry, [&](int f, std::string_view v) {
    if (f == 1) key = v;
    if (f == 2) value = v;
    return base::okStatus();
  }));
  into[key] = base64 ? base64Encode(value) : value;
  return base::okStatus();
}

// The parts of an ObjectMeta a client sets on create.
base::Status decodeObjectMeta(std::string_view raw, json& meta) {
  return forEachField(raw, [&](int f, std::string_view v) {
    switch (f) {
      case 1:
        if (!v.empty()) meta["name"] = v;
        break;
      case 2:
        if (!v.empty()) meta["generateName"] = v;
        break;
      case 3:
        if (!v.empty()) meta["namespace"] = v;
        break;
      case 11:
        return decodeMapEntry(v, meta["labels"]);
      case 12:
        return decodeMapEntry(v, meta["annotations"]);
      case 14:
        meta["finalizers"].push_back(v);
        break;
      default:
        break;
    }
    return base::okStatus();
  });
}

// Decodes the fields of one (sub)message by number: strings, string maps, bytes maps, bools and
// repeated messages, each into the JSON field it is named for.
struct FieldSpec {
  enum class Type {
    kString,
    kStrings,  // repeated string
    kStringMap,
    kBytesMap,
    kBool,
    kInt,
    kObjectRefs,
    kLocalRefs,
    kMessage,   // a nested message with the fields `message`
    kMessages,  // repeated kMessage: a JSON array
    kBytes,     // bytes: a base64 string, as JSON carries []byte
    kTime,      // metav1.Time {seconds, nanos}: an RFC 3339 string
  };
  int number;
  const char* name;
  Type type;
  const std::vector<FieldSpec>* message = nullptr;
};

base::Status decodeObjectRef(std::string_view raw, json& into, bool local) {
  static const char* kRefFields[] = {nullptr, "kind",       "namespace",       "name",
                                     "uid",   "apiVersion", "resourceVersion", "fieldPath"};
  json ref = json::object();
  RETURN_IF_ERROR(forEachField(raw, [&](int f, std::string_view v) {
    if (local ? f == 1 : (f >= 1 && f <= 7)) {
      if (!v.empty()) ref[local ? "name" : kRefFields[f]] = v;
    }
    return base::okStatus();
  }));
  into.push_back(std::move(ref));
  return base::okStatus();
}

// metav1.Time as protobuf (seconds = 1, nanos = 2) into its JSON form.
base::Status decodeTime(std::string_view raw, json& into) {
  int64_t seconds = 0;
  RETURN_IF_ERROR(forEachField(
      raw, [](int, std::string_view) { return base::okStatus(); },
      [&](int f, uint64_t v) {
        if (f == 1) seconds = static_cast<int64_t>(v);
      }));
  // The zero time is JSON null, as metav1.Time marshals it.
  into = seconds == 0 ? json(nullptr)
                      : json(formatTime(base::SystemTime(std::chrono::seconds(seconds))));
  return base::okStatus();
}

// `top_level`: field 1 is the object's ObjectMeta.
base::Status decodeFields(std::string_view raw, const std::vector<FieldSpec>& specs, json& out,
                          bool top_level = true) {
  auto spec_for = [&](int f) -> const FieldSpec* {
    for (const auto& s : specs) {
      if (s.number == f) return &s;
    }
    return nullptr;
  };
  using Type = FieldSpec::Type;
  return forEachField(
      raw,
      [&](int f, std::string_view v) {
        if (top_level && f == 1) return decodeObjectMeta(v, out["metadata"]);
        const FieldSpec* s = spec_for(f);
        if (!s) return base::okStatus();
        switch (s->type) {
          case Type::kString:
            if (!v.empty()) out[s->name] = v;
            return base::okStatus();
          case Type::kStrings:
            out[s->name].push_back(v);
            return base::okStatus();
          case Type::kMessage:
            out[s->name] = json::object();
            return decodeFields(v, *s->message, out[s->name], false);
          case Type::kMessages: {
            json element = json::object();
            RETURN_IF_ERROR(decodeFields(v, *s->message, element, false));
            out[s->name].push_back(std::move(element));
            return base::okStatus();
          }
          case Type::kBytes:
            out[s->name] = base64Encode(v);
            return base::okStatus();
          case Type::kTime:
            return decodeTime(v, out[s->name]);
          case Type::kStringMap:
          case Type::kBytesMap:
            return decodeMapEntry(v, out[s->name], s->type == Type::kBytesMap);
          case Type::kObjectRefs:
          case Type::kLocalRefs:
            return decodeObjectRef(v, out[s->name], s->type == Type::kLocalRefs);
          case Type::kBool:
          case Type::kInt:
            break;
        }
        return base::okStatus();
      },
      [&](int f, uint64_t v) {
        const FieldSpec* s = spec_for(f);
        if (s && s->type == Type::kBool) out[s->name] = v != 0;
        if (s && s->type == Type::kInt) out[s->name] = static_cast<int64_t>(v);
      });
}

// k8s.io/api/core/v1/generated.proto: the field numbers of the kinds kubectl's create
// subcommands send.
const std::vector<FieldSpec>* specsFor(const std::string& kind) {
  using Type = FieldSpec::Type;
  static const std::vector<FieldSpec> kNamespace = {};
  static const std::vector<FieldSpec> kConfigMap = {{2, "data", Type::kStringMap},
                                                    {3, "binaryData", Type::kBytesMap},
                                                    {4, "immutable", Type::kBool}};
  static const std::vector<FieldSpec> kSecret = {{2, "data", Type::kBytesMap},
                                                 {3, "type", Type::kString},
                                                 {4, "stringData", Type::kStringMap},
                                                 {5, "immutable", Type::kBool}};
  static const std::vector<FieldSpec> kServiceAccount = {
      {2, "secrets", Type::kObjectRefs},
      {3, "imagePullSecrets", Type::kLocalRefs},
      {4, "automountServiceAccountToken", Type::kBool}};
  // k8s.io/api/authentication/v1/generated.proto: what kubectl create token sends.
  static const std::vector<FieldSpec> kBoundObjectReference = {{1, "kind", Type::kString},
                                                               {2, "apiVersion", Type::kString},
                                                               {3, "name", Type::kString},
                                                               {4, "uid", Type::kString}};
  static const std::vector<FieldSpec> kTokenRequestSpec = {
      {1, "audiences", Type::kStrings},
      {3, "boundObjectRef", Type::kMessage, &kBoundObjectReference},
      {4, "expirationSeconds", Type::kInt}};
  static const std::vector<FieldSpec> kTokenRequest = {
      {2, "spec", Type::kMessage, &kTokenRequestSpec}};
  // k8s.io/api/authorization/v1 and authentication/v1: what kubectl auth can-i and whoami send.
  static const std::vector<FieldSpec> kResourceAttributes = {
      {1, "namespace", Type::kString}, {2, "verb", Type::kString},
      {3, "group", Type::kString},     {4, "version", Type::kString},
      {5, "resource", Type::kString},  {6, "subresource", Type::kString},
      {7, "name", Type::kString}};
  static const std::vector<FieldSpec> kNonResourceAttributes = {{1, "path", Type::kString},
                                                                {2, "verb", Type::kString}};
  static const std::vector<FieldSpec> kSelfAccessSpec = {
      {1, "resourceAttributes", Type::kMessage, &kResourceAttributes},
      {2, "nonResourceAttributes", Type::kMessage, &kNonResourceAttributes}};
  static const std::vector<FieldSpec> kSelfAccessReview = {
      {2, "spec", Type::kMessage, &kSelfAccessSpec}};
  static const std::vector<FieldSpec> kSelfRulesSpec = {{1, "namespace", Type::kString}};
  static const std::vector<FieldSpec> kSelfRulesReview = {
      {2, "spec", Type::kMessage, &kSelfRulesSpec}};
  static const std::vector<FieldSpec> kSelfSubjectReview = {};
  // k8s.io/api/certificates/v1: what kubectl certificate approve|deny and create send.
  static const std::vector<FieldSpec> kCsrSpec = {
      {1, "request", Type::kBytes},        {2, "username", Type::kString},
      {3, "uid", Type::kString},           {4, "groups", Type::kStrings},
      {5, "usages", Type::kStrings},       {7, "signerName", Type::kString},
      {8, "expirationSeconds", Type::kInt}};
  static const std::vector<FieldSpec> kCsrCondition = {{1, "type", Type::kString},
                                                       {2, "reason", Type::kString},
                                                       {3, "message", Type::kString},
                                                       {4, "lastUpdateTime", Type::kTime},
                                                       {5, "lastTransitionTime", Type::kTime},
                                                       {6, "status", Type::kString}};
  static const std::vector<FieldSpec> kCsrStatus = {
      {1, "conditions", Type::kMessages, &kCsrCondition}, {2, "certificate", Type::kBytes}};
  static const std::vector<FieldSpec> kCsr = {{2, "spec", Type::kMessage, &kCsrSpec},
                                              {3, "status", Type::kMessage, &kCsrStatus}};
  if (kind == "CertificateSigningRequest") return &kCsr;
  if (kind == "SelfSubjectAccessReview") return &kSelfAccessReview;
  if (kind == "SelfSubjectRulesReview") return &kSelfRulesReview;
  if (kind == "SelfSubjectReview") return &kSelfSubjectReview;
  if (kind == "Namespace") return &kNamespace;
  if (kind == "TokenRequest") return &kTokenRequest;
  if (kind == "ConfigMap") return &kConfigMap;
  if (kind == "Secret") return &kSecret;
  if (kind == "ServiceAccount") return &kServiceAccount;
  return nullptr;
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
  const std::vector<FieldSpec>* specs = specsFor(kind);
  if (!specs) {
    return base::unimplementedError(
        "protobuf bodies are only understood for Namespace, ConfigMap, Secret, "
        "ServiceAccount, TokenRequest, CertificateSigningRequest and the self reviews, not " +
        (kind.empty() ? std::string("(no kind)") : kind) + "; send application/json");
  }
  json out = {{"apiVersion", api_version.empty() ? "v1" : api_version},
              {"kind", kind},
              {"metadata", json::object()}};
  RETURN_IF_ERROR(decodeFields(raw, *specs, out));
  return out;
}

}  // namespace nodeagent::testapiserver
