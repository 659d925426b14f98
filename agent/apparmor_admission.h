// kubelet's AppArmor admit handler (pkg/kubelet/lifecycle, pkg/security/apparmor's Validate): a
// Pending pod that asks for an AppArmor profile other than unconfined (runtime/apparmor.h) is
// refused with reason "AppArmor" and message "Cannot enforce AppArmor: ..." when the node cannot
// enforce it: the kernel's AppArmor is off, the runtime cannot confine a container (the process
// runtime runs host processes), or a profile is malformed. A pod that asked to be confined never
// runs unconfined.
#pragma once

#include <string_view>

#include "agent/cm/resources.h"
#include "api/pod.h"

namespace nodeagent::agent {

inline constexpr std::string_view kAppArmorReason = "AppArmor";

// `apparmor_enabled`: runtime::appArmorEnabled() at the agent's start; `runtime` the runtime's
// type, of which only "cri" confines containers.
cm::AdmitResult admitAppArmor(const api::Pod& pod, bool apparmor_enabled, std::string_view runtime);

}  // namespace nodeagent::agent
