// PodValidator, private to config/: pod_validation.cpp checks the pod's metadata, spec, volumes,
// pod security context and tolerations; pod_validation_containers.cpp its containers (probes,
// hooks, ports, env, mounts, resources, security contexts).
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/path_component.h"
#include "config/pod_defaults.h"
#include "config/pod_validation.h"

namespace nodeagent::config {
namespace pod_validation_internal {

using nlohmann::json;
using namespace validation;

inline constexpr int64_t kTotalAnnotationSizeLimit = 256 * 1024;
inline constexpr int64_t kMaxInt32 = 2147483647;
inline constexpr std::string_view kNegativeMsg = "must be greater than or equal to 0";

inline std::string child(const std::string& path, std::string_view name) {
  std::string out;
  out.reserve(path.size() + name.size() + 1);
  out += path;
  out += '.';
  out += name;
  return out;
}

inline std::string index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

inline std::string key(const std::string& path, std::string_view k) {
  return path + "[" + std::string(k) + "]";
}

// Null-safe JSON navigation: a missing key, a wrong type or a null parent gives null.
inline const json* get(const json* j, std::string_view name) {
  if (j == nullptr || !j->is_object()) return nullptr;
  auto it = j->find(name);
  return it == j->end() ? nullptr : &*it;
}

inline const json* at(const json* j, size_t i) {
  if (j == nullptr || !j->is_array() || i >= j->size()) return nullptr;
  return &(*j)[i];
}

inline std::string toLowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

inline bool isNativeResource(std::string_view name) {
  return name.find('/') == std::string_view::npos ||
         name.find("kubernetes.io/") != std::string_view::npos;
}

inline bool isHugePageResource(std::string_view name) { return name.starts_with("hugepages-"); }

inline bool isExtendedResource(std::string_view name) {
  if (isNativeResource(name) || name.starts_with("requests.")) return false;
  return isQualifiedName("requests." + std::string(name)).empty();
}

inline bool isStandardResourceName(std::string_view name) {
  static const std::set<std::string_view> kStandard = {"cpu",
                                                       "memory",
                                                       "ephemeral-storage",
                                                       "storage",
                                                       "pods",
                                                       "services",
                                                       "replicationcontrollers",
                                                       "resourcequotas",
                                                       "secrets",
                                                       "configmaps",
                                                       "persistentvolumeclaims",
                                                       "services.nodeports",
                                                       "services.loadbalancers",
                                                       "requests.cpu",
                                                       "requests.memory",
                                                       "requests.storage",
                                                       "requests.ephemeral-storage",
                                                       "limits.cpu",
                                                       "limits.memory",
                                                       "limits.ephemeral-storage"};
  return kStandard.contains(name) || isHugePageResource(name) ||
         name.starts_with("requests.hugepages-");
}

inline bool isStandardContainerResourceName(std::string_view name) {
  return name == "cpu" || name == "memory" || name == "ephemeral-storage" ||
         isHugePageResource(name);
}

class PodValidator {
 public:
  explicit PodValidator(const nlohmann::json* pod_json) : pod_json_(pod_json) {}

  std::vector<FieldError> run(const api::Pod& pod);

 private:
  void add(FieldError e) { errs_.push_back(std::move(e)); }
  void addInvalid(const std::string& field, std::string_view value,
                  const std::vector<std::string>& msgs) {
    for (const auto& msg : msgs) add(invalid(field, value, msg));
  }
  void nonNegative(const std::string& field, int64_t value) {
    if (value < 0) add(invalid(field, value, kNegativeMsg));
  }
  // A container or volume name: required, a DNS-1123 label. Returns whether it was valid.
  bool validateLabelName(const std::string& name_path, const std::string& name);

  void validateNameAndNamespace(const api::ObjectMeta& meta);

  void validateObjectMeta(const api::ObjectMeta& meta);

  // The UID names the pod's directories (<root-dir>/pods/<uid>, the log directory): when a
  // manifest gives one, it must be a single path component.
  void validateUid(const std::string& uid);

 public:
  // The names that become path components on the node, by kube-apiserver's rules for them.
  std::vector<FieldError> runNames(const api::Pod& pod);

 private:
  void validateSpec(const api::PodSpec& spec);

  // restartPolicy and dnsPolicy are required and one of the known values.
  void validatePolicies(const api::PodSpec& spec);

  // With hostNetwork every container port is its host port.
  void validateHostNetworkPorts(const std::vector<api::Container>& containers);

  void validateVolumes(const std::vector<api::Volume>& volumes, const json* volumes_json);

  void validateVolumeSource(const api::Volume& vol, const std::string& path, const json* vol_json);

  void validatePathNoBacksteps(std::string_view target, const std::string& field);

  void validateContainers(const std::vector<api::Container>& containers, const std::string& path,
                          const json* containers_json);

  // One container's fields other than its name; `ip` is its path.
  void validateContainer(const api::Container& ctr, const std::string& ip, const json* ctr_json);

  // Lifecycle hooks and probes; liveness and startup probes succeed after exactly one success.
  void validateHooksAndProbes(const api::Container& ctr, const std::string& ip);

  void validateInitContainers(const api::PodSpec& spec, const json* init_json);

  void validateProbe(const api::Probe& probe, const std::string& path);

  void validateHandler(const api::Handler& h, const std::string& path);

  void validateHttpGet(const api::HTTPGetAction& get_action, const std::string& path);

  void validatePortNumOrName(const api::IntOrString& port, const std::string& path);

  void validatePorts(const std::vector<api::ContainerPort>& ports, const std::string& path);

  void checkHostPortConflicts(const std::vector<api::Container>& containers, size_t from, size_t to,
                              const std::string& path);

  void validateEnv(const std::vector<api::EnvVar>& env, const std::string& path,
                   const json* env_json);

  void validateEnvValueFrom(const api::EnvVar& ev, const std::string& path, const json* from_json);

  void validateObjectFieldSelector(const api::ObjectFieldSelector& fs, const std::string& path);
  void validateResourceFieldSelector(const api::ResourceFieldSelector& fs, const std::string& path);

  void validateVolumeMounts(const std::vector<api::VolumeMount>& mounts, const std::string& path);

  void validateResourceName(const std::string& name, const std::string& path);

  void validateQuantity(const std::string& name, const api::Quantity& q, const std::string& path);

  void validateResources(const api::ResourceRequirements& res, const std::string& path);

  // validation.IsValidUserID / IsValidGroupID.
  void validateId(const std::string& path, std::optional<int64_t> id) {
    if (id && (*id < 0 || *id > kMaxInt32)) {
      add(invalid(path, *id, "must be between 0 and 2147483647, inclusive"));
    }
  }

  void validateSecurityContext(const api::SecurityContext& sc, const std::string& path);

  // kubelet v1.18's validatePodSpecSecurityContext (the id ranges).
  void validatePodSecurityContext(const api::PodSecurityContext& sc);

  static FieldError invalidRendered(std::string field, std::string_view rendered,
                                    std::string_view detail) {
    return {std::move(field),
            "Invalid value: " + std::string(rendered) + ": " + std::string(detail)};
  }

  void validateTolerations(const std::vector<api::Toleration>& tolerations);

  void validateImagesOnlyForPod(const std::vector<api::Container>& containers,
                                const std::string& path);

  const nlohmann::json* pod_json_;
  std::vector<FieldError> errs_;
  std::map<std::string, const api::Volume*> volumes_;
};

}  // namespace pod_validation_internal
}  // namespace nodeagent::config
