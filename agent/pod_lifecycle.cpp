// PodLifecycle's syncs: syncPod (kubelet's syncPod + kuberuntime SyncPod), syncTerminatingPod,
// syncTerminatingRuntimePod and syncTerminatedPod. Everything here runs on the pod's strand and
// waits only through co_await. Container starts are in pod_lifecycle_start.cpp, the API status in
// pod_lifecycle_status.cpp.
#include <algorithm>

#include "agent/pod_lifecycle.h"
#include "agent/status/pod_status.h"
#include "api/pod_phase.h"
#include "api/pod_update.h"
#include "base/blocking.h"
#include "base/log.h"
#include "base/printable.h"
#include "podmanager/mirror_client.h"
#include "podworkers/pod_workers.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

base::Status cancelled() { return base::cancelledError("sync cancelled"); }

runtime::Pod runningPodOf(const runtime::PodStatus& status) {  // the running containers
  runtime::Pod pod;
  pod.uid = status.uid;
  pod.name = status.name;
  pod.namespace_ = status.namespace_;
  for (const auto& cs : status.container_statuses) {
    if (cs.state != runtime::ContainerState::kRunning) continue;
    pod.containers.push_back({cs.id, cs.name, cs.image, cs.hash, cs.state, ""});
  }
  return pod;
}

bool anyRunning(const runtime::PodStatus& status) {
  return std::any_of(status.container_statuses.begin(), status.container_statuses.end(),
                     [](const auto& cs) { return cs.state == runtime::ContainerState::kRunning; });
}

}  // namespace

PodLifecycle::PodLifecycle(Deps deps, PodLifecycleOptions options)
    : deps_(std::move(deps)), options_(std::move(options)) {}

void PodLifecycle::recordEvent(const api::Pod& pod, const std::string& type,
                               const std::string& reason, const std::string& message,
                               const std::string& field_path) const {
  if (deps_.record_event) deps_.record_event(pod, type, reason, message, field_path);
}

