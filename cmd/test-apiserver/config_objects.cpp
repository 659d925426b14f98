#include "cmd/test-apiserver/config_objects.h"

#include <map>
#include <string>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/util.h"
#include "config/field_validation.h"

namespace nodeagent::testapiserver {

using nlohmann::json;
namespace validation = config::validation;

namespace {

constexpr char kImmutableMessage[] = "field is immutable when `immutable` is set";

const json& fieldOf(const json& object, const char* field) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(field);
  return it == object.end() ? kNull : *it;
}

// field.Invalid with a value kube-apiserver does not print.
config::FieldError invalidRedacted(std::string field, const char* redacted, std::string detail) {
  return {std::move(field), std::string("Invalid value: ") + redacted + ": " + detail};
}

// Go's name for a JSON value's type in an unmarshal error.
const char* jsonTypeName(const json& v) {
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "bool";
  if (v.is_array()) return "array";
  return "object";
}

// What kube-apiserver's decoder answers for a field of the wrong JSON type.
base::Status undecodable(const ResourceInfo& res, const std::string& field, const json& value,
                         const char* go_type) {
  return base::invalidArgumentError(res.kind + " in version \"v1\" cannot be handled as a " +
                                    res.kind + ": json: cannot unmarshal " + jsonTypeName(value) +
                                    " into Go struct field " + res.kind + "." + field +
                                    " of type " + go_type);
}

// The checks ValidateConfigMap and ValidateSecret share, run on one object (the one the Checker
// was made for, or its decoded copy), with errors naming its kind and name.
class Checker {
 public:
  Checker(const ResourceInfo& res, const json& object)
      : res_(res),
        name_(fieldOf(fieldOf(object, "metadata"), "name").is_string()
                  ? fieldOf(fieldOf(object, "metadata"), "name").get<std::string>()
                  : "") {}

  base::Status fail(const config::FieldError& error) const {
    return invalidObjectError(res_.kind, name_, error.toString());
  }

  // A null field is absent, as for Go's decoder; a map's null values are empty.
  base::Status checkMap(json& object, const char* field, const char* go_value_type) const {
    if (!object.contains(field)) return base::okStatus();
    json& map = object[field];
    if (map.is_null()) {
      object.erase(field);
      return base::okStatus();
    }
    if (!map.is_object()) {
      return undecodable(res_, field, map, (std::string("map[string]") + go_value_type).c_str());
    }
    for (auto& [key, value] : map.items()) {
      if (value.is_null()) value = "";
      if (!value.is_string()) return undecodable(res_, field, value, go_value_type);
    }
    return base::okStatus();
  }

  base::Status checkScalar(const json& object, const char* field, bool boolean) const {
    auto it = object.find(field);
    if (it == object.end() || it->is_null()) return base::okStatus();
    if (boolean ? it->is_boolean() : it->is_string()) return base::okStatus();
    return undecodable(res_, field, *it, boolean ? "bool" : "string");
  }

  // Decodes every value of `object[field]` (base64), re-encodes it canonically and adds its size
  // to `total`; keeps the decoded values in `decoded` when given.
  base::Status decodeBase64Map(json& object, const char* field, const char* redacted,
                               int64_t& total, std::map<std::string, std::string>* decoded) const {
    if (!object.contains(field)) return base::okStatus();
    for (auto& [key, value] : object[field].items()) {
      auto bytes = base64DecodeStd(value.get<std::string>());
      if (!bytes.ok()) {
        return fail(invalidRedacted(std::string(field) + "[" + key + "]", redacted,
                                    bytes.status().message()));
      }
      value = base64Encode(*bytes);
      total += static_cast<int64_t>(bytes->size());
      if (decoded) (*decoded)[key] = std::move(*bytes);
    }
    return base::okStatus();
  }

  base::Status checkKeys(const json& object, const char* field, const char* other) const {
    if (!object.contains(field)) return base::okStatus();
    for (const auto& [key, value] : object[field].items()) {
      const std::string path = std::string(field) + "[" + key + "]";
      auto problems = validation::isConfigMapKey(key);
      if (!problems.empty()) return fail(validation::invalid(path, key, problems.front()));
      if (other && object.contains(other) && object[other].contains(key)) {
        return fail(
            validation::invalid(path, key, std::string("duplicate of key present in ") + other));
      }
    }
    return base::okStatus();
  }

  // ValidateConfigMapUpdate/ValidateSecretUpdate's part for `immutable`.
  base::Status checkImmutable(const json& object, const json& previous,
                              std::initializer_list<const char*> fields) const {
    if (fieldOf(previous, "immutable") != true) return base::okStatus();
    if (fieldOf(object, "immutable") != true) {
      return fail(validation::forbidden("immutable", kImmutableMessage));
    }
    for (const char* field : fields) {
      if (fieldOf(object, field) != fieldOf(previous, field)) {
        return fail(validation::forbidden(field, kImmutableMessage));
      }
    }
    return base::okStatus();
  }

