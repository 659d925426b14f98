// The container runtime interface, shaped after kubelet's kubecontainer.Runtime and the CRI
// calls under it (pod sandboxes, containers with an image and mounts), and what
// syncPod/computePodActions, killPod and PLEG need from it. Two implementations: ProcessRuntime
// (each container is a host process held by a nodeagent-shim; the default) and FakeRuntime
// (in memory: unit tests and hollow nodes, `--runtime=fake`). A CRI runtime fits the same
// interface: the agent never assumes which one runs.
//
// Threading: every method may be called from any thread or strand, concurrently; operations are
// coroutines that run on the caller's executor and never block it (waits for a process or a
// grace period are asynchronous, timed with the injected base::Clock). Containers are identified
// by ContainerId; a container never changes identity, a restart is a new container whose
// `restart_count` (kubelet's attempt) is one more.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/cm/resources.h"
#include "agent/runtime/resource_field.h"
#include "agent/runtime/stream_session.h"
#include "api/hash.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::runtime {

// kubecontainer.ContainerID: "<type>://<id>" in API statuses.
struct ContainerId {
  std::string type;  // the runtime's type(): "process" or "fake"
  std::string id;
  bool empty() const { return id.empty(); }
  std::string toString() const { return type + "://" + id; }
  bool operator==(const ContainerId&) const = default;
};

// kubecontainer.ContainerState.
enum class ContainerState { kCreated, kRunning, kExited, kUnknown };
std::string_view containerStateName(ContainerState state);

// kubecontainer.ContainerStatus. Times are zero when not reached yet.
struct ContainerStatus {
  ContainerId id;
  std::string name;
  ContainerState state = ContainerState::kUnknown;
  base::SystemTime created_at{};
  base::SystemTime started_at{};
  base::SystemTime finished_at{};
  int exit_code = 0;   // 128+signal for a signal death (as kubelet reports it)
  int signal = 0;      // the signal that ended it, 0 when it exited by itself
  std::string reason;  // "Completed" (exit 0), "Error", "ContainerCannotRun", ...
  std::string message;
  std::string image;
  std::string image_id;   // the image's ID ("sha256:..."), for a runtime that runs images
  api::Hash128 hash;      // the spec hash the container was started with
  int restart_count = 0;  // the attempt it was started as
  int pid = 0;            // 0 when not running
  std::filesystem::path log_path;
};

// kubecontainer.Container: the running-pod view of one container.
struct Container {
  ContainerId id;
  std::string name;
  std::string image;
  api::Hash128 hash;
  ContainerState state = ContainerState::kUnknown;
  // A CRI runtime's container: the sandbox it was created in (its PodSandboxId), which container
  // GC keeps while the container is there. Empty otherwise.
  std::string sandbox_id;
};

// kubecontainer.Pod ("running pod"): what the runtime holds for one pod UID.
struct Pod {
  std::string uid;
  std::string name;
  std::string namespace_;
  std::vector<Container> containers;
  // kubecontainer.Pod.Sandboxes: a CRI runtime's sandboxes of the pod, as containers (their ID,
  // state kRunning while ready, kExited once not), so that the PLEG sees a sandbox die. The
  // process and fake runtimes list none.
  std::vector<Container> sandboxes;
  // No containers (sandboxes are not counted: killPod has nothing to stop then).
  bool empty() const { return containers.empty(); }
};

// A pod's sandbox (CRI PodSandbox): what the containers of one pod share. A CRI runtime holds
// the pod's namespaces in it; the process runtime's sandbox is the pod's log directory.
enum class SandboxState { kReady, kNotReady };

struct PodSandboxStatus {
  std::string id;
  SandboxState state = SandboxState::kNotReady;
  uint32_t attempt = 0;  // how many sandboxes the pod had before this one
  base::SystemTime created_at{};
};

