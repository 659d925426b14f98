#include "api/objects.h"

#include <exception>

#include <nlohmann/json.hpp>

#include "api/canonical_json.h"
#include "api/json_util.h"
#include "api/pod_json.h"

namespace nodeagent::api {
namespace {

using nlohmann::json;
using namespace json_util;

// Runs a decoder, turning any library exception into an error.
template <typename Fn>
auto guarded(const char* what, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return base::invalidArgumentError(std::string("decoding ") + what + ": " + e.what());
  }
}

// Writes `typed[key]` over `base[key]` for every modelled key; a key missing from `typed` is
// removed from `base`.
void overlay(json& base, const json& typed, std::initializer_list<const char*> keys) {
  if (!base.is_object()) base = json::object();
  for (const char* key : keys) {
    auto it = typed.find(key);
    if (it != typed.end()) {
      base[key] = *it;
    } else {
      base.erase(key);
    }
  }
}

constexpr std::initializer_list<const char*> kMetaKeys = {"name",
                                                          "generateName",
                                                          "namespace",
                                                          "uid",
                                                          "resourceVersion",
                                                          "generation",
                                                          "creationTimestamp",
                                                          "deletionTimestamp",
                                                          "deletionGracePeriodSeconds",
                                                          "labels",
                                                          "annotations",
                                                          "ownerReferences"};

json baseObject(const std::shared_ptr<const std::string>& raw) {
  if (!raw) return json::object();
  return json::parse(*raw);
}

json quantityMap(const std::map<std::string, Quantity>& m) {
  json j = json::object();
  for (const auto& [k, q] : m) j[k] = q.toString();
  return j;
}

base::Status decodeNodeSpec(const json& spec, const Path& p, NodeSpec& out) {
  RETURN_IF_ERROR(readString(spec, p, "podCIDR", &out.pod_cidr));
  RETURN_IF_ERROR(readBool(spec, p, "unschedulable", &out.unschedulable));
  RETURN_IF_ERROR(readString(spec, p, "providerID", &out.provider_id));
  return readList(spec, p, "taints", &out.taints, [](const json& e, const Path& ep, Taint* t) {
    RETURN_IF_ERROR(readString(e, ep, "key", &t->key));
    RETURN_IF_ERROR(readString(e, ep, "value", &t->value));
    RETURN_IF_ERROR(readString(e, ep, "effect", &t->effect));
    return readTime(e, ep, "timeAdded", &t->time_added);
  });
}

base::Status decodeNodeSystemInfo(const json& info, const Path& ip, NodeSystemInfo& n) {
  RETURN_IF_ERROR(readString(info, ip, "machineID", &n.machine_id));
  RETURN_IF_ERROR(readString(info, ip, "systemUUID", &n.system_uuid));
  RETURN_IF_ERROR(readString(info, ip, "bootID", &n.boot_id));
  RETURN_IF_ERROR(readString(info, ip, "kernelVersion", &n.kernel_version));
  RETURN_IF_ERROR(readString(info, ip, "osImage", &n.os_image));
  RETURN_IF_ERROR(readString(info, ip, "containerRuntimeVersion", &n.container_runtime_version));
  RETURN_IF_ERROR(readString(info, ip, "kubeletVersion", &n.kubelet_version));
  RETURN_IF_ERROR(readString(info, ip, "kubeProxyVersion", &n.kube_proxy_version));
  RETURN_IF_ERROR(readString(info, ip, "operatingSystem", &n.operating_system));
  return readString(info, ip, "architecture", &n.architecture);
}

base::Status decodeNodeStatus(const json& status, const Path& p, NodeStatus& s) {
  RETURN_IF_ERROR(readQuantityMap(status, p, "capacity", &s.capacity));
  RETURN_IF_ERROR(readQuantityMap(status, p, "allocatable", &s.allocatable));
  RETURN_IF_ERROR(readList(
      status, p, "conditions", &s.conditions, [](const json& e, const Path& ep, NodeCondition* c) {
        RETURN_IF_ERROR(readString(e, ep, "type", &c->type));
        RETURN_IF_ERROR(readString(e, ep, "status", &c->status));
        RETURN_IF_ERROR(readTime(e, ep, "lastHeartbeatTime", &c->last_heartbeat_time));
        RETURN_IF_ERROR(readTime(e, ep, "lastTransitionTime", &c->last_transition_time));
        RETURN_IF_ERROR(readString(e, ep, "reason", &c->reason));
        return readString(e, ep, "message", &c->message);
      }));
  RETURN_IF_ERROR(readList(status, p, "addresses", &s.addresses,
                           [](const json& e, const Path& ep, NodeAddress* a) {
                             RETURN_IF_ERROR(readString(e, ep, "type", &a->type));
                             return readString(e, ep, "address", &a->address);
                           }));
  ASSIGN_OR_RETURN(const json* endpoints, objectMember(status, p, "daemonEndpoints"));
  if (endpoints != nullptr) {
    Path ep = p.field("daemonEndpoints");
    ASSIGN_OR_RETURN(const json* kubelet, objectMember(*endpoints, ep, "kubeletEndpoint"));
    if (kubelet != nullptr) {
      RETURN_IF_ERROR(
          readInt32(*kubelet, ep.field("kubeletEndpoint"), "Port", &s.kubelet_endpoint_port));
    }
  }
  ASSIGN_OR_RETURN(const json* info, objectMember(status, p, "nodeInfo"));
  if (info != nullptr) {
    RETURN_IF_ERROR(decodeNodeSystemInfo(*info, p.field("nodeInfo"), s.node_info));
  }
  return base::okStatus();
}

}  // namespace