 private:
  const ResourceInfo& res_;
  const std::string name_;
};

// Go's omitempty: an empty map is not stored.
void dropEmpty(json& object, const char* field) {
  if (object.contains(field) && object[field].empty()) object.erase(field);
}

bool validJsonObject(const std::string& text) {
  const json doc = json::parse(text, nullptr, false);
  return !doc.is_discarded() && doc.is_object();
}

// ValidateSecret's checks by type.
base::Status checkSecretType(const Checker& check, const json& secret, const std::string& type,
                             const std::map<std::string, std::string>& data) {
  auto key = [](const char* k) { return std::string("data[") + k + "]"; };
  if (type == "kubernetes.io/service-account-token") {
    const char* annotation = "kubernetes.io/service-account.name";
    const json& name = fieldOf(fieldOf(fieldOf(secret, "metadata"), "annotations"), annotation);
    if (!name.is_string() || name.get<std::string>().empty()) {
      return check.fail(
          validation::required(std::string("metadata.annotations[") + annotation + "]"));
    }
  } else if (type == "kubernetes.io/dockercfg" || type == "kubernetes.io/dockerconfigjson") {
    const char* k = type == "kubernetes.io/dockercfg" ? ".dockercfg" : ".dockerconfigjson";
    auto it = data.find(k);
    if (it == data.end()) return check.fail(validation::required(key(k)));
    if (!validJsonObject(it->second)) {
      return check.fail(
          invalidRedacted(key(k), "\"<secret contents redacted>\"", "not a valid JSON object"));
    }
  } else if (type == "kubernetes.io/basic-auth") {
    if (!data.contains("username") && !data.contains("password")) {
      return check.fail(validation::required(key("username")));
    }
  } else if (type == "kubernetes.io/ssh-auth") {
    auto it = data.find("ssh-privatekey");
    if (it == data.end() || it->second.empty()) {
      return check.fail(validation::required(key("ssh-privatekey")));
    }
  } else if (type == "kubernetes.io/tls") {
    for (const char* k : {"tls.crt", "tls.key"}) {
      if (!data.contains(k)) return check.fail(validation::required(key(k)));
    }
  }
  return base::okStatus();
}

base::Status prepareSecret(const ResourceInfo& res, json& secret, const json* previous) {
  const Checker check(res, secret);
  RETURN_IF_ERROR(check.checkMap(secret, "data", "[]uint8"));
  RETURN_IF_ERROR(check.checkMap(secret, "stringData", "string"));
  RETURN_IF_ERROR(check.checkScalar(secret, "type", false));
  RETURN_IF_ERROR(check.checkScalar(secret, "immutable", true));
  if (secret.contains("immutable") && secret["immutable"].is_null()) secret.erase("immutable");
  if (fieldOf(secret, "type").is_null() || secret["type"] == "") secret["type"] = "Opaque";
  const std::string type = secret["type"].get<std::string>();

  int64_t total = 0;
  std::map<std::string, std::string> data;
  RETURN_IF_ERROR(
      check.decodeBase64Map(secret, "data", "\"<secret contents redacted>\"", total, &data));
  // stringData is write-only: it overwrites data's values and is dropped.
  if (secret.contains("stringData")) {
    for (const auto& [key, value] : secret["stringData"].items()) {
      const std::string bytes = value.get<std::string>();
      if (auto old = data.find(key); old != data.end()) {
        total -= static_cast<int64_t>(old->second.size());
      }
      total += static_cast<int64_t>(bytes.size());
      data[key] = bytes;
      secret["data"][key] = base64Encode(bytes);
    }
    secret.erase("stringData");
  }
  dropEmpty(secret, "data");

  if (previous) {
    if (fieldOf(*previous, "type") != type) {
      return check.fail(validation::invalid("type", type, "field is immutable"));
    }
    RETURN_IF_ERROR(check.checkImmutable(secret, *previous, {"data"}));
  }
  RETURN_IF_ERROR(check.checkKeys(secret, "data", nullptr));
  if (total > kMaxConfigObjectBytes) {
    return check.fail(validation::tooLong("data", kMaxConfigObjectBytes));
  }
  return checkSecretType(check, secret, type, data);
}

base::Status prepareConfigMap(const ResourceInfo& res, json& cm, const json* previous) {
  const Checker check(res, cm);
  RETURN_IF_ERROR(check.checkMap(cm, "data", "string"));
  RETURN_IF_ERROR(check.checkMap(cm, "binaryData", "[]uint8"));
  RETURN_IF_ERROR(check.checkScalar(cm, "immutable", true));
  if (cm.contains("immutable") && cm["immutable"].is_null()) cm.erase("immutable");

  int64_t total = 0;
  RETURN_IF_ERROR(
      check.decodeBase64Map(cm, "binaryData", "\"<binary contents redacted>\"", total, nullptr));
  dropEmpty(cm, "data");
  dropEmpty(cm, "binaryData");
  if (previous) RETURN_IF_ERROR(check.checkImmutable(cm, *previous, {"data", "binaryData"}));
  RETURN_IF_ERROR(check.checkKeys(cm, "data", "binaryData"));
  RETURN_IF_ERROR(check.checkKeys(cm, "binaryData", "data"));
  if (cm.contains("data")) {
    for (const auto& [key, value] : cm["data"].items()) {
      total += static_cast<int64_t>(value.get<std::string>().size());
    }
  }
  if (total > kMaxConfigObjectBytes) {
    return check.fail(validation::tooLong("[]", kMaxConfigObjectBytes));
  }
  return base::okStatus();
}

}  // namespace

base::Status prepareConfigObject(const ResourceInfo& res, json& object, const json* previous) {
  if (res.group.empty() && res.plural == "secrets") return prepareSecret(res, object, previous);
  if (res.group.empty() && res.plural == "configmaps") {
    return prepareConfigMap(res, object, previous);
  }
  return base::okStatus();
}

}  // namespace nodeagent::testapiserver