asio::awaitable<base::StatusOr<bool>> PodLifecycle::syncPod(api::SyncPodType type, api::PodPtr pod,
                                                            api::PodPtr mirror_pod,
                                                            std::stop_token cancel) {
  ++deps_.metrics.sync_pod_total;
  ScopedTimer timing(deps_.metrics.pod_worker[static_cast<size_t>(type)], deps_.clock);
  const auto& uid = pod->metadata.uid;
  log()->debug("syncPod pod={} uid={} type={}", api::podRef(*pod), uid, api::syncPodTypeName(type));
  if (type == api::SyncPodType::kCreate) forgetFinishedLife(*pod);
  uint64_t settled_fingerprint = 0;
  const Resync resync = type == api::SyncPodType::kCreate
                            ? Resync::kFull
                            : settledResync(pod, mirror_pod, settled_fingerprint);
  if (resync == Resync::kSkip) {
    ++deps_.metrics.sync_pod_unchanged;
    co_return false;
  }
  if (resync == Resync::kFull) unsettle(uid);

  // The file work comes first, while this frame holds nothing else: a node starting thousands of
  // pods at once has them all waiting for the blocking pool here. Its outcome is acted on in
  // kubelet's order, after the status and the mirror pod.
  auto names = VolumePreparer::checkPodPathNames(*pod);
  PreparedPod prepared{base::okStatus(), names, std::vector<runtime::PodVolume>{}};
  if (names.ok()) {
    prepared = co_await preparePod(pod);
  } else {
    prepared.volumes = names;
  }

  // Read before the status: a change while it is read shows as another version next time. The
  // watermarks come first of all, before any of the pod's own inputs.
  Settled settled{pod, mirror_pod, 0, 0, 0, watermarks()};
  if (deps_.runtime.podStatusVersion(uid)) {
    // (Only a runtime with per-pod versions has its watermark read: it vouches for nothing else,
    // and may cost more elsewhere.)
    settled.marks.runtime = deps_.runtime.podsVersion();
    if (auto version = deps_.runtime.podStatusVersion(uid)) {
      settled.runtime_state = *version;
      settled.runtime_versioned = true;
    }
  }
  settled.probe_version = deps_.prober.resultsVersion(uid);
  auto status =
      co_await deps_.runtime.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) {
    ++deps_.metrics.sync_pod_errors;
    co_return status.status();
  }
  if (!settled.runtime_versioned) settled.runtime_state = runtime::fingerprint(*status);
  // (The other inputs are checked again: they may have changed while the status was read.)
  if (resync == Resync::kSkipIfStatusSame && !settled.runtime_versioned &&
      settled.runtime_state == settled_fingerprint &&
      settledResync(pod, mirror_pod, settled_fingerprint) == Resync::kSkipIfStatusSame) {
    ++deps_.metrics.sync_pod_unchanged;
    co_return false;
  }
  if (resync == Resync::kSkipIfStatusSame) unsettle(uid);  // (a full one forgot it above)
  reportOomKills(*pod, *status);
  if (publishStatus(*pod, *status, settled.status_stamp)) co_return true;  // terminal
  if (cancel.stop_requested()) co_return cancelled();
  CO_RETURN_IF_ERROR(checkNetworkReady(*pod));
  if (!prepared.cgroup.ok()) co_return refuseWithoutCgroup(*pod, prepared.cgroup);

  if (api::isStaticPod(*pod)) co_await syncMirrorPod(pod, mirror_pod, cancel);
  if (cancel.stop_requested()) co_return cancelled();

  if (!names.ok()) co_return refuseBadNames(*pod, names);
  auto& volumes = prepared.volumes;
  if (!volumes.ok()) {
    ++deps_.metrics.sync_pod_errors;
    if (volumes.status().code() == base::StatusCode::kUnavailable) {
      // A volume that cannot be set up yet (a ConfigMap not created yet): the containers wait in
      // ContainerCreating and the next sync tries again, as kubelet's volume manager does.
      recordEvent(*pod, "Warning", "FailedMount", volumes.status().message(), "");
    } else if (prepared.dirs.ok()) {
      setStatusReason(*pod, "UnsupportedVolume", volumes.status().message());
    }
    co_return volumes.status();
  }
  auto synced = syncRuntimePod(pod, *std::move(status), *std::move(volumes), cancel);
  auto nothing_done = co_await std::move(synced);
  if (!nothing_done.ok()) co_return nothing_done.status();
  // (A status the manager refused leaves no stamp to compare: such a pod is synced in full.)
  if (*nothing_done && settled.status_stamp != 0 && canSettle(*pod, mirror_pod)) {
    settle(std::move(settled));
  }
  co_return false;
}

bool PodLifecycle::trySettledSync(const api::PodPtr& pod, const api::PodPtr& mirror_pod) {
  uint64_t fingerprint = 0;
  if (settledResync(pod, mirror_pod, fingerprint) != Resync::kSkip) return false;
  ++deps_.metrics.sync_pod_total;
  ++deps_.metrics.sync_pod_unchanged;
  return true;
}

PodLifecycle::Watermarks PodLifecycle::watermarks() const {
  return Watermarks{std::nullopt, deps_.status_manager.version(), deps_.dirs.removals(),
                    deps_.cgroups.removals()};
}

PodLifecycle::Resync PodLifecycle::settledResync(const api::PodPtr& pod, const api::PodPtr& mirror,
                                                 uint64_t& fingerprint) {
  const auto& uid = pod->metadata.uid;
  // Before the pod's own inputs: a change after this read moves a watermark past it.
  Watermarks now = watermarks();
  Settled s;
  {
    std::lock_guard lock(mu_);
    auto it = settled_.find(uid);
    if (it == settled_.end()) return Resync::kFull;
    if (it->second.pod != pod || it->second.mirror != mirror) return Resync::kFull;
    s = it->second;
  }
  fingerprint = s.runtime_versioned ? 0 : s.runtime_state;
  // Each input is looked up only when its node-wide watermark moved since the pod settled (or
  // was last found unchanged).
  if (deps_.prober.resultsVersion(uid) != s.probe_version) return Resync::kFull;
  if (now.status != s.marks.status && deps_.status_manager.statusStamp(uid) != s.status_stamp) {
    return Resync::kFull;
  }
  if (now.dirs != s.marks.dirs && !deps_.dirs.made(uid)) return Resync::kFull;
  if (now.cgroups != s.marks.cgroups && !deps_.cgroups.made(uid)) return Resync::kFull;
  // A runtime network that went away is reported by a full sync.
  if (!networkErrors(*pod).empty()) return Resync::kFull;
  if (s.runtime_versioned) {
    now.runtime = deps_.runtime.podsVersion();
    if ((!now.runtime || now.runtime != s.marks.runtime) &&
        deps_.runtime.podStatusVersion(uid) != s.runtime_state) {
      return Resync::kFull;
    }
  }
  if (now != s.marks) {
    // Everything the moved watermarks vouch for was checked above: they vouch for it from now.
    std::lock_guard lock(mu_);
    auto it = settled_.find(uid);
    if (it != settled_.end() && it->second.pod == pod && it->second.mirror == mirror) {
      it->second.marks = now;
    }
  }
  return s.runtime_versioned ? Resync::kSkip : Resync::kSkipIfStatusSame;
}