// CRI SecurityProfile: a seccomp profile (kubelet's getSeccompProfile). Unconfined: none;
// RuntimeDefault: the runtime's own; Localhost: the profile in the file `localhost_ref`.
struct SecurityProfile {
  enum class Type { kRuntimeDefault = 0, kUnconfined = 1, kLocalhost = 2 };  // CRI's numbers
  Type type = Type::kUnconfined;
  std::string localhost_ref;
  bool operator==(const SecurityProfile&) const = default;
};

// core/v1 SELinuxOptions, CRI SELinuxOption: the labels a runtime with SELinux gives a sandbox's
// or a container's processes (a part left empty is the runtime's choice).
struct SELinuxOption {
  std::string user;
  std::string role;
  std::string type;
  std::string level;
  bool operator==(const SELinuxOption&) const = default;
};

// CRI PodSandboxConfig: what runPodSandbox needs (kubelet's generatePodSandboxConfig). The
// process and fake runtimes, whose pods all share the node's namespaces, use only the metadata,
// log directory, labels and annotations.
struct PodSandboxConfig {
  // CRI DNSConfig: the lines of the sandbox's resolv.conf.
  struct DnsConfig {
    std::vector<std::string> servers;
    std::vector<std::string> searches;
    std::vector<std::string> options;
    bool operator==(const DnsConfig&) const = default;
  };
  // CRI PortMapping, one per declared container port (kubelet's MakePortMappings).
  struct PortMapping {
    std::string protocol = "TCP";  // "TCP", "UDP" or "SCTP"
    int32_t container_port = 0;
    int32_t host_port = 0;  // 0: none
    std::string host_ip;
    bool operator==(const PortMapping&) const = default;
  };

  std::string uid;
  std::string name;
  std::string namespace_;
  uint32_t attempt = 0;
  // <pod-log-dir>/<ns>_<name>_<uid>: made by the runtime, holds the containers' logs.
  std::filesystem::path log_directory;
  // The pod's hostname (kubelet: spec.hostname or the pod's name, at most 63 characters); empty
  // for a host-network pod, which has the node's UTS namespace.
  std::string hostname;
  api::StringMap labels;
  api::StringMap annotations;
  // kubelet's GetPodDNS for the pod's dnsPolicy; nullopt: the runtime's default (the node's).
  std::optional<DnsConfig> dns_config;
  std::vector<PortMapping> port_mappings;
  // LinuxPodSandboxConfig.cgroup_parent: the pod's cgroup as a cgroupfs path
  // ("/kubepods/burstable/pod<uid>", StartContainerOptions' cgroup_parent); "" when cgroups are
  // not enforced.
  std::string cgroup_parent;
  // The pod's namespaces (kubelet's namespacesForPod): the node's network, PID and IPC namespaces
  // for hostNetwork, hostPID and hostIPC; else the pod's own network and IPC, and a PID namespace
  // per container, shared by the pod's containers with shareProcessNamespace.
  bool host_network = false;
  bool host_pid = false;
  bool host_ipc = false;
  bool share_process_namespace = false;
  // A container of the pod is privileged (kubelet's HasPrivilegedContainer).
  bool privileged = false;
  // LinuxSandboxSecurityContext from the pod's securityContext (kubelet's
  // generatePodSandboxLinuxConfig): runAsUser and runAsGroup; fsGroup, then supplementalGroups;
  // the pod's seccomp profile (the sandbox's own process).
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  std::vector<int64_t> supplemental_groups;
  SecurityProfile seccomp;
  std::optional<SELinuxOption> selinux_options;  // the pod's securityContext.seLinuxOptions
  // LinuxPodSandboxConfig.sysctls: the pod's securityContext.sysctls, names with '.' separators
  // (admission checked them against the node's allowlist).
  std::map<std::string, std::string> sysctls;
};

// kubecontainer.PodStatus: every container the runtime still has for the pod, newest first
// (by creation time, then attempt), and its sandboxes, newest first.
struct PodStatus {
  std::string uid;
  std::string name;
  std::string namespace_;
  std::vector<std::string> ips;
  std::vector<PodSandboxStatus> sandbox_statuses;
  std::vector<ContainerStatus> container_statuses;

