#include "agent/runtime/process_support.h"

#include "agent/runtime/security_context.h"
#include "agent/runtime/spec_extras.h"

namespace nodeagent::runtime {
namespace {

constexpr const char* kSeccompRefusal =
    ".seccompProfile.type: Forbidden: cannot be honoured by the process runtime (it does not "
    "filter a host process's system calls)";

bool confined(const SpecExtras& extras, std::string_view container) {
  const auto seccomp = seccompProfileFor(extras, container, false, "/");
  return !seccomp.ok() || seccomp->type != SecurityProfile::Type::kUnconfined;
}

}  // namespace

std::vector<std::string> processRuntimeRefusals(const api::Pod& pod) {
  std::vector<std::string> out;
  const SpecExtras extras = specExtras(pod);
  bool pod_seccomp_used = false;  // by a container without a seccompProfile of its own
  auto containers = [&](const std::vector<api::Container>& list, const std::string& field) {
    for (size_t i = 0; i < list.size(); ++i) {
      const api::Container& c = list[i];
      const std::string at = "spec." + field + "[" + std::to_string(i) + "]";
      if (c.command.empty()) {
        out.push_back(at +
                      ".command: Required value: the process runtime runs the command as a "
                      "host process and does not pull or run images, so a container needs "
                      "a command (an image's entrypoint does not exist here)");
      }
      if (determineEffectiveSecurityContext(pod, c).read_only_root_filesystem) {
        out.push_back(at +
                      ".securityContext.readOnlyRootFilesystem: Forbidden: cannot be "
                      "honoured by the process runtime (a host process shares the node's "
                      "root filesystem)");
      }
      if (extras.container_seccomp.count(c.name) == 0) {
        pod_seccomp_used = true;
      } else if (confined(extras, c.name)) {
        out.push_back(at + ".securityContext" + kSeccompRefusal);
      }
    }
  };
  containers(pod.spec->init_containers, "initContainers");
  containers(pod.spec->containers, "containers");
  for (size_t i = 0; i < pod.spec->volumes.size(); ++i) {
    const auto& v = pod.spec->volumes[i];
    if (v.source_type == "emptyDir" || v.source_type == "hostPath" ||
        v.source_type == "configMap" || v.source_type == "secret" ||
        v.source_type == "downwardAPI" || v.source_type == "projected") {
      continue;
    }
    out.push_back("spec.volumes[" + std::to_string(i) + "]: Unsupported value: \"" + v.source_type +
                  "\": nodeagent supports emptyDir, hostPath, configMap, secret, downwardAPI and "
                  "projected volumes");
  }
  if (pod_seccomp_used && confined(extras, "")) {
    out.push_back(std::string("spec.securityContext") + kSeccompRefusal);
  }
  for (size_t i = 0; i < extras.sysctls.size(); ++i) {
    out.push_back("spec.securityContext.sysctls[" + std::to_string(i) +
                  "]: Forbidden: the process runtime runs every pod in the node's namespaces, "
                  "where \"" +
                  extras.sysctls[i].name + "\" would be set for the whole node");
  }
  return out;
}

}  // namespace nodeagent::runtime
