// PodStorage: kubelet's podStorage (pkg/kubelet/config/config.go, v1.18), the pure part of
// PodConfig. It keeps the pods of every source keyed by UID, diffs each incoming PodUpdate against
// them and returns the updates to emit (ADD/UPDATE/DELETE/REMOVE/RECONCILE/RESTORE in kubelet's
// order, or SET snapshots). The op a source sends is only a hint: ADD, UPDATE and DELETE inputs are
// all diffed by UID, only SET marks a source as seen and only SET implies removals.
//
// No Asio, no threads, no I/O: PodConfig (config/pod_config.h) runs it on its strand and unit tests
// drive it directly. Not thread-safe; every method must be called from one thread at a time.
//
// Pods are immutable: where kubelet mutates its stored object, PodStorage builds a new pod from the
// stored one (keeping its identity fields and first-seen time) and replaces it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "api/pod.h"
#include "api/pod_update.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::config {

// kubelet's PodConfigNotificationMode (Unknown is not representable here).
enum class PodConfigNotificationMode {
  // One message per kind of change (kubelet's default and the only mode the agent uses).
  kIncremental,
  // A SET with the merged state of every source whenever anything changed.
  kSnapshot,
  // A SET when pods are added or removed, UPDATE/DELETE messages for changed pods.
  kSnapshotAndUpdates,
};

// kubelet's podsDifferSemantically: true unless spec (compared by spec_hash, so fields outside the
// typed model count), labels, deletionTimestamp, deletionGracePeriodSeconds and the annotations
// other than config.source/config.mirror/config.seen are all equal. config.hash counts.
bool podsDifferSemantically(const api::Pod& existing, const api::Pod& ref);

// kubelet's isAnnotationMapEqual: annotations equal once the local keys are ignored.
bool annotationsEqualIgnoringLocal(const api::StringTable& existing,
                                   const api::StringTable& candidate);

// True when the statuses differ, including fields of `status` the typed model does not cover.
bool podStatusesDiffer(const api::Pod& existing, const api::Pod& ref);

// The pods one merge classified, before the notification mode decides what to emit. PodConfig
// uses it to keep checkpoints in step whatever the mode.
struct MergeChanges {
  std::vector<api::PodPtr> adds;
  std::vector<api::PodPtr> updates;
  std::vector<api::PodPtr> deletes;
  std::vector<api::PodPtr> removes;
  std::vector<api::PodPtr> reconciles;
  std::vector<api::PodPtr> restores;
  // This merge was the source's first SET.
  bool first_set = false;
};

class PodStorage {
 public:
  // `clock` stamps config.seen (wallNow, RFC3339Nano); it must outlive the storage.
  PodStorage(PodConfigNotificationMode mode, base::Clock& clock);
  ~PodStorage();
  PodStorage(const PodStorage&) = delete;
  PodStorage& operator=(const PodStorage&) = delete;

  // kubelet's podStorage.Merge: applies `change` (its `source` field is ignored; `source` names
  // the sender) and returns the updates to deliver, in order. Incremental mode emits, each only
  // when non-empty: REMOVE, ADD, UPDATE, DELETE, RESTORE, then the empty ADD on the source's first
  // SET when it added, updated and deleted nothing (the readiness signal), then RECONCILE.
  // `changes`, when given, receives the classification.
  //
  // A SET that repeats most of the previous SET of the same source object for object (a file
  // source resends its whole set after one file changed) costs a pointer comparison per chunk
  // the two share and per pod of the others: only the positions that hold another object are
  // merged, with the same outcome as a full merge.
  std::vector<api::PodUpdate> merge(const std::string& source, api::PodUpdate change,
                                    MergeChanges* changes = nullptr);

  // kubelet's Sync: a SET of the merged state with source "*".
  api::PodUpdate sync() const;

