// PodLifecycle's container starts: crash-loop backoff (kubelet's doBackOff), the container's
// image (kubelet's EnsureImageExists, for a runtime that runs images), its runtime config (sandbox,
// image, volumes and mounts), the start itself and its postStart hook.
// On the pod's strand.
#include "agent/pod_lifecycle.h"
#include "agent/runtime/spec_extras.h"
#include "api/pod_update.h"
#include "base/blocking.h"
#include "base/log.h"
#include "base/printable.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

std::string containerFieldPath(const api::Container& c) {
  return "spec.containers{" + c.name + "}";
}

// The backoff key of a container: a changed spec starts a fresh backoff, like kubelet's key.
std::string backoffKey(const api::Pod& pod, const api::Container& c) {
  return pod.metadata.uid + "/" + c.name + "/" + c.hash.toHex();
}

std::string podDescription(const api::Pod& pod) {
  return pod.metadata.name + "_" + pod.metadata.namespace_ + "(" + pod.metadata.uid + ")";
}

ProbeTarget hookTarget(const api::Handler& handler, const api::Container& container,
                       const runtime::ContainerId& id, base::Duration timeout,
                       const std::string& pod_ip) {
  ProbeTarget target;
  target.handler = handler;
  target.timeout = timeout;
  target.container_id = id;
  target.pod_ip = pod_ip;
  target.ports = container.ports;
  return target;
}

}  // namespace

bool PodLifecycle::inBackoff(const api::Pod& pod, const api::Container& container,
                             const runtime::PodStatus& status) {
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
  if (last_exited == nullptr) return false;
  const auto key = backoffKey(pod, container);
  base::Duration remaining{};
  if (!deps_.crash_backoff.isInBackOffSince(key, last_exited->finished_at, &remaining)) {
    deps_.crash_backoff.next(key);
    return false;
  }
  const auto& uid = pod.metadata.uid;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(deps_.crash_backoff.get(key));
  setStartFailure(uid, container.name,
                  {"CrashLoopBackOff", "back-off " + std::to_string(secs.count()) +
                                           "s restarting failed container=" + container.name +
                                           " pod=" + podDescription(pod)});
  deps_.schedule_sync(uid, remaining);
  recordEvent(
      pod, "Warning", "BackOff",
      "Back-off restarting failed container " + container.name + " in pod " + podDescription(pod),
      containerFieldPath(container));
  return true;
}

asio::awaitable<base::StatusOr<std::optional<images::EnsureImageResult>>> PodLifecycle::ensureImage(
    api::PodPtr pod, api::Container container) {
  auto ensure = images_.ensureImageExists(pod, container);
  auto result = co_await std::move(ensure);
  if (result.ok()) co_return std::optional<images::EnsureImageResult>(std::move(result));
  // No container was made: the restart count stays, the reason shows as the container's Waiting
  // state until a start succeeds.
  const auto& uid = pod->metadata.uid;
  setStartFailure(uid, container.name, {result.reason, result.message});
  recordEvent(*pod, "Warning", "Failed", "Error: " + result.reason, containerFieldPath(container));
  if (result.retry_in) deps_.schedule_sync(uid, *result.retry_in);
  if (result.reason == images::kImagePullBackOff) {
    co_return std::optional<images::EnsureImageResult>();
  }
  log()->warn("Container image not ready pod={} container={} image={} reason={} message={}",
              api::podRef(*pod), container.name, container.image, result.reason,
              base::goQuote(result.message));
  co_return base::unknownError(result.reason + ": " + result.message);
}

asio::awaitable<base::StatusOr<ContainerEnvSources>> PodLifecycle::envSources(
    api::PodPtr pod, api::Container container) {
  if (!needsEnvSources(*pod, container))
    co_return ContainerEnvSources{std::move(container), {}, {}};
  auto resolve = [objects = deps_.volumes.objects(), pod, container] {
    return resolveEnvSources(*pod, container, objects);
  };
  auto sources = co_await base::runBlocking(deps_.blocking, std::move(resolve));
  if (sources.ok()) {
    for (const auto& message : sources->skipped_keys) {
      recordEvent(*pod, "Warning", "InvalidEnvironmentVariableNames", message,
                  containerFieldPath(container));
    }
  }
  co_return sources;
}

