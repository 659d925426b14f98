// The node's cgroups as the daemon starts them: which cgroup version the node runs, the kubepods
// hierarchy with its node allocatable limits, or why limits are not enforced (an unprivileged
// agent, a read-only cgroupfs, a fake runtime). An agent that cannot write cgroups still runs
// every pod; it says so once in the log, in /healthz?verbose (informational) and in the metric
// nodeagent_cgroups_enforced.
#pragma once

#include <memory>
#include <string>

#include "agent/cm/container_manager.h"
#include "cmd/nodeagent/daemon_config.h"

namespace nodeagent::cmd {

struct NodeCgroups {
  std::shared_ptr<cm::ContainerManager> manager;  // null: limits are not enforced
  std::string not_enforced;                       // why, when manager is null
  // Cgroups can be written but kubepods cannot be set up as asked (e.g. its memory limit below
  // what its pods use after the reservations grew): the agent does not start, as kubelet.
  base::Status error;

  // The manager's cgroup driver, for the runtime's container cgroups (null when not enforced).
  std::shared_ptr<cm::CgroupManager> cgroups() const {
    return manager ? std::shared_ptr<cm::CgroupManager>(manager, &manager->cgroups()) : nullptr;
  }
  // The /healthz check and the metric.
  bool enforced(std::string* why) const;
  std::string metricsText() const;
};

// Detects the hierarchies (logging the version) and makes kubepods, burstable and besteffort.
// Blocking (cgroupfs IO). No hierarchy or no right to write it leaves limits unenforced; any
// other problem is `error`.
NodeCgroups startNodeCgroups(const DaemonConfig& config);

}  // namespace nodeagent::cmd
