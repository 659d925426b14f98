#include "agent/runtime/fake_runtime.h"

#include <algorithm>
#include <cstdio>

namespace nodeagent::runtime {

FakeRuntime::FakeRuntime(asio::any_io_executor event_executor, base::Clock& clock)
    : event_executor_(std::move(event_executor)), clock_(clock) {}

FakeRuntime::~FakeRuntime() = default;

void FakeRuntime::setPreStopHookRunner(PreStopHookRunner runner) {
  std::lock_guard lock(mu_);
  pre_stop_runner_ = std::move(runner);
}

void FakeRuntime::setEventHandler(ContainerEventHandler handler) {
  std::lock_guard lock(mu_);
  handler_ = std::move(handler);
}

void FakeRuntime::emit(ContainerEvent event) {
  ContainerEventHandler handler;
  {
    std::lock_guard lock(mu_);
    handler = handler_;
  }
  if (!handler) return;
  asio::post(event_executor_,
             [handler = std::move(handler), event = std::move(event)] { handler(event); });
}

void FakeRuntime::record(Action action) {
  if (record_actions_) actions_.push_back(std::move(action));
}

ContainerStatus* FakeRuntime::findLocked(const std::string& id, std::string* uid) {
  auto it = pod_of_container_.find(id);
  if (it == pod_of_container_.end()) return nullptr;
  auto pit = pods_.find(it->second);
  if (pit == pods_.end()) return nullptr;
  for (auto& c : pit->second.containers) {
    if (c.id.id == id) {
      if (uid) *uid = it->second;
      return &c;
    }
  }
  return nullptr;
}

asio::awaitable<base::StatusOr<std::vector<Pod>>> FakeRuntime::getPods(bool all) {
  std::vector<Pod> out;
  {
    std::lock_guard lock(mu_);
    ++get_pods_calls_;
    out.reserve(pods_.size());
    for (const auto& [uid, rec] : pods_) {
      Pod pod{uid, rec.name, rec.namespace_, {}, {}};
      for (const auto& c : rec.containers) {
        if (!all && c.state != ContainerState::kRunning) continue;
        auto in = rec.container_sandboxes.find(c.id.id);
        pod.containers.push_back(Container{c.id, c.name, c.image, c.hash, c.state,
                                           in == rec.container_sandboxes.end() ? "" : in->second});
      }
      auto list = [&](const PodSandboxStatus& sandbox) {
        const bool ready = sandbox.state == SandboxState::kReady;
        if (!all && !ready) return;
        pod.sandboxes.push_back(
            Container{ContainerId{type(), sandbox.id},
                      "",
                      "",
                      {},
                      ready ? ContainerState::kRunning : ContainerState::kExited,
                      ""});
      };
      if (lists_sandboxes_ && rec.sandbox) list(*rec.sandbox);
      if (lists_sandboxes_)
        std::for_each(rec.older_sandboxes.begin(), rec.older_sandboxes.end(), list);
      if (!pod.containers.empty() || !pod.sandboxes.empty()) out.push_back(std::move(pod));
    }
  }
  co_return out;
}

void FakeRuntime::setListsSandboxes(bool lists) {
  std::lock_guard lock(mu_);
  lists_sandboxes_ = lists;
  ++version_;
}

size_t FakeRuntime::getPodsCalls() const {
  std::lock_guard lock(mu_);
  return get_pods_calls_;
}

std::optional<uint64_t> FakeRuntime::podsVersion() const {
  std::lock_guard lock(mu_);
  return version_;
}

void FakeRuntime::setReportsPodStatusVersions(bool reports) {
  std::lock_guard lock(mu_);
  reports_pod_status_versions_ = reports;
}

std::optional<uint64_t> FakeRuntime::podStatusVersion(const std::string& uid) const {
  std::lock_guard lock(mu_);
  if (!reports_pod_status_versions_) return std::nullopt;
  auto it = pods_.find(uid);
  return it == pods_.end() ? 0 : it->second.version;
}

asio::awaitable<base::StatusOr<PodStatus>> FakeRuntime::getPodStatus(std::string uid,
                                                                     std::string name,
                                                                     std::string namespace_) {
  PodStatus status{uid, std::move(name), std::move(namespace_), {}, {}, {}};
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(uid);
    if (it != pods_.end()) {
      // Oldest first in storage: reverse for newest first.
      status.container_statuses.assign(it->second.containers.rbegin(),
                                       it->second.containers.rend());
      if (it->second.sandbox) {
        status.sandbox_statuses.push_back(*it->second.sandbox);
      } else if (!it->second.containers.empty()) {
        status.sandbox_statuses.push_back({uid, SandboxState::kReady, 0, {}});
      }
      status.sandbox_statuses.insert(status.sandbox_statuses.end(),
                                     it->second.older_sandboxes.begin(),
                                     it->second.older_sandboxes.end());
    }
  }
  co_return status;
}

