// The PodSyncer half of the agent: syncPod (kubelet's syncPod + kuberuntime SyncPod),
// syncTerminatingPod, syncTerminatingRuntimePod and syncTerminatedPod. Everything here runs on
// the pod's strand and waits only through co_await.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "agent/agent.h"
#include "agent/pod_actions.h"
#include "agent/pod_status.h"
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

base::Status cancelled() { return base::cancelledError("sync cancelled"); }

// The backoff key of a container: a changed spec starts a fresh backoff, like kubelet's key.
std::string containerFieldPath(const api::Container& c) {
  return "spec.containers{" + c.name + "}";
}

std::string backoffKey(const api::Pod& pod, const api::Container& c) {
  return pod.metadata.uid + "/" + c.name + "/" + c.hash.toHex();
}

std::string volumeEnvName(const std::string& volume) {
  std::string out = "NODEAGENT_VOLUME_";
  for (char ch : volume) {
    out += std::isalnum(static_cast<unsigned char>(ch)) ? static_cast<char>(std::toupper(ch)) : '_';
  }
  return out;
}

// The pod-level names that become path components: the pod's namespace, name and UID (its
// directory, its log directory) and its volumes' names (emptyDir directories). Container names are
// checked by the runtime when it starts one (CreateContainerConfigError for that container).
base::Status checkPodPathNames(const api::Pod& pod) {
  RETURN_IF_ERROR(runtime::checkPodPathNames(pod));
  for (const auto& v : pod.spec.volumes) {
    RETURN_IF_ERROR(base::checkPathComponent("volume name", v.name));
  }
  return base::okStatus();
}

runtime::Pod runningPodOf(const runtime::PodStatus& status) {
  runtime::Pod pod;
  pod.uid = status.uid;
  pod.name = status.name;
  pod.namespace_ = status.namespace_;
  for (const auto& cs : status.container_statuses) {
    if (cs.state != runtime::ContainerState::kRunning) continue;
    runtime::Container c;
    c.id = cs.id;
    c.name = cs.name;
    c.image = cs.image;
    c.hash = cs.hash;
    c.state = cs.state;
    pod.containers.push_back(std::move(c));
  }
  return pod;
}

bool anyRunning(const runtime::PodStatus& status) {
  return std::any_of(status.container_statuses.begin(), status.container_statuses.end(),
                     [](const auto& cs) { return cs.state == runtime::ContainerState::kRunning; });
}

// kubelet's emptyDir permissions (0777: containers of any user share it) and, with an fsGroup,
// its SetVolumeOwnership: group fsGroup, group read-write, and setgid so that files made in it
// inherit the group.
base::Status setEmptyDirOwnership(const std::filesystem::path& path,
                                  std::optional<int64_t> fs_group) {
  mode_t mode = 0777;
  if (fs_group) {
    if (::chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(*fs_group)) != 0) {
      return base::internalError("cannot set the group of " + path.string() + " to fsGroup " +
                                 std::to_string(*fs_group) + ": " + std::strerror(errno));
    }
    mode |= S_ISGID;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 07777) == mode) return base::okStatus();
  if (::chmod(path.c_str(), mode) != 0) {
    return base::internalError("cannot chmod " + path.string() + ": " + std::strerror(errno));
  }
  return base::okStatus();
}

}  // namespace