base::StatusOr<runtime::StartContainerOptions> PodLifecycle::startOptions(
    const StartRequest& request, const api::Container& container) {
  const api::Pod& pod = *request.pod;
  runtime::StartContainerOptions options;
  auto pod_dir = deps_.dirs.path(pod.metadata.uid);
  if (!pod_dir.ok()) return pod_dir.status();
  options.pod_dir = std::move(*pod_dir);
  options.sandbox_id = request.sandbox_id;
  options.sandbox_config = request.sandbox_config;
  options.image = container.image;
  options.volumes = request.volumes;
  auto mounts = VolumePreparer::mountsFor(pod, container, request.volumes);
  if (!mounts.ok()) return mounts.status();
  options.mounts = std::move(*mounts);
  options.pod_ip = request.pod_ip;
  options.host_ip = options_.node_ip;
  options.node_allocatable = options_.node_allocatable;
  options.refuse_root = !options_.allow_root_api_pods && !api::isStaticPod(pod);
  options.cgroup_parent = deps_.cgroups.parent(pod);
  options.resources = deps_.cgroups.resources(pod, container);
  auto seccomp = runtime::seccompProfileFor(pod, container.name, options_.seccomp_default,
                                            options_.seccomp_profile_root);
  if (!seccomp.ok()) return seccomp.status();
  options.seccomp = *std::move(seccomp);
  return options;
}

asio::awaitable<base::Status> PodLifecycle::startContainerWithBackoff(
    StartRequest request, std::shared_ptr<const runtime::PodStatus> status) {
  const api::PodPtr pod = request.pod;
  const api::Container container = request.init ? pod->spec->init_containers[request.index]
                                                : pod->spec->containers[request.index];
  if (inBackoff(*pod, container, *status)) co_return base::okStatus();
  const auto* last = status->findContainerStatusByName(container.name);
  const int attempt = last != nullptr ? last->restart_count + 1 : 0;
  std::optional<runtime::ImageInfo> image_info;  // what the image check found, for the start
  if (deps_.runtime.runsImages()) {
    auto ensure = ensureImage(pod, container);
    auto image = co_await std::move(ensure);
    if (!image.ok()) co_return image.status();
    if (!*image) co_return base::okStatus();  // the pull backs off
    image_info = std::move((*image)->image);
  }
  auto resolve = envSources(pod, container);
  auto sources = co_await std::move(resolve);
  // (No co_await inside a conditional expression: GCC 12 destroys its temporaries twice.)
  auto options = startOptions(request, container);
  if (options.ok()) options->image_info = std::move(image_info);
  base::StatusOr<runtime::ContainerId> started = runtime::ContainerId{};
  if (!sources.ok()) {
    started = sources.status();
  } else if (!options.ok()) {
    started = options.status();
  } else {
    // envFrom's variables come before the container's env, which may override them.
    options->extra_env = std::move(sources->env_from);
    started = co_await deps_.runtime.startContainer(pod, std::move(sources->container), attempt,
                                                    std::move(*options));
  }
  if (!started.ok()) {
    setStartFailure(
        pod->metadata.uid, container.name,
        {std::string(runtime::startErrorReason(started.status())), started.status().message()});
    log()->warn("Container failed to start pod={} container={} err={}", api::podRef(*pod),
                container.name, started.status().toString());
    recordEvent(*pod, "Warning", "Failed", "Error: " + started.status().message(),
                containerFieldPath(container));
    co_return started.status();
  }
  reportStarted(*pod, container, *started, attempt);
  if (container.lifecycle && container.lifecycle->post_start) {
    auto hook = runPostStartHook(pod, container, *started, request.pod_ip);
    co_return co_await std::move(hook);
  }
  co_return base::okStatus();
}