// ---- Node --------------------------------------------------------------------------------------

base::StatusOr<Node> decodeNode(const json& object) {
  return guarded("node", [&]() -> base::StatusOr<Node> {
    Path root;
    RETURN_IF_ERROR(checkObject(object, root));
    RETURN_IF_ERROR(checkKind(object, "Node", "v1"));
    Node node;
    ASSIGN_OR_RETURN(const json* meta, objectMember(object, root, "metadata"));
    if (meta != nullptr) {
      ASSIGN_OR_RETURN(node.metadata, decodeObjectMeta(*meta, root.field("metadata")));
    }
    ASSIGN_OR_RETURN(const json* spec, objectMember(object, root, "spec"));
    if (spec != nullptr) RETURN_IF_ERROR(decodeNodeSpec(*spec, root.field("spec"), node.spec));
    ASSIGN_OR_RETURN(const json* status, objectMember(object, root, "status"));
    if (status != nullptr) {
      RETURN_IF_ERROR(decodeNodeStatus(*status, root.field("status"), node.status));
    }
    node.raw = std::make_shared<const std::string>(canonicalJson(object));
    return node;
  });
}

json encodeNode(const Node& node) {
  json j = baseObject(node.raw);
  j["kind"] = "Node";
  j["apiVersion"] = "v1";
  overlay(j["metadata"], encodeObjectMeta(node.metadata), kMetaKeys);

  json spec = json::object();
  if (!node.spec.pod_cidr.empty()) spec["podCIDR"] = node.spec.pod_cidr;
  if (node.spec.unschedulable) spec["unschedulable"] = true;
  if (!node.spec.provider_id.empty()) spec["providerID"] = node.spec.provider_id;
  if (!node.spec.taints.empty()) {
    json taints = json::array();
    for (const auto& t : node.spec.taints) {
      json tj = {{"key", t.key}, {"effect", t.effect}};
      if (!t.value.empty()) tj["value"] = t.value;
      if (t.time_added) tj["timeAdded"] = formatTime(*t.time_added);
      taints.push_back(std::move(tj));
    }
    spec["taints"] = std::move(taints);
  }
  overlay(j["spec"], spec, {"podCIDR", "unschedulable", "providerID", "taints"});

  const NodeStatus& s = node.status;
  json status = json::object();
  if (!s.capacity.empty()) status["capacity"] = quantityMap(s.capacity);
  if (!s.allocatable.empty()) status["allocatable"] = quantityMap(s.allocatable);
  if (!s.conditions.empty()) {
    json conds = json::array();
    for (const auto& c : s.conditions) {
      json cj = {{"type", c.type}, {"status", c.status}};
      if (c.last_heartbeat_time) cj["lastHeartbeatTime"] = formatTime(*c.last_heartbeat_time);
      if (c.last_transition_time) cj["lastTransitionTime"] = formatTime(*c.last_transition_time);
      if (!c.reason.empty()) cj["reason"] = c.reason;
      if (!c.message.empty()) cj["message"] = c.message;
      conds.push_back(std::move(cj));
    }
    status["conditions"] = std::move(conds);
  }
  if (!s.addresses.empty()) {
    json addrs = json::array();
    for (const auto& a : s.addresses) addrs.push_back({{"type", a.type}, {"address", a.address}});
    status["addresses"] = std::move(addrs);
  }
  status["daemonEndpoints"] = {{"kubeletEndpoint", {{"Port", s.kubelet_endpoint_port}}}};
  const NodeSystemInfo& n = s.node_info;
  // Every nodeInfo field is required on the wire (no omitempty).
  status["nodeInfo"] = {{"machineID", n.machine_id},
                        {"systemUUID", n.system_uuid},
                        {"bootID", n.boot_id},
                        {"kernelVersion", n.kernel_version},
                        {"osImage", n.os_image},
                        {"containerRuntimeVersion", n.container_runtime_version},
                        {"kubeletVersion", n.kubelet_version},
                        {"kubeProxyVersion", n.kube_proxy_version},
                        {"operatingSystem", n.operating_system},
                        {"architecture", n.architecture}};
  overlay(j["status"], status,
          {"capacity", "allocatable", "conditions", "addresses", "daemonEndpoints", "nodeInfo"});
  return j;
}

