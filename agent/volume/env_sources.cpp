#include "agent/volume/env_sources.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace nodeagent::agent {
namespace {

using nlohmann::json;

// kubelet's IsEnvVarName: [-._a-zA-Z][-._a-zA-Z0-9]*.
bool isEnvVarName(std::string_view name) {
  if (name.empty()) return false;
  auto ok = [](char c, bool first) {
    return c == '-' || c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && c >= '0' && c <= '9');
  };
  for (size_t i = 0; i < name.size(); ++i) {
    if (!ok(name[i], i == 0)) return false;
  }
  return true;
}

// The container's own JSON in the pod's spec.
const json* containerJson(const json& pod, const std::string& name) {
  const json& spec = pod.at("spec");
  for (const char* list : {"initContainers", "containers"}) {
    auto it = spec.find(list);
    if (it == spec.end() || !it->is_array()) continue;
    for (const auto& c : *it) {
      if (c.is_object() && stringMember(c, "name") == name) return &c;
    }
  }
  return nullptr;
}

// A value $(VAR) expansion leaves as it is.
std::string escapeExpansion(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '$') out += '$';
    out += c;
  }
  return out;
}

struct Reader {
  const api::Pod& pod;
  ApiObjectSource* objects;

  // The object's data; nullopt when it is missing and `optional`.
  base::StatusOr<std::optional<std::map<std::string, std::string>>> data(ApiObjectKind kind,
                                                                         const std::string& name,
                                                                         bool optional) const {
    if (objects == nullptr) {
      return base::failedPreconditionError(
          "cannot read " + std::string(apiObjectKindName(kind)) + " \"" + name +
          "\": nodeagent has no apiserver (--kubeconfig) to read it from");
    }
    auto object = objects->get(kind, pod.metadata.namespace_, name, pod.metadata.uid);
    if (!object.ok()) {
      if (optional && object.status().code() == base::StatusCode::kNotFound) return std::nullopt;
      return object.status();
    }
    auto data = apiObjectData(kind, **object);
    if (!data.ok()) {
      return data.status().withContext(std::string(apiObjectKindName(kind)) + " \"" + name + "\"");
    }
    return std::optional(std::move(*data));
  }
};

base::Status addEnvFrom(const Reader& reader, const json& container, ContainerEnvSources& out) {
  auto env_from = container.find("envFrom");
  if (env_from == container.end() || !env_from->is_array()) return base::okStatus();
  for (const auto& source : *env_from) {
    const std::string prefix = stringMember(source, "prefix");
    const bool is_config_map = source.contains("configMapRef");
    const json& ref = is_config_map ? source["configMapRef"] : source.value("secretRef", json());
    if (!ref.is_object()) {
      return base::invalidArgumentError("envFrom: a source must have configMapRef or secretRef");
    }
    const auto kind = is_config_map ? ApiObjectKind::kConfigMap : ApiObjectKind::kSecret;
    const std::string name = stringMember(ref, "name");
    ASSIGN_OR_RETURN(auto data, reader.data(kind, name, isTrueMember(ref, "optional")));
    if (!data) continue;
    std::vector<std::string> invalid;
    for (const auto& [key, value] : *data) {
      if (!isEnvVarName(prefix + key)) {
        invalid.push_back(prefix + key);
        continue;
      }
      out.env_from.emplace_back(prefix + key, value);
    }
    if (!invalid.empty()) {
      std::string keys;
      for (const auto& k : invalid) keys += (keys.empty() ? "" : ", ") + k;
      out.skipped_keys.push_back("Keys [" + keys + "] from the EnvFrom " +
                                 (is_config_map ? "configMap " : "secret ") +
                                 reader.pod.metadata.namespace_ + "/" + name +
                                 " were skipped since they are considered invalid environment "
                                 "variable names.");
    }
  }
  return base::okStatus();
}

// The value of one configMapKeyRef/secretKeyRef variable; nullopt when it is optional and missing.
base::StatusOr<std::optional<std::string>> keyRefValue(const Reader& reader, ApiObjectKind kind,
                                                       const json& ref) {
  const std::string name = stringMember(ref, "name");
  const std::string key = stringMember(ref, "key");
  const bool optional = isTrueMember(ref, "optional");
  ASSIGN_OR_RETURN(auto data, reader.data(kind, name, optional));
  if (!data) return std::nullopt;
  auto it = data->find(key);
  if (it != data->end()) return std::optional(it->second);
  if (optional) return std::nullopt;
  return base::invalidArgumentError("couldn't find key " + key + " in " +
                                    (kind == ApiObjectKind::kConfigMap ? "ConfigMap " : "Secret ") +
                                    reader.pod.metadata.namespace_ + "/" + name);
}

base::Status resolveKeyRefs(const Reader& reader, const json& container, ContainerEnvSources& out) {
  auto env = container.find("env");
  if (env == container.end() || !env->is_array()) return base::okStatus();
  std::vector<api::EnvVar> resolved;
  for (size_t i = 0; i < out.container.env.size(); ++i) {
    api::EnvVar var = out.container.env[i];
    const bool config_map = var.value_from_kind == "configMapKeyRef";
    if (!config_map && var.value_from_kind != "secretKeyRef") {
      resolved.push_back(std::move(var));
      continue;
    }
    if (i >= env->size()) return base::internalError("env differs from the pod's JSON");
    const json& ref = (*env)[i].at("valueFrom").at(var.value_from_kind);
    auto value =
        keyRefValue(reader, config_map ? ApiObjectKind::kConfigMap : ApiObjectKind::kSecret, ref);
    if (!value.ok()) return value.status();
    if (!*value) continue;  // optional and missing: left unset
    var.value = escapeExpansion(**value);
    var.value_from_kind.clear();
    resolved.push_back(std::move(var));
  }
  out.container.env = std::move(resolved);
  return base::okStatus();
}

}  // namespace

bool needsEnvSources(const api::Pod& pod, const api::Container& container) {
  // envFrom is not in the pod's model: its raw JSON tells (a mention elsewhere, in a label say,
  // only costs a parse).
  return (pod.raw && pod.raw->contains("\"envFrom\"")) ||
         std::any_of(container.env.begin(), container.env.end(), [](const api::EnvVar& v) {
           return v.value_from_kind == "configMapKeyRef" || v.value_from_kind == "secretKeyRef";
         });
}

base::StatusOr<ContainerEnvSources> resolveEnvSources(const api::Pod& pod,
                                                      const api::Container& container,
                                                      ApiObjectSource* objects) {
  ContainerEnvSources out{container, {}, {}};
  const Reader reader{pod, objects};
  base::Status resolved;
  try {
    const json pod_json = json::parse(pod.raw->str());
    const json* c = containerJson(pod_json, container.name);
    if (c == nullptr)
      return base::internalError("the pod's JSON has no container " + container.name);
    resolved = addEnvFrom(reader, *c, out);
    if (resolved.ok()) resolved = resolveKeyRefs(reader, *c, out);
  } catch (const json::exception& e) {
    resolved = base::invalidArgumentError(std::string("malformed env source: ") + e.what());
  }
  if (resolved.ok()) return out;
  // Any failure here keeps the container from being made: CreateContainerConfigError.
  return base::invalidArgumentError(resolved.message());
}

}  // namespace nodeagent::agent
