// AppArmor for pods, as kubelet: a container's profile is its securityContext.appArmorProfile,
// else the pod's annotation container.apparmor.security.beta.kubernetes.io/<container> (kubelet
// 1.18's only way: "runtime/default", "localhost/<name>" or "unconfined"), else the pod's
// securityContext.appArmorProfile (kubelet's GetProfile). A pod that asks for any profile other
// than unconfined needs a node that can enforce it: kubelet's admission refuses it otherwise
// (agent/apparmor_admission.h), so that a pod that asked to be confined never runs unconfined.
// A CRI runtime gets the profile with each container (CRI's apparmor and the deprecated
// apparmor_profile); the process runtime cannot confine a host process and is never asked to.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "agent/runtime/runtime.h"
#include "agent/runtime/spec_extras.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::runtime {

inline constexpr std::string_view kAppArmorAnnotationPrefix =
    "container.apparmor.security.beta.kubernetes.io/";

// The profile `container` asks for; nullopt when it asks for none (the runtime's default
// applies, as kubelet leaves it). InvalidArgument for a Localhost profile without a name or a
// type that is none of RuntimeDefault, Unconfined and Localhost (a pod the apiserver validated
// has neither). An annotation that is none of the three spellings asks for nothing, as kubelet.
base::StatusOr<std::optional<SecurityProfile>> appArmorProfileFor(const api::Pod& pod,
                                                                  const SpecExtras& extras,
                                                                  std::string_view container);

// The same, with the pod's JSON parsed only when it names an appArmorProfile.
base::StatusOr<std::optional<SecurityProfile>> appArmorProfileFor(const api::Pod& pod,
                                                                  std::string_view container);

// The pod's spec extras as the functions above need them: read only when the pod's JSON names an
// appArmorProfile (else none: annotations alone need no parse).
SpecExtras appArmorExtras(const api::Pod& pod);

// Whether any container of the pod asks for a profile other than unconfined (kubelet's
// isRequired), from its annotations and `extras` (appArmorExtras).
bool appArmorRequired(const api::Pod& pod, const SpecExtras& extras);

// kubelet's deprecated CRI spelling of a profile: "runtime/default", "unconfined",
// "localhost/<name>".
std::string appArmorProfileName(const SecurityProfile& profile);

// The kernel enforces AppArmor: /sys/kernel/security/apparmor exists and
// /sys/module/apparmor/parameters/enabled says Y (runc's IsEnabled, which kubelet asks; `sys` is
// /sys).
bool appArmorEnabled(const std::filesystem::path& sys = "/sys");

}  // namespace nodeagent::runtime