base::StatusOr<std::vector<std::pair<std::string, std::string>>> Agent::prepareVolumes(
    const api::Pod& pod) {
  std::vector<std::pair<std::string, std::string>> env;
  std::error_code ec;
  for (const auto& v : pod.spec.volumes) {
    std::filesystem::path path;
    if (v.source_type == "emptyDir") {
      auto pod_dir = podDir(pod.metadata.uid);
      if (!pod_dir.ok()) return pod_dir.status();
      auto dir =
          base::childPath(*pod_dir / "volumes" / "kubernetes.io~empty-dir", "volume name", v.name);
      if (!dir.ok()) return dir.status();
      path = std::move(*dir);
      std::filesystem::create_directories(path, ec);
      if (ec) {
        return base::internalError("cannot create emptyDir volume " + v.name + " at " +
                                   path.string() + ": " + ec.message());
      }
      const auto& psc = pod.spec.security_context;
      RETURN_IF_ERROR(setEmptyDirOwnership(path, psc ? psc->fs_group : std::nullopt));
    } else if (v.source_type == "hostPath") {
      path = v.host_path;
      const bool creates =
          v.host_path_type == "DirectoryOrCreate" || v.host_path_type == "FileOrCreate";
      if (creates && !options_.allow_root_api_pods && !api::isStaticPod(pod)) {
        // The agent (root) would create any path the pod names: a pod from the apiserver may not.
        return base::permissionDeniedError(
            "hostPath volume " + v.name + ": type " + v.host_path_type + " would have the agent " +
            "create " + path.string() + " as root; pods from the apiserver may not (create it " +
            "on the node and use type " +
            (v.host_path_type == "FileOrCreate" ? "File" : "Directory") +
            ", or start nodeagent with --allow-root-api-pods)");
      }
      if (v.host_path_type == "DirectoryOrCreate") {
        std::filesystem::create_directories(path, ec);
      } else if (v.host_path_type == "FileOrCreate" && !std::filesystem::exists(path, ec)) {
        std::filesystem::create_directories(path.parent_path(), ec);
        FILE* f = std::fopen(path.c_str(), "a");
        if (f != nullptr) std::fclose(f);
      }
      if ((v.host_path_type == "Directory" && !std::filesystem::is_directory(path, ec)) ||
          (v.host_path_type == "File" && !std::filesystem::is_regular_file(path, ec))) {
        return base::failedPreconditionError("hostPath volume " + v.name + ": " + path.string() +
                                             " is not a " +
                                             (v.host_path_type == "File" ? "file" : "directory"));
      }
    } else {
      return base::unimplementedError("volume " + v.name + ": type \"" + v.source_type +
                                      "\" is not supported by the process runtime (only emptyDir "
                                      "and hostPath)");
    }
    env.emplace_back(volumeEnvName(v.name), path.string());
  }
  return env;
}

asio::awaitable<void> Agent::syncMirrorPod(const api::PodPtr& pod, const api::PodPtr& mirror,
                                           const std::stop_token& cancel) {
  auto& client = pod_manager_.mirrorClient();
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
    // see the old mirror or none, not the new one (AgentOptions::mirror_recreate_delay).
    co_await base::sleepFor(clock_, options_.mirror_recreate_delay);
    if (cancel.stop_requested()) co_return;
  }
  if (!mirror || deleted) {
    auto s = co_await client.createMirrorPod(pod);
    if (!s.ok()) {
      log()->warn("Failed creating mirror pod pod={} err={}", api::podRef(*pod), s.toString());
    }
  }
}

