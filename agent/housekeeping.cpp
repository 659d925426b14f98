// The agent's housekeeping (kubelet's HandlePodCleanups): forget what nothing wants any more, kill
// what runs without a config, restart workers a config still wants, remove orphaned pod
// directories and mirror pods, and collect dead containers and sandboxes (kubelet's container
// GC: all of a pod nobody wants, all but the newest exited one per name of a pod still wanted).
// A pass is skipped while nothing it looks at changed.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string_view>
#include <unordered_set>

#include "agent/agent.h"
#include "api/pod_identity.h"
#include "api/pod_phase.h"
#include "api/pod_update.h"
#include "base/blocking.h"
#include "base/log.h"
#include "base/status.h"
#include "podmanager/mirror_client.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

// A running container or a ready sandbox (kubelet's running pod).
bool anyRunning(const runtime::Pod& pod) {
  auto running = [](const auto& c) { return c.state == runtime::ContainerState::kRunning; };
  return std::any_of(pod.containers.begin(), pod.containers.end(), running) ||
         std::any_of(pod.sandboxes.begin(), pod.sandboxes.end(), running);
}

}  // namespace

HousekeepingInputs Agent::housekeepingInputs() const {
  return {pod_manager_.generation(), pod_workers_->generation(), unknown_pod_events_,
          container_exits_};
}

void Agent::handlePodCleanups() {
  assertOnSyncLoop("Agent::handlePodCleanups");
  ++metrics_.housekeeping_runs;
  if (cleanup_running_) return;
  // Read before the pass looks at anything: a change while it runs makes the next tick run.
  const auto inputs = housekeepingInputs();
  const auto now = clock_.now();
  if (housekeeping_skip_.canSkip(inputs, now)) {
    ++metrics_.housekeeping_skipped;
    crash_backoff_.gc();
    return;
  }
  cleanup_running_ = true;
  // The pass runs on its own strand: on a large node it takes a while, and config updates and
  // PLEG events must not wait for it. What touches sync-loop state comes back here.
  auto pass = [this, inputs, now]() -> asio::awaitable<void> {
    auto result = std::make_shared<CleanupResult>(co_await cleanups());
    asio::dispatch(sync_loop_->strand(),
                   [this, inputs, now, result] { applyCleanupResult(*result, inputs, now); });
  };
  asio::co_spawn(cleanup_strand_, pass, asio::detached);
}

void Agent::applyCleanupResult(const CleanupResult& result, HousekeepingInputs inputs,
                               base::MonotonicTime started) {
  bool acted = result.acted;
  std::erase_if(rejected_, [&](const std::string& uid) { return result.keep.count(uid) == 0; });
  for (const auto& pod : result.restart) {
    if (rejected_.count(pod->metadata.uid) > 0) continue;
    log()->info("Restarting pod worker pod={} uid={}", api::podRef(*pod), pod->metadata.uid);
    acted = true;
    prober_->addPod(*pod);
    dispatchWork(pod, api::SyncPodType::kCreate, pod_manager_.getMirrorPodByPod(*pod));
  }
  housekeeping_skip_.passDone(inputs, started, acted);
  cleanup_running_ = false;
}

asio::awaitable<Agent::CleanupResult> Agent::cleanups() {
  CleanupResult result;
  auto all = pod_manager_.getPodsAndMirrorPods();
  auto working = pod_workers_->syncKnownPods(all.pods);

  for (const auto& p : all.pods) result.keep.insert(p->metadata.uid);
  for (const auto& p : all.mirror_pods) result.keep.insert(p->metadata.uid);
  for (const auto& [uid, sync] : working) result.keep.insert(uid);
  status_manager_.removeOrphanedStatuses(result.keep);
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
    if (api::isTerminalPhase(status_manager_.getPodPhase(uid))) continue;
    if (api::isTerminalPhase(pod->status->phase)) continue;
    result.restart.push_back(pod);
  }
  killWorkersOfRemovedPods(working, result);
  if (co_await cleanupRuntimePods(std::move(working), result.keep)) result.acted = true;
  if (co_await deleteOrphanedMirrorPods()) result.acted = true;
  crash_backoff_.gc();
  co_return result;
}

