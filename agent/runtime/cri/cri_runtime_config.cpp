// The CRI configs of a pod's sandbox and containers (kubelet's kuberuntime_sandbox.go and
// kuberuntime_container.go generate*Config), for CriRuntime.
#include "agent/runtime/cri/cri_runtime_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <system_error>
#include <utility>

#include "agent/runtime/apparmor.h"
#include "agent/runtime/cri/cri_runtime.h"
#include "agent/runtime/cri_log.h"
#include "agent/runtime/security_context.h"
#include "agent/runtime/spec_extras.h"

#include <nlohmann/json.hpp>

namespace nodeagent::runtime {
namespace {

// kubelet's namespacesForPod: the node's network, PID and IPC namespaces for hostNetwork,
// hostPID and hostIPC; else the pod's network and IPC, and a PID namespace per container unless
// the pod shares one.
cri::NamespaceOptions namespacesForPod(bool host_network, bool host_pid, bool host_ipc,
                                       bool share_process_namespace) {
  cri::NamespaceOptions options;
  options.network = host_network ? cri::NamespaceMode::kNode : cri::NamespaceMode::kPod;
  options.ipc = host_ipc ? cri::NamespaceMode::kNode : cri::NamespaceMode::kPod;
  options.pid = host_pid                  ? cri::NamespaceMode::kNode
                : share_process_namespace ? cri::NamespaceMode::kPod
                                          : cri::NamespaceMode::kContainer;
  return options;
}

cri::NamespaceOptions namespacesForPod(const api::Pod& pod) {
  return namespacesForPod(pod.spec->host_network, pod.spec->host_pid, pod.spec->host_ipc,
                          specExtras(pod).share_process_namespace);
}

cri::Protocol criProtocol(const std::string& protocol) {
  if (protocol == "UDP") return cri::Protocol::kUdp;
  if (protocol == "SCTP") return cri::Protocol::kSctp;
  return cri::Protocol::kTcp;
}

std::vector<std::string> expandAll(const std::vector<std::string>& words,
                                   const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> out;
  out.reserve(words.size());
  for (const auto& word : words) out.push_back(expandVars(word, env));
  return out;
}

// kubelet's defaultMaskedPaths and defaultReadonlyPaths (the Default proc mount).
const std::vector<std::string>& defaultMaskedPaths() {
  static const std::vector<std::string> paths = {
      "/proc/acpi",          "/proc/kcore",      "/proc/keys",
      "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
      "/proc/sched_debug",   "/proc/scsi",       "/sys/firmware"};
  return paths;
}
const std::vector<std::string>& defaultReadonlyPaths() {
  static const std::vector<std::string> paths = {
      "/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"};
  return paths;
}

cri::SecurityProfile criSecurityProfile(const SecurityProfile& profile) {
  return {static_cast<cri::SecurityProfile::Type>(profile.type), profile.localhost_ref};
}

cri::SELinuxOption criSELinuxOption(const SELinuxOption& options) {
  return {options.user, options.role, options.type, options.level};
}

// kubelet's convertToRuntimeSecurityContext: the effective context as CRI's, with the image's
// user name when no runAsUser is set and the image names its user.
cri::ContainerSecurityContext criSecurityContext(const EffectiveSecurityContext& sc,
                                                 const DefaultUser& image_user,
                                                 const cri::NamespaceOptions& namespaces) {
  cri::ContainerSecurityContext out;
  out.run_as_user = sc.run_as_user;
  if (!sc.run_as_user && !image_user.uid) out.run_as_username = image_user.name;
  out.run_as_group = sc.run_as_group;
  out.privileged = sc.privileged;
  out.readonly_rootfs = sc.read_only_root_filesystem;
  out.add_capabilities = sc.cap_add;
  out.drop_capabilities = sc.cap_drop;
  out.supplemental_groups = sc.supplemental_groups;
  if (sc.fs_group) out.supplemental_groups.push_back(*sc.fs_group);
  out.no_new_privs = !sc.allow_privilege_escalation;
  if (!sc.privileged) {
    out.masked_paths = defaultMaskedPaths();
    out.readonly_paths = defaultReadonlyPaths();
  }
  out.namespace_options = namespaces;  // kubelet gives each container its pod's
  return out;
}

}  // namespace

cri::PodSandboxConfig toCriSandbox(const PodSandboxConfig& config) {
  cri::PodSandboxConfig out;
  out.metadata = {config.name, config.uid, config.namespace_, config.attempt};
  out.namespace_options = namespacesForPod(config.host_network, config.host_pid, config.host_ipc,
                                           config.share_process_namespace);
  // kubelet sets a hostname only for a pod with a UTS namespace of its own, which a host-network
  // pod does not have (runc refuses to set one).
  if (!config.host_network) out.hostname = config.hostname;
  out.log_directory = config.log_directory.string();
  if (config.dns_config) {
    out.dns_config = cri::DnsConfig{config.dns_config->servers, config.dns_config->searches,
                                    config.dns_config->options};
  }
  for (const auto& p : config.port_mappings) {
    out.port_mappings.push_back(
        {criProtocol(p.protocol), p.container_port, p.host_port, p.host_ip});
  }
  out.labels = cri::StringMap(config.labels.begin(), config.labels.end());
  out.labels[kPodNameLabel] = config.name;
  out.labels[kPodNamespaceLabel] = config.namespace_;
  out.labels[kPodUidLabel] = config.uid;
  out.annotations = cri::StringMap(config.annotations.begin(), config.annotations.end());
  out.cgroup_parent = config.cgroup_parent;
  out.sysctls = cri::StringMap(config.sysctls.begin(), config.sysctls.end());
  out.privileged = config.privileged;
  out.run_as_user = config.run_as_user;
  out.run_as_group = config.run_as_group;
  out.supplemental_groups = config.supplemental_groups;
  out.seccomp = criSecurityProfile(config.seccomp);
  if (config.selinux_options) out.selinux_options = criSELinuxOption(*config.selinux_options);
  return out;
}

base::StatusOr<std::optional<cri::Mount>> terminationMessageMount(
    const api::Container& container, int attempt, const std::filesystem::path& pod_dir) {
  if (container.termination_message_path.empty() || pod_dir.empty()) {
    return std::optional<cri::Mount>();
  }
  const auto dir = pod_dir / "containers" / container.name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::random_device random;
  const auto file = dir / (std::to_string(attempt) + "-" + std::to_string(random()));
  const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0 || ::fchmod(fd, 0666) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return base::unknownError("creating the termination message file " + file.string() + ": " +
                              why);
  }
  ::close(fd);
  return std::optional<cri::Mount>(
      cri::Mount{container.termination_message_path, file.string(), false});
}