  // The newest status of the container named `name`, or null.
  const ContainerStatus* findContainerStatusByName(std::string_view name) const;
  std::vector<const ContainerStatus*> runningContainerStatuses() const;
};

// A digest of every field of `status` (its containers' and sandboxes' too): equal statuses have
// equal fingerprints, and a status that differs in any field has another one but for a 2^-64
// chance. Valid within one process only (string hashes are not stable across builds).
uint64_t fingerprint(const PodStatus& status);

// A volume of the pod, made ready on the node (emptyDir, hostPath) by the agent's volume
// preparer: its name and where it is.
struct PodVolume {
  std::string name;
  std::filesystem::path host_path;
};

// One of a container's volumeMounts, resolved to the node (CRI Mount).
struct Mount {
  std::string volume;
  std::filesystem::path host_path;  // the volume's path, with the subPath appended
  std::string container_path;
  bool read_only = false;
  // With a subPath: the volume's own path, which host_path must not leave once its symlinks are
  // resolved (agent/volume/subpath.h); empty without one.
  std::filesystem::path volume_root{};
};

// What a runtime that runs images knows of one it holds (CRI ImageStatus).
struct ImageInfo {
  std::string id;  // the image's ID ("sha256:..."), kubelet's image ref
  std::vector<std::string> repo_tags;
  std::vector<std::string> repo_digests;
  uint64_t size = 0;
  std::optional<int64_t> uid;  // the image's User when it is numeric ("1000"; 0 for "" or root)
  std::string username;        // the image's User when it is a name
  // The runtime asks that it never be removed by image garbage collection (CRI `pinned`; the CRI
  // runtime also pins its own sandbox image). Set by listImages only.
  bool pinned = false;
};

// The filesystem that holds a runtime's images (CRI ImageFsInfo, with the size of the filesystem
// from statfs of its mountpoint), for image garbage collection.
struct ImageFsInfo {
  std::filesystem::path mountpoint;
  uint64_t used_bytes = 0;  // by the images
  uint64_t capacity_bytes = 0;
  uint64_t available_bytes = 0;
  uint64_t inodes_used = 0;  // by the images
};

// CRI ContainerConfig beyond the container's spec: where it runs and what it sees.
struct StartContainerOptions {
  // The pod's sandbox (runPodSandbox's ID).
  std::string sandbox_id;
  // The image reference the container runs (its spec's image; the process runtime records it).
  std::string image;
  // The image as the agent's image manager found it present (ImageStatus): a runtime that runs
  // images creates the container from its ID (kubelet gives CreateContainer the image ref that
  // EnsureImageExists resolved) and takes the image's user from it without asking again. nullopt
  // (after a pull, or with no image manager): the runtime looks the image up itself.
  std::optional<ImageInfo> image_info;
  // Every volume of the pod, and the container's own mounts of them. The process runtime gives a
  // container no filesystem of its own: it finds each volume of its pod at the path in its
  // environment variable NODEAGENT_VOLUME_<NAME> (volumeEnvName).
  std::vector<PodVolume> volumes;
  std::vector<Mount> mounts;
  // <root-dir>/pods/<uid>: the working directory when the container sets none.
  std::filesystem::path pod_dir;
  // For fieldRef env (status.podIP, status.hostIP).
  std::string pod_ip;
  std::string host_ip;
  // For resourceFieldRef env: what a limit the container does not set reads as.
  NodeAllocatableResources node_allocatable;
  // Set before the container's own env (which may override them).
  std::vector<std::pair<std::string, std::string>> extra_env;
  // Refuse a container that would run as root on the node or asks for privileged: true or
  // capabilities.add (runtime/security_context.h: checkNonRootPolicy). The agent sets it for
  // pods from the apiserver unless --allow-root-api-pods.
  bool refuse_root = false;
  // CRI LinuxContainerConfig.cgroup_parent: the pod's cgroup as a cgroupfs path
  // ("/kubepods/burstable/pod<uid>"). The container gets a cgroup of its own below it, named by
  // its container ID, that holds every process of the container from before its exec (so it is
  // limited, killed and OOM-accounted as a whole). Empty: no cgroup of its own (it stays in the
  // agent's). The process runtime makes it only when it was given a cgroup manager.
  std::string cgroup_parent;
  // The container's seccomp profile (kubelet's getSeccompProfile: its own, its pod's, or the
  // --seccomp-default). The process runtime refuses any other than Unconfined.
  SecurityProfile seccomp;
  // CRI LinuxContainerResources as kubelet computes them (cm::containerResources): the container
  // cgroup's CPU shares, quota and period and memory limit, and the OOM score adjustment of its
  // processes (0: the runtime's default, which brings a negative inherited value back to 0).
  cm::LinuxContainerResources resources;
  // The config the pod's sandbox runs with, as generatePodSandboxConfig made it for this sync
  // (CRI CreateContainer's sandbox_config: kubelet passes the one it ran the sandbox with). Set by
  // the agent for runtimes that run images; a runtime without sandboxes of its own ignores it.
  std::shared_ptr<const PodSandboxConfig> sandbox_config;
};

