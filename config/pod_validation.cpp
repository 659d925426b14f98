#include "config/pod_validation.h"

#include "config/pod_validation_impl.h"

namespace nodeagent::config {
namespace pod_validation_internal {

std::vector<FieldError> PodValidator::run(const api::Pod& pod) {
  validateObjectMeta(pod.metadata);
  validateSpec(*pod.spec);
  validateImagesOnlyForPod(pod.spec->containers, "spec.containers");
  validateImagesOnlyForPod(pod.spec->init_containers, "spec.initContainers");
  return std::move(errs_);
}

bool PodValidator::validateLabelName(const std::string& name_path, const std::string& name) {
  if (name.empty()) {
    add(required(name_path));
    return false;
  }
  auto msgs = isDns1123Label(name);
  addInvalid(name_path, name, msgs);
  return msgs.empty();
}

void PodValidator::validateNameAndNamespace(const api::ObjectMeta& meta) {
  if (meta.name.empty()) {
    add(required("metadata.name", "name or generateName is required"));
  } else {
    addInvalid("metadata.name", meta.name, isDns1123Subdomain(meta.name));
  }
  if (meta.namespace_.empty()) {
    add(required("metadata.namespace"));
  } else {
    addInvalid("metadata.namespace", meta.namespace_, isDns1123Label(meta.namespace_));
  }
}

void PodValidator::validateObjectMeta(const api::ObjectMeta& meta) {
  validateNameAndNamespace(meta);
  validateUid(meta.uid);
  nonNegative("metadata.generation", meta.generation);
  for (const auto& [k, v] : meta.labels) {
    addInvalid("metadata.labels", k, isQualifiedName(k));
    addInvalid("metadata.labels", v, isValidLabelValue(v));
  }
  int64_t total = 0;
  for (const auto& [k, v] : meta.annotations) {
    addInvalid("metadata.annotations", k, isQualifiedName(toLowerAscii(k)));
    total += static_cast<int64_t>(k.size() + v.size());
  }
  if (total > kTotalAnnotationSizeLimit)
    add(tooLong("metadata.annotations", kTotalAnnotationSizeLimit));
}

void PodValidator::validateUid(const std::string& uid) {
  if (uid.empty()) return;
  if (auto problem = base::pathComponentProblem(uid); !problem.empty()) {
    add(invalid("metadata.uid", uid, "must be a valid path component: " + problem));
  }
}

std::vector<FieldError> PodValidator::runNames(const api::Pod& pod) {
  const auto& meta = pod.metadata;
  validateNameAndNamespace(meta);
  if (meta.uid.empty()) {
    add(required("metadata.uid"));
  } else {
    validateUid(meta.uid);
  }
  for (size_t i = 0; i < pod.spec->volumes.size(); ++i) {
    validateLabelName(child(index("spec.volumes", i), "name"), pod.spec->volumes[i].name);
  }
  for (const auto& [path, list] : {std::pair{"spec.initContainers", &pod.spec->init_containers},
                                   std::pair{"spec.containers", &pod.spec->containers}}) {
    for (size_t i = 0; i < list->size(); ++i) {
      validateLabelName(child(index(path, i), "name"), (*list)[i].name);
    }
  }
  return std::move(errs_);
}

void PodValidator::validateSpec(const api::PodSpec& spec) {
  const json* spec_json = get(pod_json_, "spec");
  validateVolumes(spec.volumes, get(spec_json, "volumes"));
  validateContainers(spec.containers, "spec.containers", get(spec_json, "containers"));
  validateInitContainers(spec, get(spec_json, "initContainers"));
  if (spec.security_context) validatePodSecurityContext(*spec.security_context);

  validatePolicies(spec);
  if (spec.host_network) validateHostNetworkPorts(spec.containers);
  for (size_t i = 0; i < spec.readiness_gates.size(); ++i) {
    addInvalid(index("spec.readinessGates", i) + ".conditionType", spec.readiness_gates[i],
               isQualifiedName(spec.readiness_gates[i]));
  }
  if (!spec.service_account_name.empty()) {
    addInvalid("spec.serviceAccountName", spec.service_account_name,
               isDns1123Subdomain(spec.service_account_name));
  }
  if (!spec.node_name.empty()) {
    addInvalid("spec.nodeName", spec.node_name, isDns1123Subdomain(spec.node_name));
  }
  if (spec.active_deadline_seconds) {
    int64_t v = *spec.active_deadline_seconds;
    if (v < 1 || v > kMaxInt32) {
      add(invalid("spec.activeDeadlineSeconds", v, "must be between 1 and 2147483647, inclusive"));
    }
  }
  if (spec.termination_grace_period_seconds) {
    nonNegative("spec.terminationGracePeriodSeconds", *spec.termination_grace_period_seconds);
  }
  validateTolerations(spec.tolerations);
  if (!spec.priority_class_name.empty()) {
    addInvalid("spec.priorityClassName", spec.priority_class_name,
               isDns1123Subdomain(spec.priority_class_name));
  }
}

void PodValidator::validatePolicies(const api::PodSpec& spec) {
  static const std::vector<std::string_view> kRestartPolicies = {"Always", "OnFailure", "Never"};
  if (spec.restart_policy.empty()) {
    add(required("spec.restartPolicy"));
  } else if (std::find(kRestartPolicies.begin(), kRestartPolicies.end(), spec.restart_policy) ==
             kRestartPolicies.end()) {
    add(notSupported("spec.restartPolicy", spec.restart_policy, kRestartPolicies));
  }
  static const std::vector<std::string_view> kDnsPolicies = {"ClusterFirstWithHostNet",
                                                             "ClusterFirst", "Default", "None"};
  if (spec.dns_policy.empty()) {
    add(required("spec.dnsPolicy"));
  } else if (std::find(kDnsPolicies.begin(), kDnsPolicies.end(), spec.dns_policy) ==
             kDnsPolicies.end()) {
    add(notSupported("spec.dnsPolicy", spec.dns_policy, kDnsPolicies));
  }
}

void PodValidator::validateHostNetworkPorts(const std::vector<api::Container>& containers) {
  for (size_t i = 0; i < containers.size(); ++i) {
    const auto& ports = containers[i].ports;
    for (size_t j = 0; j < ports.size(); ++j) {
      if (ports[j].host_port != ports[j].container_port) {
        add(invalid(
            index("spec.containers", i) + ".ports" + "[" + std::to_string(j) + "].containerPort",
            ports[j].container_port, "must match `hostPort` when `hostNetwork` is true"));
      }
    }
  }
}

void PodValidator::validateVolumes(const std::vector<api::Volume>& volumes,
                                   const json* volumes_json) {
  std::set<std::string> names;
  for (size_t i = 0; i < volumes.size(); ++i) {
    const auto& vol = volumes[i];
    std::string path = index("spec.volumes", i);
    size_t before = errs_.size();
    validateVolumeSource(vol, path, at(volumes_json, i));
    std::string name_path = child(path, "name");
    validateLabelName(name_path, vol.name);
    if (names.contains(vol.name)) add(duplicate(name_path, vol.name));
    // Like kube-apiserver, only a volume without problems can be mounted.
    if (errs_.size() == before) {
      names.insert(vol.name);
      volumes_[vol.name] = &vol;
    }
  }
}

void PodValidator::validateVolumeSource(const api::Volume& vol, const std::string& path,
                                        const json* vol_json) {
  std::string first;
  if (vol_json != nullptr) {
    const uint32_t sources = volumeSourcesIn(*vol_json);
    for (size_t i = 0; i < kVolumeSourceKeys.size(); ++i) {
      if ((sources & (uint32_t{1} << i)) == 0) continue;
      std::string_view source_key = kVolumeSourceKeys[i];
      if (first.empty()) {
        first = std::string(source_key);
      } else {
        add(forbidden(child(path, source_key), "may not specify more than 1 volume type"));
      }
    }
  } else {
    first = vol.source_type;
  }
  if (first.empty()) {
    add(required(path, "must specify a volume type"));
    return;
  }
  if (first == "hostPath") {
    std::string hp = child(path, "hostPath");
    if (vol.host_path.empty()) {
      add(required(child(hp, "path")));
      return;
    }
    validatePathNoBacksteps(vol.host_path, child(hp, "path"));
    static const std::vector<std::string_view> kTypes = {
        "",     "BlockDevice",  "CharDevice", "Directory", "DirectoryOrCreate",
        "File", "FileOrCreate", "Socket"};
    if (std::find(kTypes.begin(), kTypes.end(), vol.host_path_type) == kTypes.end()) {
      add(notSupported(child(hp, "type"), vol.host_path_type, kTypes));
    }
  } else if (first == "emptyDir") {
    if (vol.empty_dir_size_limit && vol.empty_dir_size_limit->nanoValue() < 0) {
      add(forbidden(child(path, "emptyDir.sizeLimit"),
                    "SizeLimit field must be a valid resource quantity"));
    }
  } else if (first == "secret") {
    const json* name = get(get(vol_json, "secret"), "secretName");
    if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      add(required(child(path, "secret.secretName")));
    }
  } else if (first == "configMap") {
    const json* name = get(get(vol_json, "configMap"), "name");
    if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      add(required(child(path, "configMap.name")));
    }
  }
}