// ---- Lease -------------------------------------------------------------------------------------

base::StatusOr<Lease> decodeLease(const json& object) {
  return guarded("lease", [&]() -> base::StatusOr<Lease> {
    Path root;
    RETURN_IF_ERROR(checkObject(object, root));
    RETURN_IF_ERROR(checkKind(object, "Lease", "coordination.k8s.io/v1"));
    Lease lease;
    ASSIGN_OR_RETURN(const json* meta, objectMember(object, root, "metadata"));
    if (meta != nullptr) {
      ASSIGN_OR_RETURN(lease.metadata, decodeObjectMeta(*meta, root.field("metadata")));
    }
    ASSIGN_OR_RETURN(const json* spec, objectMember(object, root, "spec"));
    if (spec != nullptr) {
      Path p = root.field("spec");
      LeaseSpec& s = lease.spec;
      if (spec->contains("holderIdentity") && !(*spec)["holderIdentity"].is_null()) {
        std::string holder;
        RETURN_IF_ERROR(readString(*spec, p, "holderIdentity", &holder));
        s.holder_identity = std::move(holder);
      }
      RETURN_IF_ERROR(readInt32(*spec, p, "leaseDurationSeconds", &s.lease_duration_seconds));
      RETURN_IF_ERROR(readTime(*spec, p, "acquireTime", &s.acquire_time));
      RETURN_IF_ERROR(readTime(*spec, p, "renewTime", &s.renew_time));
      RETURN_IF_ERROR(readInt32(*spec, p, "leaseTransitions", &s.lease_transitions));
    }
    lease.raw = std::make_shared<const std::string>(canonicalJson(object));
    return lease;
  });
}

json encodeLease(const Lease& lease) {
  json j = baseObject(lease.raw);
  j["kind"] = "Lease";
  j["apiVersion"] = "coordination.k8s.io/v1";
  overlay(j["metadata"], encodeObjectMeta(lease.metadata), kMetaKeys);
  const LeaseSpec& s = lease.spec;
  json spec = json::object();
  if (s.holder_identity) spec["holderIdentity"] = *s.holder_identity;
  if (s.lease_duration_seconds) spec["leaseDurationSeconds"] = *s.lease_duration_seconds;
  if (s.acquire_time) spec["acquireTime"] = formatMicroTime(*s.acquire_time);
  if (s.renew_time) spec["renewTime"] = formatMicroTime(*s.renew_time);
  if (s.lease_transitions) spec["leaseTransitions"] = *s.lease_transitions;
  overlay(
      j["spec"], spec,
      {"holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions"});
  return j;
}

// ---- Status ------------------------------------------------------------------------------------

