// The other Kubernetes objects nodeagent reads and writes besides Pod: Node, Lease
// (coordination.k8s.io/v1), the Status error object, DeleteOptions, PodList and watch events,
// each with its JSON codec. Like Pod, decoding checks types and names the field path in errors;
// it does not default or validate. Node and Lease keep the object they were decoded from in
// `raw` (canonical JSON); their encoders write the typed fields over it, so fields the model does
// not cover survive a read-modify-write. All functions are pure and thread-safe; none throws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/pod.h"
#include "api/watch_decoder.h"
#include "base/status.h"

namespace nodeagent::api {

// ---- Node (core/v1) --------------------------------------------------------------------------

struct Taint {
  std::string key;
  std::string value;
  std::string effect;  // "NoSchedule" | "PreferNoSchedule" | "NoExecute"
  std::optional<Timestamp> time_added;
  bool operator==(const Taint&) const = default;
};

struct NodeSpec {
  std::string pod_cidr;
  bool unschedulable = false;
  std::vector<Taint> taints;
  std::string provider_id;
  bool operator==(const NodeSpec&) const = default;
};

struct NodeCondition {
  std::string type;    // "Ready", "MemoryPressure", ...
  std::string status;  // "True" | "False" | "Unknown"
  std::optional<Timestamp> last_heartbeat_time;
  std::optional<Timestamp> last_transition_time;
  std::string reason;
  std::string message;
  bool operator==(const NodeCondition&) const = default;
};

struct NodeAddress {
  std::string type;  // "InternalIP", "Hostname", ...
  std::string address;
  bool operator==(const NodeAddress&) const = default;
};

struct NodeSystemInfo {
  std::string machine_id;
  std::string system_uuid;
  std::string boot_id;
  std::string kernel_version;
  std::string os_image;
  std::string container_runtime_version;
  std::string kubelet_version;
  std::string kube_proxy_version;
  std::string operating_system;
  std::string architecture;
  bool operator==(const NodeSystemInfo&) const = default;
};

struct NodeStatus {
  std::map<std::string, Quantity> capacity;
  std::map<std::string, Quantity> allocatable;
  std::vector<NodeCondition> conditions;
  std::vector<NodeAddress> addresses;
  int32_t kubelet_endpoint_port = 0;  // daemonEndpoints.kubeletEndpoint.Port
  NodeSystemInfo node_info;
  bool operator==(const NodeStatus&) const = default;
};

struct Node {
  ObjectMeta metadata;
  NodeSpec spec;
  NodeStatus status;
  // The object as decoded (canonical JSON); null for a Node built in code.
  std::shared_ptr<const std::string> raw;
};

base::StatusOr<Node> decodeNode(const nlohmann::json& object);
// kind/apiVersion, then the typed fields written over `raw` (modelled keys that are empty in the
// typed view are removed, like omitempty).
nlohmann::json encodeNode(const Node& node);

// ---- Lease (coordination.k8s.io/v1) ----------------------------------------------------------

struct LeaseSpec {
  std::optional<std::string> holder_identity;
  std::optional<int32_t> lease_duration_seconds;
  std::optional<Timestamp> acquire_time;  // MicroTime on the wire
  std::optional<Timestamp> renew_time;    // MicroTime on the wire
  std::optional<int32_t> lease_transitions;
  bool operator==(const LeaseSpec&) const = default;
};

struct Lease {
  ObjectMeta metadata;
  LeaseSpec spec;
  std::shared_ptr<const std::string> raw;
};

base::StatusOr<Lease> decodeLease(const nlohmann::json& object);
nlohmann::json encodeLease(const Lease& lease);

// ---- Status (metav1.Status, the API error object) --------------------------------------------

struct StatusCause {
  std::string reason;  // "FieldValueRequired", ...
  std::string message;
  std::string field;
  bool operator==(const StatusCause&) const = default;
};

struct StatusDetails {
  std::string name;
  std::string group;
  std::string kind;
  std::string uid;
  std::vector<StatusCause> causes;
  std::optional<int32_t> retry_after_seconds;
  bool operator==(const StatusDetails&) const = default;
};

struct ApiStatus {
  std::string status;  // "Success" | "Failure"
  std::string message;
  std::string reason;  // "NotFound", "AlreadyExists", "Conflict", "Invalid", "Expired", ...
  int32_t code = 0;    // the HTTP status
  std::optional<StatusDetails> details;
  bool operator==(const ApiStatus&) const = default;
};

// A Failure status; `kind` and `name` fill details when not empty ({"name":"web","kind":"pods"}).
ApiStatus makeApiStatus(int32_t code, std::string reason, std::string message,
                        std::string kind = {}, std::string name = {});
ApiStatus makeSuccessStatus();

base::StatusOr<ApiStatus> decodeApiStatus(const nlohmann::json& object);
// {"kind":"Status","apiVersion":"v1","metadata":{},...} with empty fields omitted.
nlohmann::json encodeApiStatus(const ApiStatus& status);

// ---- DeleteOptions ---------------------------------------------------------------------------

struct Preconditions {
  std::optional<std::string> uid;
  std::optional<std::string> resource_version;
  bool operator==(const Preconditions&) const = default;
};

struct DeleteOptions {
  std::optional<int64_t> grace_period_seconds;
  std::optional<Preconditions> preconditions;
  std::optional<std::string> propagation_policy;  // "Orphan" | "Background" | "Foreground"
  bool operator==(const DeleteOptions&) const = default;
};

base::StatusOr<DeleteOptions> decodeDeleteOptions(const nlohmann::json& object);
nlohmann::json encodeDeleteOptions(const DeleteOptions& options);

// ---- PodList ---------------------------------------------------------------------------------

struct PodList {
  std::string resource_version;
  std::string continue_token;  // metadata.continue
  std::vector<PodPtr> items;
};

// Errors in an item are prefixed with its index ("items[3]: metadata.name: ...").
base::StatusOr<PodList> decodePodList(const nlohmann::json& object);
nlohmann::json encodePodList(const PodList& list);

// ---- Watch events ----------------------------------------------------------------------------

// One watch frame (the type is shared with api/watch_decoder.h).
using WatchEvent = RawWatchEvent;

// {"type":"ADDED","object":{...}}; the object must be a JSON object.
base::StatusOr<WatchEvent> decodeWatchEvent(const nlohmann::json& frame);
nlohmann::json encodeWatchEvent(WatchEventType type, const nlohmann::json& object);
// One line of a watch stream: compact JSON and a trailing newline.
std::string watchEventLine(WatchEventType type, const nlohmann::json& object);

}  // namespace nodeagent::api
