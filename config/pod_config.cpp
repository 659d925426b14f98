#include "config/pod_config.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "base/log.h"

namespace nodeagent::config {
namespace {

NODEAGENT_LOGGER("config")

// Checkpoint work derived from one merge of the api source.
struct CheckpointWork {
  // Pods whose checkpoint must match them now (written if annotated, otherwise removed).
  std::vector<api::PodPtr> write;
  std::vector<std::string> remove;
  // On the api source's first SET: the UIDs it has. Checkpoints of any other UID are left over
  // from pods deleted while the agent was down, and go.
  std::optional<std::set<std::string>> keep_only;
};

void runCheckpointWork(CheckpointManager& manager, const CheckpointWork& work) {
  for (const auto& pod : work.write) {
    if (auto s = manager.writePod(*pod); !s.ok()) {
      log()->error("Failed to update pod checkpoint pod={} uid={} err={}", api::podRef(*pod),
                   pod->metadata.uid, s.message());
    }
  }
  for (const auto& uid : work.remove) {
    if (auto s = manager.deletePod(uid); !s.ok()) {
      log()->error("Failed to remove pod checkpoint uid={} err={}", uid, s.message());
    }
  }
  if (work.keep_only) {
    auto uids = manager.checkpointedUids();
    if (!uids.ok()) {
      log()->error("Failed to list pod checkpoints err={}", uids.status().message());
      return;
    }
    for (const auto& uid : *uids) {
      if (work.keep_only->count(uid)) continue;
      if (auto s = manager.deletePod(uid); !s.ok()) {
        log()->error("Failed to remove stale pod checkpoint uid={} err={}", uid, s.message());
      }
    }
  }
}

}  // namespace

struct PodConfig::State {
  State(asio::any_io_executor executor, base::Clock& clock, Output out, PodConfigOptions options)
      : strand(asio::make_strand(executor)), storage(options.mode, clock), output(std::move(out)) {
    if (!options.checkpoint_dir.empty()) {
      checkpoints = std::make_shared<CheckpointManager>(options.checkpoint_dir);
      if (options.blocking_executor)
        io_strand.emplace(asio::make_strand(*options.blocking_executor));
    }
  }

  void mergeOnStrand(const std::string& source, api::PodUpdate update);
  void scheduleCheckpoints(const MergeChanges& changes);

  asio::strand<asio::any_io_executor> strand;
  PodStorage storage;  // on `strand` only
  Output output;
  std::shared_ptr<CheckpointManager> checkpoints;
  std::optional<asio::strand<asio::any_io_executor>> io_strand;
  std::atomic<bool> closed{false};