asio::awaitable<base::StatusOr<std::string>> FakeRuntime::runPodSandbox(PodSandboxConfig config) {
  std::lock_guard lock(mu_);
  ++sandboxes_run_;
  auto& rec = pods_[config.uid];
  rec.version = ++version_;
  rec.name = config.name;
  rec.namespace_ = config.namespace_;
  rec.sandbox =
      PodSandboxStatus{config.uid, SandboxState::kReady, config.attempt, clock_.wallNow()};
  co_return config.uid;
}

asio::awaitable<base::Status> FakeRuntime::stopPodSandbox(std::string id) {
  std::lock_guard lock(mu_);
  auto it = pods_.find(id);
  if (it != pods_.end()) {
    if (!it->second.sandbox) it->second.sandbox = PodSandboxStatus{id, SandboxState::kReady, 0, {}};
    it->second.sandbox->state = SandboxState::kNotReady;
    it->second.version = ++version_;
  }
  co_return base::okStatus();
}

asio::awaitable<base::Status> FakeRuntime::removePodSandbox(std::string id) {
  std::lock_guard lock(mu_);
  for (auto& [uid, rec] : pods_) {
    // (A CRI runtime removes the sandbox's containers with it; the tests' older sandboxes hold
    // none by then.)
    if (std::erase_if(rec.older_sandboxes, [&](const auto& s) { return s.id == id; }) > 0) {
      rec.version = ++version_;
      co_return base::okStatus();
    }
  }
  auto it = pods_.find(id);
  if (it != pods_.end()) {
    it->second.sandbox.reset();
    it->second.version = ++version_;
    if (it->second.containers.empty()) pods_.erase(it);
  }
  co_return base::okStatus();
}

void FakeRuntime::addOlderSandbox(const std::string& uid, PodSandboxStatus sandbox,
                                  const std::vector<std::string>& container_ids) {
  std::lock_guard lock(mu_);
  auto& rec = pods_[uid];
  for (const auto& id : container_ids) rec.container_sandboxes[id] = sandbox.id;
  rec.older_sandboxes.push_back(std::move(sandbox));
  rec.version = ++version_;
}

size_t FakeRuntime::sandboxesRun() const {
  std::lock_guard lock(mu_);
  return sandboxes_run_;
}

