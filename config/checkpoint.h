// Bootstrap checkpoints (kubelet v1.18's pkg/kubelet/checkpoint + checkpointmanager): API pods
// annotated `node.kubernetes.io/bootstrap-checkpoint: "true"` are kept as files under
// `<root-dir>/pod-checkpoints/` so that, at the next start, they can be restored (a RESTORE update
// on the api source, see PodConfig::restore) before the apiserver is reachable. This is what lets
// a self-hosted control plane come back after a reboot.
//
// One file per pod, named from its UID (`Pod_<uid>.json`), holding the pod's JSON. Files are
// written to a temporary name, fsynced and renamed, so a crash leaves either the old or the new
// content, never a torn file.
#pragma once

#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::config {

// The folder under --root-dir that holds the checkpoints.
inline constexpr std::string_view kPodCheckpointDirName = "pod-checkpoints";

// kubelet's checkAnnotations: the pod carries bootstrap-checkpoint="true".
bool wantsBootstrapCheckpoint(const api::Pod& pod);

struct CheckpointLoad {
  std::vector<api::PodPtr> pods;     // in file name order
  std::vector<base::Status> errors;  // one per skipped (corrupt) file, naming it
};

// Blocking file I/O: call it off the io_context threads (or accept a short block, see
// PodConfig). Thread-safe: calls are serialized internally.
class CheckpointManager {
 public:
  explicit CheckpointManager(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }

  // kubelet's checkpoint.WritePod: writes the pod when it wants a checkpoint, otherwise removes
  // any checkpoint it has (the annotation was dropped).
  base::Status writePod(const api::Pod& pod);
  // Removes the checkpoint of `uid`; no checkpoint is not an error.
  base::Status deletePod(const std::string& uid);
  // Reads every checkpoint. A file that cannot be read or decoded, or whose pod UID does not match
  // its name, is logged, reported in `errors` and skipped. Leftover temporary files of an
  // interrupted write are removed. Error only when the folder cannot be created or listed.
  base::StatusOr<CheckpointLoad> loadPods();
  // UIDs that currently have a checkpoint file.
  base::StatusOr<std::set<std::string>> checkpointedUids();

  // The file that holds the checkpoint of `uid`; error for a UID that cannot name a file.
  base::StatusOr<std::filesystem::path> pathFor(const std::string& uid) const;

 private:
  base::Status ensureDirLocked();
  base::Status listLocked();
  base::Status removeLocked(const std::string& uid);

  const std::filesystem::path dir_;
  std::mutex mu_;
  bool dir_ready_ = false;
  // UIDs with a file, known once the folder was listed: removing a checkpoint that does not exist
  // (the common case: most API pods never had one) then costs no system call.
  std::optional<std::set<std::string>> known_;
};

}  // namespace nodeagent::config
