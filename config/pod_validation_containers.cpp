// PodValidator: a pod's containers and init containers (ValidatePod's validateContainers and what
// it calls).
#include "config/pod_validation_impl.h"

namespace nodeagent::config {
namespace pod_validation_internal {

void PodValidator::validateContainers(const std::vector<api::Container>& containers,
                                      const std::string& path, const json* containers_json) {
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

void PodValidator::validateContainer(const api::Container& ctr, const std::string& ip,
                                     const json* ctr_json) {
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

void PodValidator::validateHooksAndProbes(const api::Container& ctr, const std::string& ip) {
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
      add(invalid(child(ip, "startupProbe.successThreshold"), ctr.startup_probe->success_threshold,
                  "must be 1"));
    }
  }
}

void PodValidator::validateInitContainers(const api::PodSpec& spec, const json* init_json) {
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

void PodValidator::validateProbe(const api::Probe& probe, const std::string& path) {
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

void PodValidator::validateHandler(const api::Handler& h, const std::string& path) {
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

void PodValidator::validateHttpGet(const api::HTTPGetAction& get_action, const std::string& path) {
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

void PodValidator::validatePortNumOrName(const api::IntOrString& port, const std::string& path) {
  if (port.is_string) {
    addInvalid(path, port.string_value, isValidPortName(port.string_value));
  } else {
    for (const auto& msg : isValidPortNum(port.int_value)) add(invalid(path, port.int_value, msg));
  }
}

void PodValidator::validatePorts(const std::vector<api::ContainerPort>& ports,
                                 const std::string& path) {
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
    } else if (std::find(kProtocols.begin(), kProtocols.end(), port.protocol) == kProtocols.end()) {
      add(notSupported(child(ip, "protocol"), port.protocol, kProtocols));
    }
  }
}

void PodValidator::checkHostPortConflicts(const std::vector<api::Container>& containers,
                                          size_t from, size_t to, const std::string& path) {
  std::set<std::string> seen;
  for (size_t ci = from; ci < to; ++ci) {
    const auto& ports = containers[ci].ports;
    for (size_t pi = 0; pi < ports.size(); ++pi) {
      if (ports[pi].host_port == 0) continue;
      std::string id =
          ports[pi].host_ip + "/" + ports[pi].protocol + "/" + std::to_string(ports[pi].host_port);
      if (!seen.insert(id).second) {
        add(duplicate(index(index(path, ci) + ".ports", pi) + ".hostPort", id));
      }
    }
  }
}

void PodValidator::validateEnv(const std::vector<api::EnvVar>& env, const std::string& path,
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

void PodValidator::validateEnvValueFrom(const api::EnvVar& ev, const std::string& path,
                                        const json* from_json) {
  bool has_value_from = from_json != nullptr ? !from_json->is_null() : !ev.value_from_kind.empty();
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
      } else if (ev.resource_field_ref) {
        validateResourceFieldSelector(*ev.resource_field_ref, child(path, "resourceFieldRef"));
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

// kube-apiserver's validateContainerResourceFieldSelector and validateContainerResourceDivisor:
// the resource one of the container's requests or limits, the divisor 1m or 1 for CPU and a unit
// of bytes (1, 1k ... 1E, 1Ki ... 1Ei) for memory and ephemeral storage. The invalid value quoted
// is the resource's name, as kube-apiserver quotes it.
void PodValidator::validateResourceFieldSelector(const api::ResourceFieldSelector& fs,
                                                 const std::string& path) {
  static const std::vector<std::string_view> kResources = {
      "limits.cpu",   "limits.ephemeral-storage",   "limits.memory",
      "requests.cpu", "requests.ephemeral-storage", "requests.memory"};
  const std::string& r = fs.resource;
  const bool hugepages = r.starts_with("limits.hugepages-") || r.starts_with("requests.hugepages-");
  if (!hugepages && std::find(kResources.begin(), kResources.end(), r) == kResources.end()) {
    add(notSupported(child(path, "resource"), r, kResources));
    return;
  }
  if (!fs.divisor || fs.divisor->isZero() || hugepages) return;
  const __int128 nanos = fs.divisor->nanoValue();
  constexpr __int128 kOne = 1'000'000'000;
  if (r.ends_with(".cpu")) {
    if (nanos != kOne && nanos != kOne / 1000) {
      add(invalid(child(path, "divisor"), r,
                  "only divisor's values 1m and 1 are supported with the cpu resource"));
    }
    return;
  }
  bool unit = false;
  for (__int128 d = 1, b = 1; d <= __int128{1'000'000'000'000'000'000}; d *= 1000, b *= 1024) {
    unit = unit || nanos == d * kOne || nanos == b * kOne;
  }
  if (!unit) {
    add(invalid(child(path, "divisor"), r,
                "only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei "
                "are supported with the " +
                    std::string(r.ends_with(".memory") ? "memory" : "local ephemeral storage") +
                    " resource"));
  }
}

void PodValidator::validateObjectFieldSelector(const api::ObjectFieldSelector& fs,
                                               const std::string& path) {
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

void PodValidator::validateVolumeMounts(const std::vector<api::VolumeMount>& mounts,
                                        const std::string& path) {
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

void PodValidator::validateResourceName(const std::string& name, const std::string& path) {
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

void PodValidator::validateQuantity(const std::string& name, const api::Quantity& q,
                                    const std::string& path) {
  if (q.nanoValue() < 0) add(invalid(path, q.toString(), kNegativeMsg));
  if (isExtendedResource(name) && q.nanoValue() % 1000000000 != 0) {
    add(invalid(path, q.toString(), "must be an integer"));
  }
}

void PodValidator::validateResources(const api::ResourceRequirements& res,
                                     const std::string& path) {
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

void PodValidator::validateSecurityContext(const api::SecurityContext& sc,
                                           const std::string& path) {
  validateId(child(path, "runAsUser"), sc.run_as_user);
  validateId(child(path, "runAsGroup"), sc.run_as_group);
  const bool no_escalation = sc.allow_privilege_escalation && !*sc.allow_privilege_escalation;
  if (no_escalation && sc.privileged && *sc.privileged) {
    add(invalidRendered(path, R"({"allowPrivilegeEscalation":false,"privileged":true})",
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

void PodValidator::validateImagesOnlyForPod(const std::vector<api::Container>& containers,
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

}  // namespace pod_validation_internal
}  // namespace nodeagent::config