asio::awaitable<base::StatusOr<ContainerId>> FakeRuntime::startContainer(
    api::PodPtr pod, api::Container container, int attempt, StartContainerOptions options) {
  const std::string& uid = pod->metadata.uid;
  ContainerStatus status;
  status.name = container.name;
  status.image = container.image;
  status.hash = container.hash;
  status.restart_count = attempt;
  status.created_at = clock_.wallNow();
  base::Status start_error;
  {
    std::lock_guard lock(mu_);
    record(Action{Action::Kind::kStart, uid, container.name, attempt, {}, KillOptions{}, 0, ""});
    auto err = start_errors_.find({uid, container.name});
    if (err == start_errors_.end()) err = start_errors_.find({"", container.name});
    if (err != start_errors_.end()) start_error = err->second;
    if (!start_error.ok() && start_error.code() == base::StatusCode::kInvalidArgument) {
      co_return start_error;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(next_id_++));
    status.id = ContainerId{type(), buf};
    if (start_error.ok()) {
      status.state = ContainerState::kRunning;
      status.started_at = status.created_at;
    } else {
      status.state = ContainerState::kExited;
      status.finished_at = status.created_at;
      status.exit_code = 128;
      status.reason = "ContainerCannotRun";
      status.message = start_error.message();
    }
    if (record_actions_) {
      actions_.back().id = status.id;
      actions_.back().cgroup_parent = options.cgroup_parent;
      actions_.back().resources = options.resources;
      actions_.back().image_info = options.image_info;
      actions_.back().node_allocatable = options.node_allocatable;
      actions_.back().sandbox_config = options.sandbox_config;
    }
    if (!options.cgroup_parent.empty() || options.resources != cm::LinuxContainerResources{}) {
      started_resources_[status.id.id] = {options.cgroup_parent, options.resources};
    }
    auto& rec = pods_[uid];
    rec.version = ++version_;
    rec.name = pod->metadata.name;
    rec.namespace_ = pod->metadata.namespace_;
    pod_of_container_[status.id.id] = uid;
    rec.containers.push_back(status);
  }
  emit(ContainerEvent{
      start_error.ok() ? ContainerEvent::Type::kStarted : ContainerEvent::Type::kDied, uid,
      status.id, status.name});
  if (!start_error.ok()) co_return start_error;
  co_return status.id;
}

asio::awaitable<base::Status> FakeRuntime::killContainer(api::PodPtr pod, ContainerId id,
                                                         KillOptions options, std::string reason) {
  std::string uid;
  std::string name;
  bool died = false;
  bool running = false;
  base::Duration delay{0};
  PreStopHookRunner runner;
  {
    std::lock_guard lock(mu_);
    ContainerStatus* c = findLocked(id.id, &uid);
    if (c != nullptr && c->state == ContainerState::kRunning) {
      delay = kill_delay_;
      running = true;
      name = c->name;
    }
    runner = pre_stop_runner_;
  }
  const int64_t hook_grace = pod ? killGracePeriodSeconds(*pod, options.probe_grace)
                                 : kDefaultTerminationGracePeriodSeconds;
  base::Duration hook_time{0};
  if (running && pod && runner && hook_grace > 0) {
    const auto* spec = findSpecContainer(*pod, name);
    if (spec != nullptr && spec->lifecycle && spec->lifecycle->pre_stop) {
      const auto started = clock_.now();
      PreStopHookRequest request{pod, name, id, std::chrono::seconds(hook_grace)};
      auto hook = runner(std::move(request));
      co_await std::move(hook);
      hook_time = clock_.now() - started;
    }
  }
  const int64_t grace =
      graceAfterPreStopSeconds(hook_grace, hook_time, options, kMinimumGracePeriodSeconds);
  if (delay > base::Duration::zero()) {
    auto wait = base::sleepFor(clock_, delay);
    co_await std::move(wait);
  }
  {
    std::lock_guard lock(mu_);
    ContainerStatus* c = findLocked(id.id, &uid);
    if (c == nullptr) {
      co_return base::notFoundError("container " + id.toString() + " not found");
    }
    name = c->name;
    record(Action{Action::Kind::kKill, uid, c->name, c->restart_count, id, options, grace, reason});
    if (c->state == ContainerState::kRunning || c->state == ContainerState::kCreated) {
      c->state = ContainerState::kExited;
      c->finished_at = clock_.wallNow();
      c->exit_code = kill_exit_code_;
      c->reason = kill_exit_code_ == 0 ? "Completed" : "Error";
      died = true;
      pods_[uid].version = ++version_;
    }
  }
  if (died) emit(ContainerEvent{ContainerEvent::Type::kDied, uid, id, name});
  co_return base::okStatus();
}

asio::awaitable<base::Status> FakeRuntime::killPod(api::PodPtr pod, Pod running_pod,
                                                   std::optional<int64_t> grace_override) {
  std::string errors;
  for (const auto& c : running_pod.containers) {
    auto s = co_await killContainer(pod, c.id, KillOptions::graceOverride(grace_override),
                                    "killing pod");
    if (!s.ok() && s.code() != base::StatusCode::kNotFound) {
      errors += (errors.empty() ? "" : "; ") + s.message();
    }
  }
  if (!errors.empty())
    co_return base::unknownError("killing pod " + running_pod.uid + ": " + errors);
  co_return base::okStatus();
}

