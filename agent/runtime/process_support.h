// What the process runtime cannot run, whatever the node, decided from the pod spec alone: a
// container without a command (a host process has no image entrypoint), readOnlyRootFilesystem
// (a host process shares the node's root filesystem), a seccompProfile other than Unconfined (no
// system call filter), sysctls (every pod is in the node's namespaces), a volume kind it does not
// mount. `nodeagent validate` reports these as the agent would refuse them.
#pragma once

#include <string>
#include <vector>

#include "api/pod.h"

namespace nodeagent::runtime {

// Field errors worded as validation's ("spec.containers[0].command: Required value: ..."), in
// spec order: init containers, containers, volumes, then the pod's seccompProfile and sysctls.
std::vector<std::string> processRuntimeRefusals(const api::Pod& pod);

}  // namespace nodeagent::runtime
