// The module's entry point (cri_module.h).
#include "agent/runtime/cri/cri_module.h"

#include <cstdlib>
#include <string_view>

#include "agent/runtime/cri/cri_runtime.h"

extern "C" __attribute__((visibility("default")))
nodeagent::base::StatusOr<std::unique_ptr<nodeagent::runtime::Runtime>>
nodeagent_make_cri_runtime(const nodeagent::runtime::cri::CriModuleOptions& options) {
  using namespace nodeagent::runtime;
  static_assert(std::is_same_v<decltype(&nodeagent_make_cri_runtime), cri::MakeCriRuntimeFn>);
  auto client = cri::CriClient::create({options.endpoint, options.request_timeout});
  if (!client.ok()) return client.status();
  CriRuntimeOptions ro;
  ro.pod_log_dir = options.pod_log_dir;
  ro.blocking_executor = options.blocking_executor;
  // NODEAGENT_CRI_EVENTS=0: no containerd event stream, the relist alone (to compare the two).
  const char* events = std::getenv("NODEAGENT_CRI_EVENTS");
  ro.container_events = events == nullptr || std::string_view(events) != "0";
  return std::unique_ptr<Runtime>(std::make_unique<CriRuntime>(
      std::shared_ptr<cri::CriClient>(std::move(*client)), *options.clock, ro));
}
