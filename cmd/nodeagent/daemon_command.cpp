#include "cmd/nodeagent/daemon_command.h"
#include "cmd/nodeagent/cri_module_loader.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "agent/cm/cgroup_manager.h"
#include "base/heap.h"
#include "base/log.h"
#include "cmd/nodeagent/client_certificate.h"
#include "cmd/nodeagent/daemon.h"
#include "cmd/nodeagent/daemon_config.h"
#include "cmd/nodeagent/daemon_support.h"
#include "cmd/nodeagent/lock_file.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("nodeagent")

// Two agents with different root dirs but one cgroup root would each take the other's pod
// cgroups for orphans and kill what runs in them: the cgroup root is locked too, through a file
// under /run/nodeagent named after it. An agent that cannot make that directory (not root) makes
// no cgroups either.
std::optional<std::string> cgroupRootLockPath(const DaemonFlags& f) {
  if (f.runtime != "process") return std::nullopt;
  const std::filesystem::path dir = cm::kCgroupRootLockDir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || ::access(dir.c_str(), W_OK) != 0) return std::nullopt;
  return cm::cgroupRootLockPath(f.cgroup_root);
}

}  // namespace

// The root dir itself is made first (the lock lives in it).
base::StatusOr<std::vector<LockFile>> lockRootDir(const DaemonFlags& f) {
  std::error_code ec;
  std::filesystem::create_directories(f.root_dir, ec);
  if (ec)
    return base::internalError("cannot create the root directory " + f.root_dir + ": " +
                               ec.message());
  std::vector<std::string> paths{(std::filesystem::path(f.root_dir) / "nodeagent.lock").string()};
  if (!f.lock_file.empty() && std::filesystem::weakly_canonical(f.lock_file, ec) !=
                                  std::filesystem::weakly_canonical(paths[0], ec)) {
    paths.push_back(f.lock_file);
  }
  std::vector<LockFile> locks;
  for (const auto& path : paths) {
    if (f.exit_on_lock_contention) log()->info("Waiting for the lock file path={}", path);
    auto lock = LockFile::acquire(path, f.exit_on_lock_contention);
    if (!lock.ok()) return lock.status();
    locks.push_back(std::move(*lock));
  }
  if (auto path = cgroupRootLockPath(f)) {
    auto lock = LockFile::acquire(*path, f.exit_on_lock_contention);
    if (!lock.ok() && lock.status().code() == base::StatusCode::kFailedPrecondition) {
      const int holder = lockHolderPid(*path);
      return base::failedPreconditionError(
          "--cgroup-root " + f.cgroup_root + " is used by another nodeagent" +
          (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
          ": two agents on one cgroup root would kill each other's pods; give each agent its "
          "own --cgroup-root");
    }
    if (!lock.ok()) return lock.status();
    locks.push_back(std::move(*lock));
  }
  std::filesystem::create_directories(std::filesystem::path(f.root_dir) / "pods", ec);
  if (ec)
    return base::internalError("cannot create the root directory " + f.root_dir + ": " +
                               ec.message());
  return locks;
}

int runDaemon(int argc, char** argv) {
  base::tuneMalloc();
  auto loaded = loadDaemonConfig(argc, argv);
  if (!loaded.config) return loaded.exit_code;
  DaemonConfig& config = *loaded.config;
  raiseOpenFileLimit();
  for (const auto& key : config.ignored_config_keys) {
    log()->warn("Ignoring a KubeletConfiguration field nodeagent does not implement file={} key={}",
                config.flags.config, key);
  }
  auto locks = lockRootDir(config.flags);
  if (!locks.ok()) {
    log()->error("Cannot start: {}", locks.status().message());
    return 1;
  }
  // The TLS bootstrap may wait for an operator to approve the request: under the lock (it writes
  // --cert-dir and --kubeconfig), before any client exists.
  if (auto st = prepareClientCertificate(config, base::realClock()); !st.ok()) {
    log()->error("Cannot start: {}", st.message());
    return 1;
  }
  auto clients = makeApiClients(config, base::realClock());
  if (!clients.ok()) {
    std::fprintf(stderr, "nodeagent: %s\n", clients.status().message().c_str());
    return 2;
  }
  runtime::cri::MakeCriRuntimeFn make_cri = nullptr;
  if (config.flags.runtime == "cri") {
    auto loaded_module = loadCriModule();
    if (!loaded_module.ok()) {
      log()->error("Cannot start: {}", loaded_module.status().message());
      return 1;
    }
    make_cri = *loaded_module;
  }
  Daemon daemon(config, std::move(*locks), std::move(*clients), make_cri);
  if (auto s = daemon.init(); !s.ok()) {
    log()->error("Cannot start: {}", s.message());
    return 1;
  }
  return daemon.run();
}

}  // namespace nodeagent::cmd