bool PodLifecycle::canSettle(const api::Pod& pod, const api::PodPtr& mirror) const {
  // Volumes are refreshed by every sync (ConfigMaps, Secrets), an active deadline is checked by
  // it, and a start failure's reason can only change with a start.
  if (!pod.spec->volumes.empty() || pod.spec->active_deadline_seconds) return false;
  if (!startFailures(pod.metadata.uid).empty()) return false;
  // Made before the watermarks were read (the sync prepared them): still made now.
  if (!deps_.dirs.made(pod.metadata.uid) || !deps_.cgroups.made(pod.metadata.uid)) return false;
  if (api::isStaticPod(pod) && deps_.pod_manager.mirrorClient().makesMirrorPods()) {
    // Until its mirror pod is in place, each sync asks for one.
    if (!mirror || mirror->metadata.deletion_timestamp ||
        !podmanager::PodManager::isMirrorPodOf(*mirror, pod)) {
      return false;
    }
  }
  return true;
}

void PodLifecycle::settle(Settled settled) {
  std::lock_guard lock(mu_);
  // Keyed by a view of the record's own pod's UID: a record for another copy of the pod moves the
  // key onto that copy.
  const std::string_view uid = settled.pod->metadata.uid;
  auto node = settled_.extract(uid);
  if (node.empty()) {
    settled_.emplace(uid, std::move(settled));
    return;
  }
  node.key() = uid;
  node.mapped() = std::move(settled);
  settled_.insert(std::move(node));
}

void PodLifecycle::unsettle(const std::string& uid) {
  std::lock_guard lock(mu_);
  settled_.erase(uid);
}

asio::awaitable<base::StatusOr<bool>> PodLifecycle::syncRuntimePod(
    api::PodPtr pod, runtime::PodStatus status, std::vector<runtime::PodVolume> volumes,
    std::stop_token cancel) {
  auto actions = computePodActions(*pod, status, &deps_.prober, options_.sandbox_network);
  const bool nothing_to_do = !actions.kill_pod && !actions.replace_sandbox &&
                             actions.containers_to_kill.empty() && !actions.next_init_container &&
                             actions.containers_to_start.empty();
  // The running containers matter only for a pod kill: a periodic sync does not copy them.
  runtime::Pod running;
  if (actions.kill_pod) running = runningPodOf(status);
  auto kill = killForActions(pod, actions, std::move(running), cancel);
  CO_RETURN_IF_ERROR(co_await std::move(kill));
  if (actions.replace_sandbox) {
    auto retire = retireSandboxes(pod, actions, status);
    CO_RETURN_IF_ERROR(co_await std::move(retire));
  }
  if (cancel.stop_requested()) co_return cancelled();
  if (!actions.next_init_container && actions.containers_to_start.empty()) co_return nothing_to_do;
  auto ensure = ensureSandbox(pod, actions, status.ips);
  auto sandbox = co_await std::move(ensure);
  if (!sandbox.ok()) {
    ++deps_.metrics.sync_pod_errors;
    co_return sandbox.status();
  }
  auto start = startForActions(pod, std::move(actions), std::move(status), *std::move(sandbox),
                               std::move(volumes), cancel);
  base::Status started = co_await std::move(start);
  if (!started.ok()) co_return started;
  co_return false;
}

