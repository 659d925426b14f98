#include "config/pod_storage.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/pod_json.h"
#include "api/time.h"
#include "base/log.h"
#include "base/printable.h"
#include "config/pod_storage_source_pods.h"
#include "config/static_pod.h"

namespace nodeagent::config {
namespace {

using nlohmann::json;

NODEAGENT_LOGGER("config")

bool isLocalAnnotationKey(std::string_view key) {
  return key == api::kConfigSourceAnnotationKey || key == api::kConfigMirrorAnnotationKey ||
         key == api::kConfigFirstSeenAnnotationKey;
}

// The duplicate full-name check of one update: open addressing over the update's pods, so a
// large SET costs one allocation instead of one per pod.
class FullNameSet {
 public:
  explicit FullNameSet(size_t pods) {
    size_t capacity = 16;
    while (capacity < pods * 2) capacity <<= 1;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }

  // False when a pod with the same name and namespace was inserted before. `pod` must outlive
  // the set.
  bool insert(const api::Pod& pod) {
    const api::ObjectMeta& meta = pod.metadata;
    size_t h = std::hash<std::string_view>()(meta.name);
    h ^= std::hash<std::string_view>()(meta.namespace_) + 0x9e3779b97f4a7c15ULL + (h << 6) +
         (h >> 2);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.pod == nullptr) {
        slot = Slot{&pod, tag};
        return true;
      }
      if (slot.tag != tag) continue;
      const api::ObjectMeta& other = slot.pod->metadata;
      if (other.name == meta.name && other.namespace_ == meta.namespace_) return false;
    }
  }

