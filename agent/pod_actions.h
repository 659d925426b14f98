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
  // restartPolicy Never, or nothing is left to keep or start).
  bool kill_pod = false;
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

// With `probes`, a running container that failed its liveness or startup probe is killed
// ("Container X failed liveness probe, will be restarted") and started again unless the
// restart policy is Never.
PodActions computePodActions(const api::Pod& pod, const runtime::PodStatus& status,
                             const ProbeFailures* probes = nullptr);

}  // namespace nodeagent::agent
