// The CRI v1 objects nodeagent sends to and reads from a container runtime, as plain structs of
// nodeagent's own: pod sandboxes, containers, exec results, images and registry credentials.
//
// Each struct carries the CRI fields nodeagent uses, with CRI's names (kubernetes/cri-api
// runtime.v1), so that kubelet's kuberuntime code reads across. cri_convert.cpp turns them into
// the generated protobuf messages and back; nothing here names a gRPC or protobuf type.
//
// Times are nanoseconds since the Unix epoch, as CRI gives them (0: not set).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nodeagent::runtime::cri {

using StringMap = std::map<std::string, std::string>;

// CRI's NamespaceMode: which namespace a sandbox or container gets. POD: the sandbox's;
// CONTAINER: one of its own; NODE: the machine's (hostNetwork, hostPID, hostIPC).
enum class NamespaceMode { kPod = 0, kContainer = 1, kNode = 2, kTarget = 3 };

// kubelet's defaults (namespacesForPod): network and IPC shared in the pod, PID per container.
struct NamespaceOptions {
  NamespaceMode network = NamespaceMode::kPod;
  NamespaceMode pid = NamespaceMode::kContainer;
  NamespaceMode ipc = NamespaceMode::kPod;
  std::string target_id;  // for kTarget only

  bool operator==(const NamespaceOptions&) const = default;
};

// ---- Pod sandboxes ----

struct PodSandboxMetadata {
  std::string name;
  std::string uid;
  std::string pod_namespace;  // CRI's `namespace`
  uint32_t attempt = 0;

  bool operator==(const PodSandboxMetadata&) const = default;
};

// CRI's DNSConfig: the sandbox's resolv.conf (the runtime copies the node's when none is given).
struct DnsConfig {
  std::vector<std::string> servers;
  std::vector<std::string> searches;
  std::vector<std::string> options;

  bool operator==(const DnsConfig&) const = default;
};

enum class Protocol { kTcp = 0, kUdp = 1, kSctp = 2 };

// CRI's SecurityProfile (seccomp).
struct SecurityProfile {
  enum class Type { kRuntimeDefault = 0, kUnconfined = 1, kLocalhost = 2 };
  Type profile_type = Type::kUnconfined;
  std::string localhost_ref;

  bool operator==(const SecurityProfile&) const = default;
};

// CRI's SELinuxOption: the SELinux labels of a sandbox's or container's processes.
struct SELinuxOption {
  std::string user;
  std::string role;
  std::string type;
  std::string level;
};

// CRI's PortMapping: a container port, and the node port (host_port, 0: none) a CNI portmap
// plugin forwards to it.
struct PortMapping {
  Protocol protocol = Protocol::kTcp;
  int32_t container_port = 0;
  int32_t host_port = 0;
  std::string host_ip;

  bool operator==(const PortMapping&) const = default;
};

struct PodSandboxConfig {
  PodSandboxMetadata metadata;
  std::string hostname;       // empty for a host-network pod (it has the node's UTS namespace)
  std::string log_directory;  // kubelet: <pod-log-dir>/<ns>_<name>_<uid>
  std::optional<DnsConfig> dns_config;
  std::vector<PortMapping> port_mappings;
  StringMap labels;
  StringMap annotations;
  // linux:
  std::string cgroup_parent;
  StringMap sysctls;
  // linux.security_context:
  NamespaceOptions namespace_options;
  // A container of the sandbox may be privileged (containerd refuses one otherwise).
  bool privileged = false;
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  std::vector<int64_t> supplemental_groups;
  SecurityProfile seccomp;
  std::optional<SELinuxOption> selinux_options;
};

enum class PodSandboxState { kReady = 0, kNotReady = 1 };

// What ListPodSandbox returns for each sandbox.
struct PodSandbox {
  std::string id;
  PodSandboxMetadata metadata;
  PodSandboxState state = PodSandboxState::kNotReady;
  int64_t created_at = 0;
  StringMap labels;
  StringMap annotations;
};

// PodSandboxStatus: a PodSandbox plus its network and namespaces.
struct PodSandboxStatus {
  std::string id;
  PodSandboxMetadata metadata;
  PodSandboxState state = PodSandboxState::kNotReady;
  int64_t created_at = 0;
  std::string ip;  // network.ip: "" for a host-network sandbox, or one without a network yet
  std::vector<std::string> additional_ips;  // network.additional_ips (dual stack)
  NamespaceOptions namespaces;              // linux.namespaces.options
  StringMap labels;
  StringMap annotations;
};