asio::awaitable<base::Status> Agent::startContainerWithBackoff(const api::PodPtr& pod, size_t index,
                                                               bool init,
                                                               const runtime::PodStatus& status,
                                                               bool* in_backoff) {
  const auto& container = init ? pod->spec.init_containers[index] : pod->spec.containers[index];
  const auto& uid = pod->metadata.uid;
  const auto* last = status.findContainerStatusByName(container.name);
  // kubelet's doBackOff: the newest exited container of that name, which is not the newest one
  // when a running container was just killed (liveness failure, changed spec), so restarts of
  // killed containers back off too.
  const runtime::ContainerStatus* last_exited = nullptr;
  for (const auto& cs : status.container_statuses) {
    if (cs.name == container.name && cs.state == runtime::ContainerState::kExited) {
      last_exited = &cs;  // newest first
      break;
    }
  }
  const auto key = backoffKey(*pod, container);
  if (last_exited != nullptr) {
    base::Duration remaining{};
    if (crash_backoff_.isInBackOffSince(key, last_exited->finished_at, &remaining)) {
      auto backoff = crash_backoff_.get(key);
      auto secs = std::chrono::duration_cast<std::chrono::seconds>(backoff).count();
      setStartFailure(
          uid, container.name,
          {"CrashLoopBackOff",
           "back-off " + std::to_string(secs) + "s restarting failed container=" + container.name +
               " pod=" + pod->metadata.name + "_" + pod->metadata.namespace_ + "(" + uid + ")"});
      scheduleSync(uid, remaining);
      if (options_.record_event) {
        options_.record_event(*pod, "Warning", "BackOff",
                              "Back-off restarting failed container " + container.name +
                                  " in pod " + pod->metadata.name + "_" + pod->metadata.namespace_ +
                                  "(" + uid + ")",
                              containerFieldPath(container));
      }
      *in_backoff = true;
      co_return base::okStatus();
    }
    crash_backoff_.next(key);
  }
  const int attempt = last != nullptr ? last->restart_count + 1 : 0;

  runtime::StartContainerOptions options;
  auto pod_dir = podDir(uid);
  if (!pod_dir.ok()) co_return pod_dir.status();
  options.pod_dir = std::move(*pod_dir);
  options.pod_ip = options_.node_ip;
  options.host_ip = options_.node_ip;
  auto volumes = prepareVolumes(*pod);
  if (!volumes.ok()) co_return volumes.status();
  options.extra_env = std::move(*volumes);
  options.refuse_root = !options_.allow_root_api_pods && !api::isStaticPod(*pod);

  auto started = co_await runtime_.startContainer(pod, container, attempt, std::move(options));
  if (!started.ok()) {
    setStartFailure(
        uid, container.name,
        {std::string(runtime::startErrorReason(started.status())), started.status().message()});
    log()->warn("Container failed to start pod={} container={} err={}", api::podRef(*pod),
                container.name, started.status().toString());
    if (options_.record_event) {
      options_.record_event(*pod, "Warning", "Failed", "Error: " + started.status().message(),
                            containerFieldPath(container));
    }
    co_return started.status();
  }
  clearStartFailure(uid, container.name);
  ++metrics_.containers_started;
  if (options_.record_event) {
    options_.record_event(*pod, "Normal", "Created", "Created container " + container.name,
                          containerFieldPath(container));
    options_.record_event(*pod, "Normal", "Started", "Started container " + container.name,
                          containerFieldPath(container));
  }
  log()->info("Container started pod={} container={} attempt={} id={}", api::podRef(*pod),
              container.name, attempt, started->toString());
  if (container.lifecycle && container.lifecycle->post_start) {
    auto hook = runPostStartHook(pod, container, *started);
    co_return co_await std::move(hook);
  }
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<bool>> Agent::syncPod(api::SyncPodType type, api::PodPtr pod,
                                                     api::PodPtr mirror_pod,
                                                     std::stop_token cancel) {
  ++metrics_.sync_pod_total;
  ScopedTimer timing(metrics_.pod_worker[static_cast<size_t>(type)], clock_);
  const auto& uid = pod->metadata.uid;
  log()->debug("syncPod pod={} uid={} type={}", api::podRef(*pod), uid, api::syncPodTypeName(type));

  if (type == api::SyncPodType::kCreate) {
    // A UID started again (its manifest was deleted and re-added): its old life's final status
    // must not hold the new one back.
    auto cached = status_manager_.getPodStatus(uid);
    if (cached && isTerminalPhase(cached->phase) && !isTerminalPhase(pod->status.phase)) {
      status_manager_.removeStatus(uid);
    }
  }

  auto status = co_await runtime_.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) {
    ++metrics_.sync_pod_errors;
    co_return status.status();
  }
  auto api_status = generateAPIPodStatus(*pod, *status);
  status_manager_.setPodStatus(*pod, api_status);
  if (isTerminalPhase(api_status.phase)) co_return true;
  if (cancel.stop_requested()) co_return cancelled();

  if (api::isStaticPod(*pod)) co_await syncMirrorPod(pod, mirror_pod, cancel);
  if (cancel.stop_requested()) co_return cancelled();

  bool dirs_made = false;
  {
    std::lock_guard lock(mu_);
    dirs_made = dirs_made_.count(uid) > 0;
  }
  if (auto names = checkPodPathNames(*pod); !names.ok()) {
    // A name that would leave the agent's directories (only a pod that skipped validation can
    // have one): this pod is refused, nothing is created for it.
    api_status.reason = "InvalidPodName";
    api_status.message = names.message();
    status_manager_.setPodStatus(*pod, api_status);
    ++metrics_.sync_pod_errors;
    log()->warn("Refusing pod with a name that is not a path component pod={} err={}",
                base::goQuote(api::podRef(*pod)), names.toString());
    co_return names;
  }
  if (!dirs_made) {
    std::error_code ec;
    auto pod_dir = podDir(uid);
    if (!pod_dir.ok()) co_return pod_dir.status();
    for (const char* sub : {"volumes", "plugins"}) {
      std::filesystem::create_directories(*pod_dir / sub, ec);
      if (ec) {
        ++metrics_.sync_pod_errors;
        co_return base::internalError("cannot make pod directories at " + pod_dir->string() + ": " +
                                      ec.message());
      }
    }
    std::lock_guard lock(mu_);
    dirs_made_.insert(uid);
  }
  if (auto volumes = prepareVolumes(*pod); !volumes.ok()) {
    api_status.reason = "UnsupportedVolume";
    api_status.message = volumes.status().message();
    status_manager_.setPodStatus(*pod, api_status);
    ++metrics_.sync_pod_errors;
    co_return volumes.status();
  }

  auto actions = computePodActions(*pod, *status, prober_.get());
  if (actions.kill_pod && anyRunning(*status)) {
    auto killed = co_await killPodWatched(pod, runningPodOf(*status), std::nullopt);
    if (!killed.ok()) co_return killed;
  }
  for (const auto& kill : actions.containers_to_kill) {
    if (cancel.stop_requested()) co_return cancelled();
    log()->info("Killing container pod={} container={} reason={}", api::podRef(*pod), kill.name,
                kill.message);
    if (options_.record_event) {
      options_.record_event(*pod, "Normal", "Killing", kill.message,
                            "spec.containers{" + kill.name + "}");
    }
    auto killed = co_await runtime_.killContainer(
        pod, kill.id, runtime::KillOptions::probeGrace(kill.probe_grace), kill.message);
    ++metrics_.containers_killed;
    if (!killed.ok()) co_return killed;
  }

  base::Status first_error;
  bool changed = false;
  auto start = [&](size_t index, bool init) -> asio::awaitable<void> {
    if (cancel.stop_requested()) co_return;
    bool in_backoff = false;
    auto s = co_await startContainerWithBackoff(pod, index, init, *status, &in_backoff);
    changed = true;  // started, failed, or now waiting in backoff: the status moved
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  if (actions.next_init_container) co_await start(*actions.next_init_container, true);
  for (size_t index : actions.containers_to_start) co_await start(index, false);
  if (cancel.stop_requested()) co_return cancelled();

  if (changed) {
    // Publish the new state (or the backoff reason) now rather than on the next sync.
    auto after = co_await runtime_.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
    if (after.ok()) {
      auto s = generateAPIPodStatus(*pod, *after);
      if (s.phase == kPhaseRunning) {
        std::lock_guard lock(mu_);
        if (started_once_.insert(uid).second) {
          auto seen =
              pod->metadata.annotations.find(std::string(api::kConfigFirstSeenAnnotationKey));
          if (seen != pod->metadata.annotations.end()) {
            if (auto t = api::parseTime(seen->second); t.ok()) {
              metrics_.observeStartLatency(toApiTime(clock_.wallNow()) - *t);
            }
          }
        }
      }
      status_manager_.setPodStatus(*pod, std::move(s));
    }
  }
  if (!first_error.ok()) {
    ++metrics_.sync_pod_errors;
    co_return first_error;
  }
  co_return false;
}

asio::awaitable<base::Status> Agent::syncTerminatingPod(api::PodPtr pod,
                                                        std::optional<int64_t> grace_period_seconds,
                                                        podworkers::PodStatusFn status_fn,
                                                        std::stop_token cancel) {
  const auto& uid = pod->metadata.uid;
  auto status = co_await runtime_.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) co_return status.status();
  auto api_status = generateAPIPodStatus(*pod, *status);
  if (status_fn) status_fn(api_status);
  status_manager_.setPodStatus(*pod, api_status);

  auto running = runningPodOf(*status);
  if (!running.empty()) {
    log()->info("Killing pod pod={} uid={} containers={} grace={}", api::podRef(*pod), uid,
                running.containers.size(),
                grace_period_seconds ? std::to_string(*grace_period_seconds) : "spec");
    if (options_.record_event) {
      for (const auto& c : running.containers) {
        options_.record_event(*pod, "Normal", "Killing", "Stopping container " + c.name,
                              "spec.containers{" + c.name + "}");
      }
    }
    auto killed = co_await killPodWatched(pod, running, grace_period_seconds);
    metrics_.containers_killed += running.containers.size();
    if (!killed.ok()) co_return killed;
  }
  if (cancel.stop_requested()) co_return cancelled();

  auto after = co_await runtime_.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!after.ok()) co_return after.status();
  if (anyRunning(*after))
    co_return base::unavailableError("containers of the pod are still running");
  auto final_status = generateAPIPodStatus(*pod, *after);
  if (status_fn) status_fn(final_status);
  status_manager_.setPodStatus(*pod, std::move(final_status));
  co_return base::okStatus();
}