 private:
  struct Slot {
    const api::Pod* pod = nullptr;
    uint32_t tag = 0;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

void sortByUid(std::vector<api::PodPtr>& pods) {
  std::sort(pods.begin(), pods.end(), [](const api::PodPtr& a, const api::PodPtr& b) {
    return a->metadata.uid < b->metadata.uid;
  });
}

// The pod's whole object as JSON (null if the raw text is unreadable, which a decoded pod never
// is).
json rawJson(const api::Pod& pod) {
  if (!pod.raw) return json(nullptr);
  return json::parse(pod.raw->str(), nullptr, /*allow_exceptions=*/false);
}

// An absent or null member reads as an empty object, as Go's zero struct does.
json memberOrEmpty(const json& object, const char* key) {
  if (!object.is_object()) return json::object();
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return json::object();
  return *it;
}

// Sets `dst[key]` to `src[key]`, or erases it when `src` lacks it (Go assigns nil).
void copyMember(json& dst, const json& src, const char* key) {
  if (!dst.is_object()) return;
  if (src.is_object()) {
    auto it = src.find(key);
    if (it != src.end() && !it->is_null()) {
      dst[key] = *it;
      return;
    }
  }
  dst.erase(key);
}

// config.source is `source` and config.seen is set.
bool carriesLocalAnnotations(const api::Pod& pod, const std::string& source) {
  const auto& a = pod.metadata.annotations;
  auto it = a.find(api::kConfigSourceAnnotationKey);
  return it != a.end() && it->second == source && a.contains(api::kConfigFirstSeenAnnotationKey);
}

void appendUpdate(std::vector<api::PodUpdate>& out, std::vector<api::PodPtr> pods,
                  api::PodOperation op, const std::string& source) {
  out.push_back(api::PodUpdate{std::move(pods), op, source});
}

// `existing` with the status of `ref` (kubelet's checkAndUpdatePod when only the status moved).
base::StatusOr<api::PodPtr> withStatusOf(const api::Pod& existing, const api::Pod& ref) {
  const json ref_json = rawJson(ref);
  return api::withJsonEdit(existing, [&](json& j) { copyMember(j, ref_json, "status"); });
}

// The stored object keeps its identity and every field kubelet does not compare; the compared
// fields and the status come from the new one, the local annotations stay the stored ones.
base::StatusOr<api::PodPtr> withChangesOf(const api::Pod& existing, const api::Pod& ref,
                                          const std::string& source) {
  const json ref_json = rawJson(ref);
  return api::withJsonEdit(existing, [&](json& j) {
    copyMember(j, ref_json, "spec");
    copyMember(j, ref_json, "status");
    if (!j.contains("metadata") || !j["metadata"].is_object()) j["metadata"] = json::object();
    json& meta = j["metadata"];
    const json ref_meta = memberOrEmpty(ref_json, "metadata");
    copyMember(meta, ref_meta, "labels");
    copyMember(meta, ref_meta, "deletionTimestamp");
    copyMember(meta, ref_meta, "deletionGracePeriodSeconds");
    json annotations = memberOrEmpty(ref_meta, "annotations");
    annotations[std::string(api::kConfigSourceAnnotationKey)] = source;
    for (std::string_view key : {api::kConfigSourceAnnotationKey, api::kConfigMirrorAnnotationKey,
                                 api::kConfigFirstSeenAnnotationKey}) {
      auto kept = existing.metadata.annotations.find(key);
      if (kept != existing.metadata.annotations.end()) {
        annotations[std::string(kept->first)] = std::string(kept->second);
      }
    }
    meta["annotations"] = std::move(annotations);
  });
}

}  // namespace

bool annotationsEqualIgnoringLocal(const api::StringTable& existing,
                                   const api::StringTable& candidate) {
  // Both maps are sorted: walk them together, skipping the local keys.
  auto a = existing.begin();
  auto b = candidate.begin();
  while (true) {
    while (a != existing.end() && isLocalAnnotationKey(a->first)) ++a;
    while (b != candidate.end() && isLocalAnnotationKey(b->first)) ++b;
    if (a == existing.end() || b == candidate.end())
      return a == existing.end() && b == candidate.end();
    if (a->first != b->first || a->second != b->second) return false;
    ++a;
    ++b;
  }
}

bool podsDifferSemantically(const api::Pod& existing, const api::Pod& ref) {
  const auto& em = existing.metadata;
  const auto& rm = ref.metadata;
  return !(existing.spec_hash == ref.spec_hash && em.labels == rm.labels &&
           em.deletion_timestamp == rm.deletion_timestamp &&
           em.deletion_grace_period_seconds == rm.deletion_grace_period_seconds &&
           annotationsEqualIgnoringLocal(em.annotations, rm.annotations));
}

bool podStatusesDiffer(const api::Pod& existing, const api::Pod& ref) {
  if (existing.status != ref.status) return true;
  // The typed views agree; fields outside the model can still differ. Reading the raw JSON is
  // costly, but this runs only for pods whose content changed without a semantic change.
  return memberOrEmpty(rawJson(existing), "status") != memberOrEmpty(rawJson(ref), "status");
}

PodStorage::PodStorage(PodConfigNotificationMode mode, base::Clock& clock)
    : mode_(mode), clock_(clock) {}

PodStorage::~PodStorage() = default;

PodStorage::SourcePods& PodStorage::store(const std::string& source) {
  auto& slot = pods_[source];
  if (!slot) slot = std::make_unique<SourcePods>();
  return *slot;
}

api::PodPtr PodStorage::annotateNew(const std::string& source, const api::PodPtr& ref,
                                    bool source_annotated,
                                    std::vector<base::Status>& errors) const {
  if (source_annotated && carriesLocalAnnotations(*ref, source)) return ref;
  // kubelet sets config.source on every incoming pod and config.seen on first sight (overwriting
  // whatever the source sent).
  auto annotated = api::withAnnotations(
      *ref, {{std::string(api::kConfigSourceAnnotationKey), source},
             {std::string(api::kConfigFirstSeenAnnotationKey), seenTime(clock_)}});
  if (!annotated.ok()) {
    auto status = annotated.status().withContext(
        "pod " + api::podRef(*ref) + " uid=" + ref->metadata.uid + " from source " + source);
    log()->error("Failed to annotate pod, ignoring it pod={} uid={} source={} err={}",
                 api::podRef(*ref), ref->metadata.uid, source, status.message());
    errors.push_back(std::move(status));
    return nullptr;
  }
  return *annotated;
}

size_t PodStorage::updatePods(const std::string& source, const api::ChunkedPods& pods,
                              bool source_annotated, SourcePods& store, MergeChanges& out,
                              std::vector<base::Status>& errors) {
  FullNameSet names(pods.size());
  store.reserve(pods.size());
  size_t matched = 0;
  size_t i = 0;
  for (const api::PodPtr& ref : pods) {
    ++i;
    if (!ref) continue;
    // kubelet's filterInvalidPods: only duplicate full names within one update; the first wins.
    if (!names.insert(*ref)) {
      log()->warn(
          "Pod failed validation due to duplicate pod name, ignoring pod={} uid={} source={} "
          "index={}",
          api::podRef(*ref), ref->metadata.uid, source, i);
      errors.push_back(base::alreadyExistsError(
          "pod " + api::podRef(*ref) + " (uid " + ref->metadata.uid + ", item " +
          std::to_string(i) + ") from source " + source + ": duplicate pod name \"" +
          ref->metadata.name + "\", ignoring"));
      continue;
    }
    Entry* found = store.find(ref->metadata.uid);
    if (found) {
      if (found->generation != generation_) ++matched;
      found->generation = generation_;
    } else {
      ++matched;
    }
    mergeOne(source, ref, source_annotated, found, store, out, errors);
  }
  return matched;
}

void PodStorage::mergeOne(const std::string& source, const api::PodPtr& ref, bool source_annotated,
                          Entry* found, SourcePods& store, MergeChanges& out,
                          std::vector<base::Status>& errors) {
  if (!found) {
    api::PodPtr added = annotateNew(source, ref, source_annotated, errors);
    if (!added) return;
    store.insert(ref->metadata.uid, Entry{added, ref->content_hash, generation_});
    out.adds.push_back(std::move(added));
    return;
  }

  Entry& entry = *found;
  if (entry.input_hash == ref->content_hash) return;  // the same object as last time

  // kubelet's checkAndUpdatePod.
  const api::Pod& existing = *entry.pod;
  if (!podsDifferSemantically(existing, *ref)) {
    if (podStatusesDiffer(existing, *ref)) {
      auto reconciled = withStatusOf(existing, *ref);
      if (!reconciled.ok()) {
        auto status = reconciled.status().withContext("reconciling pod " + api::podRef(*ref) +
                                                      " from source " + source);
        log()->error("Failed to reconcile pod status pod={} uid={} source={} err={}",
                     api::podRef(*ref), ref->metadata.uid, source, status.message());
        errors.push_back(std::move(status));
        return;
      }
      entry.pod = *reconciled;
      out.reconciles.push_back(entry.pod);
    }
    entry.input_hash = ref->content_hash;
    return;
  }

  auto updated = withChangesOf(existing, *ref, source);
  if (!updated.ok()) {
    auto status = updated.status().withContext("updating pod " + api::podRef(*ref) +
                                               " from source " + source);
    log()->error("Failed to update pod pod={} uid={} source={} err={}", api::podRef(*ref),
                 ref->metadata.uid, source, status.message());
    errors.push_back(std::move(status));
    return;
  }
  entry.pod = *updated;
  entry.input_hash = ref->content_hash;
  // A deleting pod never produces UPDATE: any change while deletionTimestamp is set is a DELETE.
  if (ref->metadata.deletion_timestamp) {
    out.deletes.push_back(entry.pod);
  } else {
    out.updates.push_back(entry.pod);
  }
}

bool PodStorage::mergeSetByPosition(const std::string& source, const api::ChunkedPods& pods,
                                    bool source_annotated, const LastSet& last, SourcePods& store,
                                    MergeChanges& out, std::vector<base::Status>& errors) {
  if (!last.valid || last.pods.size() != pods.size()) return false;
  // Beyond a few changed positions the full merge is as cheap and simpler to trust.
  const size_t limit = std::max<size_t>(16, pods.size() / 16);
  struct Change {
    const api::PodPtr* ref;  // in `pods`
    const api::PodPtr* old;  // in `last.pods`
  };
  std::vector<Change> changed;
  const bool few = api::ChunkedPods::forEachDifference(
      last.pods, pods, [&](const api::PodPtr& old, const api::PodPtr& ref) {
        if (changed.size() == limit) return false;
        changed.push_back({&ref, &old});
        return true;
      });
  if (!few) return false;
  // The unchanged positions are the same objects as last time, so a full merge would find each
  // stored and identical and do nothing for it. What the changed ones do must not reach them:
  // the same full name at each changed position keeps the SET free of duplicates, and a new UID
  // must be new to the store (not another position's) and appear once.
  std::vector<std::string_view> new_uids;
  for (const Change& c : changed) {
    const api::PodPtr& ref = *c.ref;
    const api::PodPtr& old = *c.old;
    if (!ref || ref->metadata.name != old->metadata.name ||
        ref->metadata.namespace_ != old->metadata.namespace_) {
      return false;
    }
    if (ref->metadata.uid == old->metadata.uid) continue;
    if (store.find(ref->metadata.uid) != nullptr) return false;
    new_uids.push_back(ref->metadata.uid);
  }
  std::sort(new_uids.begin(), new_uids.end());
  if (std::adjacent_find(new_uids.begin(), new_uids.end()) != new_uids.end()) return false;

  for (const Change& c : changed) {
    const api::PodPtr& ref = *c.ref;
    const api::PodPtr& old = *c.old;
    mergeOne(source, ref, source_annotated, store.find(ref->metadata.uid), store, out, errors);
    if (ref->metadata.uid != old->metadata.uid) {
      if (api::PodPtr removed = store.erase(old->metadata.uid)) {
        out.removes.push_back(std::move(removed));
      }
    }
  }
  sortByUid(out.removes);
  ++sets_merged_by_position_;
  return true;
}

std::vector<api::PodUpdate> PodStorage::merge(const std::string& source, api::PodUpdate change,
                                              MergeChanges* changes) {
  MergeChanges local;
  MergeChanges& out = changes ? *changes : local;
  out = MergeChanges{};
  std::vector<base::Status> errors;
  const bool seen_before = sources_seen_.count(source) > 0;
  SourcePods& pods = store(source);
  LastSet& last = last_sets_[source];

  switch (change.op) {
    case api::PodOperation::kAdd:
    case api::PodOperation::kUpdate:
    case api::PodOperation::kDelete:
      last = LastSet{};
      updatePods(source, change.pods, change.source_annotated, pods, out, errors);
      break;
    case api::PodOperation::kRemove:
      last = LastSet{};
      for (const auto& p : change.pods) {
        if (!p) continue;
        if (api::PodPtr removed = pods.erase(p->metadata.uid))
          out.removes.push_back(std::move(removed));
      }
      break;
    case api::PodOperation::kSet:
      mergeSet(source, change, seen_before, pods, last, out, errors);
      break;
    case api::PodOperation::kRestore:
      // Restored pods are passed on, not stored, and do not make the source seen.
      for (const auto& p : change.pods) {
        if (p) out.restores.push_back(p);
      }
      break;
    default:
      log()->warn("Received invalid update type op={} source={}", api::podOperationName(change.op),
                  source);
      break;
  }
  errors_[source] = std::move(errors);
  out.first_set = !seen_before && sources_seen_.count(source) > 0;
  if (out.first_set) log()->info("Source seen source={} pods={}", source, pods.size());

  std::vector<api::PodUpdate> emitted = updatesToEmit(source, out);
  if (!emitted.empty()) {
    log()->debug(
        "Merged update source={} op={} adds={} updates={} deletes={} removes={} "
        "reconciles={} restores={}",
        source, api::podOperationName(change.op), out.adds.size(), out.updates.size(),
        out.deletes.size(), out.removes.size(), out.reconciles.size(), out.restores.size());
  }
  return emitted;
}

void PodStorage::mergeSet(const std::string& source, api::PodUpdate& change, bool seen_before,
                          SourcePods& pods, LastSet& last, MergeChanges& out,
                          std::vector<base::Status>& errors) {
  if (change.complete) {
    sources_seen_.insert(source);
  } else if (!seen_before) {
    log()->warn("Source not seen yet: its answer is incomplete source={} reason={}", source,
                base::goQuote(change.incomplete_reason));
  }
  const bool by_position =
      mergeSetByPosition(source, change.pods, change.source_annotated, last, pods, out, errors);
  if (!by_position) {
    ++generation_;
    const size_t kept = updatePods(source, change.pods, change.source_annotated, pods, out, errors);
    // Sweep only when something was left unmarked: the common SET keeps every pod.
    if (kept != pods.size()) {
      pods.forEach([&](Entry& entry) {
        if (entry.generation != generation_) out.removes.push_back(entry.pod);
      });
      sortByUid(out.removes);
      for (const auto& removed : out.removes) pods.erase(removed->metadata.uid);
    }
  }
  // The store now holds exactly one entry per position when nothing was dropped or failed
  // and no UID repeated. A SET merged by position holds no null: its other positions are the
  // last SET's.
  const bool all_present =
      by_position || std::all_of(change.pods.begin(), change.pods.end(),
                                 [](const api::PodPtr& p) { return p != nullptr; });
  last.valid = errors.empty() && all_present && pods.size() == change.pods.size();
  if (last.valid) {
    last.pods = std::move(change.pods);
  } else {
    last.pods.clear();
  }
}

std::vector<api::PodUpdate> PodStorage::updatesToEmit(const std::string& source,
                                                      const MergeChanges& out) const {
  std::vector<api::PodUpdate> emitted;
  switch (mode_) {
    case PodConfigNotificationMode::kIncremental:
      if (!out.removes.empty())
        appendUpdate(emitted, out.removes, api::PodOperation::kRemove, source);
      if (!out.adds.empty()) appendUpdate(emitted, out.adds, api::PodOperation::kAdd, source);
      if (!out.updates.empty())
        appendUpdate(emitted, out.updates, api::PodOperation::kUpdate, source);
      if (!out.deletes.empty())
        appendUpdate(emitted, out.deletes, api::PodOperation::kDelete, source);
      if (!out.restores.empty()) {
        appendUpdate(emitted, out.restores, api::PodOperation::kRestore, source);
      }
      if (out.first_set && out.adds.empty() && out.updates.empty() && out.deletes.empty()) {
        // Tells the consumer the source has been seen even though its first SET changed nothing.
        appendUpdate(emitted, {}, api::PodOperation::kAdd, source);
      }
      if (!out.reconciles.empty()) {
        appendUpdate(emitted, out.reconciles, api::PodOperation::kReconcile, source);
      }
      break;
    case PodConfigNotificationMode::kSnapshotAndUpdates:
      if (!out.removes.empty() || !out.adds.empty() || out.first_set) {
        appendUpdate(emitted, mergedState(), api::PodOperation::kSet, source);
      }
      if (!out.updates.empty())
        appendUpdate(emitted, out.updates, api::PodOperation::kUpdate, source);
      if (!out.deletes.empty())
        appendUpdate(emitted, out.deletes, api::PodOperation::kDelete, source);
      break;
    case PodConfigNotificationMode::kSnapshot:
      if (!out.updates.empty() || !out.deletes.empty() || !out.adds.empty() ||
          !out.removes.empty() || out.first_set) {
        appendUpdate(emitted, mergedState(), api::PodOperation::kSet, source);
      }
      break;
  }
  return emitted;
}

api::PodUpdate PodStorage::sync() const {
  return api::PodUpdate{mergedState(), api::PodOperation::kSet, std::string(api::kAllSource)};
}

std::vector<api::PodPtr> PodStorage::mergedState() const {
  std::vector<api::PodPtr> out;
  size_t total = 0;
  for (const auto& [source, store] : pods_) total += store->size();
  out.reserve(total);
  for (const auto& [source, store] : pods_) {
    const auto first = static_cast<std::ptrdiff_t>(out.size());
    store->forEach([&](Entry& entry) { out.push_back(entry.pod); });
    std::sort(out.begin() + first, out.end(), [](const api::PodPtr& a, const api::PodPtr& b) {
      return a->metadata.uid < b->metadata.uid;
    });
  }
  return out;
}

std::vector<api::PodPtr> PodStorage::pods(const std::string& source) const {
  std::vector<api::PodPtr> out;
  auto it = pods_.find(source);
  if (it == pods_.end()) return out;
  out.reserve(it->second->size());
  it->second->forEach([&](Entry& entry) { out.push_back(entry.pod); });
  sortByUid(out);
  return out;
}

api::PodPtr PodStorage::pod(const std::string& source, const std::string& uid) const {
  auto it = pods_.find(source);
  if (it == pods_.end()) return nullptr;
  const Entry* entry = it->second->find(uid);
  return entry ? entry->pod : nullptr;
}

bool PodStorage::sourceSeen(const std::string& source) const {
  return sources_seen_.count(source) > 0;
}

std::vector<base::Status> PodStorage::sourceErrors(const std::string& source) const {
  auto it = errors_.find(source);
  return it == errors_.end() ? std::vector<base::Status>{} : it->second;
}

}  // namespace nodeagent::config