// The result of a command run in a container's context (kubelet's ExecSync).
struct ExecResult {
  int exit_code = 0;       // 128+signal when a signal ended it
  bool timed_out = false;  // killed because the timeout passed
  std::string output;      // stdout and stderr as they came, at most kMaxExecOutput bytes
};
// kubelet's maxReadLength for exec probe output.
inline constexpr size_t kMaxExecOutput = 10 * 1024;

// PLEG input: a container started or exited (died).
struct ContainerEvent {
  enum class Type { kStarted, kDied };
  Type type = Type::kStarted;
  std::string pod_uid;
  ContainerId container_id;
  std::string container_name;
};
using ContainerEventHandler = std::function<void(const ContainerEvent&)>;

// Reasons kubelet shows in Waiting.reason for a failed start.
inline constexpr std::string_view kCreateContainerConfigError = "CreateContainerConfigError";
inline constexpr std::string_view kRunContainerError = "RunContainerError";
// The reason for a startContainer error: InvalidArgument (a bad spec: empty command, unsupported
// env source) is CreateContainerConfigError, anything else RunContainerError.
std::string_view startErrorReason(const base::Status& status);

// Checks every name a runtime turns into a path with base::checkPathComponent: the pod's
// namespace, name, UID and the log directory `<ns>_<name>_<uid>` they make together, and for
// checkPathNames the container's name too. InvalidArgument (so CreateContainerConfigError)
// naming the bad one.
base::Status checkPodPathNames(const api::Pod& pod);
base::Status checkPathNames(const api::Pod& pod, const api::Container& container);

// kubecontainer.ShouldContainerBeRestarted.
bool shouldContainerBeRestarted(const api::Container& container, const api::Pod& pod,
                                const runtime::PodStatus& status);

// kubelet's minimumGracePeriodInSeconds: the SIGTERM window left after a preStop hook.
inline constexpr int64_t kMinimumGracePeriodSeconds = 2;
inline constexpr int64_t kDefaultTerminationGracePeriodSeconds = 30;

// The grace period before the preStop hook: the pod's deletionGracePeriodSeconds, else
// spec.terminationGracePeriodSeconds, else 30 (kubelet's killContainer).
int64_t podGracePeriodSeconds(const api::Pod& pod);

// The app or init container `name` of the pod's spec, or null.
const api::Container* findSpecContainer(const api::Pod& pod, std::string_view name);

// How killContainer stops a container (kubelet's killContainer arguments).
struct KillOptions {
  // Replaces the grace period left after the preStop hook (0: SIGKILL at once): kubelet's
  // gracePeriodOverride.
  std::optional<int64_t> grace_override;
  // The grace period, hook included, unless the pod is being deleted: the failed liveness or
  // startup probe's terminationGracePeriodSeconds.
  std::optional<int64_t> probe_grace;

  static KillOptions graceOverride(std::optional<int64_t> seconds) {
    KillOptions o;
    o.grace_override = seconds;
    return o;
  }
  static KillOptions probeGrace(std::optional<int64_t> seconds) {
    KillOptions o;
    o.probe_grace = seconds;
    return o;
  }
};

