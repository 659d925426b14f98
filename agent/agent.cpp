// The agent's SyncHandler half (kubelet.go's HandlePodAdditions/Updates/Removes/Reconcile/Syncs):
// admission and dispatch of pod work to the pod workers. Housekeeping is in housekeeping.cpp.
#include "agent/agent.h"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include "agent/status/pod_status.h"
#include "api/pod_phase.h"
#include "api/pod_update.h"
#include "base/blocking.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

// Oldest first; pods without a creation time (static pods) before all others.
void sortByCreation(std::vector<api::PodPtr>& pods) {
  std::stable_sort(pods.begin(), pods.end(), [](const api::PodPtr& a, const api::PodPtr& b) {
    const auto& ta = a->metadata.creation_timestamp;
    const auto& tb = b->metadata.creation_timestamp;
    if (!ta || !tb) return !ta && tb;
    return *ta < *tb;
  });
}

runtime::NodeAllocatableResources downwardAllocatable(const NodeAllocatable& allocatable) {
  return {allocatable.cpu_milli, allocatable.memory_bytes, allocatable.ephemeral_storage_bytes};
}

PodLifecycleOptions lifecycleOptions(const AgentOptions& options) {
  PodLifecycleOptions lo;
  lo.node_ip = options.node_ip;
  lo.node_allocatable = downwardAllocatable(options.allocatable);
  lo.dns = options.dns;
  lo.network_errors = options.network_errors;
  lo.sandbox_network = options.sandbox_network;
  lo.kill_timeout_minimum = options.kill_timeout_minimum;
  lo.mirror_recreate_delay = options.mirror_recreate_delay;
  lo.allow_root_api_pods = options.allow_root_api_pods;
  lo.seccomp_default = options.seccomp_default;
  // Absolute: the runtime reads the file from its own working directory.
  lo.seccomp_profile_root = std::filesystem::absolute(options.root_dir) / "seccomp";
  return lo;
}

}  // namespace

Agent::Agent(asio::any_io_executor executor, base::Clock& clock, base::Random& random,
             runtime::Runtime& runtime, podmanager::PodManager& pod_manager,
             StatusManager& status_manager, std::function<bool(const std::string&)> source_seen,
             std::function<bool()> all_sources_ready, AgentOptions options)
    : executor_(executor),
      clock_(clock),
      runtime_(runtime),
      pod_manager_(pod_manager),
      status_manager_(status_manager),
      source_seen_(std::move(source_seen)),
      all_sources_ready_(std::move(all_sources_ready)),
      options_(std::move(options)),
      blocking_(options_.blocking_executor ? options_.blocking_executor : executor),
      crash_backoff_(clock, options_.crashloop_backoff_initial, options_.crashloop_backoff_max),
      pod_dirs_(options_.root_dir),
      volumes_(pod_dirs_, options_.allow_root_api_pods, options_.api_objects,
               downwardAllocatable(options_.allocatable)),
      pod_cgroups_(options_.container_manager, options_.memory_capacity,
                   options_.root_dir / "pod-cgroups"),
      probe_handler_(options_.probe_handler ? options_.probe_handler
                                            : std::make_shared<RealProbeHandler>(runtime, clock)),
      sync_loop_(std::make_shared<SyncLoop>(executor, clock, *this, all_sources_ready_,
                                            options_.sync_loop)),
      cleanup_strand_(asio::make_strand(executor)),
      housekeeping_skip_(options_.housekeeping_full_period, options_.container_gc_period) {
  prober_ = std::make_shared<Prober>(
      executor, clock, probe_handler_,
      [this](const std::string& uid) {
        auto status = status_manager_.getPodStatus(uid);
        return status && !status->pod_ip.empty() ? status->pod_ip : options_.node_ip;
      },
      [this](const std::string& uid) {
        // kubelet's probe result channels -> handleProbeSync: sync the pod on the loop.
        asio::dispatch(sync_loop_->strand(), [this, uid] {
          if (auto pod = pod_manager_.getPodByUID(uid)) handlePodSyncs({pod});
        });
      },
      [this](const std::string& uid, const std::string& container, ProbeType type,
             const ProbeOutcome& outcome) {
        auto pod = pod_manager_.getPodByUID(uid);
        if (!pod) return;
        reportProbeFailure(*pod, container, type, outcome, options_.record_event);
      });
  lifecycle_ = std::make_unique<PodLifecycle>(
      PodLifecycle::Deps{
          clock, runtime, status_manager, pod_manager, crash_backoff_, *prober_, *probe_handler_,
          pod_dirs_, volumes_, pod_cgroups_, metrics_, blocking_, options_.record_event,
          [this](const std::string& uid, base::Duration delay) { scheduleSync(uid, delay); },
          options_.api_objects},
      lifecycleOptions(options_));
  pod_workers_ = std::make_unique<podworkers::BasicPodWorkers>(executor, clock, random, *lifecycle_,
                                                               options_.workers);
  pleg_ = std::make_shared<Pleg>(executor, clock, runtime, options_.pleg);
  runtime_.setPreStopHookRunner([handler = probe_handler_, node_ip = options_.node_ip,
                                 record_event = options_.record_event,
                                 status = &status_manager_](runtime::PreStopHookRequest request) {
    // An httpGet hook goes to the pod's IP (its sandbox's, with a network of its own).
    auto pod_status = status->getPodStatus(request.pod->metadata.uid);
    std::string pod_ip = pod_status && !pod_status->pod_ip.empty() ? pod_status->pod_ip : node_ip;
    return runPreStopHook(handler, std::move(pod_ip), record_event, std::move(request));
  });
}