void Agent::killWorkersOfRemovedPods(
    const std::map<std::string, podworkers::PodWorkerSync>& working, CleanupResult& result) {
  // Workers still syncing a pod config no longer has (its removal was skipped while its source
  // was not ready): terminate them now.
  for (const auto& [uid, sync] : working) {
    if (!sync.orphan || sync.state != podworkers::PodWorkerState::kSyncPod) continue;
    if (pod_manager_.getPodByUID(uid)) continue;
    auto snapshot = status_manager_.getVersionedPodStatus(uid);
    auto pod = api::podWithIdentity(uid, snapshot ? snapshot->pod_name : "",
                                    snapshot ? snapshot->pod_namespace : "");
    if (!pod.ok()) continue;
    log()->info("Killing pod no source wants any more pod={} uid={}", api::podRef(**pod), uid);
    result.acted = true;
    killPod(*pod, false);
  }
}

asio::awaitable<bool> Agent::cleanupRuntimePods(
    std::map<std::string, podworkers::PodWorkerSync> working, std::set<std::string> keep) {
  // One runtime listing serves both the orphan kill and the pod directory cleanup.
  auto runtime_pods = co_await runtime_.getPods(true);
  if (!runtime_pods.ok()) {
    log()->warn("Housekeeping could not list runtime pods err={}",
                runtime_pods.status().toString());
    co_return true;  // try again on the next tick
  }
  bool acted = false;
  std::unordered_set<std::string> in_runtime;
  // Pods with running containers keep their cgroups until their kill (with its grace period)
  // is done.
  std::set<std::string> keep_cgroups = keep;
  for (const auto& rp : *runtime_pods) {
    in_runtime.insert(rp.uid);
    const bool running = anyRunning(rp);
    if (running) keep_cgroups.insert(rp.uid);
    if (working.count(rp.uid) > 0 || pod_manager_.getPodByUID(rp.uid)) {
      // kubelet's container GC (MaxPerPodContainer 1): a restarted container's older exited
      // instances go, the newest stays for the status and `logs --previous`.
      if (co_await removeOlderExitedContainers(rp)) acted = true;
      if (co_await removeOlderSandboxes(rp)) acted = true;
      continue;
    }
    if (!running) {
      // kubelet's container GC for a pod nobody wants (deleted from the apiserver after it
      // terminated, or ended while the agent was down): its exited containers and its sandboxes
      // go, and with them, at the next pass, its directory.
      if (co_await removeRuntimePod(rp)) acted = true;
      continue;
    }
    // Runtime pods nobody wants: kill them through the workers.
    auto pod = api::podWithIdentity(rp.uid, rp.name, rp.namespace_);
    if (!pod.ok()) continue;
    log()->info("Killing orphaned runtime pod pod={}/{} uid={}", rp.namespace_, rp.name, rp.uid);
    acted = true;
    killPod(*pod, true);
  }
  // Pod directories and pod cgroups of pods that are gone everywhere (file work: on the blocking
  // pool). A cgroup nothing knows may still hold processes (a previous agent's pod): they are
  // killed with it.
  auto remove = [this, keep = std::move(keep), in_runtime = std::move(in_runtime),
                 keep_cgroups = std::move(keep_cgroups)] {
    const bool dirs = pod_dirs_.removeOrphans(keep, in_runtime);
    return pod_cgroups_.removeOrphans(keep_cgroups) > 0 || dirs;
  };
  const bool removed = co_await base::runBlocking(blocking_, std::move(remove));
  co_return acted || removed;
}

asio::awaitable<bool> Agent::removeRuntimePod(const runtime::Pod& rp) {
  bool removed = false;
  for (const auto& c : rp.containers) {
    auto done = co_await runtime_.removeContainer(c.id);
    if (done.ok()) {
      removed = true;
    } else {
      log()->warn("Cannot remove a container of a pod nobody wants pod={}/{} container={} err={}",
                  rp.namespace_, rp.name, c.name, done.toString());
    }
  }
  for (const auto& sandbox : rp.sandboxes) {
    auto done = co_await runtime_.removePodSandbox(sandbox.id.id);
    if (done.ok()) {
      removed = true;
    } else {
      log()->warn("Cannot remove a sandbox of a pod nobody wants pod={}/{} sandbox={} err={}",
                  rp.namespace_, rp.name, sandbox.id.id, done.toString());
    }
  }
  if (removed) {
    log()->info(
        "Removed the exited containers and sandboxes of a pod nobody wants pod={}/{} "
        "uid={}",
        rp.namespace_, rp.name, rp.uid);
  }
  co_return removed;
}

asio::awaitable<bool> Agent::deleteOrphanedMirrorPods() {
  // Mirror pods whose static pod is gone (and not still terminating).
  bool acted = false;
  for (const auto& full_name : pod_manager_.getOrphanedMirrorPodNames()) {
    if (pod_workers_->isPodForMirrorPodTerminatingByFullName(full_name)) continue;
    acted = true;
    auto deleted = co_await pod_manager_.mirrorClient().deleteMirrorPod(full_name, std::nullopt);
    if (!deleted.ok()) {
      log()->warn("Cannot delete orphaned mirror pod pod={} err={}", full_name,
                  deleted.status().toString());
    }
  }
  co_return acted;
}