void PodValidator::validatePathNoBacksteps(std::string_view target, const std::string& field) {
  size_t start = 0;
  while (start <= target.size()) {
    size_t slash = target.find('/', start);
    std::string_view part =
        target.substr(start, slash == std::string_view::npos ? target.npos : slash - start);
    if (part == "..") {
      add(invalid(field, target, "must not contain '..'"));
      return;
    }
    if (slash == std::string_view::npos) return;
    start = slash + 1;
  }
}

void PodValidator::validatePodSecurityContext(const api::PodSecurityContext& sc) {
  const std::string path = "spec.securityContext";
  validateId(child(path, "runAsUser"), sc.run_as_user);
  validateId(child(path, "runAsGroup"), sc.run_as_group);
  validateId(child(path, "fsGroup"), sc.fs_group);
  for (size_t i = 0; i < sc.supplemental_groups.size(); ++i) {
    validateId(index(child(path, "supplementalGroups"), i), sc.supplemental_groups[i]);
  }
}

void PodValidator::validateTolerations(const std::vector<api::Toleration>& tolerations) {
  static const std::vector<std::string_view> kOperators = {"Equal", "Exists"};
  static const std::vector<std::string_view> kEffects = {"NoSchedule", "PreferNoSchedule",
                                                         "NoExecute"};
  for (size_t i = 0; i < tolerations.size(); ++i) {
    const auto& t = tolerations[i];
    std::string ip = index("spec.tolerations", i);
    if (!t.key.empty()) addInvalid(child(ip, "key"), t.key, isQualifiedName(t.key));
    if (t.key.empty() && t.operator_ != "Exists") {
      add(invalid(child(ip, "operator"), t.operator_,
                  "operator must be Exists when `key` is empty, which means \"match all values "
                  "and all keys\""));
    }
    if (t.toleration_seconds && t.effect != "NoExecute") {
      add(invalid(child(ip, "effect"), t.effect,
                  "effect must be 'NoExecute' when `tolerationSeconds` is set"));
    }
    if (t.operator_.empty() || t.operator_ == "Equal") {
      auto msgs = isValidLabelValue(t.value);
      if (!msgs.empty()) {
        std::string joined;
        for (size_t k = 0; k < msgs.size(); ++k) joined += (k ? ";" : "") + msgs[k];
        add(invalid(child(ip, "operator"), t.value, joined));
      }
    } else if (t.operator_ == "Exists") {
      if (!t.value.empty()) {
        add(invalid(child(ip, "operator"), t.value,
                    "value must be empty when `operator` is 'Exists'"));
      }
    } else {
      add(notSupported(child(ip, "operator"), t.operator_, kOperators));
    }
    if (!t.effect.empty() &&
        std::find(kEffects.begin(), kEffects.end(), t.effect) == kEffects.end()) {
      add(notSupported(child(ip, "effect"), t.effect, kEffects));
    }
  }
}

}  // namespace pod_validation_internal

using pod_validation_internal::json;
using pod_validation_internal::PodValidator;

std::vector<FieldError> validatePodWithJson(const api::Pod& pod, const nlohmann::json* pod_json) {
  return PodValidator(pod_json).run(pod);
}

std::vector<FieldError> validatePodNames(const api::Pod& pod) {
  return PodValidator(nullptr).runNames(pod);
}

std::vector<FieldError> validatePod(const api::Pod& pod) {
  // The raw JSON lets the shape checks run too; a pod without it gets the typed checks only.
  if (pod.raw && !pod.raw->empty()) {
    json parsed = json::parse(pod.raw->str(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) return validatePodWithJson(pod, &parsed);
  }
  return validatePodWithJson(pod, nullptr);
}

}  // namespace nodeagent::config