Agent::~Agent() {
  runtime_.setPreStopHookRunner({});
  prober_->stop();
  sync_loop_->stop();
  pleg_->stop();
  pod_workers_->shutdown();
}

void Agent::start() {
  std::weak_ptr<SyncLoop> loop = sync_loop_;
  pleg_->start([loop](const PodLifecycleEvent& e) {
    if (auto l = loop.lock()) l->onPlegEvent(e);
  });
  sync_loop_->start();
}

void Agent::stop(std::function<void()> on_idle) {
  prober_->stop();
  sync_loop_->stop();
  pleg_->stop();
  asio::dispatch(sync_loop_->strand(), [this] { wake_timers_.clear(); });
  pod_workers_->shutdown(std::move(on_idle));
}

void Agent::assertOnSyncLoop(const char* what) const {
  base::assertOnStrand(sync_loop_->strand(), what);
}

// --- SyncHandler -------------------------------------------------------------------------------

void Agent::handlePodAdditions(const api::ChunkedPods& input) {
  assertOnSyncLoop("Agent::handlePodAdditions");
  auto pods = input.toVector();
  sortByCreation(pods);
  // The active pods are computed once per batch and extended as pods are admitted: recomputing
  // them for every added pod (a status copy per existing pod) made a large batch quadratic.
  std::unordered_set<std::string_view> batch_uids;  // views of the UIDs of `pods`
  batch_uids.reserve(pods.size());
  for (const auto& pod : pods) batch_uids.insert(pod->metadata.uid);
  const ActivePodsCache::Key key{pod_manager_.generation(), pod_workers_->generation(),
                                 status_manager_.terminalGeneration()};
  auto active = activePodsBefore(batch_uids, key);
  for (const auto& pod : pods) {
    pod_manager_.addPod(pod);
    registerApiObjects(*pod);
    if (api::isMirrorPod(*pod)) {
      handleMirrorPod(pod);
      continue;
    }
    log()->info("Pod added pod={} uid={} source={}", api::podRef(*pod), pod->metadata.uid,
                api::getPodSource(*pod).valueOr(""));
    admitAndDispatch(pod, active);
  }
  // Keyed by the state before this batch: if the batch itself replaced a pod, the next batch
  // sees another key and walks the pods again.
  active_pods_cache_.put(key, std::move(active));
}

