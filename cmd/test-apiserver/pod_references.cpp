#include "cmd/test-apiserver/pod_references.h"

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

// The object member `key` of `obj`, or null.
const json& member(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

// Each element of the array member `key` of `obj`.
template <typename Visit>
void forEach(const json& obj, const char* key, Visit visit) {
  const json& list = member(obj, key);
  if (!list.is_array()) return;
  for (const json& item : list) visit(item);
}

void addName(std::set<std::string>& names, const std::string& name) {
  if (!name.empty()) names.insert(name);
}

void containerReferences(const json& container, PodReferences& refs) {
  forEach(container, "envFrom", [&](const json& from) {
    addName(refs.secrets, stringAt(member(from, "secretRef"), "name"));
    addName(refs.config_maps, stringAt(member(from, "configMapRef"), "name"));
  });
  forEach(container, "env", [&](const json& env) {
    const json& value_from = member(env, "valueFrom");
    addName(refs.secrets, stringAt(member(value_from, "secretKeyRef"), "name"));
    addName(refs.config_maps, stringAt(member(value_from, "configMapKeyRef"), "name"));
  });
}

void projectedReferences(const json& projected, PodReferences& refs) {
  forEach(projected, "sources", [&](const json& source) {
    addName(refs.secrets, stringAt(member(source, "secret"), "name"));
    addName(refs.config_maps, stringAt(member(source, "configMap"), "name"));
    if (member(source, "clusterTrustBundle").is_object()) refs.cluster_trust_bundles = true;
  });
}

void volumeReferences(const std::string& pod_name, const json& volume, PodReferences& refs) {
  addName(refs.secrets, stringAt(member(volume, "secret"), "secretName"));
  addName(refs.secrets, stringAt(member(volume, "azureFile"), "secretName"));
  // The volume sources whose secretRef (or nodePublishSecretRef) names a secret of the pod's
  // namespace.
  for (const char* source :
       {"cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos"}) {
    addName(refs.secrets, stringAt(member(member(volume, source), "secretRef"), "name"));
  }
  addName(refs.secrets, stringAt(member(member(volume, "csi"), "nodePublishSecretRef"), "name"));
  addName(refs.config_maps, stringAt(member(volume, "configMap"), "name"));
  projectedReferences(member(volume, "projected"), refs);
  addName(refs.claims, stringAt(member(volume, "persistentVolumeClaim"), "claimName"));
  if (member(volume, "ephemeral").is_object()) {
    addName(refs.claims, pod_name + "-" + stringAt(volume, "name"));
  }
}

}  // namespace

PodReferences podReferences(const json& pod) {
  PodReferences refs;
  const json& spec = member(pod, "spec");
  const std::string pod_name = stringAt(member(pod, "metadata"), "name");
  refs.service_account = stringAt(spec, "serviceAccountName");
  forEach(spec, "imagePullSecrets",
          [&](const json& ref) { addName(refs.secrets, stringAt(ref, "name")); });
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    forEach(spec, list, [&](const json& c) { containerReferences(c, refs); });
  }
  forEach(spec, "volumes", [&](const json& v) { volumeReferences(pod_name, v, refs); });
  return refs;
}

}  // namespace nodeagent::testapiserver
