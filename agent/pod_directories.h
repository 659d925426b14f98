// The pods' directories on the node (kubelet's <root-dir>/pods/<uid> with its volumes/ and
// plugins/): their paths, made once per pod, and removed once nothing knows the pod.
//
// Threading: path() from any thread. ensure() and removeOrphans() do file I/O: call them on the
// blocking pool, never on a strand. Thread-safe.
#pragma once

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>

#include "api/hash.h"
#include "base/status.h"

namespace nodeagent::agent {

class PodDirectories {
 public:
  explicit PodDirectories(std::filesystem::path root_dir) : root_(std::move(root_dir) / "pods") {}

  // <root-dir>/pods/<uid>; an error when the UID is not a single path component.
  base::StatusOr<std::filesystem::path> path(const std::string& uid) const;
  // Makes the pod's directory with volumes/ and plugins/ (the first time only: later calls for
  // the same UID cost a set lookup, so periodic syncs skip the I/O). Blocking.
  base::Status ensure(const std::string& uid);
  // Whether ensure() made the pod's directories (and forget() has not been called since).
  bool made(const std::string& uid) const;
  // The pod is gone: the next ensure() looks at the disk again.
  void forget(const std::string& uid);
  // Changes whenever made() turns false for a pod (before it does). Any thread.
  uint64_t removals() const { return removals_.load(); }
  // A terminated pod's subPath bind mounts and memory-backed volumes (its secret and projected
  // tmpfs) are unmounted, as kubelet's SyncTerminatedPod waits for, while the directory stays
  // until removeOrphans() (its exited containers may be kept longer). Blocking.
  base::Status unmountVolumes(const std::string& uid);
  // Removes the directory of every pod in neither set; true when it removed any. A directory
  // with a subPath still mounted in it stays (its removal would reach into the volume). Blocking.
  bool removeOrphans(const std::set<std::string>& known,
                     const std::unordered_set<std::string>& in_runtime);

 private:
  std::filesystem::path root_;
  mutable std::mutex mu_;
  // The pods whose directories ensure() made, by the 128-bit hash of their UID (a UID's copy
  // here cost more than the rest of the entry).
  std::unordered_set<api::Hash128, api::Hash128Hasher> made_;
  std::atomic<uint64_t> removals_{0};
};

}  // namespace nodeagent::agent