std::vector<api::PodPtr> Agent::activePodsBefore(
    const std::unordered_set<std::string_view>& batch_uids, const ActivePodsCache::Key& key) {
  if (auto cached = active_pods_cache_.take(key)) {
    std::erase_if(*cached,
                  [&](const api::PodPtr& p) { return batch_uids.count(p->metadata.uid) > 0; });
    return std::move(*cached);
  }
  // The few inactive UIDs are fetched at once rather than with lookups per pod.
  const auto terminal = status_manager_.terminalPodUIDs();
  const auto terminated = pod_workers_->knownTerminatedUIDs();
  std::vector<api::PodPtr> active;
  for (const auto& other : pod_manager_.getPods()) {
    const auto& uid = other->metadata.uid;
    if (batch_uids.count(uid) > 0) continue;
    // A pod object with a terminal phase is rare: ask precisely (its cached status wins).
    const bool inactive =
        api::isTerminalPhase(other->status->phase)
            ? podIsInactive(*other)
            : rejected_.count(uid) > 0 || terminal.count(uid) > 0 || terminated.count(uid) > 0;
    if (!inactive) active.push_back(other);
  }
  return active;
}

void Agent::admitAndDispatch(const api::PodPtr& pod, std::vector<api::PodPtr>& active) {
  if (!pod_workers_->isPodTerminationRequested(pod->metadata.uid)) {
    AdmitResult result;
    if (options_.admit_handler) result = options_.admit_handler(*pod);
    if (result.admit) result = canAdmitPod(*pod, active, options_.allocatable);
    if (!result.admit) {
      rejectPod(*pod, result.reason, result.message);
      return;
    }
  }
  if (!podIsInactive(*pod)) active.push_back(pod);
  trackDeadline(pod);
  prober_->addPod(*pod);
  dispatchWork(pod, api::SyncPodType::kCreate, pod_manager_.getMirrorPodByPod(*pod));
}

void Agent::handlePodUpdates(const api::ChunkedPods& pods) {
  assertOnSyncLoop("Agent::handlePodUpdates");
  for (const auto& pod : pods) {
    pod_manager_.updatePod(pod);
    registerApiObjects(*pod);
    if (api::isMirrorPod(*pod)) {
      handleMirrorPod(pod);
      continue;
    }
    trackDeadline(pod);
    prober_->addPod(*pod);
    dispatchWork(pod, api::SyncPodType::kUpdate, pod_manager_.getMirrorPodByPod(*pod));
  }
}

void Agent::handlePodRemoves(const api::ChunkedPods& pods) {
  assertOnSyncLoop("Agent::handlePodRemoves");
  for (const auto& pod : pods) {
    pod_manager_.deletePod(pod);
    if (options_.api_objects) options_.api_objects->unregisterPod(pod->metadata.uid);
    if (api::isMirrorPod(*pod)) {
      // The mirror is gone from the apiserver (kubelet hands the removed one to the sync, which
      // then re-creates it only at the next resync): sync with the mirror the pod manager has
      // now, none, so that it is re-created at once, as after the apiserver lost its state.
      if (auto static_pod = pod_manager_.getPodByMirrorPod(*pod)) {
        dispatchWork(static_pod, api::SyncPodType::kUpdate,
                     pod_manager_.getMirrorPodByPod(*static_pod));
      }
      continue;
    }
    prober_->removePod(pod->metadata.uid);
    deletePod(pod);
  }
}

void Agent::handlePodReconcile(const api::ChunkedPods& pods) {
  assertOnSyncLoop("Agent::handlePodReconcile");
  for (const auto& pod : pods) {
    pod_manager_.updatePod(pod);
    registerApiObjects(*pod);
    if (api::isMirrorPod(*pod)) continue;
    // A pod with readiness gates whose Ready condition is stale needs a sync to recompute it.
    if (pod->spec->readiness_gates.empty()) continue;
    const auto* ready = findCondition(pod->status->conditions, api::kConditionReady);
    if (ready == nullptr) continue;
    auto want =
        generatePodReadyCondition(*pod->spec, pod->status->conditions,
                                  pod->status->container_statuses, true, pod->status->phase);
    if (ready->status != want.status || ready->message != want.message) {
      dispatchWork(pod, api::SyncPodType::kSync, pod_manager_.getMirrorPodByPod(*pod));
    }
  }
}

void Agent::registerApiObjects(const api::Pod& pod) {
  if (!options_.api_objects || api::isMirrorPod(pod)) return;
  // A terminated pod waiting for its cleanup reads nothing more (kubelet's pod manager).
  if (api::isTerminalPhase(pod.status->phase)) {
    options_.api_objects->unregisterPod(pod.metadata.uid);
  } else {
    options_.api_objects->registerPod(pod);
  }
}