// ListPodSandbox's filter: each field that is set must match (labels: all of them).
struct PodSandboxFilter {
  std::string id;
  std::optional<PodSandboxState> state;
  StringMap label_selector;
};

// ---- Containers ----

struct ContainerMetadata {
  std::string name;
  uint32_t attempt = 0;

  bool operator==(const ContainerMetadata&) const = default;
};

struct KeyValue {
  std::string key;
  std::string value;
};

struct Mount {
  std::string container_path;
  std::string host_path;
  bool readonly = false;

  bool operator==(const Mount&) const = default;
};

// CRI's LinuxContainerResources (0: not set; oom_score_adj 0 is a value).
struct LinuxContainerResources {
  int64_t cpu_period = 0;
  int64_t cpu_quota = 0;
  int64_t cpu_shares = 0;
  int64_t memory_limit_in_bytes = 0;
  int64_t oom_score_adj = 0;
};

struct ContainerSecurityContext {
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  std::string run_as_username;
  bool readonly_rootfs = false;
  bool privileged = false;
  std::vector<std::string> add_capabilities;  // "NET_ADMIN", as CRI: without CAP_
  std::vector<std::string> drop_capabilities;
  std::vector<int64_t> supplemental_groups;
  bool no_new_privs = false;
  std::vector<std::string> masked_paths;    // kubelet's defaults unless privileged
  std::vector<std::string> readonly_paths;  // likewise
  NamespaceOptions namespace_options;       // kubelet gives each container its pod's
  SecurityProfile seccomp;
  // The container's AppArmor profile when it asks for one (runtime/apparmor.h), and kubelet's
  // deprecated spelling of it ("runtime/default", "localhost/<name>", "unconfined").
  std::optional<SecurityProfile> apparmor;
  std::string apparmor_profile;
  std::optional<SELinuxOption> selinux_options;
};

struct ContainerConfig {
  ContainerMetadata metadata;
  std::string image;  // image.image: a reference or an image ID
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::string working_dir;
  std::vector<KeyValue> envs;
  std::vector<Mount> mounts;
  StringMap labels;
  StringMap annotations;
  // Relative to the sandbox's log_directory (kubelet: <container>/<restartCount>.log), or absolute.
  std::string log_path;
  bool stdin_open = false;  // CRI's `stdin`
  bool stdin_once = false;
  bool tty = false;
  // linux:
  LinuxContainerResources resources;
  ContainerSecurityContext security_context;
};

enum class ContainerState { kCreated = 0, kRunning = 1, kExited = 2, kUnknown = 3 };

// What ListContainers returns for each container.
struct Container {
  std::string id;
  std::string pod_sandbox_id;
  ContainerMetadata metadata;
  std::string image;
  std::string image_ref;
  ContainerState state = ContainerState::kUnknown;
  int64_t created_at = 0;
  StringMap labels;
  StringMap annotations;
};

struct ContainerStatus {
  std::string id;
  ContainerMetadata metadata;
  ContainerState state = ContainerState::kUnknown;
  int64_t created_at = 0;
  int64_t started_at = 0;
  int64_t finished_at = 0;
  int32_t exit_code = 0;
  std::string image;
  std::string image_ref;  // the image ID the container runs ("sha256:...")
  std::string reason;     // "Completed", "Error", "OOMKilled"
  std::string message;
  StringMap labels;
  StringMap annotations;
  std::vector<Mount> mounts;
  std::string log_path;
};

// ListContainers' filter: each field that is set must match (labels: all of them).
struct ContainerFilter {
  std::string id;
  std::optional<ContainerState> state;
  std::string pod_sandbox_id;
  StringMap label_selector;
};

struct ExecSyncResult {
  std::string stdout_bytes;
  std::string stderr_bytes;
  int32_t exit_code = 0;
};

// ---- Images ----

// Registry credentials for PullImage (kubelet's from imagePullSecrets). Never logged.
struct AuthConfig {
  std::string username;
  std::string password;
  std::string auth;  // base64 "user:password", as in a docker config
  std::string server_address;
  std::string identity_token;
  std::string registry_token;
};

}  // namespace nodeagent::runtime::cri
