#include "agent/apparmor_admission.h"

#include "agent/runtime/apparmor.h"

namespace nodeagent::agent {

cm::AdmitResult admitAppArmor(const api::Pod& pod, bool apparmor_enabled,
                              std::string_view runtime) {
  // kubelet: a pod already running or done is not checked again.
  if (pod.status->phase != "Pending" && !pod.status->phase.empty()) return {};
  const auto extras = runtime::appArmorExtras(pod);
  if (!runtime::appArmorRequired(pod, extras)) return {};
  auto refuse = [](const std::string& why) {
    return cm::AdmitResult{false, std::string(kAppArmorReason), "Cannot enforce AppArmor: " + why};
  };
  if (!apparmor_enabled) return refuse("AppArmor is not enabled on the host");
  if (runtime != "cri") {
    return refuse("the " + std::string(runtime) + " runtime cannot confine containers");
  }
  for (const auto* list : {&pod.spec->init_containers, &pod.spec->containers}) {
    for (const auto& c : *list) {
      auto profile = runtime::appArmorProfileFor(pod, extras, c.name);
      if (!profile.ok()) return refuse(profile.status().message());
    }
  }
  return {};
}

}  // namespace nodeagent::agent