void Agent::handlePodSyncs(const std::vector<api::PodPtr>& pods) {
  assertOnSyncLoop("Agent::handlePodSyncs");
  for (const auto& pod : pods) {
    dispatchWork(pod, api::SyncPodType::kSync, pod_manager_.getMirrorPodByPod(*pod));
  }
}

void Agent::handlePlegEvent(const PodLifecycleEvent& event) {
  assertOnSyncLoop("Agent::handlePlegEvent");
  if (event.type == PodLifecycleEvent::Type::kContainerRemoved) {
    if (!pod_manager_.getPodByUID(event.pod_uid)) ++unknown_pod_events_;
    return;
  }
  auto pod = pod_manager_.getPodByUID(event.pod_uid);
  if (!pod) {
    ++unknown_pod_events_;  // a container nothing wants: housekeeping must look
    return;
  }
  if (event.type == PodLifecycleEvent::Type::kContainerDied) ++container_exits_;
  log()->debug("PLEG event pod={} event={} container={}", api::podRef(*pod),
               podLifecycleEventTypeName(event.type), event.container_id);
  handlePodSyncs({pod});
}

std::vector<api::PodPtr> Agent::podsToSync() {
  assertOnSyncLoop("Agent::podsToSync");
  std::vector<api::PodPtr> out;
  // The queue gives each UID once; only the deadline pods may repeat one of them.
  const auto due = pod_workers_->getWorkToSync();
  out.reserve(due.size());
  for (const auto& uid : due) {
    if (auto pod = pod_manager_.getPodByUID(uid)) out.push_back(std::move(pod));
  }
  if (deadline_uids_.empty()) return out;
  std::unordered_set<std::string_view> added(due.begin(), due.end());
  for (auto it = deadline_uids_.begin(); it != deadline_uids_.end();) {
    auto pod = pod_manager_.getPodByUID(*it);
    if (!pod) {
      it = deadline_uids_.erase(it);
      continue;
    }
    if (pastActiveDeadline(*pod, status_manager_, clock_) && added.insert(*it).second) {
      out.push_back(pod);
    }
    ++it;
  }
  return out;
}

void Agent::dispatchWork(const api::PodPtr& pod, api::SyncPodType type, const api::PodPtr& mirror) {
  if (rejected_.count(pod->metadata.uid) > 0) return;  // admission is final for a UID
  podworkers::UpdatePodOptions options;
  options.update_type = type;
  options.pod = pod;
  options.mirror_pod = mirror;
  pod_workers_->updatePod(std::move(options));
}

void Agent::handleMirrorPod(const api::PodPtr& mirror) {
  if (auto pod = pod_manager_.getPodByMirrorPod(*mirror)) {
    dispatchWork(pod, api::SyncPodType::kUpdate, mirror);
  }
}

void Agent::deletePod(const api::PodPtr& pod) {
  auto source = api::getPodSource(*pod).valueOr(std::string(api::kApiserverSource));
  if (!source_seen_(source)) {
    // The pod may still be wanted by a source that has not reported yet.
    log()->info("Skipping delete: source not ready pod={} source={}", api::podRef(*pod), source);
    return;
  }
  log()->info("Pod removed, killing pod={} uid={}", api::podRef(*pod), pod->metadata.uid);
  rejected_.erase(pod->metadata.uid);
  killPod(pod, false);
}

void Agent::killPod(api::PodPtr pod, bool runtime_pod) {
  podworkers::UpdatePodOptions options;
  options.update_type = api::SyncPodType::kKill;
  options.pod = std::move(pod);
  options.runtime_pod = runtime_pod;
  pod_workers_->updatePod(std::move(options));
}

std::vector<api::PodPtr> Agent::activePods() const {
  std::vector<api::PodPtr> out;
  for (auto& pod : pod_manager_.getPods()) {
    const auto& uid = pod->metadata.uid;
    auto phase = status_manager_.getPodPhase(uid);
    if (phase.empty()) phase = pod->status->phase;
    if (api::isTerminalPhase(phase) || pod_workers_->isPodTerminationRequested(uid) ||
        pod_workers_->isPodKnownTerminated(uid)) {
      continue;
    }
    out.push_back(std::move(pod));
  }
  return out;
}