ApiStatus makeApiStatus(int32_t code, std::string reason, std::string message, std::string kind,
                        std::string name) {
  ApiStatus s;
  s.status = "Failure";
  s.code = code;
  s.reason = std::move(reason);
  s.message = std::move(message);
  if (!kind.empty() || !name.empty()) {
    StatusDetails d;
    d.kind = std::move(kind);
    d.name = std::move(name);
    s.details = std::move(d);
  }
  return s;
}

ApiStatus makeSuccessStatus() {
  ApiStatus s;
  s.status = "Success";
  return s;
}

base::StatusOr<ApiStatus> decodeApiStatus(const json& object) {
  return guarded("status", [&]() -> base::StatusOr<ApiStatus> {
    Path root;
    RETURN_IF_ERROR(checkObject(object, root));
    RETURN_IF_ERROR(checkKind(object, "Status", "v1"));
    ApiStatus s;
    RETURN_IF_ERROR(readString(object, root, "status", &s.status));
    RETURN_IF_ERROR(readString(object, root, "message", &s.message));
    RETURN_IF_ERROR(readString(object, root, "reason", &s.reason));
    RETURN_IF_ERROR(readInt32(object, root, "code", &s.code));
    ASSIGN_OR_RETURN(const json* details, objectMember(object, root, "details"));
    if (details != nullptr) {
      Path p = root.field("details");
      StatusDetails d;
      RETURN_IF_ERROR(readString(*details, p, "name", &d.name));
      RETURN_IF_ERROR(readString(*details, p, "group", &d.group));
      RETURN_IF_ERROR(readString(*details, p, "kind", &d.kind));
      RETURN_IF_ERROR(readString(*details, p, "uid", &d.uid));
      RETURN_IF_ERROR(readInt32(*details, p, "retryAfterSeconds", &d.retry_after_seconds));
      RETURN_IF_ERROR(readList(*details, p, "causes", &d.causes,
                               [](const json& e, const Path& ep, StatusCause* c) {
                                 RETURN_IF_ERROR(readString(e, ep, "reason", &c->reason));
                                 RETURN_IF_ERROR(readString(e, ep, "message", &c->message));
                                 return readString(e, ep, "field", &c->field);
                               }));
      s.details = std::move(d);
    }
    return s;
  });
}

json encodeApiStatus(const ApiStatus& s) {
  json j = {{"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", json::object()}};
  if (!s.status.empty()) j["status"] = s.status;
  if (!s.message.empty()) j["message"] = s.message;
  if (!s.reason.empty()) j["reason"] = s.reason;
  if (s.code != 0) j["code"] = s.code;
  if (s.details) {
    const StatusDetails& d = *s.details;
    json dj = json::object();
    if (!d.name.empty()) dj["name"] = d.name;
    if (!d.group.empty()) dj["group"] = d.group;
    if (!d.kind.empty()) dj["kind"] = d.kind;
    if (!d.uid.empty()) dj["uid"] = d.uid;
    if (!d.causes.empty()) {
      json causes = json::array();
      for (const auto& c : d.causes) {
        json cj = json::object();
        if (!c.reason.empty()) cj["reason"] = c.reason;
        if (!c.message.empty()) cj["message"] = c.message;
        if (!c.field.empty()) cj["field"] = c.field;
        causes.push_back(std::move(cj));
      }
      dj["causes"] = std::move(causes);
    }
    if (d.retry_after_seconds) dj["retryAfterSeconds"] = *d.retry_after_seconds;
    j["details"] = std::move(dj);
  }
  return j;
}

// ---- DeleteOptions -----------------------------------------------------------------------------

