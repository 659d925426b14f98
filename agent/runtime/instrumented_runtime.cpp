#include "agent/runtime/instrumented_runtime.h"

#include <iterator>

#include "base/metrics.h"

namespace nodeagent::runtime {
namespace {

// By Op. killPod stops a pod's containers: counted as one stop_container.
constexpr const char* kOpNames[] = {
    "list_containers",  "container_status", "start_container", "stop_container",    "exec_sync",
    "remove_container", "run_podsandbox",   "stop_podsandbox", "remove_podsandbox", "exec",
    "attach",           "status",           "image_status",    "pull_image",        "port_forward",
    "list_images",      "remove_image",     "image_fs_info",
};
static_assert(std::size(kOpNames) == InstrumentedRuntime::kOpCount);

}  // namespace

asio::awaitable<base::StatusOr<std::vector<Pod>>> InstrumentedRuntime::getPods(bool all) {
  auto call = inner_.getPods(all);
  auto r = co_await std::move(call);
  count(kList, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<PodStatus>> InstrumentedRuntime::getPodStatus(
    std::string uid, std::string name, std::string namespace_) {
  auto call = inner_.getPodStatus(std::move(uid), std::move(name), std::move(namespace_));
  auto r = co_await std::move(call);
  count(kStatus, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::string>> InstrumentedRuntime::runPodSandbox(
    PodSandboxConfig config) {
  auto call = inner_.runPodSandbox(std::move(config));
  auto r = co_await std::move(call);
  count(kRunSandbox, r.ok());
  co_return r;
}

asio::awaitable<base::Status> InstrumentedRuntime::stopPodSandbox(std::string id) {
  auto call = inner_.stopPodSandbox(std::move(id));
  auto r = co_await std::move(call);
  count(kStopSandbox, r.ok());
  co_return r;
}

asio::awaitable<base::Status> InstrumentedRuntime::removePodSandbox(std::string id) {
  auto call = inner_.removePodSandbox(std::move(id));
  auto r = co_await std::move(call);
  count(kRemoveSandbox, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<ContainerId>> InstrumentedRuntime::startContainer(
    api::PodPtr pod, api::Container container, int attempt, StartContainerOptions options) {
  auto call =
      inner_.startContainer(std::move(pod), std::move(container), attempt, std::move(options));
  auto r = co_await std::move(call);
  count(kStart, r.ok());
  co_return r;
}

asio::awaitable<base::Status> InstrumentedRuntime::killContainer(api::PodPtr pod, ContainerId id,
                                                                 KillOptions options,
                                                                 std::string reason) {
  auto call = inner_.killContainer(std::move(pod), std::move(id), options, std::move(reason));
  auto r = co_await std::move(call);
  count(kStop, r.ok());
  co_return r;
}

asio::awaitable<base::Status> InstrumentedRuntime::killPod(api::PodPtr pod, Pod running_pod,
                                                           std::optional<int64_t> grace_override) {
  auto call = inner_.killPod(std::move(pod), std::move(running_pod), grace_override);
  auto r = co_await std::move(call);
  count(kStop, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<ExecResult>> InstrumentedRuntime::execInContainer(
    ContainerId id, std::vector<std::string> command, base::Duration timeout) {
  auto call = inner_.execInContainer(std::move(id), std::move(command), timeout);
  auto r = co_await std::move(call);
  count(kExec, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> InstrumentedRuntime::execStream(
    ContainerId id, std::vector<std::string> command, StreamOptions options) {
  auto call = inner_.execStream(std::move(id), std::move(command), options);
  auto r = co_await std::move(call);
  count(kExecStream, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<StreamSessionPtr>> InstrumentedRuntime::attach(
    ContainerId id, StreamOptions options) {
  auto call = inner_.attach(std::move(id), options);
  auto r = co_await std::move(call);
  count(kAttach, r.ok());
  co_return r;
}

asio::awaitable<base::Status> InstrumentedRuntime::removeContainer(ContainerId id) {
  auto call = inner_.removeContainer(std::move(id));
  auto r = co_await std::move(call);
  count(kRemove, r.ok());
  co_return r;
}

void InstrumentedRuntime::writeMetrics(std::ostream& out) const {
  auto write = [&](const char* name, const char* help, const auto& counters) {
    base::writeMetricHeader(out, name, "counter", help);
    for (size_t op = 0; op < kOpCount; ++op) {
      out << name << "{operation_type=\"" << kOpNames[op] << "\"} " << counters[op].load() << '\n';
    }
  };
  write("kubelet_runtime_operations_total", "Cumulative number of runtime operations by type.",
        calls_);
  write("kubelet_runtime_operations_errors_total",
        "Cumulative number of runtime operation errors by type.", errors_);
}

asio::awaitable<base::StatusOr<RuntimeStatus>> InstrumentedRuntime::status() {
  auto call = inner_.status();
  auto r = co_await std::move(call);
  count(kRuntimeStatus, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> InstrumentedRuntime::imageStatus(
    std::string image) {
  auto call = inner_.imageStatus(std::move(image));
  auto r = co_await std::move(call);
  count(kImageStatus, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::string>> InstrumentedRuntime::pullImage(
    std::string image, std::optional<RegistryAuth> auth) {
  auto call = inner_.pullImage(std::move(image), std::move(auth));
  auto r = co_await std::move(call);
  count(kPullImage, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> InstrumentedRuntime::listImages() {
  auto call = inner_.listImages();
  auto r = co_await std::move(call);
  count(kListImages, r.ok());
  co_return r;
}

asio::awaitable<base::Status> InstrumentedRuntime::removeImage(std::string image) {
  auto call = inner_.removeImage(std::move(image));
  auto r = co_await std::move(call);
  count(kRemoveImage, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<ImageFsInfo>> InstrumentedRuntime::imageFsInfo() {
  auto call = inner_.imageFsInfo();
  auto r = co_await std::move(call);
  count(kImageFsInfo, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::set<std::string>>> InstrumentedRuntime::imagesInUse() {
  auto call = inner_.imagesInUse();
  auto r = co_await std::move(call);
  count(kList, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::string>> InstrumentedRuntime::execUrl(
    ContainerId id, std::vector<std::string> command, StreamOptions options) {
  auto call = inner_.execUrl(std::move(id), std::move(command), options);
  auto r = co_await std::move(call);
  count(kExecStream, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::string>> InstrumentedRuntime::attachUrl(ContainerId id,
                                                                            StreamOptions options) {
  auto call = inner_.attachUrl(std::move(id), options);
  auto r = co_await std::move(call);
  count(kAttach, r.ok());
  co_return r;
}

asio::awaitable<base::StatusOr<std::string>> InstrumentedRuntime::portForwardUrl(
    std::string uid, std::vector<int32_t> ports) {
  auto call = inner_.portForwardUrl(std::move(uid), std::move(ports));
  auto r = co_await std::move(call);
  count(kPortForward, r.ok());
  co_return r;
}

}  // namespace nodeagent::runtime