asio::awaitable<base::Status> Agent::killPodWatched(const api::PodPtr& pod, runtime::Pod running,
                                                    std::optional<int64_t> grace_override) {
  // kubelet's killPodNow waits max(grace * 1.5, 10 s) for the kill, then reports the overrun; the
  // kill itself goes on (the runtime SIGKILLs at the end of the grace period).
  const int64_t grace = grace_override ? *grace_override : runtime::podGracePeriodSeconds(*pod);
  const base::Duration timeout = std::max<base::Duration>(std::chrono::seconds(grace + grace / 2),
                                                          options_.kill_timeout_minimum);
  auto timer = clock_.makeTimer(co_await asio::this_coro::executor);
  auto on_timeout = [this, pod, grace] {
    log()->warn(
        "Container runtime did not kill the pod within its grace period pod={} uid={} "
        "grace_seconds={}",
        api::podRef(*pod), pod->metadata.uid, grace);
    if (options_.record_event) {
      options_.record_event(*pod, "Warning", "ExceededGracePeriod",
                            "Container runtime did not kill the pod within specified grace period.",
                            "");
    }
  };
  timer->asyncWaitFor(timeout, on_timeout);
  auto killed = co_await runtime_.killPod(pod, std::move(running), grace_override);
  timer->cancel();
  co_return killed;
}

