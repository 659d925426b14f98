#include "cmd/nodeagent/node_cgroups.h"

#include "base/log.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("cm")

NodeCgroups notEnforced(std::string why) {
  log()->warn("Resource limits are not enforced: {}; pods run without cgroups of their own", why);
  return NodeCgroups{nullptr, std::move(why), {}};
}

}  // namespace

bool NodeCgroups::enforced(std::string* why) const {
  if (manager) return true;
  if (why != nullptr) *why = "resource limits are not enforced: " + not_enforced;
  return false;
}

std::string NodeCgroups::metricsText() const {
  return std::string(
             "# HELP nodeagent_cgroups_enforced Whether pods' resource limits are enforced "
             "through cgroups (1) or not (0).\n"
             "# TYPE nodeagent_cgroups_enforced gauge\n"
             "nodeagent_cgroups_enforced ") +
         (manager ? "1" : "0") + "\n";
}

NodeCgroups startNodeCgroups(const DaemonConfig& config) {
  const auto& f = config.flags;
  if (f.runtime == "fake") return notEnforced("the fake runtime runs no processes");
  auto mounts = cm::detectCgroupMounts();
  if (!mounts.ok()) return notEnforced(mounts.status().message());
  log()->info("Using cgroup {} cgroup_root={} cgroups_per_qos={} driver={}",
              cm::cgroupVersionName(mounts->version), f.cgroup_root, f.cgroups_per_qos,
              f.cgroup_driver);
  cm::ContainerManagerOptions options;
  options.cgroup_root = f.cgroup_root;
  options.cgroups_per_qos = f.cgroups_per_qos;
  options.pod_pids_limit = f.pod_max_pids;
  if (f.enforce_node_allocatable == "pods") {
    options.node_allocatable = config.kubepods_limits;
  } else {
    // Not enforced, but kubepods still gets the node's CPU as shares, as kubelet does: the
    // default shares would starve pods next to the node's other services.
    options.node_allocatable.cpu_shares =
        static_cast<uint64_t>(cm::milliCpuToShares(config.capacity.cpu_milli));
  }
  auto manager = cm::ContainerManager::start(cm::CgroupManager(std::move(*mounts)), options);
  if (!manager.ok()) {
    if (manager.status().code() == base::StatusCode::kPermissionDenied) {
      return notEnforced(manager.status().message());
    }
    return NodeCgroups{nullptr, manager.status().message(), manager.status()};
  }
  return NodeCgroups{std::shared_ptr<cm::ContainerManager>(std::move(*manager)), "", {}};
}

}  // namespace nodeagent::cmd
