// What the daemon gives the kubelet API (port 10250) beyond the agent: its TLS material
// (the given certificate, or kubelet's self-signed one under --cert-dir), its authentication and
// authorization options, /configz (the effective configuration) and /spec/ (the machine).
#pragma once

#include <string>

#include "agent/server/kubelet_server.h"
#include "base/status.h"
#include "cmd/nodeagent/daemon_config.h"

namespace nodeagent::cmd {

// The kubelet API's options from the flags (TLS files made when none were given); an error names
// the file or directory.
base::StatusOr<agent::KubeletServerOptions> kubeletServerOptions(const DaemonConfig& config);

// kubelet's /configz: {"kubeletconfig": {...}} with the effective settings under their
// KubeletConfiguration names.
std::string configzJson(const DaemonConfig& config);

// kubelet's /spec/ (cAdvisor's MachineInfo): cores, memory, machine and boot IDs.
std::string machineSpecJson(const DaemonConfig& config);

}  // namespace nodeagent::cmd
