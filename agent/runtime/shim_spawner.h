// Starts container shims for ProcessRuntime through the spawn helper (`<shim> spawner`,
// agent/runtime/spawn.h), so that a start does not copy the agent's descriptor table (one
// descriptor per running container) into the new process.
//
// The helper is started at the first spawn and lives as long as this object; it is the shims'
// parent and reaps them. A helper found dead is replaced by the next spawn. When no helper can be
// started, shims are spawned directly: for good when the shim binary cannot be one (missing, or of
// another version that does not know `spawner`), and for the next 100 spawns after a passing
// failure (no memory or descriptors, a greeting that did not come in time). A request the helper
// received but did not answer (it ended, or was killed after `answer_timeout`) returns
// kAnswerLost: the child may have started, and only its own report can tell.
//
// Blocking (a round trip to the helper, or posix_spawn): call from a file pool, never a strand.
// Thread-safe: spawns through the helper are serialised on its socket (a lock held for the round
// trip, milliseconds); direct spawns run outside the lock.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace nodeagent::runtime {

class ShimSpawner {
 public:
  // What spawn returns when the helper got the request and its answer was lost.
  static constexpr int kAnswerLost = ECONNABORTED;
  // Spawns made directly after a passing failure to start a helper, before the next try.
  static constexpr int kDirectSpawnsBeforeRetry = 100;

  explicit ShimSpawner(std::filesystem::path shim,
                       std::chrono::milliseconds answer_timeout = std::chrono::seconds(30));
  ~ShimSpawner();
  ShimSpawner(const ShimSpawner&) = delete;
  ShimSpawner& operator=(const ShimSpawner&) = delete;

  struct Child {
    pid_t pid = 0;
    int pidfd = -1;  // owned by the caller (close-on-exec)
  };
  // Starts args[0] with `args` as spawnDetached does (fds[i] is its descriptor i; /dev/null for
  // -1). Returns 0 with `child` set, kAnswerLost, or the error number of the start.
  int spawn(const std::vector<std::string>& args, std::span<const int> fds, Child& child);

  // Whether spawns currently go through the helper (tests).
  bool usingHelper() const;
  // The helper's pid, 0 when none runs (tests).
  pid_t helperPid() const;

 private:
  // A helper when one runs or may be started now (false: spawn directly).
  bool ensureHelperLocked();
  // 0, or the error number of the start (the helper is not kept then).
  int startHelperLocked();
  void stopHelperLocked();
  // A round trip to the helper. False when the helper had gone before it got the request (it is
  // stopped then); true with `error` the start's own error number (or kAnswerLost) otherwise.
  bool spawnThroughHelperLocked(const std::vector<std::string>& args, std::span<const int> fds,
                                Child& child, int& error);

  const std::filesystem::path shim_;
  const std::chrono::milliseconds answer_timeout_;
  mutable std::mutex mu_;
  int sock_ = -1;
  pid_t helper_pid_ = 0;
  // False once the shim binary proved unable to be a helper: spawns are direct from then on.
  bool helper_possible_ = true;
  int direct_spawns_before_retry_ = 0;
};

}  // namespace nodeagent::runtime