// kubelet's setTerminationGracePeriod: deletionGracePeriodSeconds while the pod is being
// deleted, else the probe's grace period when a probe failure is the reason, else
// podGracePeriodSeconds.
int64_t killGracePeriodSeconds(const api::Pod& pod, std::optional<int64_t> probe_grace);

// The grace period killContainer gives SIGTERM once the preStop hook ran (kubelet's
// killContainer): `grace` (the period before the hook, which is the hook's timeout) minus the
// whole seconds `hook_time` the hook took (zero when none ran), at least `minimum_seconds`;
// options.grace_override replaces the result when set (a negative override counts as 0: SIGKILL
// at once).
int64_t graceAfterPreStopSeconds(int64_t grace, base::Duration hook_time,
                                 const KillOptions& options, int64_t minimum_seconds);

// A container's preStop hook, run inside killContainer before SIGTERM; `timeout` is the grace
// period. The agent installs a runner for exec and httpGet hooks (kubelet's lifecycle
// HandlerRunner, which also records FailedPreStopHook events); without one, or without the pod
// (orphans), a runtime runs the exec hook recorded when the container started.
struct PreStopHookRequest {
  api::PodPtr pod;
  std::string container_name;
  ContainerId id;
  base::Duration timeout{};
};
using PreStopHookRunner = std::function<asio::awaitable<void>(PreStopHookRequest)>;

// One condition of the runtime's status (kubelet's RuntimeCondition): "RuntimeReady" or
// "NetworkReady".
struct RuntimeCondition {
  std::string type;
  bool status = false;
  std::string reason;
  std::string message;
};
inline constexpr std::string_view kRuntimeReadyCondition = "RuntimeReady";
inline constexpr std::string_view kNetworkReadyCondition = "NetworkReady";

// kubelet's kubecontainer.RuntimeStatus.
struct RuntimeStatus {
  std::vector<RuntimeCondition> conditions;
  // The condition of `type`, or null when the runtime did not report it.
  const RuntimeCondition* find(std::string_view type) const;
};

// Registry credentials for a pull (CRI AuthConfig), from the pod's imagePullSecrets. Never logged.
struct RegistryAuth {
  std::string username;
  std::string password;
  std::string auth;  // base64 "user:password", as in a docker config
  std::string server_address;
  std::string identity_token;
  std::string registry_token;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  // "process" or "fake": the ContainerId type, and the scheme of the Node's
  // containerRuntimeVersion ("<type>://<version>").
  virtual std::string type() const = 0;
  // The runtime's own version, for the Node's containerRuntimeVersion ("<type>://<version>");
  // empty for a runtime inside the agent (the agent's version stands for it). Known once
  // recover() returned.
  virtual std::string version() const { return {}; }

  // Takes over what a previous agent left (containers still running, exits recorded meanwhile).
  // Called once, before any container is started, listed or killed and before the agent's
  // threads run; may block.
  virtual base::Status recover() = 0;

  // Makes the pod's sandbox and answers its ID (CRI RunPodSandbox). The ID is in the pod's
  // status as a ready sandbox until stopPodSandbox. A pod whose containers the runtime already
  // had before it knew sandboxes (adopted at recover()) has a ready sandbox.
  virtual asio::awaitable<base::StatusOr<std::string>> runPodSandbox(PodSandboxConfig config) = 0;
  // Marks the sandbox not ready (after every container of the pod stopped). OK for an unknown ID.
  virtual asio::awaitable<base::Status> stopPodSandbox(std::string id) = 0;
  // Forgets the sandbox (the pod is gone). OK for an unknown ID.
  virtual asio::awaitable<base::Status> removePodSandbox(std::string id) = 0;

  // Installs the PLEG hook. `handler` runs on the runtime's event executor (the one given at
  // construction; implementations document which), one call at a time, within milliseconds of a
  // container starting or exiting. Set it once, before starting containers.
  virtual void setEventHandler(ContainerEventHandler handler) = 0;