  // Every stored pod of every source (sources in name order, then pods in UID order).
  std::vector<api::PodPtr> mergedState() const;
  // The stored pods of one source, in UID order.
  std::vector<api::PodPtr> pods(const std::string& source) const;
  // The stored pod of `source` with `uid`, or null.
  api::PodPtr pod(const std::string& source, const std::string& uid) const;

  // The source has sent at least one SET.
  bool sourceSeen(const std::string& source) const;
  const std::set<std::string>& sourcesSeen() const { return sources_seen_; }

  // Problems found in the most recent update of `source` (duplicate full names: the first pod
  // wins, the others are dropped); empty when that update was clean.
  std::vector<base::Status> sourceErrors(const std::string& source) const;

  PodConfigNotificationMode mode() const { return mode_; }

  // SETs merged position by position rather than in full (see merge), for tests and benchmarks.
  uint64_t setsMergedByPosition() const { return sets_merged_by_position_; }

 private:
  struct Entry {
    api::PodPtr pod;  // the stored pod, with config.source and config.seen set
    // content_hash of the last pod the source sent for this UID: an identical resend needs no
    // comparison at all, which keeps a large unchanged SET cheap.
    api::Hash128 input_hash;
    // Merge generation that last saw this UID in a SET (mark and sweep for removals).
    uint64_t generation = 0;
  };
  // One source's pods by UID (defined in the .cpp: a flat hash index over densely stored entries,
  // because a SET of 10,000 pods looks every one of them up).
  class SourcePods;

  // The store of `source`, created empty on first use.
  SourcePods& store(const std::string& source);
  // The previous SET of a source, while the store holds exactly its pods: each position's UID is
  // stored once, nothing was dropped, and no other op changed the store since.
  struct LastSet {
    api::ChunkedPods pods;  // shares its chunks with the source's set
    bool valid = false;
  };

  // Returns how many distinct stored entries the pods matched.
  // `source_annotated`: see api::PodUpdate.
  size_t updatePods(const std::string& source, const api::ChunkedPods& pods, bool source_annotated,
                    SourcePods& store, MergeChanges& out, std::vector<base::Status>& errors);
  // kubelet's checkAndUpdatePod for one incoming pod whose stored entry is `found`, or its ADD
  // when `found` is null.
  void mergeOne(const std::string& source, const api::PodPtr& ref, bool source_annotated,
                Entry* found, SourcePods& store, MergeChanges& out,
                std::vector<base::Status>& errors);
  // Merges a SET against `last` position by position when only a few positions hold other objects
  // and nothing else changed (same full name at each of them, no UID moved between positions).
  // False, having changed nothing, when the SET needs the full merge.
  bool mergeSetByPosition(const std::string& source, const api::ChunkedPods& pods,
                          bool source_annotated, const LastSet& last, SourcePods& store,
                          MergeChanges& out, std::vector<base::Status>& errors);
  // A SET: merged position by position when it can be, else in full, then swept of the pods it
  // no longer holds. Moves `change.pods` into `last` when the store holds exactly them.
  void mergeSet(const std::string& source, api::PodUpdate& change, bool seen_before,
                SourcePods& pods, LastSet& last, MergeChanges& out,
                std::vector<base::Status>& errors);
  // The updates a merge that changed `out` emits in this storage's notification mode.
  std::vector<api::PodUpdate> updatesToEmit(const std::string& source,
                                            const MergeChanges& out) const;
  // The pod as stored for its first sight: `ref` itself when its source annotated it, else a
  // copy with config.source and config.seen.
  api::PodPtr annotateNew(const std::string& source, const api::PodPtr& ref, bool source_annotated,
                          std::vector<base::Status>& errors) const;

  PodConfigNotificationMode mode_;
  base::Clock& clock_;
  std::map<std::string, std::unique_ptr<SourcePods>> pods_;
  std::set<std::string> sources_seen_;
  std::map<std::string, std::vector<base::Status>> errors_;
  std::map<std::string, LastSet> last_sets_;
  uint64_t generation_ = 0;
  uint64_t sets_merged_by_position_ = 0;
};

}  // namespace nodeagent::config
