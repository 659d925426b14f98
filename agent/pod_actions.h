// What syncPod must do to a pod's containers (kubelet's kuberuntime computePodActions and its
// helpers), computed from the pod spec and the runtime's view. Pure: no I/O, no clocks.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/prober/probe_failures.h"
#include "agent/runtime/runtime.h"
#include "api/pod.h"

namespace nodeagent::agent {

struct ContainerToKill {
  runtime::ContainerId id;
  std::string name;
  std::string message;  // why, e.g. "Container web definition changed, will be restarted"
  // The failed liveness or startup probe's terminationGracePeriodSeconds, when it sets one.
  std::optional<int64_t> probe_grace;
};

struct PodActions {
  // Stop every container (the pod cannot run any more: an init container failed under
  // restartPolicy Never, or nothing is left to keep or start; or its sandbox is replaced).
  bool kill_pod = false;
  // kubelet's CreateSandbox and Attempt: the starts need a new sandbox, made as attempt
  // `sandbox_attempt` (the pod has none yet, or its sandbox is replaced).
  bool create_sandbox = false;
  uint32_t sandbox_attempt = 0;
  // The pod's sandboxes no longer fit it (podSandboxChanged): every container is killed and every
  // sandbox stopped (kill_pod is set), then the pod starts over in a new sandbox, init containers
  // first, unless its restart policy says it is done.
  bool replace_sandbox = false;
  std::string replace_reason;  // why, for logs
  // The ready sandbox the starts go to when no sandbox is made.
  std::string sandbox_id;
  // The init container to start next (index into spec.init_containers); app containers wait
  // while init containers are pending.
  std::optional<size_t> next_init_container;
  // Indexes into spec.containers of the containers to (re)start.
  std::vector<size_t> containers_to_start;
  // Running containers to stop before the starts (spec changed).
  std::vector<ContainerToKill> containers_to_kill;
};

// kuberuntime findNextInitContainerToRun: (the status of the last failed init container or null,
// the index of the next init container to run, whether all init containers are done).
struct NextInitContainer {
  const runtime::ContainerStatus* last_failed = nullptr;
  std::optional<size_t> next;
  bool done = false;
};
NextInitContainer findNextInitContainerToRun(const api::Pod& pod, const runtime::PodStatus& status);

bool isInitContainerFailed(const runtime::ContainerStatus& status);

// kubelet's podSandboxChanged: whether the pod needs a new sandbox, as which attempt, and why.
// `sandbox_network` says the runtime's sandboxes have a network of their own unless hostNetwork
// (a CRI runtime), so that a sandbox's IP tells its network namespace: a hostNetwork pod's sandbox
// has none, any other has one.
struct SandboxChange {
  bool create = false;   // a sandbox must be made
  bool replace = false;  // ... in place of the pod's sandboxes (the pod is killed first)
  uint32_t attempt = 0;
  std::string ready_id;  // the sandbox to use when none is made
  std::string reason;    // why one is made, for logs
};
SandboxChange podSandboxChanged(const api::Pod& pod, const runtime::PodStatus& status,
                                bool sandbox_network);

// With `probes`, a running container that failed its liveness or startup probe is killed
// ("Container X failed liveness probe, will be restarted") and started again unless the
// restart policy is Never. `sandbox_network` as podSandboxChanged's.
PodActions computePodActions(const api::Pod& pod, const runtime::PodStatus& status,
                             const ProbeFailures* probes = nullptr, bool sandbox_network = false);

}  // namespace nodeagent::agent