  // Pods with at least one container; with `all` false only running containers are listed (and
  // pods with none are left out). Cheap: answers from memory.
  virtual asio::awaitable<base::StatusOr<std::vector<Pod>>> getPods(bool all) = 0;

  // A number that changes whenever what getPods(true) answers may have changed, so a relist can
  // skip an unchanged runtime; nullopt when the runtime cannot tell (relists then always list).
  // Any thread.
  virtual std::optional<uint64_t> podsVersion() const { return std::nullopt; }

  // A number that changes whenever what getPodStatus(uid) answers may have changed (a container
  // of the pod made, started, exited or removed, its sandbox changed), so that a resync of an
  // unchanged pod can skip the status; nullopt when the runtime cannot tell for this pod. Cheap
  // (no copy of the status). A runtime that tells these also changes podsVersion() whenever any
  // pod's version changes (before the pod's does), so an unchanged podsVersion vouches for every
  // pod's. Any thread.
  virtual std::optional<uint64_t> podStatusVersion(const std::string& uid) const {
    (void)uid;
    return std::nullopt;
  }

  // Every container of the pod (NotFound is never returned: an unknown UID gives an empty status).
  virtual asio::awaitable<base::StatusOr<PodStatus>> getPodStatus(std::string uid, std::string name,
                                                                  std::string namespace_) = 0;

  // Starts `container` of `pod` as attempt `attempt` (its restart count) and completes once the
  // process runs. An error leaves either nothing behind (InvalidArgument: a bad spec) or an exited
  // container with reason ContainerCannotRun (the command could not be executed), so restarts and
  // backoff work as for a crash.
  virtual asio::awaitable<base::StatusOr<ContainerId>> startContainer(
      api::PodPtr pod, api::Container container, int attempt, StartContainerOptions options) = 0;

  // Installs the preStop hook runner (see PreStopHookRunner). Set it once, before killing
  // containers; an empty runner removes it.
  virtual void setPreStopHookRunner(PreStopHookRunner runner) = 0;

  // Stops a container: runs its preStop hook (if any, bounded by the grace period), sends
  // SIGTERM to its process group, and SIGKILL when the grace period ends. The hook gets
  // killGracePeriodSeconds(pod, options.probe_grace) (or the one recorded at start when `pod` is
  // null); SIGTERM gets what graceAfterPreStopSeconds leaves: that minus the hook's time, at least
  // kMinimumGracePeriodSeconds, or `options.grace_override` (0: SIGKILL at once). Completes when
  // the process is gone. Killing an exited or unknown container is OK. `reason` is for logs.
  virtual asio::awaitable<base::Status> killContainer(api::PodPtr pod, ContainerId id,
                                                      KillOptions options, std::string reason) = 0;

  // Kills every running container of `running_pod` in parallel (kubelet's KillPod). `pod` may be
  // null (orphans). Errors of individual containers are joined into one.
  virtual asio::awaitable<base::Status> killPod(api::PodPtr pod, Pod running_pod,
                                                std::optional<int64_t> grace_override) = 0;

  // Runs `command` with the running container's environment, working directory and credentials
  // (exec probes and hooks), without a shell unless the command is one. Completes with the exit
  // code and the first kMaxExecOutput bytes of output; the command's process group is killed
  // when `timeout` passes (timed_out). FailedPrecondition when the container is not running,
  // NotFound for an unknown container.
  virtual asio::awaitable<base::StatusOr<ExecResult>> execInContainer(
      ContainerId id, std::vector<std::string> command, base::Duration timeout) = 0;

  // kubelet's exec with streams (CRI Exec): runs `command` in the running container's context as
  // execInContainer does, connected to the session's streams (StreamOptions: separate pipes, or
  // one pseudo-terminal). Completes once the command runs. FailedPrecondition when the container
  // is not running, NotFound when unknown, InvalidArgument for an empty command, tty with
  // stderr, or no stream at all. Default: Unimplemented.
  virtual asio::awaitable<base::StatusOr<StreamSessionPtr>> execStream(
      ContainerId id, std::vector<std::string> command, StreamOptions options);
  // kubelet's attach (CRI Attach): connects to the running container's own stdio (stdin only for
  // a container whose spec says stdin: true). Errors as execStream's; InvalidArgument for stdin
  // on a container without stdin: true. Default: Unimplemented.
  virtual asio::awaitable<base::StatusOr<StreamSessionPtr>> attach(ContainerId id,
                                                                   StreamOptions options);

