// What the API sees of a pod: its status (kubelet's generateAPIPodStatus, with the reasons of
// failed starts), and for a static pod its mirror pod.
#include "agent/pod_lifecycle.h"
#include "agent/status/pod_status.h"
#include "api/pod_phase.h"
#include "api/pod_update.h"
#include "base/log.h"
#include "podmanager/mirror_client.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

// How soon a static pod asks again for its mirror pod while the node is not registered.
constexpr base::Duration kMirrorRetry = std::chrono::seconds(1);

bool hasRequestsOrLimits(const api::Container& c) {
  return !c.resources.requests.empty() || !c.resources.limits.empty();
}

}  // namespace

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
  for (const auto& c : pod.spec->init_containers) visit(c);
  for (const auto& c : pod.spec->containers) visit(c);
  if (!any) return "BestEffort";
  return guaranteed ? "Guaranteed" : "Burstable";
}

bool pastActiveDeadline(const api::Pod& pod, const StatusManager& status_manager,
                        base::Clock& clock) {
  if (!pod.spec->active_deadline_seconds) return false;
  auto status = status_manager.getPodStatus(pod.metadata.uid);
  if (!status || !status->start_time) return false;
  auto now = toApiTime(clock.wallNow());
  return now - *status->start_time >= std::chrono::seconds(*pod.spec->active_deadline_seconds);
}

api::PodStatus PodLifecycle::generateAPIPodStatus(const api::Pod& pod,
                                                  const runtime::PodStatus& status) const {
  auto old = deps_.status_manager.getPodStatus(pod.metadata.uid).value_or(*pod.status);
  auto failures = startFailures(pod.metadata.uid);
  api::PodStatus s;
  s.host_ip = options_.node_ip;
  s.pod_ips = podIps(pod, status.ips);
  if (!s.pod_ips.empty()) s.pod_ip = s.pod_ips[0];
  s.qos_class = podQosClass(pod);
  s.start_time = old.start_time;
  const bool has_init = !pod.spec->init_containers.empty();
  s.container_statuses = convertToAPIContainerStatuses(
      pod, status, old.container_statuses, pod.spec->containers, has_init, false, failures);
  deps_.prober.updatePodStatus(pod, s.container_statuses);
  s.init_container_statuses =
      convertToAPIContainerStatuses(pod, status, old.init_container_statuses,
                                    pod.spec->init_containers, has_init, true, failures);
  for (const auto& c : pod.status->conditions) {
    if (!podConditionByKubelet(c.type)) s.conditions.push_back(c);
  }
  if (pastActiveDeadline(pod, deps_.status_manager, deps_.clock)) {
    s.phase = std::string(api::kPhaseFailed);
    s.reason = "DeadlineExceeded";
    s.message = "Pod was active on the node longer than the specified deadline";
    return s;
  }
  s.phase = getPhase(*pod.spec, s.init_container_statuses, s.container_statuses);
  // kubelet's three-way merge: a terminal phase the status manager or the API has is final (an
  // evicted pod stays Failed), and the reason and message that came with a phase stay with it.
  if (!api::isTerminalPhase(s.phase)) {
    if (api::isTerminalPhase(old.phase)) {
      s.phase = old.phase;
    } else if (api::isTerminalPhase(pod.status->phase)) {
      s.phase = pod.status->phase;
    }
  }
  if (s.phase == old.phase) {
    // (The API's, only when it is about the same phase.)
    const bool api_same = pod.status->phase == s.phase;
    s.reason = old.reason.empty() && api_same ? pod.status->reason : old.reason;
    s.message = old.message.empty() && api_same ? pod.status->message : old.message;
  }
  s.conditions.push_back(
      generatePodInitializedCondition(*pod.spec, s.init_container_statuses, true, s.phase));
  s.conditions.push_back(
      generatePodReadyCondition(*pod.spec, s.conditions, s.container_statuses, true, s.phase));
  s.conditions.push_back(
      generateContainersReadyCondition(*pod.spec, s.container_statuses, true, s.phase));
  api::PodCondition scheduled;
  scheduled.type = std::string(api::kConditionPodScheduled);
  scheduled.status = "True";
  s.conditions.push_back(scheduled);
  return s;
}

void PodLifecycle::setStartFailure(const std::string& uid, const std::string& container,
                                   StartFailure f) {
  std::lock_guard lock(mu_);
  start_failures_[uid][container] = std::move(f);
}

void PodLifecycle::clearStartFailure(const std::string& uid, const std::string& container) {
  std::lock_guard lock(mu_);
  auto it = start_failures_.find(uid);
  if (it == start_failures_.end()) return;
  it->second.erase(container);
  if (it->second.empty()) start_failures_.erase(it);
}

StartFailures PodLifecycle::startFailures(const std::string& uid) const {
  std::lock_guard lock(mu_);
  auto it = start_failures_.find(uid);
  return it == start_failures_.end() ? StartFailures{} : it->second;
}

asio::awaitable<void> PodLifecycle::syncMirrorPod(api::PodPtr pod, api::PodPtr mirror,
                                                  std::stop_token cancel) {
  auto& client = deps_.pod_manager.mirrorClient();
  bool deleted = false;
  if (mirror && (mirror->metadata.deletion_timestamp ||
                 !podmanager::PodManager::isMirrorPodOf(*mirror, *pod))) {
    log()->info("Deleting stale mirror pod pod={} mirror_uid={}", api::podRef(*pod),
                mirror->metadata.uid);
    auto r = co_await client.deleteMirrorPod(pod->fullName(), mirror->metadata.uid);
    if (!r.ok()) {
      log()->warn("Failed deleting mirror pod pod={} err={}", api::podRef(*pod),
                  r.status().toString());
    } else {
      deleted = *r;
    }
  }
  if (deleted && mirror->metadata.deletion_timestamp &&
      options_.mirror_recreate_delay > base::Duration::zero()) {
    // Someone deleted the mirror and may be waiting for it to go (kubectl delete): let its LIST
    // see the old mirror or none, not the new one (PodLifecycleOptions::mirror_recreate_delay).
    co_await base::sleepFor(deps_.clock, options_.mirror_recreate_delay);
    if (cancel.stop_requested()) co_return;
  }
  if (!mirror || deleted) {
    auto s = co_await client.createMirrorPod(pod);
    if (s.code() == base::StatusCode::kFailedPrecondition) {
      // The node is not registered yet: try again shortly (no request is made meanwhile).
      log()->debug("Mirror pod waits for the node's registration pod={} err={}", api::podRef(*pod),
                   s.toString());
      deps_.schedule_sync(pod->metadata.uid, kMirrorRetry);
    } else if (!s.ok()) {
      log()->warn("Failed creating mirror pod pod={} err={}", api::podRef(*pod), s.toString());
    }
  }
}

}  // namespace nodeagent::agent