base::StatusOr<DeleteOptions> decodeDeleteOptions(const json& object) {
  return guarded("delete options", [&]() -> base::StatusOr<DeleteOptions> {
    Path root;
    RETURN_IF_ERROR(checkObject(object, root));
    RETURN_IF_ERROR(checkKind(object, "DeleteOptions", "v1"));
    DeleteOptions o;
    RETURN_IF_ERROR(readInt64(object, root, "gracePeriodSeconds", &o.grace_period_seconds));
    ASSIGN_OR_RETURN(const json* pre, objectMember(object, root, "preconditions"));
    if (pre != nullptr) {
      Path p = root.field("preconditions");
      Preconditions pc;
      std::string v;
      if (pre->contains("uid") && !(*pre)["uid"].is_null()) {
        RETURN_IF_ERROR(readString(*pre, p, "uid", &v));
        pc.uid = v;
      }
      if (pre->contains("resourceVersion") && !(*pre)["resourceVersion"].is_null()) {
        RETURN_IF_ERROR(readString(*pre, p, "resourceVersion", &v));
        pc.resource_version = v;
      }
      o.preconditions = std::move(pc);
    }
    if (object.contains("propagationPolicy") && !object["propagationPolicy"].is_null()) {
      std::string policy;
      RETURN_IF_ERROR(readString(object, root, "propagationPolicy", &policy));
      o.propagation_policy = std::move(policy);
    }
    return o;
  });
}

json encodeDeleteOptions(const DeleteOptions& o) {
  json j = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (o.grace_period_seconds) j["gracePeriodSeconds"] = *o.grace_period_seconds;
  if (o.preconditions) {
    json pj = json::object();
    if (o.preconditions->uid) pj["uid"] = *o.preconditions->uid;
    if (o.preconditions->resource_version) {
      pj["resourceVersion"] = *o.preconditions->resource_version;
    }
    j["preconditions"] = std::move(pj);
  }
  if (o.propagation_policy) j["propagationPolicy"] = *o.propagation_policy;
  return j;
}

// ---- PodList -----------------------------------------------------------------------------------

base::StatusOr<PodList> decodePodList(const json& object) {
  return guarded("pod list", [&]() -> base::StatusOr<PodList> {
    Path root;
    RETURN_IF_ERROR(checkObject(object, root));
    RETURN_IF_ERROR(checkKind(object, "PodList", "v1"));
    PodList list;
    ASSIGN_OR_RETURN(const json* meta, objectMember(object, root, "metadata"));
    if (meta != nullptr) {
      Path p = root.field("metadata");
      RETURN_IF_ERROR(readString(*meta, p, "resourceVersion", &list.resource_version));
      RETURN_IF_ERROR(readString(*meta, p, "continue", &list.continue_token));
    }
    ASSIGN_OR_RETURN(const json* items, arrayMember(object, root, "items"));
    if (items != nullptr) {
      list.items.reserve(items->size());
      for (size_t i = 0; i < items->size(); ++i) {
        auto pod = decodePodPtr((*items)[i]);
        if (!pod.ok()) return pod.status().withContext("items[" + std::to_string(i) + "]");
        list.items.push_back(std::move(*pod));
      }
    }
    return list;
  });
}

json encodePodList(const PodList& list) {
  json meta = json::object();
  if (!list.resource_version.empty()) meta["resourceVersion"] = list.resource_version;
  if (!list.continue_token.empty()) meta["continue"] = list.continue_token;
  json items = json::array();
  for (const auto& pod : list.items) items.push_back(encodePod(*pod));
  return {{"kind", "PodList"},
          {"apiVersion", "v1"},
          {"metadata", std::move(meta)},
          {"items", std::move(items)}};
}

// ---- Watch events ------------------------------------------------------------------------------

base::StatusOr<WatchEvent> decodeWatchEvent(const json& frame) {
  return guarded("watch event", [&]() -> base::StatusOr<WatchEvent> {
    Path root;
    RETURN_IF_ERROR(checkObject(frame, root));
    std::string type;
    RETURN_IF_ERROR(readString(frame, root, "type", &type));
    WatchEvent event;
    if (!parseWatchEventType(type, event.type)) {
      return fieldError(root.field("type"), "unknown watch event type \"" + type + "\"");
    }
    ASSIGN_OR_RETURN(const json* object, objectMember(frame, root, "object"));
    if (object == nullptr) return fieldError(root.field("object"), "missing");
    event.object = std::make_shared<json>(*object);
    return event;
  });
}

json encodeWatchEvent(WatchEventType type, const json& object) {
  return {{"type", std::string(watchEventTypeName(type))}, {"object", object}};
}

std::string watchEventLine(WatchEventType type, const json& object) {
  std::string line = canonicalJson(encodeWatchEvent(type, object));
  line += '\n';
  return line;
}

}  // namespace nodeagent::api
