// The CRI runtime as a loadable module (nodeagent-cri.so). gRPC, protobuf and abseil are about
// 6 MiB of resident memory and 48 shared libraries; an agent that runs the process runtime never
// loads them. The daemon loads the module only with --runtime=cri and asks it for the runtime
// through one C entry point. The module holds the CRI client, CriRuntime and the generated gRPC
// code; what they use of nodeagent's own libraries comes from the executable, which exports its
// symbols, so there is one copy of every piece of state (loggers, clocks).
//
// The module and the executable come from the same build: the entry point passes C++ types.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "agent/runtime/runtime.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::runtime::cri {

struct CriModuleOptions {
  // --container-runtime-endpoint and --runtime-request-timeout.
  std::string endpoint;
  std::chrono::milliseconds request_timeout{};
  // --pod-log-dir.
  std::filesystem::path pod_log_dir;
  // Where the blocking gRPC calls run.
  asio::any_io_executor blocking_executor;
  base::Clock* clock = nullptr;
};

// The entry point's signature and name.
using MakeCriRuntimeFn = base::StatusOr<std::unique_ptr<Runtime>> (*)(const CriModuleOptions&);
inline constexpr const char* kMakeCriRuntimeSymbol = "nodeagent_make_cri_runtime";

}  // namespace nodeagent::runtime::cri
