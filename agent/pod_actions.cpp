#include "agent/pod_actions.h"

namespace nodeagent::agent {

using runtime::ContainerState;

bool isInitContainerFailed(const runtime::ContainerStatus& status) {
  if (status.state == ContainerState::kExited && status.exit_code != 0) return true;
  return status.state == ContainerState::kUnknown;
}

NextInitContainer findNextInitContainerToRun(const api::Pod& pod,
                                             const runtime::PodStatus& status) {
  const auto& inits = pod.spec.init_containers;
  if (inits.empty()) return {nullptr, std::nullopt, true};
  // A running app container means every init container has run.
  for (const auto& c : pod.spec.containers) {
    const auto* cs = status.findContainerStatusByName(c.name);
    if (cs != nullptr && cs->state == ContainerState::kRunning)
      return {nullptr, std::nullopt, true};
  }
  for (size_t i = inits.size(); i-- > 0;) {
    const auto* cs = status.findContainerStatusByName(inits[i].name);
    if (cs != nullptr && isInitContainerFailed(*cs)) return {cs, i, false};
  }
  for (size_t i = inits.size(); i-- > 0;) {
    const auto* cs = status.findContainerStatusByName(inits[i].name);
    if (cs == nullptr) continue;
    if (cs->state == ContainerState::kRunning) return {nullptr, std::nullopt, false};
    if (cs->state == ContainerState::kExited) {
      if (i + 1 == inits.size()) return {nullptr, std::nullopt, true};
      return {nullptr, i + 1, false};
    }
  }
  return {nullptr, size_t{0}, false};
}

PodActions computePodActions(const api::Pod& pod, const runtime::PodStatus& status,
                             const ProbeFailures* probes) {
  PodActions actions;
  const bool restart_on_failure = pod.spec.restart_policy != "Never";

  auto init = findNextInitContainerToRun(pod, status);
  if (!init.done) {
    if (init.next) {
      const bool failed = init.last_failed != nullptr;
      if (failed && !restart_on_failure) {
        actions.kill_pod = true;
      } else {
        actions.next_init_container = init.next;
      }
    }
    return actions;
  }

  size_t keep = 0;
  for (size_t i = 0; i < pod.spec.containers.size(); ++i) {
    const auto& container = pod.spec.containers[i];
    const auto* cs = status.findContainerStatusByName(container.name);
    if (cs == nullptr || cs->state != ContainerState::kRunning) {
      if (runtime::shouldContainerBeRestarted(container, pod, status)) {
        actions.containers_to_start.push_back(i);
      }
      continue;
    }
    if (cs->hash != container.hash) {
      // The spec changed: kubelet restarts the container whatever the restart policy.
      actions.containers_to_start.push_back(i);
      actions.containers_to_kill.push_back(
          {cs->id, container.name,
           "Container " + container.name + " definition changed, will be restarted", std::nullopt});
      continue;
    }
    auto failed = probes != nullptr ? probes->failedProbe(pod.metadata.uid, container.name, cs->id)
                                    : std::string_view();
    if (failed.empty()) {
      ++keep;
      continue;
    }
    std::string message =
        "Container " + container.name + " failed " + std::string(failed) + " probe";
    if (restart_on_failure) {
      message += ", will be restarted";
      actions.containers_to_start.push_back(i);
    }
    const auto& probe = failed == "startup" ? container.startup_probe : container.liveness_probe;
    actions.containers_to_kill.push_back(
        {cs->id, container.name, std::move(message),
         probe ? probe->termination_grace_period_seconds : std::nullopt});
  }
  if (keep == 0 && actions.containers_to_start.empty()) actions.kill_pod = true;
  return actions;
}

}  // namespace nodeagent::agent
