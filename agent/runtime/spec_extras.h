// Pod spec fields the typed pod (api/pod.h) does not model, read from the pod's JSON when they
// are needed (at a sandbox's or container's start, at admission): its hostname and
// shareProcessNamespace, the pod's sysctls, and the pod's and each container's seccompProfile,
// appArmorProfile and seLinuxOptions.
// And kubelet's choice of a container's seccomp profile from them (getSeccompProfile).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/runtime.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::runtime {

// core/v1 Sysctl.
struct Sysctl {
  std::string name;
  std::string value;
  bool operator==(const Sysctl&) const = default;
};

// core/v1 SeccompProfile and AppArmorProfile: type "RuntimeDefault", "Unconfined" or "Localhost"
// (with the profile: a seccomp profile's path below the kubelet's seccomp directory, an AppArmor
// profile's name).
struct SecurityProfileField {
  std::string type;
  std::string localhost_profile;
  bool operator==(const SecurityProfileField&) const = default;
};

struct SpecExtras {
  std::string hostname;                              // spec.hostname
  std::string subdomain;                             // spec.subdomain
  bool share_process_namespace = false;              // spec.shareProcessNamespace
  std::vector<Sysctl> sysctls;                       // spec.securityContext.sysctls
  std::optional<SecurityProfileField> pod_seccomp;   // spec.securityContext.seccompProfile
  std::optional<SecurityProfileField> pod_apparmor;  // spec.securityContext.appArmorProfile
  // Each init and app container's securityContext.seccompProfile and appArmorProfile, by
  // container name.
  std::map<std::string, SecurityProfileField, std::less<>> container_seccomp;
  std::map<std::string, SecurityProfileField, std::less<>> container_apparmor;
  std::optional<SELinuxOption> pod_selinux;  // spec.securityContext.seLinuxOptions
  std::map<std::string, SELinuxOption, std::less<>> container_selinux;
};

// Reads the fields above from the pod's JSON (what is missing or of another type stays empty).
SpecExtras specExtras(const api::Pod& pod);
// The same, parsed only when the pod's JSON names the field `key` ("seccompProfile"); none
// otherwise, so that hot paths cost nothing for pods without it.
SpecExtras specExtrasNaming(const api::Pod& pod, std::string_view key);

// kubelet's GeneratePodHostNameAndDomain hostname (its names are checked by the caller):
// spec.hostname or else the pod's name, cut to 63 characters, and then without a trailing '-'
// or '.'.
std::string podHostname(const SpecExtras& extras, std::string_view pod_name);

// spec.securityContext.sysctls alone; a pod without the word in its JSON is not parsed.
std::vector<Sysctl> podSysctls(const api::Pod& pod);

// A sysctl name with '.' separators (kubelet's ConvertSysctlVariableToDotsSeparator): when its
// first separator is '/', every '/' becomes '.' and every '.' '/' ("net/ipv4/conf/eth0.100/x" is
// "net.ipv4.conf.eth0/100.x").
std::string sysctlDotted(std::string_view name);

// kubelet's getSeccompProfile: the container's seccompProfile, else the pod's, else
// RuntimeDefault with --seccomp-default and Unconfined without. `container` "" is the sandbox
// (the pod's profile only). A Localhost profile is `profile_root`/localhostProfile (kubelet's
// <root-dir>/seccomp); InvalidArgument when it names no file, as kubelet.
base::StatusOr<SecurityProfile> seccompProfileFor(const SpecExtras& extras,
                                                  std::string_view container, bool seccomp_default,
                                                  const std::filesystem::path& profile_root);
// The same from the pod, whose JSON is parsed only when it names a seccompProfile.
base::StatusOr<SecurityProfile> seccompProfileFor(const api::Pod& pod, std::string_view container,
                                                  bool seccomp_default,
                                                  const std::filesystem::path& profile_root);

// kubelet's DetermineEffectiveSecurityContext for seLinuxOptions: the container's (whole, not
// merged with the pod's), else the pod's; `container` "" is the sandbox (the pod's only). None
// when neither sets them.
std::optional<SELinuxOption> seLinuxOptionsFor(const SpecExtras& extras,
                                               std::string_view container);
// The same from the pod, whose JSON is parsed only when it names seLinuxOptions.
std::optional<SELinuxOption> seLinuxOptionsFor(const api::Pod& pod, std::string_view container);

// Whether the node enforces or audits SELinux (selinuxfs mounted under `sys`, as go-selinux
// asks). Where it does not, a runtime ignores seLinuxOptions (containerd does: labels mean
// nothing without it).
bool seLinuxEnabled(const std::filesystem::path& sys = "/sys");

}  // namespace nodeagent::runtime
