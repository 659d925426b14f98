// CriRuntime: the Runtime that drives a CRI v1 container runtime (containerd) through CriClient,
// shaped after kubelet's kuberuntime manager: a pod's sandbox is a CRI pod sandbox, each
// container a CRI container created and started in it, and the runtime's own lists
// (ListPodSandbox, ListContainers, ContainerStatus) are the source of truth: nothing is kept in
// memory that an agent restart would lose. Pods and containers are found again by kubelet's
// labels (io.kubernetes.pod.{name,namespace,uid}, io.kubernetes.container.name) and annotations
// (io.kubernetes.container.{hash,restartCount,preStopHandler},
// io.kubernetes.pod.terminationGracePeriod).
//
// The daemon runs it with --runtime=cri. A sandbox is made from the PodSandboxConfig the agent
// generates as kubelet does (agent/pod_lifecycle_sandbox.h): the pod's namespaces (a network and
// IPC namespace of its own unless hostNetwork or hostIPC, a PID namespace per container unless
// hostPID or shareProcessNamespace), its hostname (none for hostNetwork: runc refuses one without
// a UTS namespace of its own), DNS config, port mappings, cgroup parent, and whether a container
// is privileged; each container gets its pod's namespaces. Pod networking is the runtime's own
// (containerd's CNI config, which the agent may write: agent/pod_network.h): a sandbox that is not
// hostNetwork gets a network namespace and an IP, which getPodStatus answers as the pod's; host
// ports need a CNI portmap plugin in that config (the mappings are passed on). The sandbox gets
// the pod's sysctls, runAsUser, runAsGroup, groups and seccomp profile, each container its own
// seccomp and AppArmor profile (agent/runtime/spec_extras.h, apparmor.h), the pod's and each
// container's SELinux options, and CreateContainer the config the agent made for the sandbox
// (StartContainerOptions::sandbox_config). A subPath is given as a bind mount of the checked
// directory (agent/volume/subpath.h).
//
// execStream and attach are Unimplemented: sessions go through the runtime's streaming server.
//
// Container events: CRI v1's GetContainerEvents is not served by containerd 1.6, so once the
// event handler is installed the runtime follows containerd's own event stream on the same socket
// (containerd_events.h): a task start or exit of a CRI container becomes a ContainerEvent with the
// pod's UID and the container's name from kubelet's labels, on the stream's thread, as soon as
// ContainerStatus shows it (containerd's CRI plugin records it just after it publishes the event).
// A sandbox's pause container and exec processes are not containers and give none. A runtime
// without that stream (not containerd) gives no events; the agent's relist finds every change in
// any case.
//
// Threading: as Runtime. Every CriClient call is a blocking gRPC call and runs on the blocking
// executor given in the options (base::runBlocking), never on the caller's strand; the coroutine
// resumes on the caller's executor. recover() blocks the calling thread (it runs before the
// agent's threads do).
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "agent/runtime/cri/containerd_events.h"
#include "agent/runtime/cri/cri_client.h"
#include "agent/runtime/runtime.h"

namespace nodeagent::runtime {

struct KillTarget;  // cri_runtime.cpp

// kubelet's label and annotation keys (pkg/kubelet/types/labels.go, kuberuntime/labels.go).
inline constexpr const char* kPodNameLabel = "io.kubernetes.pod.name";
inline constexpr const char* kPodNamespaceLabel = "io.kubernetes.pod.namespace";
inline constexpr const char* kPodUidLabel = "io.kubernetes.pod.uid";
inline constexpr const char* kContainerNameLabel = "io.kubernetes.container.name";
inline constexpr const char* kContainerHashAnnotation = "io.kubernetes.container.hash";
inline constexpr const char* kContainerRestartCountAnnotation =
    "io.kubernetes.container.restartCount";
inline constexpr const char* kPodTerminationGracePeriodAnnotation =
    "io.kubernetes.pod.terminationGracePeriod";
// kubelet's: where the container writes its termination message, and the policy for it.
inline constexpr const char* kTerminationMessagePathAnnotation =
    "io.kubernetes.container.terminationMessagePath";
inline constexpr const char* kTerminationMessagePolicyAnnotation =
    "io.kubernetes.container.terminationMessagePolicy";
// kubelet's: the preStop handler as JSON ({"exec":{"command":[...]}}), for orphans.
inline constexpr const char* kPreStopHandlerAnnotation = "io.kubernetes.container.preStopHandler";

struct CriRuntimeOptions {
  // --pod-log-dir: sandboxes' log directories are <pod_log_dir>/<ns>_<name>_<uid>.
  std::filesystem::path pod_log_dir = "/var/log/pods";
  // Where every blocking CriClient call runs (the agent's blocking pool). Required.
  asio::any_io_executor blocking_executor;
  // kubelet's minimumGracePeriodInSeconds.
  int64_t minimum_grace_seconds = kMinimumGracePeriodSeconds;
  // Follow containerd's event stream for container events once an event handler is installed
  // (off: the agent's relist alone notices starts and exits).
  bool container_events = true;
};

class CriRuntime final : public Runtime {
 public:
  // `clock` times the preStop hook.
  CriRuntime(std::shared_ptr<cri::CriClient> client, base::Clock& clock, CriRuntimeOptions options);
  ~CriRuntime() override;
  CriRuntime(const CriRuntime&) = delete;
  CriRuntime& operator=(const CriRuntime&) = delete;

