// The typed, immutable Kubernetes object model nodeagent acts on (core/v1 Pod and its parts).
//
// A Pod is built only by the codec (api/pod_json.h: decodePod) and never changes afterwards:
// `PodPtr` is a shared pointer to const, so pods cross strands freely. The typed fields are a view
// of `raw`, the whole object as canonical JSON, which keeps every field the model does not cover
// (mirror pods and round trips need them). To change a pod, change its JSON and decode again
// (api/pod_json.h has helpers such as withAnnotations and withStatus).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/hash.h"
#include "api/pod_text.h"
#include "api/string_table.h"
#include "api/quantity.h"
#include "api/time.h"

namespace nodeagent::api {


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

// A part held behind a shared pointer that reads as a default T while empty (readers need no
// check). Pods with an equal part may share one copy: the codec hands every static pod the same
// copy of the status they all start with (phase Pending), and pods with the same spec one copy of
// it (api/list_interner.h). Any access through a non-const object first makes the part this
// object's own, copied when it is shared (handed out by `shared`) or another object holds it too,
// so a change never reaches another pod. Pods are read through `const Pod&` (PodPtr), which never
// copies.
template <typename T>
class SharedBox {
 public:
  SharedBox() = default;
  SharedBox(T value) : p_(std::make_shared<T>(std::move(value))) {}  // NOLINT: optional-like
  // Shares `value`, which others may hold or hand out later (an interner keeps a weak reference):
  // a write through the result always copies it first.
  static SharedBox shared(std::shared_ptr<T> value) {
    SharedBox box;
    box.p_ = std::move(value);
    box.frozen_ = true;
    return box;
  }

  const T& operator*() const { return p_ ? *p_ : empty(); }
  const T* operator->() const { return &**this; }
  T& operator*() { return own(); }
  T* operator->() { return &own(); }
  bool has_value() const { return p_ != nullptr; }
  const std::shared_ptr<T>& sharedValue() const { return p_; }
  bool frozen() const { return frozen_; }
  // Whether this box and `o` hold the very same part (not merely equal ones).
  bool sharesWith(const SharedBox& o) const { return p_ == o.p_; }
  bool operator==(const SharedBox& o) const { return p_ == o.p_ || **this == *o; }

 private:
  static const T& empty() {
    static const T kEmpty;
    return kEmpty;
  }
  // A count of one means no other holder exists, so none can take a reference meanwhile. Pods
  // are only written while they are made, on the thread making them, before any other thread
  // sees them.
  T& own() {
    if (!p_) {
      p_ = std::make_shared<T>();
    } else if (frozen_ || p_.use_count() > 1) {
      p_ = std::make_shared<T>(*p_);
    }
    frozen_ = false;
    return *p_;
  }
  std::shared_ptr<T> p_;
  bool frozen_ = false;
};

// A list that pods with identical items share: the codec hands out one copy of each distinct
// container list (api/pod_json.cpp), so a node of replicas keeps one, and the status manager one
// copy of each distinct list of conditions (api/list_interner.h). A const list reads like a const
// std::vector (and converts to `const std::vector<T>&`). Any non-const access except on an empty
// list, even one that only reads, first copies the items when they are shared or were interned,
// so a changed copy never changes another pod; it also ends references taken before.
// Pods are read through `const Pod&` (PodPtr), which never copies.
template <typename T>
class SharedList {
 public:
  using value_type = T;
  using Vector = std::vector<T>;
  using const_iterator = typename Vector::const_iterator;
  using iterator = typename Vector::iterator;
  using size_type = typename Vector::size_type;

  SharedList() = default;
  SharedList(Vector items)  // NOLINT(google-explicit-constructor): vector-like
      : p_(items.empty() ? nullptr : std::make_shared<Vector>(std::move(items))) {}
  SharedList(std::initializer_list<T> items) : SharedList(Vector(items)) {}
  // Shares `items` (null: empty); a write through the result copies them first.
  static SharedList shared(std::shared_ptr<Vector> items) {
    SharedList list;
    list.p_ = std::move(items);
    list.frozen_ = true;
    return list;
  }

  const Vector& items() const { return p_ ? *p_ : emptyItems(); }
  operator const Vector&() const { return items(); }  // NOLINT(google-explicit-constructor)
  // Whether this list and `o` hold the very same items (not merely equal ones).
  bool sharesWith(const SharedList& o) const { return p_ == o.p_; }
  // The items to share; null when empty.
  const std::shared_ptr<Vector>& sharedItems() const { return p_; }
  // Whether the items are never written in place (they came from shared()).
  bool frozen() const { return frozen_; }

  const_iterator begin() const { return items().begin(); }
  const_iterator end() const { return items().end(); }
  const_iterator cbegin() const { return items().begin(); }
  const_iterator cend() const { return items().end(); }
  size_type size() const { return items().size(); }
  bool empty() const { return items().empty(); }
  const T& operator[](size_type i) const { return items()[i]; }
  const T& at(size_type i) const { return items().at(i); }
  const T& front() const { return items().front(); }
  const T& back() const { return items().back(); }

  // Writes: this list's own items, copied first if shared.
  Vector& mutableItems() {
    if (!p_) {
      p_ = std::make_shared<Vector>();
    } else if (frozen_ || p_.use_count() > 1) {
      p_ = std::make_shared<Vector>(*p_);
    }
    frozen_ = false;
    return *p_;
  }
  iterator begin() { return p_ ? mutableItems().begin() : iterator(); }
  iterator end() { return p_ ? mutableItems().end() : iterator(); }
  T& operator[](size_type i) { return mutableItems()[i]; }
  T& at(size_type i) { return mutableItems().at(i); }
  T& front() { return mutableItems().front(); }
  T& back() { return mutableItems().back(); }
  void push_back(T item) { mutableItems().push_back(std::move(item)); }
  template <typename... Args>
  T& emplace_back(Args&&... args) {
    return mutableItems().emplace_back(std::forward<Args>(args)...);
  }
  void clear() {
    p_.reset();
    frozen_ = false;
  }

  bool operator==(const SharedList& o) const { return p_ == o.p_ || items() == o.items(); }

 private:
  static const Vector& emptyItems() {
    static const Vector kEmpty;
    return kEmpty;
  }
  std::shared_ptr<Vector> p_;
  // The items may be shared through a weak reference (an interner's table): never written in
  // place.
  bool frozen_ = false;
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
  StringTable labels;
  StringTable annotations;
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
  // Shared between pods with the same containers (see api/pod_json.h).
  SharedList<Container> init_containers;
  SharedList<Container> containers;
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

// At most one member is set. Boxed: a status holds two of these (state and lastState), and at
// most one of each one's waiting and terminated parts is set.
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
  // Shared between statuses with the same conditions: the status manager keeps one copy of each
  // distinct list (pods started within the same second have equal ones).
  SharedList<PodCondition> conditions;
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

// apiVersion "v1", kind "Pod": the codec accepts no other.
struct Pod {
  ObjectMeta metadata;
  // Pods with the same spec (replicas, a fleet of static pods from one template) share one copy.
  SharedBox<PodSpec> spec;
  // The status the pod came with. Static pods get phase Pending from their defaults and share
  // one copy of that status.
  SharedBox<PodStatus> status;

  // The whole object as canonical JSON (sorted keys, compact), its spec's text shared with the
  // pods of the same spec; never null in a decoded pod.
  std::shared_ptr<const PodText> raw;
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
