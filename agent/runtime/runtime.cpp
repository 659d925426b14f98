#include "agent/runtime/runtime.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>

#include "base/path_component.h"

namespace nodeagent::runtime {

std::string_view containerStateName(ContainerState state) {
  switch (state) {
    case ContainerState::kCreated:
      return "created";
    case ContainerState::kRunning:
      return "running";
    case ContainerState::kExited:
      return "exited";
    case ContainerState::kUnknown:
      break;
  }
  return "unknown";
}

const ContainerStatus* PodStatus::findContainerStatusByName(std::string_view name) const {
  for (const auto& s : container_statuses) {
    if (s.name == name) return &s;  // newest first
  }
  return nullptr;
}

namespace {

// Mixes values into a 64-bit digest (a multiply-xorshift step per value; strings through
// std::hash, their length first so that neighbouring strings cannot trade characters).
class Digest {
 public:
  void add(uint64_t v) {
    h_ ^= v + 0x9e3779b97f4a7c15ULL + (h_ << 6) + (h_ >> 2);
    h_ *= 0xff51afd7ed558ccdULL;
    h_ ^= h_ >> 33;
  }
  void add(std::string_view s) {
    add(static_cast<uint64_t>(s.size()));
    add(static_cast<uint64_t>(std::hash<std::string_view>{}(s)));
  }
  void add(const std::string& s) { add(std::string_view(s)); }
  void add(base::SystemTime t) { add(static_cast<uint64_t>(t.time_since_epoch().count())); }
  void add(const api::Hash128& hash) {
    add(hash.high);
    add(hash.low);
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0x243f6a8885a308d3ULL;
};

}  // namespace

uint64_t fingerprint(const PodStatus& status) {
  Digest d;
  d.add(status.uid);
  d.add(status.name);
  d.add(status.namespace_);
  d.add(static_cast<uint64_t>(status.ips.size()));
  for (const auto& ip : status.ips) d.add(ip);
  d.add(static_cast<uint64_t>(status.sandbox_statuses.size()));
  for (const auto& s : status.sandbox_statuses) {
    d.add(s.id);
    d.add(static_cast<uint64_t>(s.state));
    d.add(static_cast<uint64_t>(s.attempt));
    d.add(s.created_at);
  }
  d.add(static_cast<uint64_t>(status.container_statuses.size()));
  for (const auto& c : status.container_statuses) {
    d.add(c.id.type);
    d.add(c.id.id);
    d.add(c.name);
    d.add(static_cast<uint64_t>(c.state));
    d.add(c.created_at);
    d.add(c.started_at);
    d.add(c.finished_at);
    d.add(static_cast<uint64_t>(static_cast<int64_t>(c.exit_code)));
    d.add(static_cast<uint64_t>(static_cast<int64_t>(c.signal)));
    d.add(c.reason);
    d.add(c.message);
    d.add(c.image);
    d.add(c.image_id);
    d.add(c.hash);
    d.add(static_cast<uint64_t>(static_cast<int64_t>(c.restart_count)));
    d.add(static_cast<uint64_t>(static_cast<int64_t>(c.pid)));
    d.add(c.log_path.native());
  }
  return d.value();
}

std::vector<const ContainerStatus*> PodStatus::runningContainerStatuses() const {
  std::vector<const ContainerStatus*> out;
  for (const auto& s : container_statuses) {
    if (s.state == ContainerState::kRunning) out.push_back(&s);
  }
  return out;
}

std::string_view startErrorReason(const base::Status& status) {
  return status.code() == base::StatusCode::kInvalidArgument ? kCreateContainerConfigError
                                                             : kRunContainerError;
}

base::Status checkPodPathNames(const api::Pod& pod) {
  const auto& meta = pod.metadata;
  RETURN_IF_ERROR(base::checkPathComponent("pod namespace", meta.namespace_));
  RETURN_IF_ERROR(base::checkPathComponent("pod name", meta.name));
  RETURN_IF_ERROR(base::checkPathComponent("pod UID", meta.uid));
  return base::checkPathComponent("pod log directory",
                                  meta.namespace_ + "_" + meta.name + "_" + meta.uid);
}

base::Status checkPathNames(const api::Pod& pod, const api::Container& container) {
  RETURN_IF_ERROR(checkPodPathNames(pod));
  return base::checkPathComponent("container name", container.name);
}

int64_t podGracePeriodSeconds(const api::Pod& pod) {
  if (pod.metadata.deletion_grace_period_seconds)
    return *pod.metadata.deletion_grace_period_seconds;
  if (pod.spec->termination_grace_period_seconds)
    return *pod.spec->termination_grace_period_seconds;
  return kDefaultTerminationGracePeriodSeconds;
}

const api::Container* findSpecContainer(const api::Pod& pod, std::string_view name) {
  for (const auto& c : pod.spec->containers) {
    if (c.name == name) return &c;
  }
  for (const auto& c : pod.spec->init_containers) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

int64_t killGracePeriodSeconds(const api::Pod& pod, std::optional<int64_t> probe_grace) {
  if (!pod.metadata.deletion_grace_period_seconds && probe_grace) return *probe_grace;
  return podGracePeriodSeconds(pod);
}

int64_t graceAfterPreStopSeconds(int64_t grace, base::Duration hook_time,
                                 const KillOptions& options, int64_t minimum_seconds) {
  if (options.grace_override) return std::max<int64_t>(*options.grace_override, 0);
  grace -= std::chrono::duration_cast<std::chrono::seconds>(hook_time).count();
  return std::max(grace, minimum_seconds);
}

namespace {

// "metadata.labels['key']" -> key (also accepts double quotes).
std::optional<std::string> subscript(const std::string& path, std::string_view prefix) {
  if (path.size() < prefix.size() + 4 || path.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  std::string_view rest(path);
  rest.remove_prefix(prefix.size());
  if (rest.front() != '[' || rest.back() != ']') return std::nullopt;
  rest = rest.substr(1, rest.size() - 2);
  if (rest.size() < 2 || (rest.front() != '\'' && rest.front() != '"') ||
      rest.back() != rest.front()) {
    return std::nullopt;
  }
  return std::string(rest.substr(1, rest.size() - 2));
}

void setEnv(std::vector<std::pair<std::string, std::string>>& env, std::string name,
            std::string value) {
  for (auto& kv : env) {
    if (kv.first == name) {
      kv.second = std::move(value);
      return;
    }
  }
  env.emplace_back(std::move(name), std::move(value));
}

}  // namespace

base::StatusOr<std::string> resolveFieldRef(const api::Pod& pod, const std::string& field_path,
                                            const StartContainerOptions& options) {
  if (field_path == "metadata.name") return pod.metadata.name;
  if (field_path == "metadata.namespace") return pod.metadata.namespace_;
  if (field_path == "metadata.uid") return pod.metadata.uid;
  if (field_path == "spec.nodeName") return pod.spec->node_name;
  if (field_path == "spec.serviceAccountName") return pod.spec->service_account_name;
  if (field_path == "status.podIP") return options.pod_ip;
  if (field_path == "status.hostIP") return options.host_ip;
  if (auto key = subscript(field_path, "metadata.labels")) {
    return std::string(pod.metadata.labels.get(*key));
  }
  if (auto key = subscript(field_path, "metadata.annotations")) {
    return std::string(pod.metadata.annotations.get(*key));
  }
  return base::invalidArgumentError("unsupported fieldRef fieldPath \"" + field_path + "\"");
}

std::string expandVars(std::string_view input,
                       const std::vector<std::pair<std::string, std::string>>& env) {
  std::string out;
  out.reserve(input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    if (input[i] != '$' || i + 1 >= input.size()) {
      out += input[i];
      continue;
    }
    char next = input[i + 1];
    if (next == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (next == '(') {
      auto close = input.find(')', i + 2);
      if (close != std::string_view::npos) {
        std::string_view name = input.substr(i + 2, close - i - 2);
        auto it =
            std::find_if(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
        if (it != env.end() && !name.empty()) {
          out += it->second;
        } else {
          out.append(input.data() + i, close - i + 1);
        }
        i = close;
        continue;
      }
    }
    out += '$';
  }
  return out;
}

base::StatusOr<std::vector<std::pair<std::string, std::string>>> buildContainerEnv(
    const api::Pod& pod, const api::Container& container, const StartContainerOptions& options) {
  // PATH first so that the container's own PATH replaces it in place and $(PATH) expands.
  std::vector<std::pair<std::string, std::string>> env{{"PATH", std::string(kDefaultPath)}};
  for (const auto& v : options.volumes) setEnv(env, volumeEnvName(v.name), v.host_path.string());
  for (const auto& [k, v] : options.extra_env) setEnv(env, k, v);
  for (const auto& var : container.env) {
    if (var.name.empty()) {
      return base::invalidArgumentError("container \"" + container.name +
                                        "\": env: a variable has an empty name");
    }
    auto resolved = [&]() -> base::StatusOr<std::string> {
      if (var.field_ref) return resolveFieldRef(pod, var.field_ref->field_path, options);
      if (var.resource_field_ref) {
        return resolveResourceFieldRef(pod, &container, *var.resource_field_ref,
                                       options.node_allocatable);
      }
      if (!var.value_from_kind.empty() && var.value_from_kind != "fieldRef" &&
          var.value_from_kind != "resourceFieldRef") {
        return base::invalidArgumentError(
            "valueFrom." + var.value_from_kind +
            " is not supported by nodeagent (only value, fieldRef, resourceFieldRef, "
            "configMapKeyRef and secretKeyRef)");
      }
      return expandVars(var.value, env);
    }();
    if (!resolved.ok()) {
      return base::invalidArgumentError("container \"" + container.name + "\": env " + var.name +
                                        ": " + resolved.status().message());
    }
    setEnv(env, var.name, *resolved);
  }
  return env;
}

std::string hashToHex(const api::Hash128& hash) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hash.high),
                static_cast<unsigned long long>(hash.low));
  return std::string(buf, 32);
}

api::Hash128 hashFromHex(std::string_view hex) {
  api::Hash128 h;
  if (hex.size() != 32) return h;
  auto parse = [](std::string_view part) {
    uint64_t v = 0;
    for (char c : part) {
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint64_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint64_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint64_t>(c - 'A' + 10);
      }
    }
    return v;
  };
  h.high = parse(hex.substr(0, 16));
  h.low = parse(hex.substr(16));
  return h;
}

bool shouldContainerBeRestarted(const api::Container& container, const api::Pod& pod,
                                const runtime::PodStatus& status) {
  // A pod marked for deletion never gets a container back.
  if (pod.metadata.deletion_timestamp) return false;
  const auto* cs = status.findContainerStatusByName(container.name);
  if (cs == nullptr) return true;  // never ran
  if (cs->state == ContainerState::kRunning) return false;
  if (cs->state == ContainerState::kUnknown || cs->state == ContainerState::kCreated) return true;
  if (pod.spec->restart_policy == "Never") return false;
  if (pod.spec->restart_policy == "OnFailure" && cs->exit_code == 0) return false;
  return true;
}

std::filesystem::path buildPodLogsDirectory(const std::filesystem::path& root,
                                            std::string_view pod_namespace,
                                            std::string_view pod_name, std::string_view pod_uid) {
  std::string dir;
  dir.append(pod_namespace).append("_").append(pod_name).append("_").append(pod_uid);
  return root / dir;
}

std::filesystem::path buildContainerLogPath(const std::filesystem::path& pod_logs_directory,
                                            std::string_view container_name, int restart_count) {
  return pod_logs_directory / std::string(container_name) /
         (std::to_string(restart_count) + ".log");
}

std::string volumeEnvName(std::string_view volume) {
  std::string out = "NODEAGENT_VOLUME_";
  for (char ch : volume) {
    out += std::isalnum(static_cast<unsigned char>(ch)) ? static_cast<char>(std::toupper(ch)) : '_';
  }
  return out;
}

const PodSandboxStatus* readySandbox(const std::vector<PodSandboxStatus>& sandboxes) {
  for (const auto& s : sandboxes) {
    if (s.state == SandboxState::kReady) return &s;
  }
  return nullptr;
}

const RuntimeCondition* RuntimeStatus::find(std::string_view type) const {
  for (const auto& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

asio::awaitable<base::Status> Runtime::reopenContainerLog(ContainerId id) {
  co_return base::unimplementedError("the " + type() + " runtime rotates its logs itself (" +
                                     id.toString() + ")");
}

asio::awaitable<base::StatusOr<std::string>> Runtime::execUrl(ContainerId id,
                                                              std::vector<std::string>,
                                                              StreamOptions) {
  co_return base::unimplementedError("the " + type() + " runtime has no streaming server (" +
                                     id.toString() + ")");
}

asio::awaitable<base::StatusOr<std::string>> Runtime::attachUrl(ContainerId id, StreamOptions) {
  co_return base::unimplementedError("the " + type() + " runtime has no streaming server (" +
                                     id.toString() + ")");
}

asio::awaitable<base::StatusOr<std::string>> Runtime::portForwardUrl(std::string uid,
                                                                     std::vector<int32_t>) {
  co_return base::unimplementedError("the " + type() + " runtime has no streaming server (pod " +
                                     uid + ")");
}

asio::awaitable<base::Status> Runtime::updatePodCidr(std::string) { co_return base::okStatus(); }

asio::awaitable<base::StatusOr<RuntimeStatus>> Runtime::status() {
  RuntimeStatus s;
  s.conditions.push_back({std::string(kRuntimeReadyCondition), true, "", ""});
  s.conditions.push_back({std::string(kNetworkReadyCondition), true, "", ""});
  co_return s;
}

asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> Runtime::imageStatus(std::string image) {
  co_return base::unimplementedError("the " + type() + " runtime holds no images (" + image + ")");
}

asio::awaitable<base::StatusOr<std::string>> Runtime::pullImage(std::string image,
                                                                std::optional<RegistryAuth>) {
  co_return base::unimplementedError("the " + type() + " runtime cannot pull images (" + image +
                                     ")");
}

asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> Runtime::listImages() {
  co_return base::unimplementedError("the " + type() + " runtime holds no images");
}

asio::awaitable<base::Status> Runtime::removeImage(std::string image) {
  co_return base::unimplementedError("the " + type() + " runtime holds no images (" + image + ")");
}

asio::awaitable<base::StatusOr<ImageFsInfo>> Runtime::imageFsInfo() {
  co_return base::unimplementedError("the " + type() + " runtime has no image filesystem");
}

asio::awaitable<base::StatusOr<std::set<std::string>>> Runtime::imagesInUse() {
  co_return base::unimplementedError("the " + type() + " runtime holds no images");
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> Runtime::execStream(ContainerId id,
                                                                      std::vector<std::string>,
                                                                      StreamOptions) {
  co_return base::unimplementedError("the " + type() + " runtime cannot exec with streams into " +
                                     id.toString());
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> Runtime::attach(ContainerId id, StreamOptions) {
  co_return base::unimplementedError("the " + type() + " runtime cannot attach to " +
                                     id.toString());
}

base::Status checkStreamOptions(const StreamOptions& options) {
  if (options.tty && options.stderr) {
    return base::invalidArgumentError(
        "tty and stderr cannot both be set: a terminal has one output");
  }
  if (!options.stdin && !options.stdout && !options.stderr) {
    return base::invalidArgumentError("at least one of stdin, stdout and stderr must be set");
  }
  return base::okStatus();
}

asio::awaitable<std::vector<base::Status>> runAll(
    std::vector<asio::awaitable<base::Status>> tasks) {
  if (tasks.empty()) co_return std::vector<base::Status>{};
  auto ex = co_await asio::this_coro::executor;
  // GCC 12 destroys the captures of a temporary lambda inside a co_await expression twice:
  // the initiation lives in a named variable.
  auto initiation = [&tasks, ex](auto handler) {
    using Handler = decltype(handler);
    struct Join {
      std::mutex mu;
      size_t remaining = 0;
      std::vector<base::Status> results;
      std::unique_ptr<Handler> handler;
    };
    auto join = std::make_shared<Join>();
    join->remaining = tasks.size();
    join->results.resize(tasks.size());
    join->handler = std::make_unique<Handler>(std::move(handler));
    for (size_t i = 0; i < tasks.size(); ++i) {
      asio::co_spawn(ex, std::move(tasks[i]), [join, i, ex](std::exception_ptr e, base::Status s) {
        std::unique_ptr<Handler> done;
        std::vector<base::Status> results;
        {
          std::lock_guard lock(join->mu);
          join->results[i] = e ? base::internalError("unexpected exception") : std::move(s);
          if (--join->remaining > 0) return;
          done = std::move(join->handler);
          results = std::move(join->results);
        }
        asio::post(ex,
                   [h = std::move(done), r = std::move(results)]() mutable { (*h)(std::move(r)); });
      });
    }
  };
  auto results =
      co_await asio::async_initiate<decltype(asio::use_awaitable), void(std::vector<base::Status>)>(
          initiation, asio::use_awaitable);
  co_return results;
}

asio::awaitable<base::Status> killPodContainers(
    Pod running_pod, std::function<asio::awaitable<base::Status>(const ContainerId&)> kill) {
  std::vector<asio::awaitable<base::Status>> tasks;
  for (const auto& c : running_pod.containers) tasks.push_back(kill(c.id));
  auto all = runAll(std::move(tasks));
  const auto results = co_await std::move(all);
  std::string errors;
  for (const auto& s : results) {
    if (!s.ok() && s.code() != base::StatusCode::kNotFound) {
      errors += (errors.empty() ? "" : "; ") + s.message();
    }
  }
  if (!errors.empty()) {
    co_return base::unknownError("killing pod " + running_pod.namespace_ + "/" + running_pod.name +
                                 ": " + errors);
  }
  co_return base::okStatus();
}

}  // namespace nodeagent::runtime