asio::awaitable<base::Status> FakeRuntime::removeContainer(ContainerId id) {
  std::lock_guard lock(mu_);
  std::string uid;
  ContainerStatus* c = findLocked(id.id, &uid);
  if (c == nullptr) co_return base::notFoundError("container " + id.toString() + " not found");
  if (c->state == ContainerState::kRunning) {
    co_return base::failedPreconditionError("container " + id.toString() + " is running");
  }
  record(Action{Action::Kind::kRemove, uid, c->name, c->restart_count, id, KillOptions{}, 0, ""});
  auto& rec = pods_[uid];
  rec.version = ++version_;
  auto& containers = rec.containers;
  containers.erase(std::remove_if(containers.begin(), containers.end(),
                                  [&](const ContainerStatus& s) { return s.id == id; }),
                   containers.end());
  if (containers.empty()) pods_.erase(uid);
  pod_of_container_.erase(id.id);
  started_resources_.erase(id.id);
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<ExecResult>> FakeRuntime::execInContainer(
    ContainerId id, std::vector<std::string> command, base::Duration /*timeout*/) {
  std::string name;
  ExecFn fn;
  {
    std::lock_guard lock(mu_);
    std::string uid;
    ContainerStatus* c = findLocked(id.id, &uid);
    if (c == nullptr) co_return base::notFoundError("container " + id.toString() + " not found");
    if (c->state != ContainerState::kRunning) {
      co_return base::failedPreconditionError("container " + id.toString() + " is not running");
    }
    name = c->name;
    fn = exec_fn_;
    execs_.emplace_back(name, command);
  }
  if (!fn) co_return ExecResult{};
  co_return fn(name, command);
}

void FakeRuntime::setExecHandler(ExecFn fn) {
  std::lock_guard lock(mu_);
  exec_fn_ = std::move(fn);
}

std::vector<std::pair<std::string, std::vector<std::string>>> FakeRuntime::execs() const {
  std::lock_guard lock(mu_);
  return execs_;
}

std::filesystem::path FakeRuntime::containerLogsPath(std::string_view pod_namespace,
                                                     std::string_view pod_name,
                                                     std::string_view pod_uid,
                                                     std::string_view container_name,
                                                     int restart_count) const {
  return buildContainerLogPath(podLogsDirectory(pod_namespace, pod_name, pod_uid), container_name,
                               restart_count);
}

std::filesystem::path FakeRuntime::podLogsDirectory(std::string_view pod_namespace,
                                                    std::string_view pod_name,
                                                    std::string_view pod_uid) const {
  return buildPodLogsDirectory("/var/log/pods", pod_namespace, pod_name, pod_uid);
}

std::vector<FakeRuntime::Action> FakeRuntime::actions() const {
  std::lock_guard lock(mu_);
  return actions_;
}

void FakeRuntime::clearActions() {
  std::lock_guard lock(mu_);
  actions_.clear();
}

void FakeRuntime::setRecordActions(bool record) {
  std::lock_guard lock(mu_);
  record_actions_ = record;
}

bool FakeRuntime::exitContainer(const std::string& uid, const std::string& name, int exit_code,
                                std::string reason) {
  ContainerId id;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(uid);
    if (it == pods_.end()) return false;
    auto& containers = it->second.containers;
    auto c = std::find_if(containers.rbegin(), containers.rend(), [&](const ContainerStatus& s) {
      return s.name == name && s.state == ContainerState::kRunning;
    });
    if (c == containers.rend()) return false;
    c->state = ContainerState::kExited;
    c->finished_at = clock_.wallNow();
    c->exit_code = exit_code;
    c->reason = !reason.empty() ? std::move(reason) : exit_code == 0 ? "Completed" : "Error";
    id = c->id;
    it->second.version = ++version_;
  }
  emit(ContainerEvent{ContainerEvent::Type::kDied, uid, id, name});
  return true;
}

