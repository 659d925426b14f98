// `nodeagent [flags]`: the node agent daemon (sources, PodConfig, sync loop, pod workers,
// runtime, read-only endpoints) until SIGINT/SIGTERM.
#pragma once

#include <vector>

#include "base/status.h"
#include "cmd/nodeagent/daemon_config.h"
#include "cmd/nodeagent/lock_file.h"

namespace nodeagent::cmd {

int runDaemon(int argc, char** argv);

// Makes --root-dir and takes its lock (and --lock-file's, and the cgroup root's with the process
// runtime) before anything reads or changes it: two agents on one root dir would each take the
// other's containers for orphans. The error names the directory or the other agent.
base::StatusOr<std::vector<LockFile>> lockRootDir(const DaemonFlags& f);

}  // namespace nodeagent::cmd