DefaultUser imageUser(const std::optional<ImageInfo>& image) {
  DefaultUser user{int64_t{0}, "", "the image's user is root"};
  if (image && image->uid) {
    user.uid = image->uid;
  } else if (image && !image->username.empty()) {
    user.uid.reset();
    user.name = image->username;
  }
  return user;
}

base::StatusOr<cri::ContainerConfig> containerConfig(const api::Pod& pod,
                                                     const api::Container& container, int attempt,
                                                     const StartContainerOptions& options,
                                                     const std::string& image_ref,
                                                     const DefaultUser& image_user) {
  const auto sc = determineEffectiveSecurityContext(pod, container);
  RETURN_IF_ERROR(verifyRunAsNonRoot(pod, container, sc, image_user));
  if (options.refuse_root) RETURN_IF_ERROR(checkNonRootPolicy(pod, container, sc, image_user));
  auto env = buildContainerEnv(pod, container, options);
  if (!env.ok()) return env.status();
  cri::ContainerConfig config;
  config.metadata = {container.name, static_cast<uint32_t>(attempt)};
  config.image = image_ref;
  config.command = expandAll(container.command, *env);
  config.args = expandAll(container.args, *env);
  config.working_dir = container.working_dir;
  for (const auto& [name, value] : *env) config.envs.push_back({name, value});
  for (const auto& m : options.mounts) {
    config.mounts.push_back({m.container_path, m.host_path.string(), m.read_only});
  }
  config.labels = {{kPodNameLabel, pod.metadata.name},
                   {kPodNamespaceLabel, pod.metadata.namespace_},
                   {kPodUidLabel, pod.metadata.uid},
                   {kContainerNameLabel, container.name}};
  config.annotations = {
      {kContainerHashAnnotation, hashToHex(container.hash)},
      {kContainerRestartCountAnnotation, std::to_string(attempt)},
      {kPodTerminationGracePeriodAnnotation, std::to_string(podGracePeriodSeconds(pod))}};
  if (!container.termination_message_path.empty()) {
    config.annotations[kTerminationMessagePathAnnotation] = container.termination_message_path;
    config.annotations[kTerminationMessagePolicyAnnotation] = container.termination_message_policy;
  }
  if (auto pre_stop = preStopCommand(container); !pre_stop.empty()) {
    nlohmann::json handler = {{"exec", {{"command", pre_stop}}}};
    config.annotations[kPreStopHandlerAnnotation] = handler.dump();
  }
  config.log_path = buildContainerLogPath("", container.name, attempt).string();
  config.stdin_open = container.stdin;
  config.stdin_once = container.stdin_once;
  config.tty = container.tty;
  const auto& r = options.resources;
  config.resources = {r.cpu_period, r.cpu_quota, r.cpu_shares, r.memory_limit_in_bytes,
                      r.oom_score_adj};
  config.security_context = criSecurityContext(sc, image_user, namespacesForPod(pod));
  config.security_context.seccomp = criSecurityProfile(options.seccomp);
  auto apparmor = appArmorProfileFor(pod, container.name);
  if (!apparmor.ok()) return apparmor.status();
  if (*apparmor) {
    config.security_context.apparmor = criSecurityProfile(**apparmor);
    config.security_context.apparmor_profile = appArmorProfileName(**apparmor);
  }
  if (auto selinux = seLinuxOptionsFor(pod, container.name)) {
    config.security_context.selinux_options = criSELinuxOption(*selinux);
  }
  return config;
}

}  // namespace nodeagent::runtime
