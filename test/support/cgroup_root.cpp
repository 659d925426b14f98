#include "test/support/cgroup_root.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "agent/cm/cgroup_manager.h"

namespace nodeagent::testing {
namespace {

// Never destroyed: removeAll runs at exit, after function-local statics may be gone.
std::mutex& rootsMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<std::string>& roots() {
  static auto* list = new std::vector<std::string>;
  return *list;
}

void removeAll() {
  std::lock_guard lock(rootsMutex());
  for (const auto& root : roots()) removeCgroupTree(root);
  roots().clear();
}

}  // namespace

void removeCgroupTree(const std::string& root) {
  // The agents' lock file for this cgroup root.
  ::unlink(cm::cgroupRootLockPath(root).c_str());
  auto mounts = cm::detectCgroupMounts();
  if (!mounts.ok()) return;
  cm::CgroupManager cgroups(std::move(*mounts));
  (void)cgroups.destroy(cm::parseCgroupPath(root));
}

std::string isolatedCgroupRoot() {
  static std::atomic<int> counter{0};
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(removeAll); });
  std::string root =
      "/nodeagent-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
  std::lock_guard lock(rootsMutex());
  roots().push_back(root);
  return root;
}

std::string cgroupRootFlag() { return "--cgroup-root=" + isolatedCgroupRoot(); }

}  // namespace nodeagent::testing