void PodLifecycle::forgetFinishedLife(const api::Pod& pod) {
  // A UID started again (its manifest was deleted and re-added): its old life's final status must
  // not hold the new one back.
  auto cached = deps_.status_manager.getPodStatus(pod.metadata.uid);
  if (cached && api::isTerminalPhase(cached->phase) && !api::isTerminalPhase(pod.status->phase)) {
    deps_.status_manager.removeStatus(pod.metadata.uid);
  }
}

bool PodLifecycle::publishStatus(const api::Pod& pod, const runtime::PodStatus& status,
                                 uint64_t& stamp) {
  // Not part of syncPod's frame: a sync suspended later (at the blocking pool, on a node starting
  // thousands of pods) holds no copy of the API status.
  auto api_status = generateAPIPodStatus(pod, status);
  const bool terminal = api::isTerminalPhase(api_status.phase);
  deps_.status_manager.setPodStatus(pod, std::move(api_status), stamp);
  return terminal;
}

void PodLifecycle::setStatusReason(const api::Pod& pod, std::string reason, std::string message) {
  auto api_status = deps_.status_manager.getPodStatus(pod.metadata.uid).value_or(*pod.status);
  api_status.reason = std::move(reason);
  api_status.message = std::move(message);
  deps_.status_manager.setPodStatus(pod, std::move(api_status));
}

base::Status PodLifecycle::refuseBadNames(const api::Pod& pod, base::Status names) {
  // A name that would leave the agent's directories (only a pod that skipped validation can have
  // one): this pod is refused, nothing is created for it.
  setStatusReason(pod, "InvalidPodName", names.message());
  ++deps_.metrics.sync_pod_errors;
  log()->warn("Refusing pod with a name that is not a path component pod={} err={}",
              base::goQuote(api::podRef(pod)), names.toString());
  return names;
}

asio::awaitable<PodLifecycle::PreparedPod> PodLifecycle::preparePod(api::PodPtr pod) {
  // A periodic sync of a pod without volumes whose cgroup and directories exist has no file work
  // to do.
  const auto& uid = pod->metadata.uid;
  if (pod->spec->volumes.empty() && deps_.dirs.made(uid) && deps_.cgroups.made(uid)) {
    co_return PreparedPod{base::okStatus(), base::okStatus(), std::vector<runtime::PodVolume>{}};
  }
  auto prepare = [this, pod]() -> PreparedPod {
    auto cgroup = deps_.cgroups.ensure(pod);
    auto dirs = deps_.dirs.ensure(pod->metadata.uid);
    if (!dirs.ok()) return {cgroup, dirs, dirs};
    return {cgroup, dirs, deps_.volumes.prepare(*pod)};
  };
  co_return co_await base::runBlocking(deps_.blocking, std::move(prepare));
}

base::Status PodLifecycle::refuseWithoutCgroup(const api::Pod& pod, base::Status cgroup) {
  ++deps_.metrics.sync_pod_errors;
  log()->warn("Cannot make the pod's cgroup pod={} err={}", api::podRef(pod), cgroup.toString());
  recordEvent(pod, "Warning", "FailedToCreatePodContainer",
              "unable to ensure pod container exists: " + cgroup.message(), "");
  return cgroup;
}

asio::awaitable<void> PodLifecycle::destroyPodCgroup(api::PodPtr pod) {
  if (!deps_.cgroups.enabled()) co_return;
  auto destroy = [this, uid = pod->metadata.uid] { return deps_.cgroups.destroy(uid); };
  auto destroyed = co_await base::runBlocking(deps_.blocking, std::move(destroy));
  if (!destroyed.ok()) {
    // Housekeeping tries again once no source wants the pod.
    log()->warn("Cannot remove the pod's cgroup pod={} err={}", api::podRef(*pod),
                destroyed.toString());
  }
}

asio::awaitable<base::Status> PodLifecycle::killForActions(api::PodPtr pod, PodActions actions,
                                                           runtime::Pod running,
                                                           std::stop_token cancel) {
  if (actions.kill_pod && !running.empty()) {
    CO_RETURN_IF_ERROR(co_await killPodWatched(pod, std::move(running), std::nullopt));
  }
  for (const auto& kill : actions.containers_to_kill) {
    if (cancel.stop_requested()) co_return cancelled();
    log()->info("Killing container pod={} container={} reason={}", api::podRef(*pod), kill.name,
                kill.message);
    recordEvent(*pod, "Normal", "Killing", kill.message, "spec.containers{" + kill.name + "}");
    auto killed = co_await deps_.runtime.killContainer(
        pod, kill.id, runtime::KillOptions::probeGrace(kill.probe_grace), kill.message);
    ++deps_.metrics.containers_killed;
    if (!killed.ok()) co_return killed;
  }
  co_return base::okStatus();
}