  // The runtime's name from Version ("containerd"), as kubelet reports it; "remote" until
  // recover() has asked.
  std::string type() const override;
  // The runtime's version from Version ("1.6.20~ds1"); empty until recover() has asked.
  std::string version() const override;

  // Calls Version (a clear error naming the endpoint when the runtime is missing or speaks
  // another API) and records the runtime's name and version. There is nothing else to adopt:
  // every other method asks the runtime's lists. Blocks.
  base::Status recover() override;

  // RunPodSandbox with kubelet's PodSandboxConfig (metadata, hostname, log directory, which it
  // makes first, DNS config, port mappings, labels with kubelet's io.kubernetes.pod.*,
  // annotations, cgroup parent, the pod's namespaces, privileged).
  asio::awaitable<base::StatusOr<std::string>> runPodSandbox(PodSandboxConfig config) override;
  // StopPodSandbox / RemovePodSandbox; OK for an unknown ID.
  asio::awaitable<base::Status> stopPodSandbox(std::string id) override;
  asio::awaitable<base::Status> removePodSandbox(std::string id) override;

  // Installs the handler and subscribes to containerd's events (see the top of this file): the
  // handler runs on the event stream's thread, one event at a time. Set it once.
  void setEventHandler(ContainerEventHandler handler) override;
  // killContainer calls it for a pod's preStop hook.
  void setPreStopHookRunner(PreStopHookRunner runner) override;

  // ListContainers grouped by the io.kubernetes.pod.uid label; containers without it (not made
  // by a kubelet-style agent) are left out.
  asio::awaitable<base::StatusOr<std::vector<Pod>>> getPods(bool all) override;
  // The pod's sandboxes (PodSandboxStatus) and containers (ContainerStatus), newest first; the
  // newest sandbox's IPs as the pod's while it is ready (kubelet's), none otherwise.
  asio::awaitable<base::StatusOr<PodStatus>> getPodStatus(std::string uid, std::string name,
                                                          std::string namespace_) override;

  // CreateContainer + StartContainer in options.sandbox_id: the image by its ID (as kubelet),
  // with its user, from options.image_info, else from ImageStatus; command and args with $(VAR)
  // expanded, env from buildContainerEnv, working dir, options.mounts, resources, log path
  // <container>/<attempt>.log (its directory made first), kubelet's labels and annotations. A
  // failed StartContainer is an error (RunContainerError) and leaves the container as containerd
  // has it, as kubelet does: exited, code 128, reason StartError (where the process runtime says
  // ContainerCannotRun), so restarts and backoff work as for a crash.
  asio::awaitable<base::StatusOr<ContainerId>> startContainer(
      api::PodPtr pod, api::Container container, int attempt,
      StartContainerOptions options) override;
  // Runs the preStop hook (the installed runner for a pod's spec hook; the exec hook recorded at
  // start, by ExecSync, without runner or pod), then StopContainer with what
  // graceAfterPreStopSeconds leaves of killGracePeriodSeconds (the pod's, or the grace period
  // recorded at start when `pod` is null). OK for an exited or unknown container.
  asio::awaitable<base::Status> killContainer(api::PodPtr pod, ContainerId id, KillOptions options,
                                              std::string reason) override;
  // killContainer for every container of `running_pod`, in parallel; errors joined.
  asio::awaitable<base::Status> killPod(api::PodPtr pod, Pod running_pod,
                                        std::optional<int64_t> grace_override) override;
  // ExecSync: stdout then stderr, at most kMaxExecOutput bytes.
  asio::awaitable<base::StatusOr<ExecResult>> execInContainer(ContainerId id,
                                                              std::vector<std::string> command,
                                                              base::Duration timeout) override;
  // RemoveContainer and its log file. NotFound for an unknown container, FailedPrecondition while
  // it runs.
  asio::awaitable<base::Status> removeContainer(ContainerId id) override;