asio::awaitable<size_t> Agent::removeExitedContainers(const runtime::PodStatus& status,
                                                      bool keep_newest) {
  size_t removed = 0;
  std::set<std::string> kept;
  // Newest first: the first exited container of each name is the one a status still shows.
  for (const auto& cs : status.container_statuses) {
    if (cs.state != runtime::ContainerState::kExited) continue;
    if (keep_newest && kept.insert(cs.name).second) continue;
    auto done = co_await runtime_.removeContainer(cs.id);
    if (done.ok()) {
      ++removed;
    } else {
      log()->warn("Cannot remove a dead container pod={}/{} container={} err={}", status.namespace_,
                  status.name, cs.name, done.toString());
    }
  }
  co_return removed;
}

asio::awaitable<bool> Agent::removeOlderExitedContainers(const runtime::Pod& rp) {
  // Only a pod that lists two exited containers of one name has any to remove: the others cost
  // no status call.
  std::map<std::string_view, int> exited;
  bool any = false;
  for (const auto& c : rp.containers) {
    if (c.state == runtime::ContainerState::kExited && ++exited[c.name] > 1) any = true;
  }
  if (!any) co_return false;
  auto status = co_await runtime_.getPodStatus(rp.uid, rp.name, rp.namespace_);
  if (!status.ok()) co_return false;
  auto removing = removeExitedContainers(*status, /*keep_newest=*/true);
  co_return co_await std::move(removing) > 0;
}

asio::awaitable<bool> Agent::removeOlderSandboxes(const runtime::Pod& rp) {
  if (rp.sandboxes.size() < 2) co_return false;
  std::set<std::string> in_use;  // sandboxes that hold a container, running or exited
  for (const auto& c : rp.containers) {
    if (!c.sandbox_id.empty()) in_use.insert(c.sandbox_id);
  }
  auto removable = [&](const std::string& id, bool ready) { return !ready && !in_use.count(id); };
  if (std::none_of(rp.sandboxes.begin(), rp.sandboxes.end(), [&](const runtime::Container& s) {
        return removable(s.id.id, s.state == runtime::ContainerState::kRunning);
      })) {
    co_return false;
  }
  auto status = co_await runtime_.getPodStatus(rp.uid, rp.name, rp.namespace_);
  if (!status.ok()) co_return false;
  bool removed = false;
  // Newest first: the first is kept whatever its state.
  for (size_t i = 1; i < status->sandbox_statuses.size(); ++i) {
    const auto& s = status->sandbox_statuses[i];
    if (!removable(s.id, s.state == runtime::SandboxState::kReady)) continue;
    auto done = co_await runtime_.removePodSandbox(s.id);
    if (done.ok()) {
      removed = true;
      log()->info("Removed an older sandbox of a pod pod={}/{} sandbox={}", rp.namespace_, rp.name,
                  s.id);
    } else {
      log()->warn("Cannot remove an older sandbox of a pod pod={}/{} sandbox={} err={}",
                  rp.namespace_, rp.name, s.id, done.toString());
    }
  }
  co_return removed;
}

asio::awaitable<size_t> Agent::garbageCollectContainers() {
  auto pods = co_await runtime_.getPods(true);
  if (!pods.ok()) co_return 0;
  size_t removed = 0;
  for (const auto& rp : *pods) {
    auto status = co_await runtime_.getPodStatus(rp.uid, rp.name, rp.namespace_);
    if (!status.ok()) continue;
    const auto wanted = pod_manager_.getPodByUID(rp.uid);
    const bool keep_newest = wanted && !api::isTerminalPhase(status_manager_.getPodPhase(rp.uid));
    auto removing = removeExitedContainers(*status, keep_newest);
    removed += co_await std::move(removing);
  }
  co_return removed;
}

asio::awaitable<base::Status> Agent::removeDeadContainers() {
  // On the agent's executor, as housekeeping's own collection: the caller (the eviction manager's
  // strand) only waits for it, without holding a thread.
  asio::awaitable<size_t> collecting =
      asio::co_spawn(executor_, garbageCollectContainers(), asio::use_awaitable);
  const size_t removed = co_await std::move(collecting);
  log()->info("Removed dead containers to reclaim node resources count={}", removed);
  co_return base::okStatus();
}

}  // namespace nodeagent::agent
