// kubelet's sysctl admission (pkg/kubelet/sysctl): a pod's spec.securityContext.sysctls must each
// be on the node's allowlist, which is kubelet's safe sysctls (namespaced, and isolated from the
// other pods) plus --allowed-unsafe-sysctls (names or prefixes ending in '*', each known to be
// namespaced: kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*). A net.* sysctl is
// refused for a hostNetwork pod and an IPC one for a hostIPC pod: setting it would change the
// node's. A refused pod fails with reason SysctlForbidden and kubelet's message.
//
// The process runtime runs every pod in the node's namespaces: there every sysctl is refused, as
// for a pod with hostNetwork and hostIPC.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agent/cm/resources.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

inline constexpr std::string_view kSysctlForbiddenReason = "SysctlForbidden";

// The kernel namespace a sysctl is in: "ipc", "net", or "" when it is not known to be namespaced
// (kubelet's NamespacedBy).
std::string_view sysctlNamespace(std::string_view name);

// kubelet's safe sysctls the running kernel has per namespace (`kernel_release` as uname -r
// gives it; one that cannot be read keeps only those without a minimum version).
std::vector<std::string> safeSysctls(std::string_view kernel_release);
// uname's release ("6.1.0-18-amd64"); "" when it fails.
std::string runningKernelRelease();

class SysctlAllowlist {
 public:
  // `patterns`: safeSysctls() and --allowed-unsafe-sysctls. InvalidArgument names a malformed
  // pattern or one not known to be namespaced (kubelet refuses to start).
  static base::StatusOr<SysctlAllowlist> create(const std::vector<std::string>& patterns);

  // kubelet's validateSysctl: "" when `name` may be set, else why not ("\"x\" not allowlisted",
  // "\"net.x\" not allowed with host net enabled").
  std::string check(std::string_view name, bool host_network, bool host_ipc) const;

  // kubelet's Admit. `node_namespaces`: every pod shares the node's namespaces (the process
  // runtime).
  cm::AdmitResult admit(const api::Pod& pod, bool node_namespaces) const;

 private:
  std::map<std::string, std::string_view, std::less<>> names_;     // name -> namespace
  std::map<std::string, std::string_view, std::less<>> prefixes_;  // prefix -> namespace
};

}  // namespace nodeagent::agent
