#include "agent/volume/volume_sources.h"

#include <nlohmann/json.hpp>

#include "agent/runtime/resource_field.h"
#include "agent/runtime/runtime.h"
#include "api/pod_json.h"
#include "base/printable.h"

namespace nodeagent::agent {
namespace {

using nlohmann::json;

constexpr int64_t kDefaultMode = 0644;  // kubelet's configMap/secret/downwardAPI/projected default

base::StatusOr<mode_t> fileMode(const json& holder, int64_t fallback) {
  int64_t mode = fallback;
  auto it = holder.find("mode");
  if (it != holder.end() && !it->is_null()) mode = it->get<int64_t>();
  if (mode < 0 || mode > 0777) {
    return base::invalidArgumentError("mode " + std::to_string(mode) +
                                      " must be between 0 and 0777 (511)");
  }
  return static_cast<mode_t>(mode);
}

int64_t defaultModeOf(const json& source, int64_t fallback) {
  auto it = source.find("defaultMode");
  return it == source.end() || it->is_null() ? fallback : it->get<int64_t>();
}

// The list under `key`: null when absent or empty, an error when it is not a list.
base::StatusOr<const json*> listField(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return static_cast<const json*>(nullptr);
  if (!it->is_array()) return base::invalidArgumentError(std::string(key) + " must be a list");
  return it->empty() ? nullptr : &*it;
}

// kubelet's configmap/secret MakePayload: every key, or the listed items, of the object.
base::Status addKeyToPathPayload(ApiObjectKind kind, const json& source, const json* object,
                                 int64_t default_mode, bool optional, VolumePayload& out) {
  std::map<std::string, std::string> data;
  if (object != nullptr) {
    ASSIGN_OR_RETURN(data, apiObjectData(kind, *object));
  }
  ASSIGN_OR_RETURN(const json* items, listField(source, "items"));
  if (items == nullptr) {
    ASSIGN_OR_RETURN(mode_t mode, fileMode(json::object(), default_mode));
    for (auto& [key, value] : data) out[key] = {std::move(value), mode};
    return base::okStatus();
  }
  for (const auto& item : *items) {
    const std::string key = stringMember(item, "key");
    auto it = data.find(key);
    if (it == data.end()) {
      if (optional) continue;
      return base::notFoundError(std::string(apiObjectKindName(kind)) +
                                 (kind == ApiObjectKind::kConfigMap
                                      ? " references non-existent config key: "
                                      : " references non-existent secret key: ") +
                                 key);
    }
    ASSIGN_OR_RETURN(mode_t mode, fileMode(item, default_mode));
    out[stringMember(item, "path")] = {it->second, mode};
  }
  return base::okStatus();
}

// A configMap or secret source: the object from the apiserver, then its payload.
base::Status addObjectPayload(const api::Pod& pod, ApiObjectKind kind, const json& source,
                              const std::string& name, int64_t default_mode,
                              ApiObjectSource* objects, VolumePayload& out) {
  const bool optional = isTrueMember(source, "optional");
  if (objects == nullptr) {
    return base::failedPreconditionError(
        "cannot read " + std::string(apiObjectKindName(kind)) + " \"" + name +
        "\": nodeagent has no apiserver (--kubeconfig) to read it from");
  }
  auto object = objects->get(kind, pod.metadata.namespace_, name, pod.metadata.uid);
  if (!object.ok() && !(optional && object.status().code() == base::StatusCode::kNotFound)) {
    return object.status();
  }
  const json* found = object.ok() ? object->get() : nullptr;
  return addKeyToPathPayload(kind, source, found, default_mode, optional, out);
}

base::StatusOr<std::string> downwardValue(const api::Pod& pod, const json& item,
                                          const runtime::NodeAllocatableResources& node) {
  auto field_ref = item.find("fieldRef");
  if (field_ref != item.end() && field_ref->is_object()) {
    const std::string path = stringMember(*field_ref, "fieldPath");
    if (path == "metadata.labels") return formatDownwardMap(pod.metadata.labels);
    if (path == "metadata.annotations") return formatDownwardMap(pod.metadata.annotations);
    return runtime::resolveFieldRef(pod, path, runtime::StartContainerOptions{});
  }
  auto resource_ref = item.find("resourceFieldRef");
  if (resource_ref != item.end() && resource_ref->is_object()) {
    ASSIGN_OR_RETURN(auto selector,
                     api::decodeResourceFieldSelector(*resource_ref, "resourceFieldRef"));
    return runtime::resolveResourceFieldRef(pod, nullptr, selector, node);
  }
  return base::invalidArgumentError("an item must have fieldRef or resourceFieldRef");
}

base::Status addDownwardPayload(const api::Pod& pod, const json& source, int64_t default_mode,
                                const runtime::NodeAllocatableResources& node, VolumePayload& out) {
  ASSIGN_OR_RETURN(const json* items, listField(source, "items"));
  if (items == nullptr) return base::okStatus();
  for (const auto& item : *items) {
    const std::string path = stringMember(item, "path");
    auto value = downwardValue(pod, item, node);
    if (!value.ok()) return value.status().withContext("item \"" + path + "\"");
    ASSIGN_OR_RETURN(mode_t mode, fileMode(item, default_mode));
    out[path] = {std::move(*value), mode};
  }
  return base::okStatus();
}

// A token of the pod's service account, bound to the pod (kubelet's projected token source).
base::Status addTokenPayload(const api::Pod& pod, const json& source, int64_t default_mode,
                             ApiObjectSource* objects, VolumePayload& out) {
  ServiceAccountTokenRequest request;
  request.ns = pod.metadata.namespace_;
  request.service_account =
      pod.spec->service_account_name.empty() ? "default" : pod.spec->service_account_name;
  request.audience = stringMember(source, "audience");
  auto expiration = source.find("expirationSeconds");
  if (expiration != source.end() && !expiration->is_null()) {
    request.expiration_seconds = expiration->get<int64_t>();
  }
  request.pod_name = pod.metadata.name;
  request.pod_uid = pod.metadata.uid;
  if (objects == nullptr) {
    return base::failedPreconditionError(
        "cannot get a service account token: nodeagent has no apiserver (--kubeconfig)");
  }
  ASSIGN_OR_RETURN(std::string token, objects->serviceAccountToken(request));
  ASSIGN_OR_RETURN(mode_t mode, fileMode(json::object(), default_mode));
  out[stringMember(source, "path")] = {std::move(token), mode};
  return base::okStatus();
}

base::Status addProjectedPayload(const api::Pod& pod, const json& source, ApiObjectSource* objects,
                                 const runtime::NodeAllocatableResources& node,
                                 VolumePayload& out) {
  const int64_t default_mode = defaultModeOf(source, kDefaultMode);
  ASSIGN_OR_RETURN(const json* sources, listField(source, "sources"));
  if (sources == nullptr) return base::okStatus();
  for (const auto& s : *sources) {
    if (auto it = s.find("configMap"); it != s.end() && it->is_object()) {
      RETURN_IF_ERROR(addObjectPayload(pod, ApiObjectKind::kConfigMap, *it,
                                       stringMember(*it, "name"), default_mode, objects, out));
    } else if (auto it = s.find("secret"); it != s.end() && it->is_object()) {
      RETURN_IF_ERROR(addObjectPayload(pod, ApiObjectKind::kSecret, *it, stringMember(*it, "name"),
                                       default_mode, objects, out));
    } else if (auto it = s.find("downwardAPI"); it != s.end() && it->is_object()) {
      RETURN_IF_ERROR(addDownwardPayload(pod, *it, default_mode, node, out));
    } else if (auto it = s.find("serviceAccountToken"); it != s.end() && it->is_object()) {
      RETURN_IF_ERROR(addTokenPayload(pod, *it, default_mode, objects, out));
    } else {
      return base::invalidArgumentError(
          "a source must be one of configMap, secret, downwardAPI, serviceAccountToken");
    }
  }
  return base::okStatus();
}

}  // namespace

bool isApiDataVolume(std::string_view source_type) {
  return source_type == "configMap" || source_type == "secret" || source_type == "downwardAPI" ||
         source_type == "projected";
}

std::string formatDownwardMap(const api::StringTable& map) {
  std::string out;
  for (const auto& [key, value] : map) {
    if (!out.empty()) out += '\n';
    out.append(key);
    out += "=" + base::goQuote(value);
  }
  return out;
}

base::StatusOr<VolumePayload> apiDataVolumePayload(const api::Pod& pod,
                                                   const std::string& source_type,
                                                   const json& source, ApiObjectSource* objects,
                                                   const runtime::NodeAllocatableResources& node) {
  VolumePayload out;
  base::Status made;
  try {
    if (!source.is_object()) {
      made = base::invalidArgumentError("the volume source is not an object");
    } else if (source_type == "configMap") {
      made = addObjectPayload(pod, ApiObjectKind::kConfigMap, source, stringMember(source, "name"),
                              defaultModeOf(source, kDefaultMode), objects, out);
    } else if (source_type == "secret") {
      made =
          addObjectPayload(pod, ApiObjectKind::kSecret, source, stringMember(source, "secretName"),
                           defaultModeOf(source, kDefaultMode), objects, out);
    } else if (source_type == "downwardAPI") {
      made = addDownwardPayload(pod, source, defaultModeOf(source, kDefaultMode), node, out);
    } else if (source_type == "projected") {
      made = addProjectedPayload(pod, source, objects, node, out);
    } else {
      made = base::invalidArgumentError("not a configMap, secret, downwardAPI or projected volume");
    }
  } catch (const json::exception& e) {
    // A field of the wrong type (the pod skipped validation).
    made = base::invalidArgumentError(std::string("malformed volume source: ") + e.what());
  }
  if (!made.ok()) return made;
  for (const auto& [path, file] : out) RETURN_IF_ERROR(checkPayloadPath(path));
  return out;
}

}  // namespace nodeagent::agent
