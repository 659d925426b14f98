// A Runtime that counts every operation of the runtime it wraps, as kubelet counts its CRI calls:
// kubelet_runtime_operations_total{operation_type} and
// kubelet_runtime_operations_errors_total{operation_type}, with CRI's operation names
// (list_containers, container_status, start_container, stop_container, exec_sync,
// remove_container, run_podsandbox, stop_podsandbox, remove_podsandbox, exec, attach, status,
// image_status, pull_image, port_forward, list_images, remove_image, image_fs_info). Calls pass
// straight through.
#pragma once

#include <array>
#include <atomic>
#include <ostream>

#include "agent/runtime/runtime.h"

namespace nodeagent::runtime {

class InstrumentedRuntime : public Runtime {
 public:
  explicit InstrumentedRuntime(Runtime& inner) : inner_(inner) {}

  std::string type() const override { return inner_.type(); }
  std::string version() const override { return inner_.version(); }
  base::Status recover() override { return inner_.recover(); }
  asio::awaitable<base::StatusOr<std::string>> runPodSandbox(PodSandboxConfig config) override;
  asio::awaitable<base::Status> stopPodSandbox(std::string id) override;
  asio::awaitable<base::Status> removePodSandbox(std::string id) override;
  void setEventHandler(ContainerEventHandler handler) override {
    inner_.setEventHandler(std::move(handler));
  }
  asio::awaitable<base::StatusOr<std::vector<Pod>>> getPods(bool all) override;
  std::optional<uint64_t> podsVersion() const override { return inner_.podsVersion(); }
  std::optional<uint64_t> podStatusVersion(const std::string& uid) const override {
    return inner_.podStatusVersion(uid);
  }
  asio::awaitable<base::StatusOr<PodStatus>> getPodStatus(std::string uid, std::string name,
                                                          std::string namespace_) override;
  asio::awaitable<base::StatusOr<ContainerId>> startContainer(
      api::PodPtr pod, api::Container container, int attempt,
      StartContainerOptions options) override;
  void setPreStopHookRunner(PreStopHookRunner runner) override {
    inner_.setPreStopHookRunner(std::move(runner));
  }
  asio::awaitable<base::Status> killContainer(api::PodPtr pod, ContainerId id, KillOptions options,
                                              std::string reason) override;
  asio::awaitable<base::Status> killPod(api::PodPtr pod, Pod running_pod,
                                        std::optional<int64_t> grace_override) override;
  asio::awaitable<base::StatusOr<ExecResult>> execInContainer(ContainerId id,
                                                              std::vector<std::string> command,
                                                              base::Duration timeout) override;
  asio::awaitable<base::StatusOr<StreamSessionPtr>> execStream(ContainerId id,
                                                               std::vector<std::string> command,
                                                               StreamOptions options) override;
  asio::awaitable<base::StatusOr<StreamSessionPtr>> attach(ContainerId id,
                                                           StreamOptions options) override;
  asio::awaitable<base::Status> removeContainer(ContainerId id) override;
  asio::awaitable<base::StatusOr<RuntimeStatus>> status() override;
  asio::awaitable<base::Status> updatePodCidr(std::string cidrs) override {
    return inner_.updatePodCidr(std::move(cidrs));
  }
  asio::awaitable<base::Status> reopenContainerLog(ContainerId id) override {
    return inner_.reopenContainerLog(std::move(id));
  }
  bool streamsThroughUrls() const override { return inner_.streamsThroughUrls(); }
  asio::awaitable<base::StatusOr<std::string>> execUrl(ContainerId id,
                                                       std::vector<std::string> command,
                                                       StreamOptions options) override;
  asio::awaitable<base::StatusOr<std::string>> attachUrl(ContainerId id,
                                                         StreamOptions options) override;
  asio::awaitable<base::StatusOr<std::string>> portForwardUrl(std::string uid,
                                                              std::vector<int32_t> ports) override;
  bool runsImages() const override { return inner_.runsImages(); }
  asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> imageStatus(std::string image) override;
  asio::awaitable<base::StatusOr<std::string>> pullImage(std::string image,
                                                         std::optional<RegistryAuth> auth) override;
  asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> listImages() override;
  asio::awaitable<base::Status> removeImage(std::string image) override;
  asio::awaitable<base::StatusOr<ImageFsInfo>> imageFsInfo() override;
  // Counted as list_containers (a CRI runtime lists them).
  asio::awaitable<base::StatusOr<std::set<std::string>>> imagesInUse() override;
  std::filesystem::path podLogsDirectory(std::string_view pod_namespace, std::string_view pod_name,
                                         std::string_view pod_uid) const override {
    return inner_.podLogsDirectory(pod_namespace, pod_name, pod_uid);
  }
  std::filesystem::path containerLogsPath(std::string_view pod_namespace, std::string_view pod_name,
                                          std::string_view pod_uid, std::string_view container_name,
                                          int restart_count) const override {
    return inner_.containerLogsPath(pod_namespace, pod_name, pod_uid, container_name,
                                    restart_count);
  }

  // The two counters in Prometheus text format (HELP, TYPE and one sample per operation).
  void writeMetrics(std::ostream& out) const;

  enum Op {
    kList,
    kStatus,
    kStart,
    kStop,
    kExec,
    kRemove,
    kRunSandbox,
    kStopSandbox,
    kRemoveSandbox,
    kExecStream,
    kAttach,
    kRuntimeStatus,
    kImageStatus,
    kPullImage,
    kPortForward,
    kListImages,
    kRemoveImage,
    kImageFsInfo,
    kOpCount
  };

 private:
  void count(Op op, bool ok) {
    calls_[op].fetch_add(1, std::memory_order_relaxed);
    if (!ok) errors_[op].fetch_add(1, std::memory_order_relaxed);
  }

  Runtime& inner_;
  std::array<std::atomic<uint64_t>, kOpCount> calls_{};
  std::array<std::atomic<uint64_t>, kOpCount> errors_{};
};

}  // namespace nodeagent::runtime
