#include "cmd/nodeagent/cri_module_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <system_error>

#include "base/log.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("nodeagent")

constexpr const char* kModuleName = "nodeagent-cri.so";

}  // namespace

std::vector<std::filesystem::path> criModuleCandidates() {
  if (const char* env = std::getenv("NODEAGENT_CRI_MODULE"); env != nullptr && *env != '\0') {
    return {env};
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto dir = exe.parent_path();
  return {dir / kModuleName, dir.parent_path() / "lib" / "nodeagent" / kModuleName};
}

base::StatusOr<runtime::cri::MakeCriRuntimeFn> loadCriModule() {
  const auto candidates = criModuleCandidates();
  std::string tried;
  for (const auto& path : candidates) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried += (tried.empty() ? "" : ", ") + path.string();
      continue;
    }
    // Never closed: the runtime's code must stay for as long as the process runs.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      return base::failedPreconditionError("cannot load the CRI runtime module " + path.string() +
                                           ": " + ::dlerror());
    }
    auto make = reinterpret_cast<runtime::cri::MakeCriRuntimeFn>(
        ::dlsym(handle, runtime::cri::kMakeCriRuntimeSymbol));
    if (make == nullptr) {
      return base::failedPreconditionError("the CRI runtime module " + path.string() + " has no " +
                                           runtime::cri::kMakeCriRuntimeSymbol);
    }
    log()->info("Loaded the CRI runtime module path={}", path.string());
    return make;
  }
  return base::notFoundError("the CRI runtime module " + std::string(kModuleName) +
                             " is not installed (looked for " + tried +
                             "; NODEAGENT_CRI_MODULE may name it)");
}

}  // namespace nodeagent::cmd