asio::awaitable<base::Status> PodLifecycle::retireSandboxes(api::PodPtr pod, PodActions actions,
                                                            runtime::PodStatus status) {
  log()->info("Pod sandbox changed pod={} reason={} new_sandbox={}", api::podRef(*pod),
              base::goQuote(actions.replace_reason), actions.create_sandbox);
  for (const auto& sandbox : status.sandbox_statuses) {
    if (sandbox.state != runtime::SandboxState::kReady) continue;
    auto stop = deps_.runtime.stopPodSandbox(sandbox.id);
    CO_RETURN_IF_ERROR(co_await std::move(stop));
  }
  if (!actions.create_sandbox) co_return base::okStatus();
  recordEvent(*pod, "Normal", "SandboxChanged",
              "Pod sandbox changed, it will be killed and re-created.", "");
  // kubelet's purgeInitContainers: the init containers run again in the new sandbox.
  for (const auto& cs : status.container_statuses) {
    if (cs.state == runtime::ContainerState::kRunning) continue;
    const bool init =
        std::any_of(pod->spec->init_containers.begin(), pod->spec->init_containers.end(),
                    [&](const api::Container& c) { return c.name == cs.name; });
    if (!init) continue;
    auto remove = deps_.runtime.removeContainer(cs.id);
    auto removed = co_await std::move(remove);
    if (!removed.ok()) {
      log()->warn("Cannot remove init container pod={} container={} err={}", api::podRef(*pod),
                  cs.name, removed.toString());
    }
  }
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<runtime::PodSandboxConfig>> PodLifecycle::sandboxConfig(
    api::PodPtr pod, uint32_t attempt) {
  SandboxInputs inputs;
  inputs.attempt = attempt;
  inputs.log_directory = deps_.runtime.podLogsDirectory(pod->metadata.namespace_,
                                                        pod->metadata.name, pod->metadata.uid);
  inputs.cgroup_parent = deps_.cgroups.parent(*pod);
  inputs.node_ip = options_.node_ip;
  inputs.dns = options_.dns;
  inputs.with_dns = deps_.runtime.runsImages();
  inputs.seccomp_default = options_.seccomp_default;
  inputs.seccomp_profile_root = options_.seccomp_profile_root;
  if (inputs.with_dns) {
    auto read = [path = options_.dns.resolv_conf] { return readResolvConf(path); };
    auto task = base::runBlocking(deps_.blocking, std::move(read));
    auto content = co_await std::move(task);
    if (!content.ok()) co_return content.status();
    inputs.host_resolv_conf = *std::move(content);
  }
  auto generated = generatePodSandboxConfig(*pod, inputs);
  if (!generated.ok()) co_return generated.status();
  for (const auto& warning : generated->warnings) {
    log()->info("Pod DNS config warning pod={} reason={} message={}", api::podRef(*pod),
                warning.reason, base::goQuote(warning.message));
    recordEvent(*pod, "Warning", warning.reason, warning.message, "");
  }
  co_return std::move(generated->config);
}

asio::awaitable<base::StatusOr<PodLifecycle::Sandbox>> PodLifecycle::ensureSandbox(
    api::PodPtr pod, PodActions actions, std::vector<std::string> ips) {
  const bool keep = !actions.create_sandbox && !actions.sandbox_id.empty();
  // kubelet generates the sandbox config for each sync that starts containers (CreateContainer is
  // given it, also in a kept sandbox); a runtime that runs host processes uses it only to make one.
  std::shared_ptr<const runtime::PodSandboxConfig> made_config;
  base::Status config_error;
  if (!keep || deps_.runtime.runsImages()) {
    auto generate = sandboxConfig(pod, actions.sandbox_attempt);
    auto config = co_await std::move(generate);
    if (config.ok()) {
      made_config = std::make_shared<const runtime::PodSandboxConfig>(*std::move(config));
    } else {
      config_error = config.status();
    }
  }
  if (keep) {
    if (!config_error.ok()) co_return config_error;
    Sandbox kept{actions.sandbox_id, "", std::move(made_config)};
    if (auto pod_ips = podIps(*pod, ips); !pod_ips.empty()) kept.pod_ip = pod_ips[0];
    co_return kept;
  }
  base::StatusOr<std::string> id = std::string();
  if (config_error.ok()) {
    auto run = deps_.runtime.runPodSandbox(*made_config);
    id = co_await std::move(run);
  } else {
    id = config_error;
  }
  if (!id.ok()) {
    log()->warn("Cannot make the pod's sandbox pod={} err={}", api::podRef(*pod),
                id.status().toString());
    recordEvent(*pod, "Warning", "FailedCreatePodSandBox",
                "Failed to create pod sandbox: " + id.status().message(), "");
    co_return id.status();
  }
  // kubelet reads the new sandbox's IPs back for the containers' status.podIP.
  std::vector<std::string> new_ips;
  if (options_.sandbox_network && !pod->spec->host_network) {
    auto read =
        deps_.runtime.getPodStatus(pod->metadata.uid, pod->metadata.name, pod->metadata.namespace_);
    auto after = co_await std::move(read);
    if (after.ok()) new_ips = after->ips;
  }
  Sandbox made{*std::move(id), "", std::move(made_config)};
  if (auto pod_ips = podIps(*pod, new_ips); !pod_ips.empty()) made.pod_ip = pod_ips[0];
  co_return made;
}

std::vector<std::string> PodLifecycle::podIps(const api::Pod& pod,
                                              const std::vector<std::string>& sandbox_ips) const {
  if (!sandbox_ips.empty()) return sandbox_ips;
  if ((pod.spec->host_network || !options_.sandbox_network) && !options_.node_ip.empty()) {
    return {options_.node_ip};
  }
  return {};
}

std::string PodLifecycle::networkErrors(const api::Pod& pod) const {
  if (pod.spec->host_network || !options_.network_errors) return {};
  return options_.network_errors();
}

base::Status PodLifecycle::checkNetworkReady(const api::Pod& pod) {
  const std::string errors = networkErrors(pod);
  if (errors.empty()) return base::okStatus();
  ++deps_.metrics.sync_pod_errors;
  const std::string message = std::string(podworkers::kNetworkNotReadyErrorMsg) + ": " + errors;
  log()->warn("Pod waits for the runtime's network pod={} err={}", api::podRef(pod),
              base::goQuote(message));
  recordEvent(pod, "Warning", "NetworkNotReady", message, "");
  return base::unavailableError(message);
}

asio::awaitable<base::Status> PodLifecycle::startForActions(api::PodPtr pod, PodActions actions,
                                                            runtime::PodStatus status,
                                                            Sandbox sandbox,
                                                            std::vector<runtime::PodVolume> volumes,
                                                            std::stop_token cancel) {
  base::Status first_error;
  bool changed = false;
  auto before = std::make_shared<const runtime::PodStatus>(std::move(status));
  std::vector<std::pair<size_t, bool>> starts;  // (index, init)
  if (actions.next_init_container) starts.emplace_back(*actions.next_init_container, true);
  for (size_t index : actions.containers_to_start) starts.emplace_back(index, false);
  for (const auto& [index, init] : starts) {
    if (cancel.stop_requested()) break;
    StartRequest request{pod, index, init, sandbox.id, sandbox.pod_ip, volumes, sandbox.config};
    auto s = co_await startContainerWithBackoff(std::move(request), before);
    changed = true;  // started, failed, or now waiting in backoff: the status moved
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (cancel.stop_requested()) co_return cancelled();
  // Publish the new state (or the backoff reason) now rather than on the next sync.
  if (changed) co_await publishStatusAfterStarts(pod);
  if (!first_error.ok()) ++deps_.metrics.sync_pod_errors;
  co_return first_error;
}

asio::awaitable<void> PodLifecycle::publishStatusAfterStarts(api::PodPtr pod) {
  auto after = co_await deps_.runtime.getPodStatus(pod->metadata.uid, pod->metadata.name,
                                                   pod->metadata.namespace_);
  if (!after.ok()) co_return;
  auto s = generateAPIPodStatus(*pod, *after);
  observeStart(*pod, s);
  deps_.status_manager.setPodStatus(*pod, std::move(s));
}

void PodLifecycle::reportOomKills(const api::Pod& pod, const runtime::PodStatus& status) {
  for (const auto& cs : status.container_statuses) {
    if (cs.state != runtime::ContainerState::kExited || cs.reason != "OOMKilled") continue;
    {
      std::lock_guard lock(mu_);
      if (!oom_reported_[pod.metadata.uid].insert(cs.id.id).second) continue;
    }
    const auto* spec = runtime::findSpecContainer(pod, cs.name);
    std::string message = "Container " + cs.name + " was killed by the kernel's OOM killer";
    if (spec != nullptr) {
      auto limit = spec->resources.limits.find("memory");
      if (limit != spec->resources.limits.end()) {
        message += " (memory limit " + limit->second.toString() + ")";
      }
    }
    log()->warn("Container OOM-killed pod={} container={} id={}", api::podRef(pod), cs.name,
                cs.id.id);
    recordEvent(pod, "Warning", "OOMKilled", message, "spec.containers{" + cs.name + "}");
  }
}

void PodLifecycle::observeStart(const api::Pod& pod, const api::PodStatus& status) {
  if (status.phase != api::kPhaseRunning) return;
  // Once: the status cached before this one was not Running yet.
  if (deps_.status_manager.getPodPhase(pod.metadata.uid) == api::kPhaseRunning) return;
  auto seen = pod.metadata.annotations.find(std::string(api::kConfigFirstSeenAnnotationKey));
  if (seen == pod.metadata.annotations.end()) return;
  if (auto t = api::parseTime(seen->second); t.ok()) {
    deps_.metrics.observeStartLatency(toApiTime(deps_.clock.wallNow()) - *t);
  }
}

asio::awaitable<base::Status> PodLifecycle::syncTerminatingPod(
    api::PodPtr pod, std::optional<int64_t> grace_period_seconds, podworkers::PodStatusFn status_fn,
    std::stop_token cancel) {
  const auto& uid = pod->metadata.uid;
  unsettle(uid);  // a pod being torn down is synced whole, and no longer held here
  auto status =
      co_await deps_.runtime.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) co_return status.status();
  auto api_status = generateAPIPodStatus(*pod, *status);
  if (status_fn) status_fn(api_status);
  deps_.status_manager.setPodStatus(*pod, api_status);

  auto running = runningPodOf(*status);
  if (!running.empty()) {
    log()->info("Killing pod pod={} uid={} containers={} grace={}", api::podRef(*pod), uid,
                running.containers.size(),
                grace_period_seconds ? std::to_string(*grace_period_seconds) : "spec");
    for (const auto& c : running.containers) {
      recordEvent(*pod, "Normal", "Killing", "Stopping container " + c.name,
                  "spec.containers{" + c.name + "}");
    }
    auto killed = co_await killPodWatched(pod, running, grace_period_seconds);
    deps_.metrics.containers_killed += running.containers.size();
    if (!killed.ok()) co_return killed;
  }
  if (cancel.stop_requested()) co_return cancelled();

  auto after =
      co_await deps_.runtime.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!after.ok()) co_return after.status();
  if (anyRunning(*after)) {
    co_return base::unavailableError("containers of the pod are still running");
  }
  // kubelet's KillPod ends with StopPodSandbox once the containers are gone.
  for (const auto& sandbox : after->sandbox_statuses) {
    if (sandbox.state != runtime::SandboxState::kReady) continue;
    CO_RETURN_IF_ERROR(co_await deps_.runtime.stopPodSandbox(sandbox.id));
  }
  auto final_status = generateAPIPodStatus(*pod, *after);
  if (status_fn) status_fn(final_status);
  deps_.status_manager.setPodStatus(*pod, std::move(final_status));
  co_return base::okStatus();
}

