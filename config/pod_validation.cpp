#include "config/pod_validation.h"

#include "base/path_component.h"
#include "config/pod_defaults.h"

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace nodeagent::config {
namespace {

using nlohmann::json;
using namespace validation;

constexpr int64_t kTotalAnnotationSizeLimit = 256 * 1024;
constexpr int64_t kMaxInt32 = 2147483647;
constexpr std::string_view kNegativeMsg = "must be greater than or equal to 0";

std::string child(const std::string& path, std::string_view name) {
  std::string out;
  out.reserve(path.size() + name.size() + 1);
  out += path;
  out += '.';
  out += name;
  return out;
}

std::string index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string key(const std::string& path, std::string_view k) {
  return path + "[" + std::string(k) + "]";
}

// Null-safe JSON navigation: a missing key, a wrong type or a null parent gives null.
const json* get(const json* j, std::string_view name) {
  if (j == nullptr || !j->is_object()) return nullptr;
  auto it = j->find(name);
  return it == j->end() ? nullptr : &*it;
}

const json* at(const json* j, size_t i) {
  if (j == nullptr || !j->is_array() || i >= j->size()) return nullptr;
  return &(*j)[i];
}

std::string toLowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool isNativeResource(std::string_view name) {
  return name.find('/') == std::string_view::npos ||
         name.find("kubernetes.io/") != std::string_view::npos;
}

bool isHugePageResource(std::string_view name) { return name.starts_with("hugepages-"); }

bool isExtendedResource(std::string_view name) {
  if (isNativeResource(name) || name.starts_with("requests.")) return false;
  return isQualifiedName("requests." + std::string(name)).empty();
}

bool isStandardResourceName(std::string_view name) {
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

bool isStandardContainerResourceName(std::string_view name) {
  return name == "cpu" || name == "memory" || name == "ephemeral-storage" ||
         isHugePageResource(name);
}

class PodValidator {
 public:
  explicit PodValidator(const nlohmann::json* pod_json) : pod_json_(pod_json) {}

  std::vector<FieldError> run(const api::Pod& pod) {
    validateObjectMeta(pod.metadata);
    validateSpec(pod.spec);
    validateImagesOnlyForPod(pod.spec.containers, "spec.containers");
    validateImagesOnlyForPod(pod.spec.init_containers, "spec.initContainers");
    return std::move(errs_);
  }

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
  bool validateLabelName(const std::string& name_path, const std::string& name) {
    if (name.empty()) {
      add(required(name_path));
      return false;
    }
    auto msgs = isDns1123Label(name);
    addInvalid(name_path, name, msgs);
    return msgs.empty();
  }

  void validateNameAndNamespace(const api::ObjectMeta& meta) {
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

  void validateObjectMeta(const api::ObjectMeta& meta) {
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

  // The UID names the pod's directories (<root-dir>/pods/<uid>, the log directory): when a
  // manifest gives one, it must be a single path component.
  void validateUid(const std::string& uid) {
    if (uid.empty()) return;
    if (auto problem = base::pathComponentProblem(uid); !problem.empty()) {
      add(invalid("metadata.uid", uid, "must be a valid path component: " + problem));
    }
  }

 public:
  // The names that become path components on the node, by kube-apiserver's rules for them.
  std::vector<FieldError> runNames(const api::Pod& pod) {
    const auto& meta = pod.metadata;
    validateNameAndNamespace(meta);
    if (meta.uid.empty()) {
      add(required("metadata.uid"));
    } else {
      validateUid(meta.uid);
    }
    for (size_t i = 0; i < pod.spec.volumes.size(); ++i) {
      validateLabelName(child(index("spec.volumes", i), "name"), pod.spec.volumes[i].name);
    }
    for (const auto& [path, list] : {std::pair{"spec.initContainers", &pod.spec.init_containers},
                                     std::pair{"spec.containers", &pod.spec.containers}}) {
      for (size_t i = 0; i < list->size(); ++i) {
        validateLabelName(child(index(path, i), "name"), (*list)[i].name);
      }
    }
    return std::move(errs_);
  }

 private:
  void validateSpec(const api::PodSpec& spec) {
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
        add(invalid("spec.activeDeadlineSeconds", v,
                    "must be between 1 and 2147483647, inclusive"));
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

  // restartPolicy and dnsPolicy are required and one of the known values.
  void validatePolicies(const api::PodSpec& spec) {
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

  // With hostNetwork every container port is its host port.
  void validateHostNetworkPorts(const std::vector<api::Container>& containers) {
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

  void validateVolumes(const std::vector<api::Volume>& volumes, const json* volumes_json) {
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

  void validateVolumeSource(const api::Volume& vol, const std::string& path, const json* vol_json) {
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

  void validatePathNoBacksteps(std::string_view target, const std::string& field) {
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

  void validateContainers(const std::vector<api::Container>& containers, const std::string& path,
                          const json* containers_json) {
    if (containers.empty()) {
      add(required(path));
      return;
    }
    std::set<std::string> names;
    for (size_t i = 0; i < containers.size(); ++i) {
      const auto& ctr = containers[i];
      std::string ip = index(path, i);
      const json* ctr_json = at(containers_json, i);
      std::string name_path = child(ip, "name");
      validateLabelName(name_path, ctr.name);
      if (names.contains(ctr.name)) {
        add(duplicate(name_path, ctr.name));
      } else {
        names.insert(ctr.name);
      }
      validateContainer(ctr, ip, ctr_json);
    }
    // App containers run together, so their host ports must not collide; init containers run one
    // at a time.
    if (path == "spec.containers") {
      checkHostPortConflicts(containers, 0, containers.size(), path);
    } else {
      for (size_t i = 0; i < containers.size(); ++i)
        checkHostPortConflicts(containers, i, i + 1, path);
    }
  }

  // One container's fields other than its name; `ip` is its path.
  void validateContainer(const api::Container& ctr, const std::string& ip, const json* ctr_json) {
    if (ctr.image.empty()) add(required(child(ip, "image")));
    validateHooksAndProbes(ctr, ip);
    const auto& tmp = ctr.termination_message_policy;
    if (tmp.empty()) {
      add(required(child(ip, "terminationMessagePolicy"),
                   "must be 'File' or 'FallbackToLogsOnError'"));
    } else if (tmp != "File" && tmp != "FallbackToLogsOnError") {
      add(invalid(child(ip, "terminationMessagePolicy"), tmp,
                  "must be 'File' or 'FallbackToLogsOnError'"));
    }
    validatePorts(ctr.ports, child(ip, "ports"));
    validateEnv(ctr.env, child(ip, "env"), get(ctr_json, "env"));
    validateVolumeMounts(ctr.volume_mounts, child(ip, "volumeMounts"));
    static const std::vector<std::string_view> kPullPolicies = {"Always", "IfNotPresent", "Never"};
    if (ctr.image_pull_policy.empty()) {
      add(required(child(ip, "imagePullPolicy")));
    } else if (std::find(kPullPolicies.begin(), kPullPolicies.end(), ctr.image_pull_policy) ==
               kPullPolicies.end()) {
      add(notSupported(child(ip, "imagePullPolicy"), ctr.image_pull_policy, kPullPolicies));
    }
    validateResources(ctr.resources, child(ip, "resources"));
    if (ctr.security_context)
      validateSecurityContext(*ctr.security_context, child(ip, "securityContext"));
  }

  // Lifecycle hooks and probes; liveness and startup probes succeed after exactly one success.
  void validateHooksAndProbes(const api::Container& ctr, const std::string& ip) {
    if (ctr.lifecycle) {
      std::string lp = child(ip, "lifecycle");
      if (ctr.lifecycle->post_start)
        validateHandler(*ctr.lifecycle->post_start, child(lp, "postStart"));
      if (ctr.lifecycle->pre_stop) validateHandler(*ctr.lifecycle->pre_stop, child(lp, "preStop"));
    }
    if (ctr.liveness_probe) {
      validateProbe(*ctr.liveness_probe, child(ip, "livenessProbe"));
      if (ctr.liveness_probe->success_threshold != 1) {
        add(invalid(child(ip, "livenessProbe.successThreshold"),
                    ctr.liveness_probe->success_threshold, "must be 1"));
      }
    }
    if (ctr.readiness_probe) validateProbe(*ctr.readiness_probe, child(ip, "readinessProbe"));
    if (ctr.startup_probe) {
      validateProbe(*ctr.startup_probe, child(ip, "startupProbe"));
      if (ctr.startup_probe->success_threshold != 1) {
        add(invalid(child(ip, "startupProbe.successThreshold"),
                    ctr.startup_probe->success_threshold, "must be 1"));
      }
    }
  }

  void validateInitContainers(const api::PodSpec& spec, const json* init_json) {
    const auto& inits = spec.init_containers;
    if (inits.empty()) return;
    validateContainers(inits, "spec.initContainers", init_json);
    // Names are shared with the app containers (duplicates among init containers were reported
    // just above).
    std::set<std::string> app_names;
    for (const auto& c : spec.containers) app_names.insert(c.name);
    for (size_t i = 0; i < inits.size(); ++i) {
      const auto& ctr = inits[i];
      std::string ip = index("spec.initContainers", i);
      if (app_names.contains(ctr.name)) add(duplicate(child(ip, "name"), ctr.name));
      if (ctr.lifecycle) {
        add(forbidden(child(ip, "lifecycle"), "may not be set for init containers"));
      } else if (ctr.liveness_probe) {
        add(forbidden(child(ip, "livenessProbe"), "may not be set for init containers"));
      } else if (ctr.readiness_probe) {
        add(forbidden(child(ip, "readinessProbe"), "may not be set for init containers"));
      } else if (ctr.startup_probe) {
        add(forbidden(child(ip, "startupProbe"), "may not be set for init containers"));
      }
    }
  }

  void validateProbe(const api::Probe& probe, const std::string& path) {
    validateHandler(probe.handler, path);
    nonNegative(child(path, "initialDelaySeconds"), probe.initial_delay_seconds);
    nonNegative(child(path, "timeoutSeconds"), probe.timeout_seconds);
    nonNegative(child(path, "periodSeconds"), probe.period_seconds);
    nonNegative(child(path, "successThreshold"), probe.success_threshold);
    nonNegative(child(path, "failureThreshold"), probe.failure_threshold);
    if (probe.termination_grace_period_seconds && *probe.termination_grace_period_seconds <= 0) {
      add(invalid(child(path, "terminationGracePeriodSeconds"),
                  *probe.termination_grace_period_seconds, "must be greater than 0"));
    }
  }

  void validateHandler(const api::Handler& h, const std::string& path) {
    int handlers = 0;
    if (h.exec) {
      ++handlers;
      if (h.exec->command.empty()) add(required(child(path, "exec.command")));
    }
    if (h.http_get) {
      if (handlers > 0) {
        add(forbidden(child(path, "httpGet"), "may not specify more than 1 handler type"));
      } else {
        ++handlers;
        validateHttpGet(*h.http_get, child(path, "httpGet"));
      }
    }
    if (h.tcp_socket) {
      if (handlers > 0) {
        add(forbidden(child(path, "tcpSocket"), "may not specify more than 1 handler type"));
      } else {
        ++handlers;
        validatePortNumOrName(h.tcp_socket->port, child(path, "tcpSocket.port"));
      }
    }
    if (handlers == 0) add(required(path, "must specify a handler type"));
  }

  void validateHttpGet(const api::HTTPGetAction& get_action, const std::string& path) {
    if (get_action.path.empty()) add(required(child(path, "path")));
    validatePortNumOrName(get_action.port, child(path, "port"));
    static const std::vector<std::string_view> kSchemes = {"HTTP", "HTTPS"};
    if (get_action.scheme != "HTTP" && get_action.scheme != "HTTPS") {
      add(notSupported(child(path, "scheme"), get_action.scheme, kSchemes));
    }
    for (const auto& header : get_action.http_headers) {
      addInvalid(child(path, "httpHeaders"), header.name, isHttpHeaderName(header.name));
    }
  }

  void validatePortNumOrName(const api::IntOrString& port, const std::string& path) {
    if (port.is_string) {
      addInvalid(path, port.string_value, isValidPortName(port.string_value));
    } else {
      for (const auto& msg : isValidPortNum(port.int_value))
        add(invalid(path, port.int_value, msg));
    }
  }

  void validatePorts(const std::vector<api::ContainerPort>& ports, const std::string& path) {
    std::set<std::string> names;
    static const std::vector<std::string_view> kProtocols = {"SCTP", "TCP", "UDP"};
    for (size_t i = 0; i < ports.size(); ++i) {
      const auto& port = ports[i];
      std::string ip = index(path, i);
      if (!port.name.empty()) {
        auto msgs = isValidPortName(port.name);
        if (!msgs.empty()) {
          addInvalid(child(ip, "name"), port.name, msgs);
        } else if (names.contains(port.name)) {
          add(duplicate(child(ip, "name"), port.name));
        } else {
          names.insert(port.name);
        }
      }
      if (port.container_port == 0) {
        add(required(child(ip, "containerPort")));
      } else {
        for (const auto& msg : isValidPortNum(port.container_port)) {
          add(invalid(child(ip, "containerPort"), port.container_port, msg));
        }
      }
      if (port.host_port != 0) {
        for (const auto& msg : isValidPortNum(port.host_port)) {
          add(invalid(child(ip, "hostPort"), port.host_port, msg));
        }
      }
      if (port.protocol.empty()) {
        add(required(child(ip, "protocol")));
      } else if (std::find(kProtocols.begin(), kProtocols.end(), port.protocol) ==
                 kProtocols.end()) {
        add(notSupported(child(ip, "protocol"), port.protocol, kProtocols));
      }
    }
  }

  void checkHostPortConflicts(const std::vector<api::Container>& containers, size_t from, size_t to,
                              const std::string& path) {
    std::set<std::string> seen;
    for (size_t ci = from; ci < to; ++ci) {
      const auto& ports = containers[ci].ports;
      for (size_t pi = 0; pi < ports.size(); ++pi) {
        if (ports[pi].host_port == 0) continue;
        std::string id = ports[pi].host_ip + "/" + ports[pi].protocol + "/" +
                         std::to_string(ports[pi].host_port);
        if (!seen.insert(id).second) {
          add(duplicate(index(index(path, ci) + ".ports", pi) + ".hostPort", id));
        }
      }
    }
  }

  void validateEnv(const std::vector<api::EnvVar>& env, const std::string& path,
                   const json* env_json) {
    for (size_t i = 0; i < env.size(); ++i) {
      const auto& ev = env[i];
      std::string ip = index(path, i);
      if (ev.name.empty()) {
        add(required(child(ip, "name")));
      } else {
        addInvalid(child(ip, "name"), ev.name, isEnvVarName(ev.name));
      }
      validateEnvValueFrom(ev, child(ip, "valueFrom"), get(at(env_json, i), "valueFrom"));
    }
  }

  void validateEnvValueFrom(const api::EnvVar& ev, const std::string& path, const json* from_json) {
    bool has_value_from =
        from_json != nullptr ? !from_json->is_null() : !ev.value_from_kind.empty();
    if (!has_value_from) return;
    int sources = 0;
    if (from_json != nullptr) {
      if (get(from_json, "fieldRef") != nullptr) {
        ++sources;
        if (ev.field_ref) validateObjectFieldSelector(*ev.field_ref, child(path, "fieldRef"));
      }
      if (get(from_json, "resourceFieldRef") != nullptr) {
        ++sources;
        const json* resource = get(get(from_json, "resourceFieldRef"), "resource");
        if (resource == nullptr || !resource->is_string() ||
            resource->get_ref<const std::string&>().empty()) {
          add(required(child(path, "resourceFieldRef.resource")));
        }
      }
      for (const char* selector : {"configMapKeyRef", "secretKeyRef"}) {
        const json* sel = get(from_json, selector);
        if (sel == nullptr) continue;
        ++sources;
        // kubelet's validateConfigMapKeySelector / validateSecretKeySelector: the name is a DNS
        // subdomain (an empty one too is Invalid, not Required), the key a config key.
        std::string sp = child(path, selector);
        const json* n = get(sel, "name");
        const std::string name = n != nullptr && n->is_string() ? n->get<std::string>() : "";
        addInvalid(child(sp, "name"), name, isDns1123Subdomain(name));
        const json* k = get(sel, "key");
        const std::string key = k != nullptr && k->is_string() ? k->get<std::string>() : "";
        if (key.empty()) {
          add(required(child(sp, "key")));
        } else {
          addInvalid(child(sp, "key"), key, isConfigMapKey(key));
        }
      }
    } else {
      sources = 1;
      if (ev.field_ref) validateObjectFieldSelector(*ev.field_ref, child(path, "fieldRef"));
    }
    if (sources == 0) {
      add(invalid(path, "",
                  "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or "
                  "`secretKeyRef`"));
    } else if (!ev.value.empty()) {
      add(invalid(path, "", "may not be specified when `value` is not empty"));
    } else if (sources > 1) {
      add(invalid(path, "", "may not have more than one field specified at a time"));
    }
  }

  void validateObjectFieldSelector(const api::ObjectFieldSelector& fs, const std::string& path) {
    if (fs.api_version.empty()) {
      add(required(child(path, "apiVersion")));
      return;
    }
    if (fs.field_path.empty()) {
      add(required(child(path, "fieldPath")));
      return;
    }
    if (fs.api_version != "v1") {
      add(invalid(child(path, "fieldPath"), fs.field_path,
                  "error converting fieldPath: unsupported pod version: " + fs.api_version));
      return;
    }
    const std::string& fp = fs.field_path;
    // metadata.labels['key'] / metadata.annotations['key'].
    if (fp.ends_with("']")) {
      size_t open = fp.find("['");
      if (open != std::string::npos && open > 0) {
        std::string base = fp.substr(0, open);
        std::string subscript = fp.substr(open + 2, fp.size() - open - 4);
        if (base == "metadata.annotations") {
          addInvalid(path, subscript, isQualifiedName(toLowerAscii(subscript)));
        } else if (base == "metadata.labels") {
          addInvalid(path, subscript, isQualifiedName(subscript));
        } else {
          add(invalid(child(path, "fieldPath"), fp,
                      "error converting fieldPath: field label does not support subscript: " + fp));
        }
        return;
      }
    }
    static const std::set<std::string_view> kConvertible = {
        "metadata.annotations", "metadata.labels", "metadata.name",      "metadata.namespace",
        "metadata.uid",         "spec.nodeName",   "spec.restartPolicy", "spec.serviceAccountName",
        "spec.schedulerName",   "status.phase",    "status.hostIP",      "status.podIP",
        "status.podIPs",        "spec.host"};
    if (!kConvertible.contains(fp)) {
      add(invalid(child(path, "fieldPath"), fp,
                  "error converting fieldPath: field label not supported: " + fp));
      return;
    }
    static const std::vector<std::string_view> kEnvPaths = {
        "metadata.name",           "metadata.namespace", "metadata.uid", "spec.nodeName",
        "spec.serviceAccountName", "status.hostIP",      "status.podIP", "status.podIPs"};
    std::string_view internal =
        fp == "spec.host" ? std::string_view("spec.nodeName") : std::string_view(fp);
    if (std::find(kEnvPaths.begin(), kEnvPaths.end(), internal) == kEnvPaths.end()) {
      add(notSupported(child(path, "fieldPath"), internal, kEnvPaths));
    }
  }

  void validateVolumeMounts(const std::vector<api::VolumeMount>& mounts, const std::string& path) {
    std::set<std::string> mount_points;
    for (size_t i = 0; i < mounts.size(); ++i) {
      const auto& m = mounts[i];
      std::string ip = index(path, i);
      if (m.name.empty()) add(required(child(ip, "name")));
      if (!volumes_.contains(m.name)) add(notFound(child(ip, "name"), m.name));
      if (m.mount_path.empty()) add(required(child(ip, "mountPath")));
      if (!mount_points.insert(m.mount_path).second) {
        add(invalid(child(ip, "mountPath"), m.mount_path, "must be unique"));
      }
      if (!m.sub_path.empty()) {
        if (m.sub_path.front() == '/')
          add(invalid(child(ip, "subPath"), m.sub_path, "must be a relative path"));
        validatePathNoBacksteps(m.sub_path, child(ip, "subPath"));
      }
    }
  }

  void validateResourceName(const std::string& name, const std::string& path) {
    auto msgs = isQualifiedName(name);
    if (!msgs.empty()) {
      addInvalid(path, name, msgs);
      return;
    }
    if (name.find('/') == std::string::npos) {
      if (!isStandardResourceName(name)) {
        add(invalid(path, name, "must be a standard resource type or fully qualified"));
      }
      if (!isStandardContainerResourceName(name)) {
        add(invalid(path, name, "must be a standard resource for containers"));
      }
    } else if (!isNativeResource(name) && !isExtendedResource(name)) {
      add(invalid(path, name, "doesn't follow extended resource name standard"));
    }
  }

  void validateQuantity(const std::string& name, const api::Quantity& q, const std::string& path) {
    if (q.nanoValue() < 0) add(invalid(path, q.toString(), kNegativeMsg));
    if (isExtendedResource(name) && q.nanoValue() % 1000000000 != 0) {
      add(invalid(path, q.toString(), "must be an integer"));
    }
  }

  void validateResources(const api::ResourceRequirements& res, const std::string& path) {
    std::string lim_path = child(path, "limits");
    std::string req_path = child(path, "requests");
    bool lim_hugepages = false;
    bool lim_cpu_or_memory = false;
    for (const auto& [name, q] : res.limits) {
      std::string fp = key(lim_path, name);
      validateResourceName(name, fp);
      validateQuantity(name, q, fp);
      if (isHugePageResource(name)) lim_hugepages = true;
      if (name == "cpu" || name == "memory") lim_cpu_or_memory = true;
    }
    for (const auto& [name, q] : res.requests) {
      std::string fp = key(req_path, name);
      validateResourceName(name, fp);
      validateQuantity(name, q, fp);
      bool overcommit = isNativeResource(name) && !isHugePageResource(name);
      auto lim = res.limits.find(name);
      if (lim != res.limits.end()) {
        if (q != lim->second && !overcommit) {
          add(invalid(req_path, q.toString(), "must be equal to " + name + " limit"));
        } else if (q > lim->second) {
          add(invalid(req_path, q.toString(), "must be less than or equal to " + name + " limit"));
        }
      } else if (!overcommit) {
        add(required(lim_path, "Limit must be set for non overcommitable resources"));
      }
    }
    if (lim_hugepages && !lim_cpu_or_memory)
      add(forbidden(lim_path, "HugePages require cpu or memory"));
  }

  // validation.IsValidUserID / IsValidGroupID.
  void validateId(const std::string& path, std::optional<int64_t> id) {
    if (id && (*id < 0 || *id > kMaxInt32)) {
      add(invalid(path, *id, "must be between 0 and 2147483647, inclusive"));
    }
  }

  void validateSecurityContext(const api::SecurityContext& sc, const std::string& path) {
    validateId(child(path, "runAsUser"), sc.run_as_user);
    validateId(child(path, "runAsGroup"), sc.run_as_group);
    const bool no_escalation = sc.allow_privilege_escalation && !*sc.allow_privilege_escalation;
    if (no_escalation && sc.privileged && *sc.privileged) {
      add(invalidRendered(
          path, R"({"allowPrivilegeEscalation":false,"privileged":true})",
          "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"));
    }
    if (no_escalation && sc.capabilities &&
        std::find(sc.capabilities->add.begin(), sc.capabilities->add.end(), "CAP_SYS_ADMIN") !=
            sc.capabilities->add.end()) {
      add(invalidRendered(
          path, R"({"allowPrivilegeEscalation":false,"capabilities":{"add":["CAP_SYS_ADMIN"]}})",
          "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN"));
    }
  }

  // kubelet v1.18's validatePodSpecSecurityContext (the id ranges).
  void validatePodSecurityContext(const api::PodSecurityContext& sc) {
    const std::string path = "spec.securityContext";
    validateId(child(path, "runAsUser"), sc.run_as_user);
    validateId(child(path, "runAsGroup"), sc.run_as_group);
    validateId(child(path, "fsGroup"), sc.fs_group);
    for (size_t i = 0; i < sc.supplemental_groups.size(); ++i) {
      validateId(index(child(path, "supplementalGroups"), i), sc.supplemental_groups[i]);
    }
  }

  static FieldError invalidRendered(std::string field, std::string_view rendered,
                                    std::string_view detail) {
    return {std::move(field),
            "Invalid value: " + std::string(rendered) + ": " + std::string(detail)};
  }

  void validateTolerations(const std::vector<api::Toleration>& tolerations) {
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

  void validateImagesOnlyForPod(const std::vector<api::Container>& containers,
                                const std::string& path) {
    for (size_t i = 0; i < containers.size(); ++i) {
      const auto& image = containers[i].image;
      if (image.empty()) continue;
      auto is_space = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
      };
      if (is_space(image.front()) || is_space(image.back())) {
        add(invalid(index(path, i) + ".image", image,
                    "must not have leading or trailing whitespace"));
      }
    }
  }

  const nlohmann::json* pod_json_;
  std::vector<FieldError> errs_;
  std::map<std::string, const api::Volume*> volumes_;
};

}  // namespace

std::vector<FieldError> validatePodWithJson(const api::Pod& pod, const nlohmann::json* pod_json) {
  return PodValidator(pod_json).run(pod);
}

std::vector<FieldError> validatePodNames(const api::Pod& pod) {
  return PodValidator(nullptr).runNames(pod);
}

std::vector<FieldError> validatePod(const api::Pod& pod) {
  // The raw JSON lets the shape checks run too; a pod without it gets the typed checks only.
  if (pod.raw && !pod.raw->empty()) {
    json parsed = json::parse(*pod.raw, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) return validatePodWithJson(pod, &parsed);
  }
  return validatePodWithJson(pod, nullptr);
}

}  // namespace nodeagent::config