  // kubelet's Runtime.UpdatePodCIDR (CRI UpdateRuntimeConfig): the node's pod CIDRs, comma-joined,
  // from --pod-cidr or the Node's spec.podCIDRs, for a runtime that gives pods networks of their
  // own (containerd makes its CNI config from its template with them). Default: nothing to do.
  virtual asio::awaitable<base::Status> updatePodCidr(std::string cidrs);

  // kubelet's Runtime.Status: the runtime's RuntimeReady and NetworkReady conditions, asked
  // periodically for the node's Ready condition. An error means the runtime did not answer.
  // Default: both true (a runtime inside the agent is up when the agent is).
  virtual asio::awaitable<base::StatusOr<RuntimeStatus>> status();

  // kubelet's kubecontainer.ImageService, for runtimes whose containers run images they must
  // hold (a CRI runtime). The process and fake runtimes run host commands and only record the
  // image, so the agent pulls nothing for them. Default false.
  virtual bool runsImages() const { return false; }
  // ImageStatus: the image `image` names (a reference, or an ID) when the runtime holds it,
  // nullopt when it does not. Default: Unimplemented.
  virtual asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> imageStatus(std::string image);
  // PullImage with optional credentials; answers the image's ID. Default: Unimplemented.
  virtual asio::awaitable<base::StatusOr<std::string>> pullImage(std::string image,
                                                                 std::optional<RegistryAuth> auth);
  // What image garbage collection asks (kubelet's ImageGCManager); each Default: Unimplemented.
  // ListImages: every image held.
  virtual asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> listImages();
  // RemoveImage: `image` (an ID) no longer held; OK when it was not.
  virtual asio::awaitable<base::Status> removeImage(std::string image);
  // ImageFsInfo: the filesystem the images are on.
  virtual asio::awaitable<base::StatusOr<ImageFsInfo>> imageFsInfo();
  // The IDs of the images that the runtime's containers, running or exited, were created from
  // (kubelet's GetPods(true) container ImageIDs).
  virtual asio::awaitable<base::StatusOr<std::set<std::string>>> imagesInUse();

  // CRI ReopenContainerLog: the runtime reopens the running container's log file (kubelet's
  // container log manager renamed it to rotate it). A runtime whose containers rotate their own
  // logs (the process runtime's shim) does not need it. Default: Unimplemented.
  virtual asio::awaitable<base::Status> reopenContainerLog(ContainerId id);

  // kubelet's streaming runtime (CRI Exec, Attach, PortForward): a runtime that serves sessions
  // from a streaming server of its own answers the URL of one session, and the kubelet API hands
  // the client's connection over to it (then execStream and attach are not used, nor is the
  // agent's own port forwarding). Default false.
  virtual bool streamsThroughUrls() const { return false; }
  // The URL of an exec of `command` in the running container `id` with `options`' streams.
  // Default: Unimplemented.
  virtual asio::awaitable<base::StatusOr<std::string>> execUrl(ContainerId id,
                                                               std::vector<std::string> command,
                                                               StreamOptions options);
  // The URL of an attach to the running container `id`. Default: Unimplemented.
  virtual asio::awaitable<base::StatusOr<std::string>> attachUrl(ContainerId id,
                                                                 StreamOptions options);
  // The URL of a port forwarding into the pod `uid`'s ready sandbox (`ports` as the client
  // named them in the query; may be empty). NotFound without a ready sandbox. Default:
  // Unimplemented.
  virtual asio::awaitable<base::StatusOr<std::string>> portForwardUrl(std::string uid,
                                                                      std::vector<int32_t> ports);

