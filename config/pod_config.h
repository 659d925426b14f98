// PodConfig: kubelet's PodConfig + Mux (pkg/kubelet/config/config.go, pkg/util/config), the stage
// between the pod sources and the sync loop. Each source pushes PodUpdates into its own entry
// point (`channel(source)`); PodConfig merges them on its strand with a PodStorage
// (config/pod_storage.h) and hands the resulting updates, in order, to the output callback given
// at construction. It also answers the readiness questions the sync loop asks (has every configured
// source sent its first SET?) and keeps bootstrap checkpoints of API pods (config/checkpoint.h),
// restored at start-up with `restore()`.
//
// Unlike kubelet's unbuffered channels, an entry point never blocks: a slow consumer does not stall
// the sources. Per-source order is kept because every update goes through the one strand.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/pod_update.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"
#include "config/checkpoint.h"
#include "config/pod_source.h"
#include "config/pod_storage.h"

namespace nodeagent::config {

struct PodConfigOptions {
  PodConfigNotificationMode mode = PodConfigNotificationMode::kIncremental;
  // Bootstrap checkpoints of API pods (`<root-dir>/pod-checkpoints`); empty disables them and
  // `restore()`. When set, every api pod that is added, updated, deleted or reconciled has its
  // checkpoint written (annotated) or removed (not annotated); a REMOVE removes it; the api
  // source's first SET removes the checkpoints of pods it does not list (deleted while the agent
  // was down; corrupt files too).
  std::filesystem::path checkpoint_dir;
  // Where checkpoint file I/O runs, one write at a time in order (the agent's blocking pool).
  // Unset: on the config strand itself.
  std::optional<asio::any_io_executor> blocking_executor;
};

class PodConfig {
 public:
  // Receives every emitted update, in order, on the config strand. It must not block and must not
  // throw; the sync loop re-posts to its own strand.
  using Output = std::function<void(api::PodUpdate)>;

  // `clock` must outlive the PodConfig. Destroy the PodConfig from the config strand or once the
  // io_context no longer runs its handlers: `output` is not called after destruction began, and
  // entry points handed out earlier become no-ops.
  PodConfig(asio::any_io_executor executor, base::Clock& clock, Output output,
            PodConfigOptions options = {});
  ~PodConfig();
  PodConfig(const PodConfig&) = delete;
  PodConfig& operator=(const PodConfig&) = delete;

  // kubelet's Channel: the entry point of `source` (non-empty). From now on `source` counts as
  // configured, so seenAllSources() waits for its first SET. Calling it again for the same source
  // returns an equivalent entry point. Any thread. The returned sink may be called from any
  // thread, never blocks, and ignores the `source` field of the updates it gets.
  PodUpdateSink channel(std::string source);

  // kubelet's SeenAllSources: every configured source is in `seen_sources` (the sources whose
  // updates the consumer has handled) and has sent PodConfig at least one SET. Any thread.
  bool seenAllSources(const std::set<std::string>& seen_sources) const;
  // `source` has sent at least one SET (readiness of one source, for per-source gating). Any
  // thread.
  bool sourceSeen(const std::string& source) const;
  // The configured sources. Any thread.
  std::set<std::string> sources() const;
  // Where a source stands: `answered` once it sent any SET (complete or not), `seen` once it
  // sent a complete one; `reason` is what its last incomplete SET said was missing while it is
  // not seen. Any thread.
  struct SourceState {
    bool answered = false;
    bool seen = false;
    std::string reason;
  };
  SourceState sourceState(const std::string& source) const;
  // Problems in the most recent update of `source` (duplicate pod full names: the first pod wins,
  // the others are dropped); empty when it was clean. Any thread.
  std::vector<base::Status> sourceErrors(const std::string& source) const;

  // kubelet's Sync: emits a SET of every stored pod with source "*" (after the updates already
  // queued). Any thread.
  void sync();

  // kubelet 1.18's Restore: once per PodConfig, reads the checkpoints and sends them as one RESTORE
  // update on the "api" entry point (which makes "api" a configured source). Call it at start-up,
  // before the apiserver source starts; it reads files on the calling thread. Corrupt checkpoints
  // are logged, skipped and listed in the result's `errors`. Later calls return an empty result.
  // Error when checkpoints are disabled or the folder cannot be created or listed.
  base::StatusOr<CheckpointLoad> restore();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace nodeagent::config
