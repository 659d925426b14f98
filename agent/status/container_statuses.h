// The API container statuses of a pod from the runtime's view (kubelet's
// convertToAPIContainerStatuses), plus the probe-manager part of readiness: without readiness
// probes a running container is ready and an init container that exited 0 is ready.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/runtime/runtime.h"
#include "api/pod.h"

namespace nodeagent::agent {

// The last start failure of a container (kubelet's reasonCache entry): CrashLoopBackOff,
// CreateContainerConfigError, RunContainerError, with a message.
struct StartFailure {
  std::string reason;
  std::string message;
};
using StartFailures = std::map<std::string, StartFailure>;  // by container name

std::vector<api::ContainerStatus> convertToAPIContainerStatuses(
    const api::Pod& pod, const runtime::PodStatus& pod_status,
    const std::vector<api::ContainerStatus>& previous,
    const std::vector<api::Container>& containers, bool has_init_containers, bool is_init_container,
    const StartFailures& failures);

api::Timestamp toApiTime(base::SystemTime t);

}  // namespace nodeagent::agent