asio::awaitable<base::Status> Agent::syncTerminatingRuntimePod(api::PodPtr pod,
                                                               std::stop_token /*cancel*/) {
  const auto& uid = pod->metadata.uid;
  auto status = co_await runtime_.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) co_return status.status();
  auto running = runningPodOf(*status);
  if (running.empty()) co_return base::okStatus();
  // Orphans have no spec to take a grace period from; kubelet gives them one second.
  auto killed = co_await runtime_.killPod(nullptr, running, int64_t{1});
  metrics_.containers_killed += running.containers.size();
  co_return killed;
}

asio::awaitable<base::Status> Agent::syncTerminatedPod(api::PodPtr pod) {
  const auto& uid = pod->metadata.uid;
  auto status = co_await runtime_.getPodStatus(uid, pod->metadata.name, pod->metadata.namespace_);
  if (!status.ok()) co_return status.status();
  if (anyRunning(*status)) co_return base::unavailableError("containers of the pod are running");
  auto api_status = generateAPIPodStatus(*pod, *status);
  status_manager_.setPodStatus(*pod, std::move(api_status));
  crash_backoff_.forgetPrefix(uid + "/");
  {
    std::lock_guard lock(mu_);
    start_failures_.erase(uid);
    started_once_.erase(uid);
    dirs_made_.erase(uid);
  }
  // A pod config no longer has: drop its exited containers (state and logs go with them).
  if (!pod_manager_.getPodByUID(uid)) {
    for (const auto& cs : status->container_statuses) {
      auto removed = co_await runtime_.removeContainer(cs.id);
      if (!removed.ok()) {
        log()->warn("Cannot remove container pod={} container={} err={}", api::podRef(*pod),
                    cs.name, removed.toString());
      }
    }
  }
  log()->info("Pod terminated pod={} uid={}", api::podRef(*pod), uid);
  co_return base::okStatus();
}

}  // namespace nodeagent::agent
