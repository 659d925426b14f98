#include "agent/pod_directories.h"

#include <system_error>

#include "agent/volume/subpath.h"
#include "agent/volume/tmpfs.h"
#include "base/log.h"
#include "base/make_dirs.h"
#include "base/path_component.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

}  // namespace

base::StatusOr<std::filesystem::path> PodDirectories::path(const std::string& uid) const {
  return base::childPath(root_, "pod UID", uid);
}

base::Status PodDirectories::ensure(const std::string& uid) {
  {
    std::lock_guard lock(mu_);
    if (made_.count(api::hash128(uid)) > 0) return base::okStatus();
  }
  auto dir = path(uid);
  if (!dir.ok()) return dir.status();
  int err = base::makeDirs(*dir);
  for (const char* sub : {"volumes", "plugins"}) {
    if (err == 0) err = base::makeDirs(*dir / sub);
  }
  if (err != 0) {
    return base::internalError("cannot make pod directories at " + dir->string() + ": " +
                               std::generic_category().message(err));
  }
  std::lock_guard lock(mu_);
  made_.insert(api::hash128(uid));
  return base::okStatus();
}

bool PodDirectories::made(const std::string& uid) const {
  std::lock_guard lock(mu_);
  return made_.count(api::hash128(uid)) > 0;
}

void PodDirectories::forget(const std::string& uid) {
  std::lock_guard lock(mu_);
  auto it = made_.find(api::hash128(uid));
  if (it == made_.end()) return;
  ++removals_;
  made_.erase(it);
}

base::Status PodDirectories::unmountVolumes(const std::string& uid) {
  auto dir = path(uid);
  if (!dir.ok()) return dir.status();
  auto subpaths = cleanSubPaths(*dir);
  unmountPodVolumes(*dir);
  return subpaths;
}

bool PodDirectories::removeOrphans(const std::set<std::string>& known,
                                   const std::unordered_set<std::string>& in_runtime) {
  bool removed = false;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root_, ec)) {
    auto uid = entry.path().filename().string();
    if (known.count(uid) > 0 || in_runtime.count(uid) > 0) continue;
    // A subPath bind mount left mounted would let the removal reach into its volume (a
    // hostPath's files): such a directory stays, as kubelet keeps it, until the mount is gone.
    if (auto subpaths = cleanSubPaths(entry.path()); !subpaths.ok()) {
      log()->warn("Orphaned pod directory kept: a subPath is still mounted in it path={} err={}",
                  entry.path().string(), subpaths.message());
      continue;
    }
    removed = true;
    forget(uid);
    std::error_code rm_ec;
    unmountPodVolumes(entry.path());  // memory-backed secret volumes
    std::filesystem::remove_all(entry.path(), rm_ec);
    if (rm_ec) {
      log()->warn("Cannot remove orphaned pod directory path={} err={}", entry.path().string(),
                  rm_ec.message());
    }
  }
  return removed;
}

}  // namespace nodeagent::agent