  // What the any-thread queries read; written on `strand`.
  mutable std::mutex mu;
  std::set<std::string> sources;
  std::set<std::string> seen;
  std::set<std::string> answered;
  std::map<std::string, std::string> incomplete_reasons;
  std::map<std::string, std::vector<base::Status>> errors;
  bool restored = false;
};

void PodConfig::State::mergeOnStrand(const std::string& source, api::PodUpdate update) {
  if (closed.load()) return;
  MergeChanges changes;
  const bool is_set = update.op == api::PodOperation::kSet;
  const bool complete = update.complete;
  std::string incomplete_reason = update.incomplete_reason;  // storage logs it too
  std::vector<api::PodUpdate> emitted = storage.merge(source, std::move(update), &changes);
  {
    std::lock_guard lock(mu);
    if (changes.first_set) seen.insert(source);
    if (is_set) {
      answered.insert(source);
      if (complete) {
        incomplete_reasons.erase(source);
      } else {
        incomplete_reasons[source] = std::move(incomplete_reason);
      }
    }
    auto errs = storage.sourceErrors(source);
    if (errs.empty()) {
      errors.erase(source);
    } else {
      errors[source] = std::move(errs);
    }
  }
  if (checkpoints && source == api::kApiserverSource) scheduleCheckpoints(changes);
  for (auto& u : emitted) {
    if (closed.load()) return;
    output(std::move(u));
  }
}

void PodConfig::State::scheduleCheckpoints(const MergeChanges& changes) {
  auto work = std::make_shared<CheckpointWork>();
  // Whatever the op, the stored pod is now the pod's truth: RECONCILE and DELETE refresh the
  // checkpoint too, as kubelet's pod manager rewrites it on every update.
  for (const auto* list :
       {&changes.adds, &changes.updates, &changes.deletes, &changes.reconciles}) {
    work->write.insert(work->write.end(), list->begin(), list->end());
  }
  for (const auto& pod : changes.removes) work->remove.push_back(pod->metadata.uid);
  if (changes.first_set) {
    std::set<std::string> uids;
    for (const auto& pod : storage.pods(std::string(api::kApiserverSource))) {
      uids.insert(pod->metadata.uid);
    }
    work->keep_only = std::move(uids);
  }
  if (work->write.empty() && work->remove.empty() && !work->keep_only) return;

  // Writing a checkpoint is a small file plus two fsyncs: usually well under a millisecond on
  // local storage, but a loaded disk can stall fsync for seconds, and the config strand carries
  // every source's updates. So the agent gives a blocking pool and the files are written there, on
  // a strand of their own so that a write and a later removal of the same pod stay in order.
  // Without one (tests, tools) the work runs here: the pods are immutable, so either way it only
  // reads its own copy of the pointers.
  if (io_strand) {
    asio::post(*io_strand, [manager = checkpoints, work] { runCheckpointWork(*manager, *work); });
  } else {
    runCheckpointWork(*checkpoints, *work);
  }
}

PodConfig::PodConfig(asio::any_io_executor executor, base::Clock& clock, Output output,
                     PodConfigOptions options)
    : state_(std::make_shared<State>(std::move(executor), clock, std::move(output),
                                     std::move(options))) {}

PodConfig::~PodConfig() { state_->closed.store(true); }

PodUpdateSink PodConfig::channel(std::string source) {
  NA_CHECK(!source.empty(), "PodConfig::channel given an empty source name");
  {
    std::lock_guard lock(state_->mu);
    if (state_->sources.insert(source).second)
      log()->info("Pod source configured source={}", source);
  }
  std::weak_ptr<State> weak = state_;
  return [weak, source = std::move(source)](api::PodUpdate update) {
    auto state = weak.lock();
    if (!state || state->closed.load()) return;
    asio::post(state->strand, [state, source, update = std::move(update)]() mutable {
      state->mergeOnStrand(source, std::move(update));
    });
  };
}

bool PodConfig::seenAllSources(const std::set<std::string>& seen_sources) const {
  std::lock_guard lock(state_->mu);
  return std::all_of(state_->sources.begin(), state_->sources.end(), [&](const std::string& s) {
    return seen_sources.count(s) > 0 && state_->seen.count(s) > 0;
  });
}

bool PodConfig::sourceSeen(const std::string& source) const {
  std::lock_guard lock(state_->mu);
  return state_->seen.count(source) > 0;
}

PodConfig::SourceState PodConfig::sourceState(const std::string& source) const {
  std::lock_guard lock(state_->mu);
  SourceState out;
  out.answered = state_->answered.count(source) > 0;
  out.seen = state_->seen.count(source) > 0;
  if (!out.seen) {
    auto it = state_->incomplete_reasons.find(source);
    if (it != state_->incomplete_reasons.end()) out.reason = it->second;
  }
  return out;
}

std::set<std::string> PodConfig::sources() const {
  std::lock_guard lock(state_->mu);
  return state_->sources;
}

std::vector<base::Status> PodConfig::sourceErrors(const std::string& source) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->errors.find(source);
  return it == state_->errors.end() ? std::vector<base::Status>{} : it->second;
}

void PodConfig::sync() {
  asio::post(state_->strand, [state = state_] {
    if (state->closed.load()) return;
    state->output(state->storage.sync());
  });
}

base::StatusOr<CheckpointLoad> PodConfig::restore() {
  if (!state_->checkpoints) {
    return base::failedPreconditionError("restoring pods: no checkpoint folder is configured");
  }
  {
    std::lock_guard lock(state_->mu);
    if (state_->restored) return CheckpointLoad{};
    state_->restored = true;
  }
  ASSIGN_OR_RETURN(CheckpointLoad load, state_->checkpoints->loadPods());
  log()->info("Restoring pods from checkpoints pods={} skipped={}", load.pods.size(),
              load.errors.size());
  channel(std::string(api::kApiserverSource))(
      api::PodUpdate{load.pods, api::PodOperation::kRestore, std::string(api::kApiserverSource)});
  return load;
}

}  // namespace nodeagent::config
