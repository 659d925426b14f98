// What the pod's sync asks the prober (kubelet's liveness and startup results managers): a narrow
// interface so that computing a pod's actions needs nothing else of the prober.
#pragma once

#include <string>
#include <string_view>

#include "agent/runtime/runtime.h"

namespace nodeagent::agent {

class ProbeFailures {
 public:
  virtual ~ProbeFailures() = default;
  // "liveness" or "startup" when the container `id` failed that probe, else "".
  virtual std::string_view failedProbe(const std::string& pod_uid,
                                       const std::string& container_name,
                                       const runtime::ContainerId& id) const = 0;
};

}  // namespace nodeagent::agent
