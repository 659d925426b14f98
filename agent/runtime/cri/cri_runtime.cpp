#include "agent/runtime/cri/cri_runtime.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <system_error>
#include <tuple>
#include <utility>

#include "agent/runtime/cri/cri_runtime_config.h"
#include "agent/runtime/cri_log.h"
#include "agent/runtime/security_context.h"
#include "agent/volume/subpath.h"
#include "base/blocking.h"
#include "base/log.h"

#include <nlohmann/json.hpp>

namespace nodeagent::runtime {

namespace {

NODEAGENT_LOGGER("runtime")

// How long an event waits for containerd's CRI plugin to show the change it reports in
// ContainerStatus, asking again every kEventSettleStep at most: it records an exit only after it
// has deleted the task (a hundred milliseconds or so), a start right after the task started.
constexpr base::Duration kEventSettleMax = std::chrono::milliseconds(500);
constexpr base::Duration kEventSettleStep = std::chrono::milliseconds(5);

base::SystemTime criTime(int64_t nanos) {
  if (nanos <= 0) return base::SystemTime{};
  return base::SystemTime(
      std::chrono::duration_cast<base::SystemTime::duration>(std::chrono::nanoseconds(nanos)));
}

ContainerState fromCri(cri::ContainerState state) {
  switch (state) {
    case cri::ContainerState::kCreated:
      return ContainerState::kCreated;
    case cri::ContainerState::kRunning:
      return ContainerState::kRunning;
    case cri::ContainerState::kExited:
      return ContainerState::kExited;
    case cri::ContainerState::kUnknown:
      break;
  }
  return ContainerState::kUnknown;
}

std::string valueOr(const cri::StringMap& map, const std::string& key, std::string fallback = {}) {
  auto it = map.find(key);
  return it == map.end() ? fallback : it->second;
}

int64_t intValue(const cri::StringMap& map, const std::string& key, int64_t fallback) {
  auto it = map.find(key);
  if (it == map.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return fallback;
  }
}

bool isNotFound(const base::Status& status) { return status.code() == base::StatusCode::kNotFound; }

}  // namespace

CriRuntime::CriRuntime(std::shared_ptr<cri::CriClient> client, base::Clock& clock,
                       CriRuntimeOptions options)
    : client_(std::move(client)), clock_(clock), options_(std::move(options)) {}

CriRuntime::~CriRuntime() {
  // The stream's thread calls back into this object: end it first.
  std::unique_ptr<cri::ContainerdEvents> events;
  {
    std::lock_guard lock(mu_);
    events = std::move(events_);
  }
  events.reset();
}

std::string CriRuntime::type() const {
  std::lock_guard lock(mu_);
  return runtime_name_.empty() ? std::string("remote") : runtime_name_;
}

std::string CriRuntime::version() const {
  std::lock_guard lock(mu_);
  return runtime_version_;
}

base::Status CriRuntime::recover() {
  auto version = client_->version();
  if (!version.ok()) return version.status();
  std::lock_guard lock(mu_);
  runtime_name_ = version->runtime_name;
  runtime_version_ = version->runtime_version;
  return base::okStatus();
}

asio::awaitable<base::StatusOr<std::string>> CriRuntime::runPodSandbox(PodSandboxConfig config) {
  auto client = client_;
  auto run = [client, config = std::move(config)]() -> base::StatusOr<std::string> {
    std::error_code ec;
    std::filesystem::create_directories(config.log_directory, ec);
    if (ec) {
      return base::unknownError("creating pod log directory " + config.log_directory.string() +
                                ": " + ec.message());
    }
    return client->runPodSandbox(toCriSandbox(config));
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(run));
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> CriRuntime::stopPodSandbox(std::string id) {
  auto client = client_;
  auto stop = [client, id = std::move(id)]() -> base::Status {
    auto status = client->stopPodSandbox(id);
    return isNotFound(status) ? base::okStatus() : status;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(stop));
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> CriRuntime::removePodSandbox(std::string id) {
  auto client = client_;
  auto remove = [client, id = std::move(id)]() -> base::Status {
    auto status = client->removePodSandbox(id);
    return isNotFound(status) ? base::okStatus() : status;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(remove));
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<RuntimeStatus>> CriRuntime::status() {
  auto client = client_;
  auto ask = [client]() -> base::StatusOr<RuntimeStatus> {
    auto answer = client->status();
    if (!answer.ok()) return answer.status();
    RuntimeStatus out;
    for (const auto& c : answer->conditions) {
      out.conditions.push_back({c.type, c.status, c.reason, c.message});
    }
    return out;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(ask));
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> CriRuntime::updatePodCidr(std::string cidrs) {
  auto client = client_;
  auto update = [client, cidrs = std::move(cidrs)] { return client->updateRuntimeConfig(cidrs); };
  auto task = base::runBlocking(options_.blocking_executor, std::move(update));
  co_return co_await std::move(task);
}

void CriRuntime::setEventHandler(ContainerEventHandler handler) {
  std::lock_guard lock(mu_);
  event_handler_ = std::move(handler);
  if (!options_.container_events || events_) return;
  cri::ContainerdEventsOptions options;
  options.endpoint = client_->endpoint().uri;
  auto events = cri::ContainerdEvents::start(
      std::move(options),
      [this](const cri::TaskEvent& event, std::stop_token stop) { onTaskEvent(event, stop); });
  if (!events.ok()) {
    log()->warn("No container events; the PLEG relists only err={}", events.status().toString());
    return;
  }
  events_ = *std::move(events);
}

void CriRuntime::onTaskEvent(const cri::TaskEvent& event, std::stop_token stop) {
  if (!event.initProcess()) return;  // an exec's process
  const bool exit = event.type == cri::TaskEvent::Type::kExit;
  auto shows = [exit](cri::ContainerState state) {
    return exit ? state == cri::ContainerState::kExited : state != cri::ContainerState::kCreated;
  };
  // NotFound: a sandbox's pause container (not a CRI container), or one removed since.
  auto status = client_->containerStatus(event.container_id);
  base::Duration waited{};
  for (base::Duration wait = std::chrono::milliseconds(1);
       status.ok() && !shows(status->state) && waited < kEventSettleMax;
       wait = std::min(wait * 2, kEventSettleStep)) {
    if (!cri::waitUnlessStopped(stop, wait)) return;
    waited += wait;
    status = client_->containerStatus(event.container_id);
  }
  if (!status.ok() || !shows(status->state)) {
    if (!isNotFound(status.status())) {
      log()->debug("Container event left to the relist id={} exit={} err={}", event.container_id,
                   exit, status.ok() ? "status not updated yet" : status.status().toString());
    }
    return;
  }
  const std::string uid = valueOr(status->labels, kPodUidLabel);
  if (uid.empty()) return;  // not made by a kubelet-style agent
  ContainerEventHandler handler;
  {
    std::lock_guard lock(mu_);
    handler = event_handler_;
  }
  if (!handler) return;
  ContainerEvent out;
  out.type = exit ? ContainerEvent::Type::kDied : ContainerEvent::Type::kStarted;
  out.pod_uid = uid;
  out.container_id = ContainerId{type(), event.container_id};
  out.container_name = valueOr(status->labels, kContainerNameLabel, status->metadata.name);
  handler(out);
}

void CriRuntime::setPreStopHookRunner(PreStopHookRunner runner) {
  std::lock_guard lock(mu_);
  pre_stop_runner_ = std::move(runner);
}

asio::awaitable<base::StatusOr<std::vector<Pod>>> CriRuntime::getPods(bool all) {
  auto list = [this, all]() -> base::StatusOr<std::vector<Pod>> {
    cri::ContainerFilter filter;
    if (!all) filter.state = cri::ContainerState::kRunning;
    auto containers = client_->listContainers(filter);
    if (!containers.ok()) return containers.status();
    const std::string type_name = type();
    std::map<std::string, Pod> pods;
    for (const auto& c : *containers) {
      const std::string uid = valueOr(c.labels, kPodUidLabel);
      if (uid.empty()) continue;
      Pod& pod = pods[uid];
      pod.uid = uid;
      pod.name = valueOr(c.labels, kPodNameLabel);
      pod.namespace_ = valueOr(c.labels, kPodNamespaceLabel);
      pod.containers.push_back(Container{
          ContainerId{type_name, c.id}, valueOr(c.labels, kContainerNameLabel, c.metadata.name),
          c.image, hashFromHex(valueOr(c.annotations, kContainerHashAnnotation)), fromCri(c.state),
          c.pod_sandbox_id});
    }
    // kubelet's GetPods lists the sandboxes too: the PLEG sees one that stops being ready (its
    // pause process died) and the pod's sync replaces it.
    cri::PodSandboxFilter sandbox_filter;
    if (!all) sandbox_filter.state = cri::PodSandboxState::kReady;
    auto sandboxes = client_->listPodSandbox(sandbox_filter);
    if (!sandboxes.ok()) return sandboxes.status();
    for (const auto& s : *sandboxes) {
      const std::string uid = valueOr(s.labels, kPodUidLabel);  // another client's: not ours
      if (uid.empty()) continue;
      Pod& pod = pods[uid];
      pod.uid = uid;
      if (pod.name.empty()) pod.name = s.metadata.name;
      if (pod.namespace_.empty()) pod.namespace_ = s.metadata.pod_namespace;
      const bool ready = s.state == cri::PodSandboxState::kReady;
      pod.sandboxes.push_back(Container{ContainerId{type_name, s.id}, "", "", api::Hash128{},
                                        ready ? ContainerState::kRunning : ContainerState::kExited,
                                        ""});
    }
    std::vector<Pod> out;
    for (auto& [uid, pod] : pods) out.push_back(std::move(pod));
    return out;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(list));
  co_return co_await std::move(task);
}

namespace {

// kubelet's getTerminationMessage for an exited container: its termination message file (found
// among its mounts at the annotated path), else with FallbackToLogsOnError after a failure the
// end of its log; after the runtime's own message, if any.
void addTerminationMessage(const cri::ContainerStatus& s, ContainerStatus& out) {
  const auto path = s.annotations.find(kTerminationMessagePathAnnotation);
  if (path == s.annotations.end()) return;
  std::string host_path;
  for (const auto& m : s.mounts) {
    if (m.container_path == path->second) host_path = m.host_path;
  }
  const auto policy = s.annotations.find(kTerminationMessagePolicyAnnotation);
  const bool fallback = policy != s.annotations.end() &&
                        policy->second == "FallbackToLogsOnError" && s.exit_code != 0;
  if (host_path.empty() && !fallback) return;
  const auto message = readTerminationMessage(host_path, fallback, s.log_path);
  if (message.empty()) return;
  if (!out.message.empty()) out.message += ": ";
  out.message += message;
}

}  // namespace

ContainerStatus CriRuntime::toRuntimeStatus(const cri::ContainerStatus& s) const {
  ContainerStatus out;
  out.id = ContainerId{type(), s.id};
  out.name = valueOr(s.labels, kContainerNameLabel, s.metadata.name);
  out.state = fromCri(s.state);
  out.created_at = criTime(s.created_at);
  out.started_at = criTime(s.started_at);
  out.finished_at = criTime(s.finished_at);
  out.exit_code = s.exit_code;
  out.reason = s.reason;
  out.message = s.message;
  out.image = s.image;
  out.image_id = s.image_ref;
  out.hash = hashFromHex(valueOr(s.annotations, kContainerHashAnnotation));
  out.restart_count = static_cast<int>(
      intValue(s.annotations, kContainerRestartCountAnnotation, s.metadata.attempt));
  out.log_path = s.log_path;
  if (out.state == ContainerState::kExited) addTerminationMessage(s, out);
  return out;
}

base::StatusOr<PodStatus> CriRuntime::podStatusBlocking(const std::string& uid) {
  PodStatus status;
  cri::PodSandboxFilter sandbox_filter;
  sandbox_filter.label_selector = {{kPodUidLabel, uid}};
  auto sandboxes = client_->listPodSandbox(sandbox_filter);
  if (!sandboxes.ok()) return sandboxes.status();
  std::vector<cri::PodSandboxStatus> found;
  for (const auto& sandbox : *sandboxes) {
    auto s = client_->podSandboxStatus(sandbox.id);
    if (isNotFound(s.status())) continue;  // removed meanwhile
    if (!s.ok()) return s.status();
    found.push_back(*std::move(s));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(a.created_at, a.metadata.attempt) > std::tie(b.created_at, b.metadata.attempt);
  });
  for (const auto& s : found) {
    status.sandbox_statuses.push_back(PodSandboxStatus{
        s.id,
        s.state == cri::PodSandboxState::kReady ? SandboxState::kReady : SandboxState::kNotReady,
        s.metadata.attempt, criTime(s.created_at)});
  }
  // kubelet's: the pod's IPs are its newest sandbox's, while it is ready.
  if (!found.empty() && found[0].state == cri::PodSandboxState::kReady && !found[0].ip.empty()) {
    status.ips.push_back(found[0].ip);
    for (const auto& ip : found[0].additional_ips) status.ips.push_back(ip);
  }
  cri::ContainerFilter container_filter;
  container_filter.label_selector = {{kPodUidLabel, uid}};
  auto containers = client_->listContainers(container_filter);
  if (!containers.ok()) return containers.status();
  for (const auto& c : *containers) {
    auto s = client_->containerStatus(c.id);
    if (isNotFound(s.status())) continue;
    if (!s.ok()) return s.status();
    status.container_statuses.push_back(toRuntimeStatus(*s));
  }
  return status;
}

asio::awaitable<base::StatusOr<PodStatus>> CriRuntime::getPodStatus(std::string uid,
                                                                    std::string name,
                                                                    std::string namespace_) {
  auto read = [this, uid]() { return podStatusBlocking(uid); };
  auto task = base::runBlocking(options_.blocking_executor, std::move(read));
  auto result = co_await std::move(task);
  if (!result.ok()) co_return result.status();
  PodStatus status = *std::move(result);
  status.uid = std::move(uid);
  status.name = std::move(name);
  status.namespace_ = std::move(namespace_);
  std::sort(status.container_statuses.begin(), status.container_statuses.end(),
            [](const ContainerStatus& a, const ContainerStatus& b) {
              return std::tie(a.created_at, a.restart_count) >
                     std::tie(b.created_at, b.restart_count);
            });
  co_return status;
}

base::StatusOr<std::string> CriRuntime::startBlocking(const api::Pod& pod,
                                                      const api::Container& container, int attempt,
                                                      const StartContainerOptions& options) {
  // kubelet passes CreateContainer the config it ran the sandbox with: nothing is made without.
  if (!options.sandbox_config) {
    return base::invalidArgumentError("no sandbox config for container \"" + container.name +
                                      "\" of pod " + api::podRef(pod));
  }
  // As kubelet: the container is created from the image's ID (the image ref EnsureImageExists
  // resolved), and the image's user comes from the same ImageStatus; the agent's image manager
  // passes what it found, so the image is looked up here only when it did not.
  const std::string& image = options.image.empty() ? container.image : options.image;
  auto found = options.image_info ? base::StatusOr<std::optional<ImageInfo>>(options.image_info)
                                  : lookUpImage(*client_, image);
  if (!found.ok()) return found.status();
  const std::string image_ref = found->has_value() ? (*found)->id : image;
  auto config = containerConfig(pod, container, attempt, options, image_ref, imageUser(*found));
  if (!config.ok()) return config.status();
  // containerd bind-mounts what it is given, following symlinks: a subPath must not lead out of
  // its volume, and is given as a bind mount of what was checked (agent/volume/subpath.h).
  // config->mounts begins with options.mounts, in order.
  if (config->mounts.size() < options.mounts.size()) {
    return base::internalError("container config lost volume mounts");
  }
  for (size_t i = 0; i < options.mounts.size(); ++i) {
    const auto& m = options.mounts[i];
    if (m.volume_root.empty()) continue;
    auto resolved = agent::bindSubPath(m.volume_root, m.host_path, options.pod_dir, m.volume,
                                       container.name, i);
    if (!resolved.ok()) {
      // As kubelet: the node's paths go to the log, not into the pod's status.
      log()->warn("Cannot prepare a subPath pod={} container={} volumeMount={} error={}",
                  api::podRef(pod), container.name, m.volume, resolved.status().message());
      return base::invalidArgumentError("failed to prepare subPath for volumeMount \"" + m.volume +
                                        "\" of container \"" + container.name + "\"");
    }
    config->mounts[i].host_path = resolved->string();
  }
  const auto log_dir =
      podLogsDirectory(pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid);
  std::error_code ec;
  std::filesystem::create_directories(log_dir / container.name, ec);
  if (ec) {
    return base::unknownError("creating container log directory " +
                              (log_dir / container.name).string() + ": " + ec.message());
  }
  auto message_mount = terminationMessageMount(container, attempt, options.pod_dir);
  if (!message_mount.ok()) return message_mount.status();
  if (*message_mount) config->mounts.push_back(**message_mount);
  auto id =
      client_->createContainer(options.sandbox_id, *config, toCriSandbox(*options.sandbox_config));
  if (!id.ok()) return id.status();
  auto started = client_->startContainer(*id);
  if (!started.ok()) return started;
  return *id;
}

asio::awaitable<base::StatusOr<ContainerId>> CriRuntime::startContainer(
    api::PodPtr pod, api::Container container, int attempt, StartContainerOptions options) {
  auto names = checkPathNames(*pod, container);
  if (!names.ok()) co_return names;
  auto start = [this, pod, container = std::move(container), attempt,
                options = std::move(options)]() {
    return startBlocking(*pod, container, attempt, options);
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(start));
  auto id = co_await std::move(task);
  if (!id.ok()) co_return id.status();
  co_return ContainerId{type(), *std::move(id)};
}

// What killContainer needs to know of a container before it stops it.
struct KillTarget {
  bool running = false;
  bool exited = false;
  std::string name;
  int64_t recorded_grace = kDefaultTerminationGracePeriodSeconds;
  std::vector<std::string> pre_stop;  // the exec hook recorded at start
};

namespace {

std::vector<std::string> recordedPreStop(const std::string& handler) {
  std::vector<std::string> out;
  if (handler.empty()) return out;
  auto json = nlohmann::json::parse(handler, nullptr, false);
  if (!json.is_object() || !json.contains("exec") || !json["exec"].is_object()) return out;
  const auto& command = json["exec"]["command"];
  if (!command.is_array()) return out;
  for (const auto& word : command) {
    if (word.is_string()) out.push_back(word.get<std::string>());
  }
  return out;
}

base::StatusOr<KillTarget> inspectForKill(cri::CriClient& client, const std::string& id) {
  auto status = client.containerStatus(id);
  if (!status.ok()) return status.status();
  KillTarget target;
  target.running = status->state == cri::ContainerState::kRunning;
  target.exited = status->state == cri::ContainerState::kExited;
  target.name = valueOr(status->labels, kContainerNameLabel, status->metadata.name);
  target.recorded_grace =
      intValue(status->annotations, kPodTerminationGracePeriodAnnotation, target.recorded_grace);
  target.pre_stop = recordedPreStop(valueOr(status->annotations, kPreStopHandlerAnnotation));
  return target;
}

}  // namespace

asio::awaitable<base::Duration> CriRuntime::runPreStopHook(const api::PodPtr& pod,
                                                           const ContainerId& id,
                                                           const KillTarget& target,
                                                           int64_t hook_grace) {
  // The pod's spec decides the hook when there is a pod; the exec hook recorded at start serves
  // orphans (kubelet's restoreSpecsFromContainerLabels).
  const api::Container* spec = pod ? findSpecContainer(*pod, target.name) : nullptr;
  const bool has_hook =
      spec ? spec->lifecycle && spec->lifecycle->pre_stop : !target.pre_stop.empty();
  if (!has_hook || hook_grace <= 0 || !target.running) co_return base::Duration::zero();
  PreStopHookRunner runner;
  {
    std::lock_guard lock(mu_);
    runner = pre_stop_runner_;
  }
  const auto started = clock_.now();
  if (spec && runner) {
    PreStopHookRequest request{pod, target.name, id, std::chrono::seconds(hook_grace)};
    auto hook = runner(std::move(request));
    co_await std::move(hook);
  } else if (auto command = spec ? preStopCommand(*spec) : target.pre_stop; !command.empty()) {
    // Its output and exit code only matter to an event; the kill goes on whatever they are.
    auto exec = execInContainer(id, std::move(command), std::chrono::seconds(hook_grace));
    auto result = co_await std::move(exec);
    (void)result;
  }
  co_return clock_.now() - started;
}

asio::awaitable<base::Status> CriRuntime::killContainer(api::PodPtr pod, ContainerId id,
                                                        KillOptions options, std::string reason) {
  (void)reason;
  auto client = client_;
  auto inspect = [client, cid = id.id]() { return inspectForKill(*client, cid); };
  auto inspect_task = base::runBlocking(options_.blocking_executor, std::move(inspect));
  auto target = co_await std::move(inspect_task);
  if (isNotFound(target.status())) co_return base::okStatus();
  if (!target.ok()) co_return target.status();
  if (target->exited) co_return base::okStatus();

  const int64_t hook_grace =
      pod ? killGracePeriodSeconds(*pod, options.probe_grace) : target->recorded_grace;
  auto hook = runPreStopHook(pod, id, *target, hook_grace);
  const base::Duration hook_time = co_await std::move(hook);
  const int64_t seconds =
      graceAfterPreStopSeconds(hook_grace, hook_time, options, options_.minimum_grace_seconds);
  auto stop = [client, cid = id.id, seconds]() {
    auto stopped = client->stopContainer(cid, std::chrono::seconds(seconds));
    return isNotFound(stopped) ? base::okStatus() : stopped;
  };
  auto stop_task = base::runBlocking(options_.blocking_executor, std::move(stop));
  co_return co_await std::move(stop_task);
}

asio::awaitable<base::Status> CriRuntime::killPod(api::PodPtr pod, Pod running_pod,
                                                  std::optional<int64_t> grace_override) {
  auto kill = [this, pod, grace_override](const ContainerId& id) {
    return killContainer(pod, id, KillOptions::graceOverride(grace_override), "killing pod");
  };
  auto killing = killPodContainers(running_pod, kill);
  co_return co_await std::move(killing);
}

namespace {

// containerd 1.6 answers an ExecSync whose timeout passed with an error "timeout <d> exceeded".
bool isExecTimeout(const base::Status& status) {
  return status.code() == base::StatusCode::kDeadlineExceeded ||
         (status.message().find("timeout") != std::string::npos &&
          status.message().find("exceeded") != std::string::npos);
}

}  // namespace

asio::awaitable<base::StatusOr<ExecResult>> CriRuntime::execInContainer(
    ContainerId id, std::vector<std::string> command, base::Duration timeout) {
  auto exec = [this, id = std::move(id), command = std::move(command),
               timeout]() -> base::StatusOr<ExecResult> {
    auto status = client_->containerStatus(id.id);
    if (!status.ok()) return status.status();
    if (status->state != cri::ContainerState::kRunning) {
      return base::failedPreconditionError("container " + id.toString() + " is not running");
    }
    // CRI's timeout is whole seconds: round up, so a short timeout is not "none".
    auto seconds = std::chrono::ceil<std::chrono::seconds>(timeout);
    auto result = client_->execSync(id.id, command, seconds);
    if (!result.ok() && isExecTimeout(result.status())) {
      ExecResult timed_out;
      timed_out.timed_out = true;
      timed_out.exit_code = 137;
      return timed_out;
    }
    if (!result.ok()) return result.status();
    ExecResult out;
    out.exit_code = result->exit_code;
    out.output = result->stdout_bytes + result->stderr_bytes;
    if (out.output.size() > kMaxExecOutput) out.output.resize(kMaxExecOutput);
    return out;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(exec));
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> CriRuntime::removeContainer(ContainerId id) {
  auto remove = [this, id = std::move(id)]() -> base::Status {
    auto status = client_->containerStatus(id.id);
    if (!status.ok()) return status.status();
    if (status->state == cri::ContainerState::kRunning) {
      return base::failedPreconditionError("container " + id.toString() + " is still running");
    }
    auto removed = client_->removeContainer(id.id);
    if (!removed.ok()) return removed;
    // kubelet's removeContainerLog: the runtime leaves the log file behind.
    if (!status->log_path.empty()) {
      std::error_code ec;
      std::filesystem::remove(status->log_path, ec);
    }
    return base::okStatus();
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(remove));
  co_return co_await std::move(task);
}

std::filesystem::path CriRuntime::podLogsDirectory(std::string_view pod_namespace,
                                                   std::string_view pod_name,
                                                   std::string_view pod_uid) const {
  return buildPodLogsDirectory(options_.pod_log_dir, pod_namespace, pod_name, pod_uid);
}

std::filesystem::path CriRuntime::containerLogsPath(std::string_view pod_namespace,
                                                    std::string_view pod_name,
                                                    std::string_view pod_uid,
                                                    std::string_view container_name,
                                                    int restart_count) const {
  return buildContainerLogPath(podLogsDirectory(pod_namespace, pod_name, pod_uid), container_name,
                               restart_count);
}

}  // namespace nodeagent::runtime
