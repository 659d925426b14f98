#include "agent/pod_actions.h"

#include <algorithm>

namespace nodeagent::agent {

using runtime::ContainerState;

bool isInitContainerFailed(const runtime::ContainerStatus& status) {
  if (status.state == ContainerState::kExited && status.exit_code != 0) return true;
  return status.state == ContainerState::kUnknown;
}

NextInitContainer findNextInitContainerToRun(const api::Pod& pod,
                                             const runtime::PodStatus& status) {
  const auto& inits = pod.spec->init_containers;
  if (inits.empty()) return {nullptr, std::nullopt, true};
  // A running app container means every init container has run.
  for (const auto& c : pod.spec->containers) {
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

SandboxChange podSandboxChanged(const api::Pod& pod, const runtime::PodStatus& status,
                                bool sandbox_network) {
  const auto& sandboxes = status.sandbox_statuses;  // newest first
  if (sandboxes.empty()) return {true, false, 0, "", "no sandbox"};
  const auto& newest = sandboxes.front();
  const auto ready = std::count_if(sandboxes.begin(), sandboxes.end(), [](const auto& s) {
    return s.state == runtime::SandboxState::kReady;
  });
  auto replace = [&](std::string reason) {
    return SandboxChange{true, true, newest.attempt + 1, "", std::move(reason)};
  };
  if (ready > 1) return replace("more than one sandbox is ready");
  if (newest.state != runtime::SandboxState::kReady) return replace("no ready sandbox");
  if (sandbox_network) {
    // (The pod's IPs are the newest ready sandbox's.)
    if (pod.spec->host_network && !status.ips.empty()) {
      return replace("the sandbox's network namespace changed");
    }
    if (!pod.spec->host_network && status.ips.empty()) {
      return replace("the sandbox has no IP address");
    }
  }
  return {false, false, newest.attempt, newest.id, ""};
}

namespace {

bool containerSucceeded(const api::Container& c, const runtime::PodStatus& status) {
  const auto* cs = status.findContainerStatusByName(c.name);
  return cs != nullptr && cs->state == ContainerState::kExited && cs->exit_code == 0;
}

// kubelet's computePodActions for a replaced sandbox: everything is killed, then started again
// in the new sandbox, init containers first, the containers that succeeded under OnFailure
// excepted; a Never pod that ran gets no new sandbox.
PodActions replaceSandboxActions(const api::Pod& pod, const runtime::PodStatus& status,
                                 const SandboxChange& sandbox) {
  PodActions actions;
  actions.kill_pod = true;
  actions.replace_sandbox = true;
  actions.replace_reason = sandbox.reason;
  actions.create_sandbox = true;
  actions.sandbox_attempt = sandbox.attempt;
  if (pod.spec->restart_policy == "Never" && !status.container_statuses.empty()) {
    actions.create_sandbox = false;
    return actions;
  }
  if (!pod.spec->init_containers.empty()) {
    actions.next_init_container = 0;
    return actions;
  }
  for (size_t i = 0; i < pod.spec->containers.size(); ++i) {
    const auto& c = pod.spec->containers[i];
    if (pod.spec->restart_policy == "OnFailure" && containerSucceeded(c, status)) continue;
    actions.containers_to_start.push_back(i);
  }
  // Nothing to run in it: no sandbox either.
  if (actions.containers_to_start.empty()) actions.create_sandbox = false;
  return actions;
}

// The containers' actions in the pod's sandbox.
PodActions containerActions(const api::Pod& pod, const runtime::PodStatus& status,
                            const ProbeFailures* probes) {
  PodActions actions;
  const bool restart_on_failure = pod.spec->restart_policy != "Never";

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
  for (size_t i = 0; i < pod.spec->containers.size(); ++i) {
    const auto& container = pod.spec->containers[i];
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

}  // namespace

PodActions computePodActions(const api::Pod& pod, const runtime::PodStatus& status,
                             const ProbeFailures* probes, bool sandbox_network) {
  const auto sandbox = podSandboxChanged(pod, status, sandbox_network);
  if (sandbox.replace) return replaceSandboxActions(pod, status, sandbox);
  PodActions actions = containerActions(pod, status, probes);
  actions.create_sandbox = sandbox.create;
  actions.sandbox_attempt = sandbox.attempt;
  actions.sandbox_id = sandbox.ready_id;
  return actions;
}

}  // namespace nodeagent::agent