void FakeRuntime::injectStartError(const std::string& uid, const std::string& name,
                                   base::Status status) {
  std::lock_guard lock(mu_);
  start_errors_[{uid, name}] = std::move(status);
}

void FakeRuntime::clearStartErrors() {
  std::lock_guard lock(mu_);
  start_errors_.clear();
}

void FakeRuntime::setKillDelay(base::Duration delay) {
  std::lock_guard lock(mu_);
  kill_delay_ = delay;
}

void FakeRuntime::setKillExitCode(int exit_code) {
  std::lock_guard lock(mu_);
  kill_exit_code_ = exit_code;
}

std::optional<ContainerStatus> FakeRuntime::containerStatus(const std::string& uid,
                                                            const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) return std::nullopt;
  const auto& containers = it->second.containers;
  for (auto c = containers.rbegin(); c != containers.rend(); ++c) {
    if (c->name == name) return *c;
  }
  return std::nullopt;
}

std::optional<FakeRuntime::StartedResources> FakeRuntime::startedResources(
    const std::string& uid, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = pods_.find(uid);
  if (it == pods_.end()) return std::nullopt;
  const auto& containers = it->second.containers;
  for (auto c = containers.rbegin(); c != containers.rend(); ++c) {
    if (c->name != name) continue;
    auto started = started_resources_.find(c->id.id);
    if (started == started_resources_.end()) return StartedResources{};
    return started->second;
  }
  return std::nullopt;
}

size_t FakeRuntime::runningContainerCount() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [uid, rec] : pods_) {
    for (const auto& c : rec.containers) n += c.state == ContainerState::kRunning ? 1 : 0;
  }
  return n;
}

bool FakeRuntime::runsImages() const {
  std::lock_guard lock(mu_);
  return runs_images_;
}

asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> FakeRuntime::imageStatus(
    std::string image) {
  base::StatusOr<std::optional<ImageInfo>> out = std::optional<ImageInfo>();
  {
    std::lock_guard lock(mu_);
    auto held = images_.find(image);
    if (!image_status_error_.ok()) {
      out = image_status_error_;
    } else if (held != images_.end()) {
      out = std::optional<ImageInfo>(held->second);
    } else {
      auto by_id = std::find_if(images_.begin(), images_.end(),
                                [&](const auto& kv) { return kv.second.id == image; });
      if (by_id != images_.end()) out = std::optional<ImageInfo>(by_id->second);
    }
  }
  co_return out;
}

asio::awaitable<base::StatusOr<std::string>> FakeRuntime::pullImage(
    std::string image, std::optional<RegistryAuth> auth) {
  base::Duration delay{};
  {
    std::lock_guard lock(mu_);
    pulls_.push_back(image);
    if (auth) ++pulls_with_auth_;
    pull_users_.push_back(auth ? auth->username : "");
    delay = pull_delay_;
  }
  if (delay > base::Duration::zero()) {
    auto wait = base::sleepFor(clock_, delay);
    co_await std::move(wait);
  }
  base::StatusOr<std::string> out = std::string();
  {
    std::lock_guard lock(mu_);
    auto result = pull_results_.find(image);
    auto needed = pull_credentials_.find(image);
    if (needed != pull_credentials_.end() && (!auth || auth->username != needed->second.first ||
                                              auth->password != needed->second.second)) {
      out = base::Status(base::StatusCode::kUnknown,
                         "failed to pull " + image + ": 401 Unauthorized");
    } else if (result != pull_results_.end() && !result->second.ok()) {
      out = result->second;
    } else {
      auto& info = images_[image];
      if (info.id.empty()) info.id = "sha256:fake-" + image;
      if (info.repo_tags.empty()) info.repo_tags.push_back(image);
      out = info.id;
    }
  }
  co_return out;
}

void FakeRuntime::setRunsImages(bool runs_images) {
  std::lock_guard lock(mu_);
  runs_images_ = runs_images;
}

void FakeRuntime::addImage(const std::string& image, ImageInfo info) {
  std::lock_guard lock(mu_);
  if (info.id.empty()) info.id = "sha256:fake-" + image;
  if (info.repo_tags.empty()) info.repo_tags.push_back(image);
  images_[image] = std::move(info);
}

asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> FakeRuntime::listImages() {
  std::vector<ImageInfo> out;
  {
    std::lock_guard lock(mu_);
    std::set<std::string> seen;
    for (const auto& [ref, info] : images_) {
      if (seen.insert(info.id).second) out.push_back(info);
    }
  }
  co_return out;
}

asio::awaitable<base::Status> FakeRuntime::removeImage(std::string image) {
  base::Duration delay{};
  {
    std::lock_guard lock(mu_);
    delay = remove_image_delay_;
  }
  if (delay > base::Duration::zero()) {
    auto wait = base::sleepFor(clock_, delay);
    co_await std::move(wait);
  }
  std::lock_guard lock(mu_);
  if (auto error = remove_image_errors_.find(image); error != remove_image_errors_.end()) {
    co_return error->second;
  }
  std::erase_if(images_,
                [&](const auto& kv) { return kv.first == image || kv.second.id == image; });
  removed_images_.push_back(image);
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<ImageFsInfo>> FakeRuntime::imageFsInfo() {
  std::lock_guard lock(mu_);
  if (!image_fs_) co_return base::unavailableError("fake runtime: no image filesystem set");
  co_return *image_fs_;
}

asio::awaitable<base::Status> FakeRuntime::updatePodCidr(std::string cidrs) {
  std::lock_guard lock(mu_);
  pod_cidr_updates_.push_back(std::move(cidrs));
  co_return pod_cidr_error_;
}

std::vector<std::string> FakeRuntime::podCidrUpdates() const {
  std::lock_guard lock(mu_);
  return pod_cidr_updates_;
}

void FakeRuntime::setPodCidrError(base::Status status) {
  std::lock_guard lock(mu_);
  pod_cidr_error_ = std::move(status);
}

asio::awaitable<base::StatusOr<std::set<std::string>>> FakeRuntime::imagesInUse() {
  std::set<std::string> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [uid, rec] : pods_) {
      for (const auto& c : rec.containers) {
        auto held = images_.find(c.image);
        out.insert(held != images_.end() ? held->second.id : c.image);
      }
    }
  }
  co_return out;
}

void FakeRuntime::setImageFs(ImageFsInfo info) {
  std::lock_guard lock(mu_);
  image_fs_ = std::move(info);
}

void FakeRuntime::setRemoveImageError(const std::string& image, base::Status status) {
  std::lock_guard lock(mu_);
  if (status.ok()) {
    remove_image_errors_.erase(image);
  } else {
    remove_image_errors_[image] = std::move(status);
  }
}

void FakeRuntime::setRemoveImageDelay(base::Duration delay) {
  std::lock_guard lock(mu_);
  remove_image_delay_ = delay;
}

std::vector<std::string> FakeRuntime::removedImages() const {
  std::lock_guard lock(mu_);
  return removed_images_;
}

bool FakeRuntime::hasImage(const std::string& image) const {
  std::lock_guard lock(mu_);
  return images_.count(image) != 0;
}

void FakeRuntime::setPullResult(const std::string& image, base::Status result) {
  std::lock_guard lock(mu_);
  pull_results_[image] = std::move(result);
}

void FakeRuntime::setPullDelay(base::Duration delay) {
  std::lock_guard lock(mu_);
  pull_delay_ = delay;
}

void FakeRuntime::setImageStatusError(base::Status status) {
  std::lock_guard lock(mu_);
  image_status_error_ = std::move(status);
}

std::vector<std::string> FakeRuntime::pulls() const {
  std::lock_guard lock(mu_);
  return pulls_;
}

size_t FakeRuntime::pullsWithAuth() const {
  std::lock_guard lock(mu_);
  return pulls_with_auth_;
}

std::vector<std::string> FakeRuntime::pullUsers() const {
  std::lock_guard lock(mu_);
  return pull_users_;
}

void FakeRuntime::setPullCredential(const std::string& image, std::string username,
                                    std::string password) {
  std::lock_guard lock(mu_);
  pull_credentials_[image] = {std::move(username), std::move(password)};
}

}  // namespace nodeagent::runtime