asio::awaitable<base::Status> PodLifecycle::killPodWatched(api::PodPtr pod, runtime::Pod running,
                                                           std::optional<int64_t> grace_override) {
  // kubelet's killPodNow waits max(grace * 1.5, 10 s) for the kill, then reports the overrun; the
  // kill itself goes on (the runtime SIGKILLs at the end of the grace period).
  const int64_t grace = grace_override ? *grace_override : runtime::podGracePeriodSeconds(*pod);
  const base::Duration timeout = std::max<base::Duration>(std::chrono::seconds(grace + grace / 2),
                                                          options_.kill_timeout_minimum);
  auto timer = deps_.clock.makeTimer(co_await asio::this_coro::executor);
  auto on_timeout = [this, pod, grace] {
    log()->warn(
        "Container runtime did not kill the pod within its grace period pod={} uid={} "
        "grace_seconds={}",
        api::podRef(*pod), pod->metadata.uid, grace);
    recordEvent(*pod, "Warning", "ExceededGracePeriod",
                "Container runtime did not kill the pod within specified grace period.", "");
  };
  timer->asyncWaitFor(timeout, on_timeout);
  auto killed = co_await deps_.runtime.killPod(pod, std::move(running), grace_override);
  timer->cancel();
  co_return killed;
}

asio::awaitable<base::Status> PodLifecycle::syncTerminatingRuntimePod(api::PodPtr pod,
                                                                      std::stop_token /*cancel*/) {
  const auto& uid = pod->metadata.uid;
  auto status =
      co_await deps_.runtime.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) co_return status.status();
  auto running = runningPodOf(*status);
  if (!running.empty()) {
    // Orphans have no spec to take a grace period from; kubelet gives them one second.
    auto killed = co_await deps_.runtime.killPod(nullptr, running, int64_t{1});
    deps_.metrics.containers_killed += running.containers.size();
    CO_RETURN_IF_ERROR(killed);
  }
  // And their sandboxes stop (kubelet's killPodWithSyncResult).
  for (const auto& sandbox : status->sandbox_statuses) {
    if (sandbox.state != runtime::SandboxState::kReady) continue;
    CO_RETURN_IF_ERROR(co_await deps_.runtime.stopPodSandbox(sandbox.id));
  }
  co_return base::okStatus();
}

