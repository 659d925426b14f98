// ProcessRuntime: the default Runtime. Each container is a host process (`command` + `args`; the
// image is recorded, never pulled) held by its own nodeagent-shim, which the agent starts with
// posix_spawn in a new session, so containers survive an agent stop or crash. The shim relays
// output to CRI log files under --pod-log-dir, rotates them, and records the exit in
// `<root-dir>/containers/<id>/state` (see state_file.h). The agent watches each shim through a
// pidfd on the io_context, so exits are seen in milliseconds without polling or SIGCHLD.
// recover() adopts the shims a previous agent left running and reads the exits recorded while
// no agent was watching.
//
// Cgroups: given a cgroup manager, a container started with a cgroup parent gets its own cgroup
// `<cgroup_parent>/<container-id>` (kubelet's and the CRI runtimes' naming) with its
// LinuxContainerResources as limits, made before its shim is spawned; the shim moves the
// container's process into it before exec, kills through it (every process of the container,
// including ones that called setsid or double-forked) and reports an OOM kill seen in it as
// reason OOMKilled, exit code 137. The cgroup is removed when the container ends (by the shim)
// or at the latest when it is removed. Adopted containers keep the cgroups they run in.
//
// Threading: as Runtime. Operations run on the caller's executor; the pidfd watchers and the
// event handler run on one internal strand of the executor given at construction. Destroying the
// runtime stops watching (containers keep running); pending handlers keep its internal state alive
// until they have run.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "agent/cm/cgroup_manager.h"
#include "agent/runtime/cri_log.h"
#include "agent/runtime/runtime.h"

namespace nodeagent::runtime {

struct ProcessRuntimeOptions {
  // --root-dir: container state goes to <root_dir>/containers/<id>/, default working directories
  // are <root_dir>/pods/<uid>/.
  std::filesystem::path root_dir = "/var/lib/nodeagent";
  // --pod-log-dir.
  std::filesystem::path pod_log_dir = "/var/log/pods";
  // The nodeagent-shim binary; empty means "nodeagent-shim" next to the running executable.
  std::filesystem::path shim_path;
  int64_t log_max_size = kDefaultLogMaxSize;
  int log_max_files = kDefaultLogMaxFiles;
  // kubelet's minimumGracePeriodInSeconds.
  int64_t minimum_grace_seconds = kMinimumGracePeriodSeconds;
  // Where file work and process creation run (launches, removals, log directories). Empty: two
  // threads of the runtime's own. Single-threaded tests give their io_context.
  asio::any_io_executor file_executor;
  // Makes and removes container cgroups (on the file pool). Null: containers get no cgroup of
  // their own, whatever StartContainerOptions::cgroup_parent says.
  std::shared_ptr<cm::CgroupManager> cgroups;
  // The RLIMIT_NOFILE soft limit of containers (ShimConfig::open_files): the agent's own from
  // before it raised it. Absent: they inherit the agent's.
  std::optional<uint64_t> container_open_files;
};

class ProcessRuntime final : public Runtime {
 public:
  ProcessRuntime(asio::any_io_executor executor, base::Clock& clock, ProcessRuntimeOptions options);
  ~ProcessRuntime() override;
  ProcessRuntime(const ProcessRuntime&) = delete;
  ProcessRuntime& operator=(const ProcessRuntime&) = delete;

  static constexpr std::string_view kType = "process";

  // Scans <root-dir>/containers: adopts live shims (matched by pid and start time, on this boot),
  // records the exits of containers that ended meanwhile, and kills containers whose shim died
  // (nothing would supervise them). Call once, before any other method; does file IO.
  base::Status recover() override;

  std::string type() const override { return std::string(kType); }
  // The sandbox of a process pod is its log directory (made by runPodSandbox); its ID is the pod
  // UID. Pods adopted at recover() have a ready sandbox.
  asio::awaitable<base::StatusOr<std::string>> runPodSandbox(PodSandboxConfig config) override;
  asio::awaitable<base::Status> stopPodSandbox(std::string id) override;
  asio::awaitable<base::Status> removePodSandbox(std::string id) override;
  // The handler runs on the runtime's internal strand.
  void setEventHandler(ContainerEventHandler handler) override;
  void setPreStopHookRunner(PreStopHookRunner runner) override;
  asio::awaitable<base::StatusOr<std::vector<Pod>>> getPods(bool all) override;
  // Moves with every start, exit, adoption and removal; nullopt while an adopted container's
  // start can only be seen in its state file.
  std::optional<uint64_t> podsVersion() const override;
  asio::awaitable<base::StatusOr<PodStatus>> getPodStatus(std::string uid, std::string name,
                                                          std::string namespace_) override;
  asio::awaitable<base::StatusOr<ContainerId>> startContainer(
      api::PodPtr pod, api::Container container, int attempt,
      StartContainerOptions options) override;
  asio::awaitable<base::Status> killContainer(api::PodPtr pod, ContainerId id, KillOptions options,
                                              std::string reason) override;
  asio::awaitable<base::Status> killPod(api::PodPtr pod, Pod running_pod,
                                        std::optional<int64_t> grace_override) override;
  asio::awaitable<base::Status> removeContainer(ContainerId id) override;
  asio::awaitable<base::StatusOr<ExecResult>> execInContainer(ContainerId id,
                                                              std::vector<std::string> command,
                                                              base::Duration timeout) override;
  // `nodeagent-shim exec` with pipes, or with a pseudo-terminal that becomes the command's
  // controlling terminal. Destroying the session kills the command's process group if it still
  // runs; the runtime reaps it.
  asio::awaitable<base::StatusOr<StreamSessionPtr>> execStream(ContainerId id,
                                                               std::vector<std::string> command,
                                                               StreamOptions options) override;
  // Through the shim's attach socket (kAttachSocketName in the container's directory), so adopted
  // containers are attachable too. Containers run without a terminal: tty is InvalidArgument.
  // Containers started by a shim without attach support: Unavailable.
  asio::awaitable<base::StatusOr<StreamSessionPtr>> attach(ContainerId id,
                                                           StreamOptions options) override;
  std::filesystem::path podLogsDirectory(std::string_view pod_namespace, std::string_view pod_name,
                                         std::string_view pod_uid) const override;
  std::filesystem::path containerLogsPath(std::string_view pod_namespace, std::string_view pod_name,
                                          std::string_view pod_uid, std::string_view container_name,
                                          int restart_count) const override;

  // The shim's pid for a container (0 if unknown): for tests and diagnostics.
  int shimPidForTest(const ContainerId& id) const;

  class State;

 private:
  std::shared_ptr<State> state_;
  // File work and process creation (launches, removals): never on the caller's strand. Declared
  // last: destroyed (joined) first, while the state it works on is still held.
  std::optional<asio::thread_pool> own_files_;
  asio::any_io_executor files_;
};

}  // namespace nodeagent::runtime
