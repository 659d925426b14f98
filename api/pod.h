// The typed, immutable Kubernetes object model nodeagent acts on (core/v1 Pod and its parts).
//
// A Pod is built only by the codec (api/pod_json.h: decodePod) and never changes afterwards:
// `PodPtr` is a shared pointer to const, so pods cross strands freely. The typed fields are a view
// of `raw`, the whole object as canonical JSON, which keeps every field the model does not cover
// (mirror pods and round trips need them). To change a pod, change its JSON and decode again
// (api/pod_json.h has helpers such as withAnnotations and withStatus).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/hash.h"
#include "api/quantity.h"
#include "api/time.h"

namespace nodeagent::api {

using StringMap = std::map<std::string, std::string>;

// An optional value kept on the heap: std::optional's interface and value semantics (deep copy,
// deep comparison) for large parts most objects lack (probes, lifecycle hooks), so that a
// container without them stays small (a pointer each instead of the whole part).
template <typename T>
class Boxed {
 public:
  using value_type = T;
  Boxed() = default;
  Boxed(std::nullopt_t) {}  // NOLINT(google-explicit-constructor): optional-like
  Boxed(T value) : p_(std::make_unique<T>(std::move(value))) {}  // NOLINT: optional-like
  Boxed(const Boxed& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  Boxed(Boxed&&) noexcept = default;
  Boxed& operator=(const Boxed& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  Boxed& operator=(Boxed&&) noexcept = default;
  Boxed& operator=(std::nullopt_t) {
    p_.reset();
    return *this;
  }
  Boxed& operator=(T value) {
    p_ = std::make_unique<T>(std::move(value));
    return *this;
  }
  Boxed& operator=(std::optional<T> value) {
    if (value) {
      p_ = std::make_unique<T>(std::move(*value));
    } else {
      p_.reset();
    }
    return *this;
  }

  template <typename... Args>
  T& emplace(Args&&... args) {
    p_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *p_;
  }

  bool has_value() const { return p_ != nullptr; }
  const T& value() const {
    if (!p_) throw std::bad_optional_access();
    return *p_;
  }
  T& value() {
    if (!p_) throw std::bad_optional_access();
    return *p_;
  }
  explicit operator bool() const { return p_ != nullptr; }
  const T& operator*() const { return *p_; }
  T& operator*() { return *p_; }
  const T* operator->() const { return p_.get(); }
  T* operator->() { return p_.get(); }
  void reset() { p_.reset(); }

  bool operator==(const Boxed& o) const {
    if (!p_ || !o.p_) return !p_ && !o.p_;
    return *p_ == *o.p_;
  }

 private:
  std::unique_ptr<T> p_;
};

struct OwnerReference {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  std::optional<bool> controller;
  std::optional<bool> block_owner_deletion;
  bool operator==(const OwnerReference&) const = default;
};

struct ObjectMeta {
  std::string name;
  std::string generate_name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::optional<Timestamp> creation_timestamp;
  std::optional<Timestamp> deletion_timestamp;
  std::optional<int64_t> deletion_grace_period_seconds;
  StringMap labels;
  StringMap annotations;
  std::vector<OwnerReference> owner_references;
  bool operator==(const ObjectMeta&) const = default;
};

// intstr.IntOrString.
struct IntOrString {
  bool is_string = false;
  int32_t int_value = 0;
  std::string string_value;
  bool operator==(const IntOrString&) const = default;
};

struct ObjectFieldSelector {
  std::string api_version;  // defaults to "v1"
  std::string field_path;
  bool operator==(const ObjectFieldSelector&) const = default;
};

// The downward API's resourceFieldRef: one of a container's requests or limits, in units of
// `divisor` (default 1).
struct ResourceFieldSelector {
  std::string container_name;  // "" in env: the container itself
  std::string resource;        // "limits.cpu", "requests.memory", ...
  std::optional<Quantity> divisor;
  bool operator==(const ResourceFieldSelector&) const = default;
};

struct EnvVar {
  std::string name;
  std::string value;
  // valueFrom.fieldRef and valueFrom.resourceFieldRef; the other valueFrom kinds are kept in raw
  // and named in `value_from_kind`.
  Boxed<ObjectFieldSelector> field_ref;
  Boxed<ResourceFieldSelector> resource_field_ref;
  std::string value_from_kind;  // "" (none), "fieldRef", "resourceFieldRef", "secretKeyRef", ...
  bool operator==(const EnvVar&) const = default;
};

struct ContainerPort {
  std::string name;
  int32_t container_port = 0;
  int32_t host_port = 0;
  std::string protocol = "TCP";
  std::string host_ip;
  bool operator==(const ContainerPort&) const = default;
};

struct ResourceRequirements {
  std::map<std::string, Quantity> requests;
  std::map<std::string, Quantity> limits;
  bool operator==(const ResourceRequirements&) const = default;
};

struct ExecAction {
  std::vector<std::string> command;
  bool operator==(const ExecAction&) const = default;
};

struct HTTPHeader {
  std::string name;
  std::string value;
  bool operator==(const HTTPHeader&) const = default;
};

struct HTTPGetAction {
  std::string path;
  IntOrString port;
  std::string host;
  std::string scheme = "HTTP";
  std::vector<HTTPHeader> http_headers;
  bool operator==(const HTTPGetAction&) const = default;
};

struct TCPSocketAction {
  IntOrString port;
  std::string host;
  bool operator==(const TCPSocketAction&) const = default;
};

// The handler part of a probe or lifecycle hook; exactly one member is set in a valid pod.
struct Handler {
  std::optional<ExecAction> exec;
  std::optional<HTTPGetAction> http_get;
  std::optional<TCPSocketAction> tcp_socket;
  bool operator==(const Handler&) const = default;
};

struct Probe {
  Handler handler;
  int32_t initial_delay_seconds = 0;
  int32_t timeout_seconds = 1;
  int32_t period_seconds = 10;
  int32_t success_threshold = 1;
  int32_t failure_threshold = 3;
  std::optional<int64_t> termination_grace_period_seconds;
  bool operator==(const Probe&) const = default;
};

struct Lifecycle {
  std::optional<Handler> post_start;
  std::optional<Handler> pre_stop;
  bool operator==(const Lifecycle&) const = default;
};

// core/v1 Capabilities: capability names as written ("NET_ADMIN", "CAP_NET_ADMIN" or "ALL").
struct Capabilities {
  std::vector<std::string> add;
  std::vector<std::string> drop;
  bool operator==(const Capabilities&) const = default;
};

// The container-level securityContext.
struct SecurityContext {
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  std::optional<bool> run_as_non_root;
  std::optional<bool> allow_privilege_escalation;
  std::optional<bool> privileged;
  std::optional<bool> read_only_root_filesystem;
  std::optional<Capabilities> capabilities;
  bool operator==(const SecurityContext&) const = default;
};

// The pod-level securityContext (core/v1 PodSecurityContext). runAsUser, runAsGroup and
// runAsNonRoot are defaults a container's own securityContext overrides.
struct PodSecurityContext {
  std::optional<int64_t> run_as_user;
  std::optional<int64_t> run_as_group;
  std::optional<bool> run_as_non_root;
  std::vector<int64_t> supplemental_groups;
  std::optional<int64_t> fs_group;
  bool operator==(const PodSecurityContext&) const = default;
};

struct VolumeMount {
  std::string name;
  std::string mount_path;
  bool read_only = false;
  std::string sub_path;
  bool operator==(const VolumeMount&) const = default;
};

struct Container {
  std::string name;
  std::string image;
  std::string image_pull_policy;
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::string working_dir;
  std::vector<ContainerPort> ports;
  std::vector<EnvVar> env;
  ResourceRequirements resources;
  std::vector<VolumeMount> volume_mounts;
  // Boxed: most containers have none of these, and inline they made a Container 2 KiB.
  Boxed<Probe> liveness_probe;
  Boxed<Probe> readiness_probe;
  Boxed<Probe> startup_probe;
  Boxed<Lifecycle> lifecycle;
  std::string termination_message_path;
  std::string termination_message_policy;
  Boxed<SecurityContext> security_context;
  bool stdin = false;
  bool stdin_once = false;  // stdinOnce
  bool tty = false;
  // Hash of this container's canonical JSON (kubelet's container hash: a change restarts it).
  Hash128 hash;
  bool operator==(const Container&) const = default;
};

struct Toleration {
  std::string key;
  std::string operator_;  // "Exists" or "Equal" ("" means Equal)
  std::string value;
  std::string effect;
  std::optional<int64_t> toleration_seconds;
  bool operator==(const Toleration&) const = default;
};

struct Volume {
  std::string name;
  // The volume source's key in the JSON ("emptyDir", "hostPath", "configMap", ...), "" if none.
  std::string source_type;
  std::string host_path;       // hostPath.path
  std::string host_path_type;  // hostPath.type
  std::string empty_dir_medium;
  std::optional<Quantity> empty_dir_size_limit;
  bool operator==(const Volume&) const = default;
};

struct PodSpec {
  std::vector<Container> init_containers;
  std::vector<Container> containers;
  std::string restart_policy;  // "Always" | "OnFailure" | "Never"
  std::optional<int64_t> termination_grace_period_seconds;
  std::optional<int64_t> active_deadline_seconds;
  std::string dns_policy;
  std::string node_name;
  std::string service_account_name;
  std::vector<std::string> image_pull_secrets;  // the name of each imagePullSecrets entry
  bool host_network = false;
  bool host_pid = false;
  bool host_ipc = false;
  std::string scheduler_name;
  std::vector<Toleration> tolerations;
  std::vector<Volume> volumes;
  std::vector<std::string> readiness_gates;  // conditionType of each gate
  std::optional<int32_t> priority;
  std::string priority_class_name;
  Boxed<PodSecurityContext> security_context;
  bool operator==(const PodSpec&) const = default;
};

struct ContainerStateWaiting {
  std::string reason;
  std::string message;
  bool operator==(const ContainerStateWaiting&) const = default;
};

struct ContainerStateRunning {
  std::optional<Timestamp> started_at;
  bool operator==(const ContainerStateRunning&) const = default;
};

struct ContainerStateTerminated {
  int32_t exit_code = 0;
  int32_t signal = 0;
  std::string reason;
  std::string message;
  std::optional<Timestamp> started_at;
  std::optional<Timestamp> finished_at;
  std::string container_id;
  bool operator==(const ContainerStateTerminated&) const = default;
};

// At most one member is set. Boxed: a status holds two of these (state and lastState), and most
// of the four members are empty.
struct ContainerState {
  Boxed<ContainerStateWaiting> waiting;
  std::optional<ContainerStateRunning> running;
  Boxed<ContainerStateTerminated> terminated;
  bool operator==(const ContainerState&) const = default;
};

struct ContainerStatus {
  std::string name;
  ContainerState state;
  ContainerState last_state;
  bool ready = false;
  std::optional<bool> started;
  int32_t restart_count = 0;
  std::string image;
  std::string image_id;
  std::string container_id;
  bool operator==(const ContainerStatus&) const = default;
};

struct PodCondition {
  std::string type;
  std::string status;  // "True" | "False" | "Unknown"
  std::string reason;
  std::string message;
  std::optional<Timestamp> last_probe_time;
  std::optional<Timestamp> last_transition_time;
  bool operator==(const PodCondition&) const = default;
};

struct PodStatus {
  std::string phase;  // "Pending" | "Running" | "Succeeded" | "Failed" | "Unknown"
  std::vector<PodCondition> conditions;
  std::string message;
  std::string reason;
  std::string host_ip;
  std::string pod_ip;
  std::vector<std::string> pod_ips;
  std::optional<Timestamp> start_time;
  std::vector<ContainerStatus> init_container_statuses;
  std::vector<ContainerStatus> container_statuses;
  std::string qos_class;
  bool operator==(const PodStatus&) const = default;
};

struct Pod {
  std::string api_version = "v1";
  std::string kind = "Pod";
  ObjectMeta metadata;
  PodSpec spec;
  PodStatus status;

  // The whole object as canonical JSON (sorted keys, compact); never null in a decoded pod.
  std::shared_ptr<const std::string> raw;
  // Content hashes of the canonical JSON of `spec` and of the whole object.
  Hash128 spec_hash;
  Hash128 content_hash;

  // kubelet's GetPodFullName: "<name>_<namespace>".
  std::string fullName() const { return metadata.name + "_" + metadata.namespace_; }
};

using PodPtr = std::shared_ptr<const Pod>;

// "ns/name" for logs and messages (klog's KObj).
inline std::string podRef(const Pod& pod) {
  return pod.metadata.namespace_ + "/" + pod.metadata.name;
}

}  // namespace nodeagent::api