void Agent::evictPod(api::PodPtr pod, api::PodStatus status,
                     std::optional<int64_t> grace_override) {
  log()->info("Evicting pod pod={} uid={} reason={} message={}", api::podRef(*pod),
              pod->metadata.uid, status.reason, status.message);
  podworkers::UpdatePodOptions options;
  options.update_type = api::SyncPodType::kKill;
  options.pod = std::move(pod);
  podworkers::KillPodOptions kill;
  kill.evict = true;
  kill.grace_period_seconds_override = grace_override;
  kill.pod_status_fn = [status = std::move(status)](api::PodStatus& s) {
    s.phase = status.phase;
    s.reason = status.reason;
    s.message = status.message;
  };
  options.kill_pod_options = std::move(kill);
  pod_workers_->updatePod(std::move(options));
}

bool Agent::podCleanedUp(const api::Pod& pod) const {
  const auto& uid = pod.metadata.uid;
  return !pod_workers_->couldHaveRunningContainers(uid) &&
         (!pod_cgroups_.enabled() || !pod_cgroups_.made(uid));
}

void Agent::rejectPod(const api::Pod& pod, const std::string& reason, const std::string& message) {
  log()->warn("Pod rejected by admission pod={} uid={} reason={} message={}", api::podRef(pod),
              pod.metadata.uid, reason, message);
  ++metrics_.pods_rejected;
  rejected_.insert(pod.metadata.uid);
  api::PodStatus status = *pod.status;
  status.phase = std::string(api::kPhaseFailed);
  status.reason = reason;
  status.message = "Pod " + message;
  status_manager_.setPodStatus(pod, std::move(status));
}

bool Agent::podIsInactive(const api::Pod& pod) const {
  if (rejected_.count(pod.metadata.uid) > 0) return true;
  // The phase only: copying whole statuses here made each addition slow on a large node.
  auto phase = status_manager_.getPodPhase(pod.metadata.uid);
  if (phase.empty()) phase = pod.status->phase;
  if (api::isTerminalPhase(phase)) return true;
  return pod_workers_->isPodKnownTerminated(pod.metadata.uid);
}

void Agent::trackDeadline(const api::PodPtr& pod) {
  if (pod->spec->active_deadline_seconds) {
    deadline_uids_.insert(pod->metadata.uid);
  } else {
    deadline_uids_.erase(pod->metadata.uid);
  }
}

void Agent::scheduleSync(const std::string& uid, base::Duration delay) {
  asio::dispatch(sync_loop_->strand(), [this, uid, delay] {
    auto& timer = wake_timers_[uid];
    if (!timer) timer = clock_.makeTimer(sync_loop_->strand());
    timer->asyncWaitFor(delay, [this, uid] {
      wake_timers_.erase(uid);
      if (auto pod = pod_manager_.getPodByUID(uid)) handlePodSyncs({pod});
    });
  });
}

// --- AgentView ---------------------------------------------------------------------------------

uint64_t Agent::podsWithStatusVersion() const {
  // Both only grow, so their sum moves whenever either does.
  return pod_manager_.version() + status_manager_.version();
}

void Agent::visitPodsWithStatus(const PodVisitor& fn) const {
  const auto pods = pod_manager_.getPods();  // in UID order
  const auto stamps = status_manager_.statusStamps(pods);
  for (size_t i = 0; i < pods.size(); ++i) {
    const std::string& uid = pods[i]->metadata.uid;
    fn(*pods[i], stamps[i], [&] { return status_manager_.getPodStatus(uid); });
  }
}

AgentView::PodWithStatus Agent::podByName(std::string_view ns, std::string_view name) const {
  PodWithStatus found;
  found.pod = pod_manager_.getPodByName(ns, name);
  if (found.pod) found.status = status_manager_.getPodStatus(found.pod->metadata.uid);
  return found;
}

bool Agent::healthy(std::string* why) const { return pleg_->healthy(why); }

std::string Agent::metricsText() const {
  std::ostringstream out;
  writeAgentMetrics(out, metrics_, *pleg_, *sync_loop_, options_.node_name);
  return out.str();
}

}  // namespace nodeagent::agent