asio::awaitable<base::Status> PodLifecycle::syncTerminatedPod(api::PodPtr pod) {
  const auto& uid = pod->metadata.uid;
  auto status =
      co_await deps_.runtime.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) co_return status.status();
  if (anyRunning(*status)) co_return base::unavailableError("containers of the pod are running");
  deps_.status_manager.setPodStatus(*pod, generateAPIPodStatus(*pod, *status));
  deps_.crash_backoff.forgetPrefix(uid + "/");
  {
    std::lock_guard lock(mu_);
    start_failures_.erase(uid);
    oom_reported_.erase(uid);
  }
  deps_.dirs.forget(uid);
  // Nothing of the pod may run on (a container's forked children included): its cgroup goes.
  co_await destroyPodCgroup(pod);
  // Nor keep its secrets in memory, though its exited containers may stay a while.
  auto unmount = [this, uid] { return deps_.dirs.unmountVolumes(uid); };
  auto unmounted = co_await base::runBlocking(deps_.blocking, std::move(unmount));
  if (!unmounted.ok()) {
    log()->warn("Cannot unmount the pod's volumes pod={} err={}", api::podRef(*pod),
                unmounted.toString());
  }
  // A pod config no longer has: drop its exited containers (state and logs go with them) and its
  // sandbox.
  if (!deps_.pod_manager.getPodByUID(uid)) {
    for (const auto& cs : status->container_statuses) {
      auto removed = co_await deps_.runtime.removeContainer(cs.id);
      if (!removed.ok()) {
        log()->warn("Cannot remove container pod={} container={} err={}", api::podRef(*pod),
                    cs.name, removed.toString());
      }
    }
    for (const auto& sandbox : status->sandbox_statuses) {
      auto removed = co_await deps_.runtime.removePodSandbox(sandbox.id);
      if (!removed.ok()) {
        log()->warn("Cannot remove the pod's sandbox pod={} err={}", api::podRef(*pod),
                    removed.toString());
      }
    }
  }
  log()->info("Pod terminated pod={} uid={}", api::podRef(*pod), uid);
  co_return base::okStatus();
}

}  // namespace nodeagent::agent