  // UpdateRuntimeConfig with the node's pod CIDRs.
  asio::awaitable<base::Status> updatePodCidr(std::string cidrs) override;
  // Status: the runtime's RuntimeReady and NetworkReady conditions.
  asio::awaitable<base::StatusOr<RuntimeStatus>> status() override;
  // Containers run images: the agent makes sure each one is there before it starts a container.
  bool runsImages() const override { return true; }
  // ReopenContainerLog (cri_runtime_streaming.cpp).
  asio::awaitable<base::Status> reopenContainerLog(ContainerId id) override;
  // Exec, attach and port forwarding are served by the runtime's streaming server (Exec, Attach
  // and PortForward answer a session's URL; cri_runtime_streaming.cpp).
  bool streamsThroughUrls() const override { return true; }
  asio::awaitable<base::StatusOr<std::string>> execUrl(ContainerId id,
                                                       std::vector<std::string> command,
                                                       StreamOptions options) override;
  asio::awaitable<base::StatusOr<std::string>> attachUrl(ContainerId id,
                                                         StreamOptions options) override;
  // PortForward into the pod's ready sandbox.
  asio::awaitable<base::StatusOr<std::string>> portForwardUrl(std::string uid,
                                                              std::vector<int32_t> ports) override;
  // Images (cri_runtime_images.cpp). ImageStatus; nullopt when the runtime does not hold the
  // image.
  asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> imageStatus(std::string image) override;
  // PullImage; the image's ID.
  asio::awaitable<base::StatusOr<std::string>> pullImage(std::string image,
                                                         std::optional<RegistryAuth> auth) override;
  // ListImages; the runtime's sandbox image (its verbose Status's config) is listed as pinned.
  asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> listImages() override;
  // RemoveImage; OK when the runtime does not hold it.
  asio::awaitable<base::Status> removeImage(std::string image) override;
  // ImageFsInfo, and statvfs of the filesystem it names.
  asio::awaitable<base::StatusOr<ImageFsInfo>> imageFsInfo() override;
  // The image refs of every container (ListContainers).
  asio::awaitable<base::StatusOr<std::set<std::string>>> imagesInUse() override;

  std::filesystem::path podLogsDirectory(std::string_view pod_namespace, std::string_view pod_name,
                                         std::string_view pod_uid) const override;
  std::filesystem::path containerLogsPath(std::string_view pod_namespace, std::string_view pod_name,
                                          std::string_view pod_uid, std::string_view container_name,
                                          int restart_count) const override;

 private:
  // ImageStatus as the Runtime's ImageInfo; nullopt when the runtime does not hold the image.
  // Blocking.
  static base::StatusOr<std::optional<ImageInfo>> lookUpImage(cri::CriClient& client,
                                                              const std::string& image);
  base::StatusOr<std::string> startBlocking(const api::Pod& pod, const api::Container& container,
                                            int attempt, const StartContainerOptions& options);
  // Runs the container's preStop hook, if any, and answers how long it took.
  asio::awaitable<base::Duration> runPreStopHook(const api::PodPtr& pod, const ContainerId& id,
                                                 const KillTarget& target, int64_t hook_grace);
  base::StatusOr<PodStatus> podStatusBlocking(const std::string& uid);
  ContainerStatus toRuntimeStatus(const cri::ContainerStatus& status) const;
  // A containerd task event as the handler's ContainerEvent (the events' thread; may block).
  void onTaskEvent(const cri::TaskEvent& event, std::stop_token stop);

  std::shared_ptr<cri::CriClient> client_;
  base::Clock& clock_;
  CriRuntimeOptions options_;
  mutable std::mutex mu_;
  std::string runtime_name_;
  std::string runtime_version_;
  ContainerEventHandler event_handler_;
  PreStopHookRunner pre_stop_runner_;
  // containerd's event stream, from setEventHandler on (guarded by mu_); stopped first on
  // destruction.
  std::unique_ptr<cri::ContainerdEvents> events_;
};

}  // namespace nodeagent::runtime
