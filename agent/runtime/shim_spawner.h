// Starts container shims for ProcessRuntime through the spawn helper (`<shim> spawner`,
// agent/runtime/spawn.h), so that a start does not copy the agent's descriptor table (one
// descriptor per running container) into the new process.
//
// The helper is started at the first spawn and lives as long as this object; it is the shims'
// parent and reaps them. A helper found dead is replaced by the next spawn. When no helper can be
// started (say, a shim binary of another version), shims are spawned directly from then on
// (logged). A helper that dies after it got a request fails that start: it may have started the
// shim, and a second one must not run.
//
// Blocking (a round trip to the helper, or posix_spawn): call from a file pool, never a strand.
// Thread-safe: spawns are serialised on the helper's socket.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace nodeagent::runtime {

class ShimSpawner {
 public:
  explicit ShimSpawner(std::filesystem::path shim);
  ~ShimSpawner();
  ShimSpawner(const ShimSpawner&) = delete;
  ShimSpawner& operator=(const ShimSpawner&) = delete;

  struct Child {
    pid_t pid = 0;
    int pidfd = -1;  // owned by the caller (close-on-exec)
  };
  // Starts args[0] with `args` as spawnDetached does (fds[i] is its descriptor i; /dev/null for
  // -1). Returns 0 with `child` set, or the error number of the start.
  int spawn(const std::vector<std::string>& args, std::span<const int> fds, Child& child);

  // Whether spawns currently go through the helper (tests and /healthz?verbose-style reports).
  bool usingHelper() const;
  // The helper's pid, 0 when none runs (tests).
  pid_t helperPid() const;

 private:
  bool startHelperLocked();
  void stopHelperLocked();
  // A round trip to the helper. False when the helper failed (it is stopped then); true with
  // `error` the start's own error number otherwise.
  bool spawnThroughHelperLocked(const std::vector<std::string>& args, std::span<const int> fds,
                                Child& child, int& error);

  const std::filesystem::path shim_;
  mutable std::mutex mu_;
  int sock_ = -1;
  pid_t helper_pid_ = 0;
  // False once a helper could not be started: spawns are direct from then on.
  bool helper_possible_ = true;
};

}  // namespace nodeagent::runtime