  // Drops an exited container's state and logs (container GC). FailedPrecondition while it runs.
  virtual asio::awaitable<base::Status> removeContainer(ContainerId id) = 0;

  // `<pod-log-dir>/<ns>_<name>_<uid>`: the pod's sandbox log directory.
  virtual std::filesystem::path podLogsDirectory(std::string_view pod_namespace,
                                                 std::string_view pod_name,
                                                 std::string_view pod_uid) const = 0;
  // `<pod-log-dir>/<ns>_<name>_<uid>/<container>/<restart_count>.log`.
  virtual std::filesystem::path containerLogsPath(std::string_view pod_namespace,
                                                  std::string_view pod_name,
                                                  std::string_view pod_uid,
                                                  std::string_view container_name,
                                                  int restart_count) const = 0;
};

// The command of the container's exec preStop hook, empty when it has none (a runtime records it
// at start, for a kill without the pod).
inline std::vector<std::string> preStopCommand(const api::Container& c) {
  if (c.lifecycle && c.lifecycle->pre_stop && c.lifecycle->pre_stop->exec) {
    return c.lifecycle->pre_stop->exec->command;
  }
  return {};
}

// Runs `tasks` concurrently on the current executor; completes with every result once all end.
asio::awaitable<std::vector<base::Status>> runAll(std::vector<asio::awaitable<base::Status>> tasks);

// kubelet's KillPod for a runtime: `kill` of every container of `running_pod`, all at once; the
// errors (an unknown container is none) joined into one naming the pod.
asio::awaitable<base::Status> killPodContainers(
    Pod running_pod, std::function<asio::awaitable<base::Status>(const ContainerId&)> kill);

// Kubelet's fieldRef paths the runtimes can resolve: metadata.name, metadata.namespace,
// metadata.uid, metadata.labels['k'], metadata.annotations['k'], spec.nodeName,
// spec.serviceAccountName, status.podIP, status.hostIP.
base::StatusOr<std::string> resolveFieldRef(const api::Pod& pod, const std::string& field_path,
                                            const StartContainerOptions& options);

// The container's environment, in order: PATH (a default the env may replace), the extra env,
// then the container's env with fieldRef and resourceFieldRef values resolved and $(VAR)
// references expanded (kubelet's expansion rules). A later duplicate replaces an earlier value in
// place.
// InvalidArgument (CreateContainerConfigError) names the variable for an unsupported source.
base::StatusOr<std::vector<std::pair<std::string, std::string>>> buildContainerEnv(
    const api::Pod& pod, const api::Container& container, const StartContainerOptions& options);

// Kubelet's $(VAR) expansion (expansion.Expand): $(NAME) is replaced when NAME is defined,
// $$ escapes a dollar, anything else is kept as written.
std::string expandVars(std::string_view input,
                       const std::vector<std::pair<std::string, std::string>>& env);

// kubelet's BuildPodLogsDirectory: `<root>/<ns>_<name>_<uid>`.
std::filesystem::path buildPodLogsDirectory(const std::filesystem::path& root,
                                            std::string_view pod_namespace,
                                            std::string_view pod_name, std::string_view pod_uid);
// kubelet's BuildContainerLogsDirectory + `<restart_count>.log`.
std::filesystem::path buildContainerLogPath(const std::filesystem::path& pod_logs_directory,
                                            std::string_view container_name, int restart_count);

// NODEAGENT_VOLUME_<NAME>: the variable a process container finds its pod's volume `name` in
// (upper case, every character but a letter or digit becomes '_').
std::string volumeEnvName(std::string_view volume);

// The sandbox a pod's containers run in: the newest ready one of `sandboxes` (newest first), or
// null.
const PodSandboxStatus* readySandbox(const std::vector<PodSandboxStatus>& sandboxes);

// The default PATH a container gets when it sets none.
inline constexpr std::string_view kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// 32 lower-case hex digits of a spec hash (the runtimes record it in this form).
std::string hashToHex(const api::Hash128& hash);
api::Hash128 hashFromHex(std::string_view hex);

}  // namespace nodeagent::runtime