void PodLifecycle::reportStarted(const api::Pod& pod, const api::Container& container,
                                 const runtime::ContainerId& id, int attempt) {
  clearStartFailure(pod.metadata.uid, container.name);
  ++deps_.metrics.containers_started;
  recordEvent(pod, "Normal", "Created", "Created container " + container.name,
              containerFieldPath(container));
  recordEvent(pod, "Normal", "Started", "Started container " + container.name,
              containerFieldPath(container));
  log()->info("Container started pod={} container={} attempt={} id={}", api::podRef(pod),
              container.name, attempt, id.toString());
}

asio::awaitable<base::Status> PodLifecycle::runPostStartHook(api::PodPtr pod,
                                                             api::Container container,
                                                             runtime::ContainerId id,
                                                             std::string pod_ip) {
  // kubelet gives the hook no timeout; the grace period bounds it so that a hung hook cannot
  // hold the pod's worker for ever.
  auto target =
      hookTarget(*container.lifecycle->post_start, container, id,
                 std::chrono::seconds(std::max<int64_t>(runtime::podGracePeriodSeconds(*pod), 1)),
                 pod_ip.empty() ? options_.node_ip : pod_ip);
  auto hook = deps_.hooks.runHook(target);
  auto failure = co_await std::move(hook);
  if (!failure) co_return base::okStatus();
  const auto message = hookFailureMessage(target.handler, container.name, *pod, *failure);
  log()->warn("PostStart hook failed, killing the container pod={} container={} id={} error={}",
              api::podRef(*pod), container.name, id.toString(), base::goQuote(failure->error));
  recordEvent(*pod, "Warning", "FailedPostStartHook", message, containerFieldPath(container));
  auto kill = deps_.runtime.killContainer(pod, id, runtime::KillOptions{}, "FailedPostStartHook");
  auto killed = co_await std::move(kill);
  ++deps_.metrics.containers_killed;
  if (!killed.ok()) {
    log()->warn(
        "Cannot kill the container after its postStart hook failed pod={} container={} err={}",
        api::podRef(*pod), container.name, killed.toString());
  }
  setStartFailure(pod->metadata.uid, container.name, {"PostStartHookError", message});
  co_return base::unknownError("PostStartHookError: " + failure->error);
}

// kubelet's executePreStopHook through its HandlerRunner: an exec or httpGet hook bounded by the
// grace period; a failure is logged and recorded as a FailedPreStopHook event. The handler's
// timer and socket share a strand of their own (kills of one pod run in parallel).
asio::awaitable<void> runPreStopHook(std::shared_ptr<ProbeHandler> handler, std::string pod_ip,
                                     EventSink record_event, runtime::PreStopHookRequest request) {
  const api::Pod& pod = *request.pod;
  const auto* container = runtime::findSpecContainer(pod, request.container_name);
  if (container == nullptr || !container->lifecycle || !container->lifecycle->pre_stop) co_return;
  auto target =
      hookTarget(*container->lifecycle->pre_stop, *container, request.id, request.timeout, pod_ip);
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

void reportProbeFailure(const api::Pod& pod, const std::string& container, ProbeType type,
                        const ProbeOutcome& outcome, const EventSink& record_event) {
  const bool errored = outcome.kind == ProbeOutcome::Kind::kUnknown;
  log()->info("Probe {} probeType={} pod={} container={} output={}", errored ? "errored" : "failed",
              probeTypeName(type), api::podRef(pod), container, base::goQuote(outcome.output));
  if (record_event) {
    record_event(pod, "Warning", "Unhealthy",
                 std::string(probeTypeName(type)) + " probe " +
                     (errored ? "errored: " : "failed: ") + outcome.output,
                 "spec.containers{" + container + "}");
  }
}

}  // namespace nodeagent::agent
