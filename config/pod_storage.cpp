#include "config/pod_storage.h"

#include <chrono>
#include <functional>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "api/pod_json.h"
#include "api/time.h"
#include "base/log.h"

namespace nodeagent::config {
namespace {

using nlohmann::json;

std::shared_ptr<spdlog::logger> log() {
  static const auto logger = base::logger("config");
  return logger;
}

bool isLocalAnnotationKey(std::string_view key) {
  return key == api::kConfigSourceAnnotationKey || key == api::kConfigMirrorAnnotationKey ||
         key == api::kConfigFirstSeenAnnotationKey;
}

// Full-name key of one update's duplicate check; views into the pods of that update, so no
// string is built per pod.
struct NameKey {
  std::string_view name;
  std::string_view ns;
  bool operator==(const NameKey&) const = default;
};
struct NameKeyHash {
  size_t operator()(const NameKey& k) const {
    const size_t h = std::hash<std::string_view>()(k.name);
    return h ^ (std::hash<std::string_view>()(k.ns) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  }
};

// The pod's whole object as JSON (null if the raw text is unreadable, which a decoded pod never is).
json rawJson(const api::Pod& pod) {
  if (!pod.raw) return json(nullptr);
  return json::parse(*pod.raw, nullptr, /*allow_exceptions=*/false);
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

std::string nowRfc3339Nano(base::Clock& clock) {
  return api::formatNanoTime(
      std::chrono::time_point_cast<std::chrono::nanoseconds>(clock.wallNow()));
}

void appendUpdate(std::vector<api::PodUpdate>& out, std::vector<api::PodPtr> pods,
                  api::PodOperation op, const std::string& source) {
  out.push_back(api::PodUpdate{std::move(pods), op, source});
}

}  // namespace

bool annotationsEqualIgnoringLocal(const api::StringMap& existing,
                                   const api::StringMap& candidate) {
  // Both maps are sorted: walk them together, skipping the local keys.
  auto a = existing.begin();
  auto b = candidate.begin();
  while (true) {
    while (a != existing.end() && isLocalAnnotationKey(a->first)) ++a;
    while (b != candidate.end() && isLocalAnnotationKey(b->first)) ++b;
    if (a == existing.end() || b == candidate.end()) return a == existing.end() && b == candidate.end();
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

api::PodPtr PodStorage::annotateNew(const std::string& source, const api::PodPtr& ref,
                                    std::vector<base::Status>& errors) const {
  // kubelet sets config.source on every incoming pod and config.seen on first sight (overwriting
  // whatever the source sent).
  auto annotated =
      api::withAnnotations(*ref, {{std::string(api::kConfigSourceAnnotationKey), source},
                                  {std::string(api::kConfigFirstSeenAnnotationKey),
                                   nowRfc3339Nano(clock_)}});
  if (!annotated.ok()) {
    auto status = annotated.status().withContext("pod " + api::podRef(*ref) + " uid=" +
                                                 ref->metadata.uid + " from source " + source);
    log()->error("Failed to annotate pod, ignoring it pod={} uid={} source={} err={}",
                 api::podRef(*ref), ref->metadata.uid, source, status.message());
    errors.push_back(std::move(status));
    return nullptr;
  }
  return *annotated;
}

void PodStorage::updatePods(const std::string& source, const std::vector<api::PodPtr>& pods,
                            SourcePods& store, MergeChanges& out,
                            std::vector<base::Status>& errors) {
  std::unordered_set<NameKey, NameKeyHash> names;
  names.reserve(pods.size());
  for (size_t i = 0; i < pods.size(); ++i) {
    const api::PodPtr& ref = pods[i];
    if (!ref) continue;
    // kubelet's filterInvalidPods: only duplicate full names within one update; the first wins.
    if (!names.insert(NameKey{ref->metadata.name, ref->metadata.namespace_}).second) {
      log()->warn(
          "Pod failed validation due to duplicate pod name, ignoring pod={} uid={} source={} "
          "index={}",
          api::podRef(*ref), ref->metadata.uid, source, i + 1);
      errors.push_back(base::alreadyExistsError(
          "pod " + api::podRef(*ref) + " (uid " + ref->metadata.uid + ", item " +
          std::to_string(i + 1) + ") from source " + source + ": duplicate pod name \"" +
          ref->metadata.name + "\", ignoring"));
      continue;
    }

    auto it = store.find(ref->metadata.uid);
    if (it == store.end()) {
      api::PodPtr added = annotateNew(source, ref, errors);
      if (!added) continue;
      store.emplace(ref->metadata.uid, Entry{added, ref->content_hash, generation_});
      out.adds.push_back(std::move(added));
      continue;
    }

    Entry& entry = it->second;
    entry.generation = generation_;
    if (entry.input_hash == ref->content_hash) continue;  // the same object as last time

    // kubelet's checkAndUpdatePod.
    const api::Pod& existing = *entry.pod;
    if (!podsDifferSemantically(existing, *ref)) {
      if (podStatusesDiffer(existing, *ref)) {
        const json ref_json = rawJson(*ref);
        auto reconciled =
            api::withJsonEdit(existing, [&](json& j) { copyMember(j, ref_json, "status"); });
        if (!reconciled.ok()) {
          auto status = reconciled.status().withContext("reconciling pod " + api::podRef(*ref) +
                                                        " from source " + source);
          log()->error("Failed to reconcile pod status pod={} uid={} source={} err={}",
                       api::podRef(*ref), ref->metadata.uid, source, status.message());
          errors.push_back(std::move(status));
          continue;
        }
        entry.pod = *reconciled;
        out.reconciles.push_back(entry.pod);
      }
      entry.input_hash = ref->content_hash;
      continue;
    }

    // The stored object keeps its identity and every field kubelet does not compare; the compared
    // fields and the status come from the new one, the local annotations stay the stored ones.
    const json ref_json = rawJson(*ref);
    auto updated = api::withJsonEdit(existing, [&](json& j) {
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
        auto kept = existing.metadata.annotations.find(std::string(key));
        if (kept != existing.metadata.annotations.end()) annotations[kept->first] = kept->second;
      }
      meta["annotations"] = std::move(annotations);
    });
    if (!updated.ok()) {
      auto status = updated.status().withContext("updating pod " + api::podRef(*ref) +
                                                 " from source " + source);
      log()->error("Failed to update pod pod={} uid={} source={} err={}", api::podRef(*ref),
                   ref->metadata.uid, source, status.message());
      errors.push_back(std::move(status));
      continue;
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
}

std::vector<api::PodUpdate> PodStorage::merge(const std::string& source,
                                              const api::PodUpdate& change,
                                              MergeChanges* changes) {
  MergeChanges local;
  MergeChanges& out = changes ? *changes : local;
  out = MergeChanges{};
  std::vector<base::Status> errors;
  const bool seen_before = sources_seen_.count(source) > 0;
  SourcePods& store = pods_[source];

  switch (change.op) {
    case api::PodOperation::kAdd:
    case api::PodOperation::kUpdate:
    case api::PodOperation::kDelete:
      updatePods(source, change.pods, store, out, errors);
      break;
    case api::PodOperation::kRemove:
      for (const auto& p : change.pods) {
        if (!p) continue;
        auto it = store.find(p->metadata.uid);
        if (it == store.end()) continue;
        out.removes.push_back(it->second.pod);
        store.erase(it);
      }
      break;
    case api::PodOperation::kSet: {
      sources_seen_.insert(source);
      ++generation_;
      updatePods(source, change.pods, store, out, errors);
      for (auto it = store.begin(); it != store.end();) {
        if (it->second.generation != generation_) {
          out.removes.push_back(it->second.pod);
          it = store.erase(it);
        } else {
          ++it;
        }
      }
      break;
    }
    case api::PodOperation::kRestore:
      // Restored pods are passed on, not stored, and do not make the source seen.
      for (const auto& p : change.pods) {
        if (p) out.restores.push_back(p);
      }
      break;
    default:
      log()->warn("Received invalid update type op={} source={}",
                  api::podOperationName(change.op), source);
      break;
  }
  errors_[source] = std::move(errors);
  out.first_set = !seen_before && sources_seen_.count(source) > 0;
  if (out.first_set) log()->info("Source seen source={} pods={}", source, store.size());

  std::vector<api::PodUpdate> emitted;
  switch (mode_) {
    case PodConfigNotificationMode::kIncremental:
      if (!out.removes.empty()) appendUpdate(emitted, out.removes, api::PodOperation::kRemove, source);
      if (!out.adds.empty()) appendUpdate(emitted, out.adds, api::PodOperation::kAdd, source);
      if (!out.updates.empty()) appendUpdate(emitted, out.updates, api::PodOperation::kUpdate, source);
      if (!out.deletes.empty()) appendUpdate(emitted, out.deletes, api::PodOperation::kDelete, source);
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
      if (!out.updates.empty()) appendUpdate(emitted, out.updates, api::PodOperation::kUpdate, source);
      if (!out.deletes.empty()) appendUpdate(emitted, out.deletes, api::PodOperation::kDelete, source);
      break;
    case PodConfigNotificationMode::kSnapshot:
      if (!out.updates.empty() || !out.deletes.empty() || !out.adds.empty() ||
          !out.removes.empty() || out.first_set) {
        appendUpdate(emitted, mergedState(), api::PodOperation::kSet, source);
      }
      break;
  }
  if (!emitted.empty()) {
    log()->debug("Merged update source={} op={} adds={} updates={} deletes={} removes={} "
                 "reconciles={} restores={}",
                 source, api::podOperationName(change.op), out.adds.size(), out.updates.size(),
                 out.deletes.size(), out.removes.size(), out.reconciles.size(),
                 out.restores.size());
  }
  return emitted;
}

api::PodUpdate PodStorage::sync() const {
  return api::PodUpdate{mergedState(), api::PodOperation::kSet, std::string(api::kAllSource)};
}

std::vector<api::PodPtr> PodStorage::mergedState() const {
  std::vector<api::PodPtr> out;
  size_t total = 0;
  for (const auto& [source, store] : pods_) total += store.size();
  out.reserve(total);
  for (const auto& [source, store] : pods_) {
    for (const auto& [uid, entry] : store) out.push_back(entry.pod);
  }
  return out;
}

std::vector<api::PodPtr> PodStorage::pods(const std::string& source) const {
  std::vector<api::PodPtr> out;
  auto it = pods_.find(source);
  if (it == pods_.end()) return out;
  out.reserve(it->second.size());
  for (const auto& [uid, entry] : it->second) out.push_back(entry.pod);
  return out;
}

api::PodPtr PodStorage::pod(const std::string& source, const std::string& uid) const {
  auto it = pods_.find(source);
  if (it == pods_.end()) return nullptr;
  auto p = it->second.find(uid);
  return p == it->second.end() ? nullptr : p->second.pod;
}

bool PodStorage::sourceSeen(const std::string& source) const {
  return sources_seen_.count(source) > 0;
}

std::vector<base::Status> PodStorage::sourceErrors(const std::string& source) const {
  auto it = errors_.find(source);
  return it == errors_.end() ? std::vector<base::Status>{} : it->second;
}

}  // namespace nodeagent::config
