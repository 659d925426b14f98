// Loads the CRI runtime module (agent/runtime/cri/cri_module.h) for --runtime=cri.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "agent/runtime/cri/cri_module.h"

namespace nodeagent::cmd {

// Where the module is looked for, in order: $NODEAGENT_CRI_MODULE when set; nodeagent-cri.so
// next to the executable (the build directory); <prefix>/lib/nodeagent/nodeagent-cri.so for an
// executable in <prefix>/bin (an installation).
std::vector<std::filesystem::path> criModuleCandidates();

// Loads the first candidate that exists and answers its entry point, which makes the runtime.
// The module stays loaded for the life of the process. An error names the module (or every path
// tried) and why.
base::StatusOr<runtime::cri::MakeCriRuntimeFn> loadCriModule();

}  // namespace nodeagent::cmd
