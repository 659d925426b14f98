#include "agent/runtime/cri/cri_convert.h"

#include "agent/runtime/cri/api.pb.h"

namespace nodeagent::runtime::cri {

namespace v1 = ::runtime::v1;

namespace {

// nodeagent's enums carry CRI's numbers; a number a newer runtime sends that nodeagent does not
// know becomes the "unknown" value rather than an enum value out of range.
NamespaceMode namespaceMode(int mode) {
  return mode >= 0 && mode <= 3 ? static_cast<NamespaceMode>(mode) : NamespaceMode::kContainer;
}

PodSandboxState sandboxState(int state) {
  return state == v1::SANDBOX_READY ? PodSandboxState::kReady : PodSandboxState::kNotReady;
}

ContainerState containerState(int state) {
  return state >= 0 && state <= 3 ? static_cast<ContainerState>(state) : ContainerState::kUnknown;
}

template <typename ProtoMap>
void putMap(const StringMap& in, ProtoMap* out) {
  for (const auto& [key, value] : in) (*out)[key] = value;
}

template <typename ProtoMap>
StringMap getMap(const ProtoMap& in) {
  return StringMap(in.begin(), in.end());
}

void toProto(const NamespaceOptions& in, v1::NamespaceOption* out) {
  out->set_network(static_cast<v1::NamespaceMode>(in.network));
  out->set_pid(static_cast<v1::NamespaceMode>(in.pid));
  out->set_ipc(static_cast<v1::NamespaceMode>(in.ipc));
  out->set_target_id(in.target_id);
}

NamespaceOptions fromProto(const v1::NamespaceOption& in) {
  return {namespaceMode(in.network()), namespaceMode(in.pid()), namespaceMode(in.ipc()),
          in.target_id()};
}

PodSandboxMetadata fromProto(const v1::PodSandboxMetadata& in) {
  return {in.name(), in.uid(), in.namespace_(), in.attempt()};
}

ContainerMetadata fromProto(const v1::ContainerMetadata& in) { return {in.name(), in.attempt()}; }

void toProto(const Mount& in, v1::Mount* out) {
  out->set_container_path(in.container_path);
  out->set_host_path(in.host_path);
  out->set_readonly(in.readonly);
}

void toProto(const LinuxContainerResources& in, v1::LinuxContainerResources* out) {
  out->set_cpu_period(in.cpu_period);
  out->set_cpu_quota(in.cpu_quota);
  out->set_cpu_shares(in.cpu_shares);
  out->set_memory_limit_in_bytes(in.memory_limit_in_bytes);
  out->set_oom_score_adj(in.oom_score_adj);
}

void toProto(const SecurityProfile& in, v1::SecurityProfile* out) {
  out->set_profile_type(static_cast<v1::SecurityProfile::ProfileType>(in.profile_type));
  out->set_localhost_ref(in.localhost_ref);
}

void toProto(const SELinuxOption& in, v1::SELinuxOption* out) {
  out->set_user(in.user);
  out->set_role(in.role);
  out->set_type(in.type);
  out->set_level(in.level);
}

void toProto(const ContainerSecurityContext& in, v1::LinuxContainerSecurityContext* out) {
  if (in.run_as_user) out->mutable_run_as_user()->set_value(*in.run_as_user);
  if (in.run_as_group) out->mutable_run_as_group()->set_value(*in.run_as_group);
  out->set_run_as_username(in.run_as_username);
  out->set_readonly_rootfs(in.readonly_rootfs);
  out->set_privileged(in.privileged);
  for (const auto& cap : in.add_capabilities)
    out->mutable_capabilities()->add_add_capabilities(cap);
  for (const auto& cap : in.drop_capabilities) {
    out->mutable_capabilities()->add_drop_capabilities(cap);
  }
  out->mutable_supplemental_groups()->Add(in.supplemental_groups.begin(),
                                          in.supplemental_groups.end());
  out->set_no_new_privs(in.no_new_privs);
  out->mutable_masked_paths()->Add(in.masked_paths.begin(), in.masked_paths.end());
  out->mutable_readonly_paths()->Add(in.readonly_paths.begin(), in.readonly_paths.end());
  toProto(in.namespace_options, out->mutable_namespace_options());
  toProto(in.seccomp, out->mutable_seccomp());
  if (in.apparmor) toProto(*in.apparmor, out->mutable_apparmor());
  out->set_apparmor_profile(in.apparmor_profile);
  if (in.selinux_options) toProto(*in.selinux_options, out->mutable_selinux_options());
}

void toProto(const DnsConfig& in, v1::DNSConfig* out) {
  out->mutable_servers()->Add(in.servers.begin(), in.servers.end());
  out->mutable_searches()->Add(in.searches.begin(), in.searches.end());
  out->mutable_options()->Add(in.options.begin(), in.options.end());
}

void toProto(const PortMapping& in, v1::PortMapping* out) {
  out->set_protocol(static_cast<v1::Protocol>(in.protocol));
  out->set_container_port(in.container_port);
  out->set_host_port(in.host_port);
  out->set_host_ip(in.host_ip);
}

}  // namespace

void toProto(const PodSandboxConfig& in, v1::PodSandboxConfig* out) {
  auto* metadata = out->mutable_metadata();
  metadata->set_name(in.metadata.name);
  metadata->set_uid(in.metadata.uid);
  metadata->set_namespace_(in.metadata.pod_namespace);
  metadata->set_attempt(in.metadata.attempt);
  out->set_hostname(in.hostname);
  out->set_log_directory(in.log_directory);
  if (in.dns_config) toProto(*in.dns_config, out->mutable_dns_config());
  for (const auto& mapping : in.port_mappings) toProto(mapping, out->add_port_mappings());
  putMap(in.labels, out->mutable_labels());
  putMap(in.annotations, out->mutable_annotations());
  auto* linux_config = out->mutable_linux();
  linux_config->set_cgroup_parent(in.cgroup_parent);
  putMap(in.sysctls, linux_config->mutable_sysctls());
  auto* security = linux_config->mutable_security_context();
  toProto(in.namespace_options, security->mutable_namespace_options());
  security->set_privileged(in.privileged);
  if (in.run_as_user) security->mutable_run_as_user()->set_value(*in.run_as_user);
  if (in.run_as_group) security->mutable_run_as_group()->set_value(*in.run_as_group);
  security->mutable_supplemental_groups()->Add(in.supplemental_groups.begin(),
                                               in.supplemental_groups.end());
  toProto(in.seccomp, security->mutable_seccomp());
  if (in.selinux_options) toProto(*in.selinux_options, security->mutable_selinux_options());
}

void toProto(const PodSandboxFilter& in, v1::PodSandboxFilter* out) {
  out->set_id(in.id);
  if (in.state) out->mutable_state()->set_state(static_cast<v1::PodSandboxState>(*in.state));
  putMap(in.label_selector, out->mutable_label_selector());
}

void toProto(const ContainerConfig& in, v1::ContainerConfig* out) {
  out->mutable_metadata()->set_name(in.metadata.name);
  out->mutable_metadata()->set_attempt(in.metadata.attempt);
  out->mutable_image()->set_image(in.image);
  out->mutable_command()->Add(in.command.begin(), in.command.end());
  out->mutable_args()->Add(in.args.begin(), in.args.end());
  out->set_working_dir(in.working_dir);
  for (const auto& env : in.envs) {
    auto* kv = out->add_envs();
    kv->set_key(env.key);
    kv->set_value(env.value);
  }
  for (const auto& mount : in.mounts) toProto(mount, out->add_mounts());
  putMap(in.labels, out->mutable_labels());
  putMap(in.annotations, out->mutable_annotations());
  out->set_log_path(in.log_path);
  out->set_stdin(in.stdin_open);
  out->set_stdin_once(in.stdin_once);
  out->set_tty(in.tty);
  toProto(in.resources, out->mutable_linux()->mutable_resources());
  toProto(in.security_context, out->mutable_linux()->mutable_security_context());
}

void toProto(const ContainerFilter& in, v1::ContainerFilter* out) {
  out->set_id(in.id);
  if (in.state) out->mutable_state()->set_state(static_cast<v1::ContainerState>(*in.state));
  out->set_pod_sandbox_id(in.pod_sandbox_id);
  putMap(in.label_selector, out->mutable_label_selector());
}

void toProto(const AuthConfig& in, v1::AuthConfig* out) {
  out->set_username(in.username);
  out->set_password(in.password);
  out->set_auth(in.auth);
  out->set_server_address(in.server_address);
  out->set_identity_token(in.identity_token);
  out->set_registry_token(in.registry_token);
}

PodSandbox fromProto(const v1::PodSandbox& in) {
  return {in.id(),         fromProto(in.metadata()), sandboxState(in.state()),
          in.created_at(), getMap(in.labels()),      getMap(in.annotations())};
}

PodSandboxStatus fromProto(const v1::PodSandboxStatus& in) {
  PodSandboxStatus out;
  out.id = in.id();
  out.metadata = fromProto(in.metadata());
  out.state = sandboxState(in.state());
  out.created_at = in.created_at();
  out.ip = in.network().ip();
  for (const auto& ip : in.network().additional_ips()) out.additional_ips.push_back(ip.ip());
  out.namespaces = fromProto(in.linux().namespaces().options());
  out.labels = getMap(in.labels());
  out.annotations = getMap(in.annotations());
  return out;
}

Container fromProto(const v1::Container& in) {
  return {in.id(),
          in.pod_sandbox_id(),
          fromProto(in.metadata()),
          in.image().image(),
          in.image_ref(),
          containerState(in.state()),
          in.created_at(),
          getMap(in.labels()),
          getMap(in.annotations())};
}

ContainerStatus fromProto(const v1::ContainerStatus& in) {
  ContainerStatus out;
  out.id = in.id();
  out.metadata = fromProto(in.metadata());
  out.state = containerState(in.state());
  out.created_at = in.created_at();
  out.started_at = in.started_at();
  out.finished_at = in.finished_at();
  out.exit_code = in.exit_code();
  out.image = in.image().image();
  out.image_ref = in.image_ref();
  out.reason = in.reason();
  out.message = in.message();
  out.labels = getMap(in.labels());
  out.annotations = getMap(in.annotations());
  for (const auto& m : in.mounts())
    out.mounts.push_back({m.container_path(), m.host_path(), m.readonly()});
  out.log_path = in.log_path();
  return out;
}

ImageInfo fromProto(const v1::Image& in) {
  ImageInfo info{in.id(),
                 {in.repo_tags().begin(), in.repo_tags().end()},
                 {in.repo_digests().begin(), in.repo_digests().end()},
                 in.size(),
                 std::nullopt,
                 in.username()};
  if (in.has_uid()) info.uid = in.uid().value();
  info.pinned = in.pinned();
  return info;
}

}  // namespace nodeagent::runtime::cri
