#include "agent/agent.h"

#include <algorithm>
#include <system_error>
#include <unordered_set>

#include "agent/pod_status.h"
#include "api/pod_json.h"
#include "api/pod_update.h"
#include "base/log.h"
#include "base/path_component.h"
#include "base/printable.h"
#include "podmanager/mirror_client.h"

namespace nodeagent::agent {
namespace {

std::shared_ptr<spdlog::logger> log() {
  static auto l = base::logger("agent");
  return l;
}

bool hasRequestsOrLimits(const api::Container& c) {
  return !c.resources.requests.empty() || !c.resources.limits.empty();
}

using RecordEvent = decltype(AgentOptions::record_event);

ProbeTarget hookTarget(const api::Handler& handler, const api::Container& container,
                       const runtime::ContainerId& id, base::Duration timeout,
                       const std::string& node_ip) {
  ProbeTarget target;
  target.handler = handler;
  target.timeout = timeout;
  target.container_id = id;
  target.pod_ip = node_ip;
  target.ports = container.ports;
  return target;
}

// kubelet's executePreStopHook through its HandlerRunner: an exec or httpGet hook bounded by the
// grace period; a failure is logged and recorded as a FailedPreStopHook event. The handler's
// timer and socket share a strand of their own (kills of one pod run in parallel).
asio::awaitable<void> runPreStopHook(std::shared_ptr<ProbeHandler> handler, std::string node_ip,
                                     RecordEvent record_event,
                                     runtime::PreStopHookRequest request) {
  const api::Pod& pod = *request.pod;
  const auto* container = runtime::findSpecContainer(pod, request.container_name);
  if (container == nullptr || !container->lifecycle || !container->lifecycle->pre_stop) co_return;
  auto target =
      hookTarget(*container->lifecycle->pre_stop, *container, request.id, request.timeout, node_ip);
  log()->info("Running preStop hook pod={} container={} id={}", api::podRef(pod), container->name,
              request.id.toString());
  auto strand = asio::make_strand(co_await asio::this_coro::executor);
  auto hook = handler->runHook(target);
  auto failure = co_await asio::co_spawn(strand, std::move(hook), asio::use_awaitable);
  if (!failure) co_return;
  log()->warn("PreStop hook failed pod={} container={} id={} error={}", api::podRef(pod),
              container->name, request.id.toString(), base::goQuote(failure->error));
  if (record_event) {
    record_event(pod, "Warning", "FailedPreStopHook",
                 hookFailureMessage(target.handler, container->name, pod, *failure),
                 "spec.containers{" + container->name + "}");
  }
}

}  // namespace

void AgentMetrics::observeStartLatency(base::Duration d) {
  pod_start.observe(std::chrono::duration<double>(d).count());
}

void AgentMetrics::countConfigUpdate(api::PodOperation op, const std::string& source) {
  std::lock_guard lock(config_updates_mu_);
  ++config_updates_[{std::string(api::podOperationName(op)), source}];
}

std::map<std::pair<std::string, std::string>, uint64_t> AgentMetrics::configUpdates() const {
  std::lock_guard lock(config_updates_mu_);
  return config_updates_;
}

std::string podQosClass(const api::Pod& pod) {
  bool any = false;
  bool guaranteed = true;
  auto visit = [&](const api::Container& c) {
    if (hasRequestsOrLimits(c)) any = true;
    for (const char* r : {"cpu", "memory"}) {
      auto lim = c.resources.limits.find(r);
      if (lim == c.resources.limits.end()) {
        guaranteed = false;
        continue;
      }
      auto req = c.resources.requests.find(r);
      if (req != c.resources.requests.end() && !(req->second == lim->second)) guaranteed = false;
    }
  };
  for (const auto& c : pod.spec.init_containers) visit(c);
  for (const auto& c : pod.spec.containers) visit(c);
  if (!any) return "BestEffort";
  return guaranteed ? "Guaranteed" : "Burstable";
}

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
      crash_backoff_(clock, options_.crashloop_backoff_initial, options_.crashloop_backoff_max),
      cleanup_strand_(asio::make_strand(executor)) {
  pod_workers_ = std::make_unique<podworkers::BasicPodWorkers>(executor, clock, random, *this,
                                                               options_.workers);
  sync_loop_ =
      std::make_shared<SyncLoop>(executor, clock, *this, all_sources_ready_, options_.sync_loop);
  pleg_ = std::make_shared<Pleg>(executor, clock, runtime, options_.pleg);
  probe_handler_ = options_.probe_handler ? options_.probe_handler
                                          : std::make_shared<RealProbeHandler>(runtime, clock);
  prober_ = std::make_shared<Prober>(
      executor, clock, probe_handler_, options_.node_ip,
      [this](const std::string& uid) {
        // kubelet's probe result channels -> handleProbeSync: sync the pod on the loop.
        asio::dispatch(sync_loop_->strand(), [this, uid] {
          if (auto pod = pod_manager_.getPodByUID(uid)) handlePodSyncs({pod});
        });
      },
      [this](const std::string& uid, const std::string& container, ProbeType type,
             const ProbeOutcome& outcome) { onProbeFailure(uid, container, type, outcome); });
  runtime_.setPreStopHookRunner(
      [handler = probe_handler_, node_ip = options_.node_ip,
       record_event = options_.record_event](runtime::PreStopHookRequest request) {
        return runPreStopHook(handler, node_ip, record_event, std::move(request));
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

base::StatusOr<std::filesystem::path> Agent::podDir(const std::string& uid) const {
  return base::childPath(options_.root_dir / "pods", "pod UID", uid);
}

// --- SyncHandler -------------------------------------------------------------------------------

void Agent::handlePodAdditions(const std::vector<api::PodPtr>& input) {
  auto pods = input;
  // Oldest first; pods without a creation time (static pods) before all others.
  std::stable_sort(pods.begin(), pods.end(), [](const api::PodPtr& a, const api::PodPtr& b) {
    const auto& ta = a->metadata.creation_timestamp;
    const auto& tb = b->metadata.creation_timestamp;
    if (!ta || !tb) return !ta && tb;
    return *ta < *tb;
  });
  // The active pods are computed once per batch and extended as pods are admitted: recomputing
  // them for every added pod (a status copy per existing pod) made a large batch quadratic.
  std::set<std::string> batch_uids;
  for (const auto& pod : pods) batch_uids.insert(pod->metadata.uid);
  // Which pods are active changes only when a pod is removed or replaced, a status turns
  // terminal or a worker terminates: until then the last batch's list is reused (a node with
  // 50,000 pods would otherwise walk all of them for each added manifest).
  const ActiveKey key{pod_manager_.generation(), pod_workers_->generation(),
                      status_manager_.terminalGeneration()};
  std::vector<api::PodPtr> active;
  if (active_cache_ && active_cache_->key == key) {
    active = std::move(active_cache_->pods);
    if (!batch_uids.empty()) {
      std::erase_if(active,
                    [&](const api::PodPtr& p) { return batch_uids.count(p->metadata.uid) > 0; });
    }
  } else {
    // The few inactive UIDs are fetched at once rather than with lookups per pod.
    const auto terminal = status_manager_.terminalPodUIDs();
    const auto terminated = pod_workers_->knownTerminatedUIDs();
    for (const auto& other : pod_manager_.getPods()) {
      const auto& uid = other->metadata.uid;
      if (batch_uids.count(uid) > 0) continue;
      // A pod object with a terminal phase is rare: ask precisely (its cached status wins).
      const bool inactive =
          isTerminalPhase(other->status.phase)
              ? podIsInactive(*other)
              : rejected_.count(uid) > 0 || terminal.count(uid) > 0 || terminated.count(uid) > 0;
      if (!inactive) active.push_back(other);
    }
  }
  active_cache_.reset();
  for (const auto& pod : pods) {
    pod_manager_.addPod(pod);
    if (api::isMirrorPod(*pod)) {
      handleMirrorPod(pod);
      continue;
    }
    log()->info("Pod added pod={} uid={} source={}", api::podRef(*pod), pod->metadata.uid,
                api::getPodSource(*pod).valueOr(""));
    if (!pod_workers_->isPodTerminationRequested(pod->metadata.uid)) {
      auto result = canAdmitPod(*pod, active, options_.allocatable);
      if (!result.admit) {
        rejectPod(*pod, result.reason, result.message);
        continue;
      }
    }
    if (!podIsInactive(*pod)) active.push_back(pod);
    trackDeadline(pod);
    prober_->addPod(*pod);
    dispatchWork(pod, api::SyncPodType::kCreate, pod_manager_.getMirrorPodByPod(*pod));
  }
  // Keyed by the state before this batch: if the batch itself replaced a pod, the next batch
  // sees another key and walks the pods again.
  active_cache_ = ActiveCache{key, std::move(active)};
}

void Agent::handlePodUpdates(const std::vector<api::PodPtr>& pods) {
  for (const auto& pod : pods) {
    pod_manager_.updatePod(pod);
    if (api::isMirrorPod(*pod)) {
      handleMirrorPod(pod);
      continue;
    }
    trackDeadline(pod);
    prober_->addPod(*pod);
    dispatchWork(pod, api::SyncPodType::kUpdate, pod_manager_.getMirrorPodByPod(*pod));
  }
}

void Agent::handlePodRemoves(const std::vector<api::PodPtr>& pods) {
  for (const auto& pod : pods) {
    pod_manager_.deletePod(pod);
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

void Agent::handlePodReconcile(const std::vector<api::PodPtr>& pods) {
  for (const auto& pod : pods) {
    pod_manager_.updatePod(pod);
    if (api::isMirrorPod(*pod)) continue;
    // A pod with readiness gates whose Ready condition is stale needs a sync to recompute it.
    if (pod->spec.readiness_gates.empty()) continue;
    const auto* ready = findCondition(pod->status.conditions, kConditionReady);
    if (ready == nullptr) continue;
    auto want = generatePodReadyCondition(pod->spec, pod->status.conditions,
                                          pod->status.container_statuses, true, pod->status.phase);
    if (ready->status != want.status || ready->message != want.message) {
      dispatchWork(pod, api::SyncPodType::kSync, pod_manager_.getMirrorPodByPod(*pod));
    }
  }
}

void Agent::handlePodSyncs(const std::vector<api::PodPtr>& pods) {
  for (const auto& pod : pods) {
    dispatchWork(pod, api::SyncPodType::kSync, pod_manager_.getMirrorPodByPod(*pod));
  }
}

void Agent::handlePlegEvent(const PodLifecycleEvent& event) {
  if (event.type == PodLifecycleEvent::Type::kContainerRemoved) {
    if (!pod_manager_.getPodByUID(event.pod_uid)) ++unknown_pod_events_;
    return;
  }
  auto pod = pod_manager_.getPodByUID(event.pod_uid);
  if (!pod) {
    ++unknown_pod_events_;  // a container nothing wants: housekeeping must look
    return;
  }
  log()->debug("PLEG event pod={} event={} container={}", api::podRef(*pod),
               podLifecycleEventTypeName(event.type), event.container_id);
  handlePodSyncs({pod});
}

std::vector<api::PodPtr> Agent::podsToSync() {
  std::vector<api::PodPtr> out;
  std::set<std::string> added;
  for (const auto& uid : pod_workers_->getWorkToSync()) {
    if (auto pod = pod_manager_.getPodByUID(uid); pod && added.insert(uid).second) {
      out.push_back(pod);
    }
  }
  for (auto it = deadline_uids_.begin(); it != deadline_uids_.end();) {
    auto pod = pod_manager_.getPodByUID(*it);
    if (!pod) {
      it = deadline_uids_.erase(it);
      continue;
    }
    if (pastActiveDeadline(*pod) && added.insert(*it).second) out.push_back(pod);
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
  podworkers::UpdatePodOptions options;
  options.update_type = api::SyncPodType::kKill;
  options.pod = pod;
  pod_workers_->updatePod(std::move(options));
}

void Agent::rejectPod(const api::Pod& pod, const std::string& reason, const std::string& message) {
  log()->warn("Pod rejected by admission pod={} uid={} reason={} message={}", api::podRef(pod),
              pod.metadata.uid, reason, message);
  ++metrics_.pods_rejected;
  rejected_.insert(pod.metadata.uid);
  api::PodStatus status = pod.status;
  status.phase = std::string(kPhaseFailed);
  status.reason = reason;
  status.message = "Pod " + message;
  status_manager_.setPodStatus(pod, std::move(status));
}

bool Agent::podIsInactive(const api::Pod& pod) const {
  if (rejected_.count(pod.metadata.uid) > 0) return true;
  // The phase only: copying whole statuses here made each addition slow on a large node.
  auto phase = status_manager_.getPodPhase(pod.metadata.uid);
  if (phase.empty()) phase = pod.status.phase;
  if (isTerminalPhase(phase)) return true;
  return pod_workers_->isPodKnownTerminated(pod.metadata.uid);
}

bool Agent::pastActiveDeadline(const api::Pod& pod) const {
  if (!pod.spec.active_deadline_seconds) return false;
  auto status = status_manager_.getPodStatus(pod.metadata.uid);
  if (!status || !status->start_time) return false;
  auto now = toApiTime(clock_.wallNow());
  return now - *status->start_time >= std::chrono::seconds(*pod.spec.active_deadline_seconds);
}

void Agent::trackDeadline(const api::PodPtr& pod) {
  if (pod->spec.active_deadline_seconds) {
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

Agent::CleanupInputs Agent::cleanupInputs() const {
  return {pod_manager_.generation(), pod_workers_->generation(), unknown_pod_events_};
}

void Agent::handlePodCleanups() {
  ++metrics_.housekeeping_runs;
  if (cleanup_running_) return;
  // Read before the pass looks at anything: a change while it runs makes the next tick run.
  const auto inputs = cleanupInputs();
  const auto now = clock_.now();
  if (last_cleanup_ && !last_cleanup_->acted && last_cleanup_->inputs == inputs &&
      now - last_cleanup_->at < options_.housekeeping_full_period) {
    ++metrics_.housekeeping_skipped;
    crash_backoff_.gc();
    return;
  }
  cleanup_running_ = true;
  // The pass runs on its own strand: on a large node it takes a while, and config updates and
  // PLEG events must not wait for it. What touches sync-loop state comes back here.
  auto pass = [this, inputs, now]() -> asio::awaitable<void> {
    auto result = std::make_shared<CleanupResult>(co_await cleanups());
    asio::dispatch(sync_loop_->strand(), [this, inputs, now, result] {
      bool acted = result->acted;
      std::erase_if(rejected_,
                    [&](const std::string& uid) { return result->keep.count(uid) == 0; });
      for (const auto& pod : result->restart) {
        if (rejected_.count(pod->metadata.uid) > 0) continue;
        log()->info("Restarting pod worker pod={} uid={}", api::podRef(*pod), pod->metadata.uid);
        acted = true;
        prober_->addPod(*pod);
        dispatchWork(pod, api::SyncPodType::kCreate, pod_manager_.getMirrorPodByPod(*pod));
      }
      last_cleanup_ = LastCleanup{inputs, now, acted};
      cleanup_running_ = false;
    });
  };
  asio::co_spawn(cleanup_strand_, pass, asio::detached);
}

asio::awaitable<Agent::CleanupResult> Agent::cleanups() {
  CleanupResult result;
  bool& acted = result.acted;

  auto all = pod_manager_.getPodsAndMirrorPods();
  auto working = pod_workers_->syncKnownPods(all.pods);

  std::set<std::string>& keep_status = result.keep;
  for (const auto& p : all.pods) keep_status.insert(p->metadata.uid);
  for (const auto& p : all.mirror_pods) keep_status.insert(p->metadata.uid);
  for (const auto& [uid, sync] : working) keep_status.insert(uid);
  status_manager_.removeOrphanedStatuses(keep_status);
  {
    std::set<std::string> desired;
    for (const auto& p : all.pods) desired.insert(p->metadata.uid);
    prober_->cleanupPods(desired);
  }

  // Pods config still wants but the workers forgot (a terminated UID re-added): start again
  // (unless admission rejected them: checked on the sync loop strand).
  for (const auto& pod : all.pods) {
    const auto& uid = pod->metadata.uid;
    if (working.count(uid) > 0) continue;
    if (isTerminalPhase(status_manager_.getPodPhase(uid))) continue;
    if (isTerminalPhase(pod->status.phase)) continue;
    result.restart.push_back(pod);
  }

  // Workers still syncing a pod config no longer has (its removal was skipped while its source
  // was not ready): terminate them now.
  for (const auto& [uid, sync] : working) {
    if (!sync.orphan || sync.state != podworkers::PodWorkerState::kSyncPod) continue;
    if (pod_manager_.getPodByUID(uid)) continue;
    auto snapshot = status_manager_.getVersionedPodStatus(uid);
    auto pod = std::make_shared<api::Pod>();
    pod->metadata.uid = uid;
    if (snapshot) {
      pod->metadata.name = snapshot->pod_name;
      pod->metadata.namespace_ = snapshot->pod_namespace;
    }
    log()->info("Killing pod no source wants any more pod={}/{} uid={}", pod->metadata.namespace_,
                pod->metadata.name, uid);
    acted = true;
    podworkers::UpdatePodOptions options;
    options.update_type = api::SyncPodType::kKill;
    options.pod = pod;
    pod_workers_->updatePod(std::move(options));
  }

  // One runtime listing serves both the orphan kill and the pod directory cleanup.
  auto runtime_pods = co_await runtime_.getPods(true);
  if (runtime_pods.ok()) {
    // Runtime pods nobody wants: kill them through the workers.
    for (const auto& rp : *runtime_pods) {
      const bool running =
          std::any_of(rp.containers.begin(), rp.containers.end(),
                      [](const auto& c) { return c.state == runtime::ContainerState::kRunning; });
      if (!running || working.count(rp.uid) > 0 || pod_manager_.getPodByUID(rp.uid)) continue;
      log()->info("Killing orphaned runtime pod pod={}/{} uid={}", rp.namespace_, rp.name, rp.uid);
      acted = true;
      auto pod = std::make_shared<api::Pod>();
      pod->metadata.uid = rp.uid;
      pod->metadata.name = rp.name;
      pod->metadata.namespace_ = rp.namespace_;
      podworkers::UpdatePodOptions options;
      options.update_type = api::SyncPodType::kKill;
      options.pod = pod;
      options.runtime_pod = true;
      pod_workers_->updatePod(std::move(options));
    }

    // Pod directories of pods that are gone everywhere.
    std::unordered_set<std::string_view> in_runtime;
    for (const auto& rp : *runtime_pods) in_runtime.insert(rp.uid);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(options_.root_dir / "pods", ec)) {
      auto uid = entry.path().filename().string();
      if (keep_status.count(uid) > 0 || in_runtime.count(uid) > 0) continue;
      acted = true;
      std::error_code rm_ec;
      std::filesystem::remove_all(entry.path(), rm_ec);
      if (rm_ec) {
        log()->warn("Cannot remove orphaned pod directory path={} err={}", entry.path().string(),
                    rm_ec.message());
      }
    }
  } else {
    log()->warn("Housekeeping could not list runtime pods err={}",
                runtime_pods.status().toString());
    acted = true;  // try again on the next tick
  }

  // Mirror pods whose static pod is gone (and not still terminating).
  for (const auto& full_name : pod_manager_.getOrphanedMirrorPodNames()) {
    if (pod_workers_->isPodForMirrorPodTerminatingByFullName(full_name)) continue;
    acted = true;
    auto deleted = co_await pod_manager_.mirrorClient().deleteMirrorPod(full_name, std::nullopt);
    if (!deleted.ok()) {
      log()->warn("Cannot delete orphaned mirror pod pod={} err={}", full_name,
                  deleted.status().toString());
    }
  }
  crash_backoff_.gc();
  co_return result;
}

// --- Status ------------------------------------------------------------------------------------

api::PodStatus Agent::generateAPIPodStatus(const api::Pod& pod,
                                           const runtime::PodStatus& status) const {
  auto old = status_manager_.getPodStatus(pod.metadata.uid).value_or(pod.status);
  auto failures = startFailures(pod.metadata.uid);
  api::PodStatus s;
  s.host_ip = options_.node_ip;
  s.pod_ip = options_.node_ip;
  if (!s.pod_ip.empty()) s.pod_ips = {s.pod_ip};
  s.qos_class = podQosClass(pod);
  s.start_time = old.start_time;
  const bool has_init = !pod.spec.init_containers.empty();
  s.container_statuses = convertToAPIContainerStatuses(
      pod, status, old.container_statuses, pod.spec.containers, has_init, false, failures);
  prober_->updatePodStatus(pod, s.container_statuses);
  s.init_container_statuses = convertToAPIContainerStatuses(
      pod, status, old.init_container_statuses, pod.spec.init_containers, has_init, true, failures);
  for (const auto& c : pod.status.conditions) {
    if (!podConditionByKubelet(c.type)) s.conditions.push_back(c);
  }
  if (pastActiveDeadline(pod)) {
    s.phase = std::string(kPhaseFailed);
    s.reason = "DeadlineExceeded";
    s.message = "Pod was active on the node longer than the specified deadline";
    return s;
  }
  s.phase = getPhase(pod.spec, s.init_container_statuses, s.container_statuses);
  if (isTerminalPhase(pod.status.phase) && s.phase != pod.status.phase) {
    s.phase = pod.status.phase;  // the API's terminal phase is final
  }
  s.conditions.push_back(
      generatePodInitializedCondition(pod.spec, s.init_container_statuses, true, s.phase));
  s.conditions.push_back(
      generatePodReadyCondition(pod.spec, s.conditions, s.container_statuses, true, s.phase));
  s.conditions.push_back(
      generateContainersReadyCondition(pod.spec, s.container_statuses, true, s.phase));
  api::PodCondition scheduled;
  scheduled.type = std::string(kConditionPodScheduled);
  scheduled.status = "True";
  s.conditions.push_back(scheduled);
  return s;
}

void Agent::setStartFailure(const std::string& uid, const std::string& container, StartFailure f) {
  std::lock_guard lock(mu_);
  start_failures_[uid][container] = std::move(f);
}

void Agent::clearStartFailure(const std::string& uid, const std::string& container) {
  std::lock_guard lock(mu_);
  auto it = start_failures_.find(uid);
  if (it == start_failures_.end()) return;
  it->second.erase(container);
  if (it->second.empty()) start_failures_.erase(it);
}

StartFailures Agent::startFailures(const std::string& uid) const {
  std::lock_guard lock(mu_);
  auto it = start_failures_.find(uid);
  return it == start_failures_.end() ? StartFailures{} : it->second;
}

uint64_t Agent::podsWithStatusVersion() const {
  // Both only grow, so their sum moves whenever either does.
  return pod_manager_.version() + status_manager_.version();
}

void Agent::visitPodsWithStatus(
    const std::function<void(const api::Pod&, std::optional<uint64_t> stamp,
                             const StatusFetch& status)>& fn) const {
  const auto pods = pod_manager_.getPods();  // in UID order
  const auto stamps = status_manager_.statusStamps(pods);
  for (size_t i = 0; i < pods.size(); ++i) {
    const std::string& uid = pods[i]->metadata.uid;
    fn(*pods[i], stamps[i], [&] { return status_manager_.getPodStatus(uid); });
  }
}

asio::awaitable<base::Status> Agent::runPostStartHook(const api::PodPtr& pod,
                                                      const api::Container& container,
                                                      const runtime::ContainerId& id) {
  // kubelet gives the hook no timeout; the grace period bounds it so that a hung hook cannot
  // hold the pod's worker for ever.
  auto target =
      hookTarget(*container.lifecycle->post_start, container, id,
                 std::chrono::seconds(std::max<int64_t>(runtime::podGracePeriodSeconds(*pod), 1)),
                 options_.node_ip);
  auto hook = probe_handler_->runHook(target);
  auto failure = co_await std::move(hook);
  if (!failure) co_return base::okStatus();
  const auto message = hookFailureMessage(target.handler, container.name, *pod, *failure);
  log()->warn("PostStart hook failed, killing the container pod={} container={} id={} error={}",
              api::podRef(*pod), container.name, id.toString(), base::goQuote(failure->error));
  if (options_.record_event) {
    options_.record_event(*pod, "Warning", "FailedPostStartHook", message,
                          "spec.containers{" + container.name + "}");
  }
  auto kill = runtime_.killContainer(pod, id, runtime::KillOptions{}, "FailedPostStartHook");
  auto killed = co_await std::move(kill);
  ++metrics_.containers_killed;
  if (!killed.ok()) {
    log()->warn(
        "Cannot kill the container after its postStart hook failed pod={} container={} "
        "err={}",
        api::podRef(*pod), container.name, killed.toString());
  }
  setStartFailure(pod->metadata.uid, container.name, {"PostStartHookError", message});
  co_return base::unknownError("PostStartHookError: " + failure->error);
}

void Agent::onProbeFailure(const std::string& uid, const std::string& container, ProbeType type,
                           const ProbeOutcome& outcome) {
  auto pod = pod_manager_.getPodByUID(uid);
  if (!pod) return;
  const bool errored = outcome.kind == ProbeOutcome::Kind::kUnknown;
  log()->info("Probe {} probeType={} pod={} container={} output={}", errored ? "errored" : "failed",
              probeTypeName(type), api::podRef(*pod), container, base::goQuote(outcome.output));
  if (options_.record_event) {
    options_.record_event(*pod, "Warning", "Unhealthy",
                          std::string(probeTypeName(type)) + " probe " +
                              (errored ? "errored: " : "failed: ") + outcome.output,
                          "spec.containers{" + container + "}");
  }
}

bool Agent::healthy(std::string* why) const { return pleg_->healthy(why); }

}  // namespace nodeagent::agent
