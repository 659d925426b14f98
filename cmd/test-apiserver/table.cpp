#include "cmd/test-apiserver/table.h"

#include <cctype>
#include <optional>

#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

namespace {

json column(const char* name, const char* type, const char* description, int priority = 0,
            const char* format = "") {
  return {{"name", name},
          {"type", type},
          {"format", format},
          {"description", description},
          {"priority", priority}};
}

const json& at(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::string s(const json& v) { return v.is_string() ? v.get<std::string>() : ""; }

std::string age(const json& obj, base::SystemTime now) {
  auto created = parseTime(s(at(at(obj, "metadata"), "creationTimestamp")));
  if (!created) return "<unknown>";
  return humanDuration(now - *created);
}

json podCells(const json& pod, base::SystemTime now) {
  const json& spec = at(pod, "spec");
  const json& status = at(pod, "status");
  const json& containers = at(spec, "containers");
  const int total = containers.is_array() ? static_cast<int>(containers.size()) : 0;
  int ready = 0;
  int64_t restarts = 0;
  std::optional<base::SystemTime> last_restart;
  const json& statuses = at(status, "containerStatuses");
  if (statuses.is_array()) {
    for (const auto& cs : statuses) {
      if (at(cs, "ready") == true) ++ready;
      restarts += at(cs, "restartCount").is_number() ? at(cs, "restartCount").get<int64_t>() : 0;
      auto finished = parseTime(s(at(at(at(cs, "lastState"), "terminated"), "finishedAt")));
      if (finished && (!last_restart || *finished > *last_restart)) last_restart = finished;
    }
  }
  std::string restarts_cell = std::to_string(restarts);
  if (restarts > 0 && last_restart) {
    restarts_cell += " (" + humanDuration(now - *last_restart) + " ago)";
  }
  std::string ip = s(at(status, "podIP"));
  std::string node = s(at(spec, "nodeName"));
  std::string nominated = s(at(status, "nominatedNodeName"));
  std::string gates = "<none>";
  const json& rg = at(spec, "readinessGates");
  if (rg.is_array() && !rg.empty()) {
    int true_gates = 0;
    for (const auto& g : rg) {
      const json& conds = at(status, "conditions");
      if (!conds.is_array()) continue;
      for (const auto& c : conds) {
        if (at(c, "type") == at(g, "conditionType") && at(c, "status") == "True") ++true_gates;
      }
    }
    gates = std::to_string(true_gates) + "/" + std::to_string(rg.size());
  }
  return {s(at(at(pod, "metadata"), "name")),
          std::to_string(ready) + "/" + std::to_string(total),
          podStatusReason(pod),
          restarts_cell,
          age(pod, now),
          ip.empty() ? "<none>" : ip,
          node.empty() ? "<none>" : node,
          nominated.empty() ? "<none>" : nominated,
          gates};
}

json nodeCells(const json& node, base::SystemTime now) {
  const json& status = at(node, "status");
  std::string ready = "Unknown";
  const json& conds = at(status, "conditions");
  if (conds.is_array()) {
    for (const auto& c : conds) {
      if (at(c, "type") == "Ready") {
        ready = at(c, "status") == "True" ? "Ready" : "NotReady";
        if (at(c, "status") == "Unknown") ready = "Unknown";
      }
    }
  }
  if (at(at(node, "spec"), "unschedulable") == true) ready += ",SchedulingDisabled";
  std::string roles;
  const json& labels = at(at(node, "metadata"), "labels");
  if (labels.is_object()) {
    for (auto it = labels.begin(); it != labels.end(); ++it) {
      std::string role;
      if (it.key().starts_with("node-role.kubernetes.io/")) {
        role = it.key().substr(24);
      } else if (it.key() == "kubernetes.io/role") {
        role = s(*it);
      }
      if (!role.empty()) roles += (roles.empty() ? "" : ",") + role;
    }
  }
  std::string internal_ip = "<none>", external_ip = "<none>";
  const json& addrs = at(status, "addresses");
  if (addrs.is_array()) {
    for (const auto& a : addrs) {
      if (at(a, "type") == "InternalIP" && internal_ip == "<none>")
        internal_ip = s(at(a, "address"));
      if (at(a, "type") == "ExternalIP" && external_ip == "<none>")
        external_ip = s(at(a, "address"));
    }
  }
  const json& info = at(status, "nodeInfo");
  auto orUnknown = [](std::string v) { return v.empty() ? std::string("<unknown>") : v; };
  return {s(at(at(node, "metadata"), "name")),
          ready,
          roles.empty() ? "<none>" : roles,
          age(node, now),
          s(at(info, "kubeletVersion")),
          internal_ip,
          external_ip,
          orUnknown(s(at(info, "osImage"))),
          orUnknown(s(at(info, "kernelVersion"))),
          orUnknown(s(at(info, "containerRuntimeVersion")))};
}

// While an init container has not succeeded: "Init:<reason>", "Init:Signal:<n>",
// "Init:ExitCode:<n>" or "Init:<done>/<total>" (kubectl's printPod).
std::optional<std::string> initContainersReason(const json& status, const json& spec) {
  const json& init_statuses = at(status, "initContainerStatuses");
  const json& init_specs = at(spec, "initContainers");
  const size_t init_total = init_specs.is_array() ? init_specs.size() : 0;
  if (!init_statuses.is_array()) return std::nullopt;
  for (size_t i = 0; i < init_statuses.size(); ++i) {
    const json& state = at(init_statuses[i], "state");
    const json& term = at(state, "terminated");
    const json& wait = at(state, "waiting");
    if (term.is_object() && at(term, "exitCode") == 0) continue;
    if (term.is_object()) {
      if (!s(at(term, "reason")).empty()) return "Init:" + s(at(term, "reason"));
      if (at(term, "signal").is_number() && at(term, "signal") != 0) {
        return "Init:Signal:" + at(term, "signal").dump();
      }
      return "Init:ExitCode:" + at(term, "exitCode").dump();
    }
    if (wait.is_object() && !s(at(wait, "reason")).empty() &&
        s(at(wait, "reason")) != "PodInitializing") {
      return "Init:" + s(at(wait, "reason"));
    }
    return "Init:" + std::to_string(i) + "/" + std::to_string(init_total);
  }
  return std::nullopt;
}

// The reason the containers give, the first one's winning (kubectl walks them backwards); a
// "Completed" pod with a ready running container is Running, or NotReady.
std::string containersReason(const json& status, std::string reason) {
  bool has_running = false;
  const json& statuses = at(status, "containerStatuses");
  if (statuses.is_array()) {
    for (size_t k = statuses.size(); k-- > 0;) {
      const json& state = at(statuses[k], "state");
      const json& term = at(state, "terminated");
      const json& wait = at(state, "waiting");
      if (wait.is_object() && !s(at(wait, "reason")).empty()) {
        reason = s(at(wait, "reason"));
      } else if (term.is_object() && !s(at(term, "reason")).empty()) {
        reason = s(at(term, "reason"));
      } else if (term.is_object()) {
        if (at(term, "signal").is_number() && at(term, "signal") != 0) {
          reason = "Signal:" + at(term, "signal").dump();
        } else {
          reason = "ExitCode:" + at(term, "exitCode").dump();
        }
      } else if (at(state, "running").is_object() && at(statuses[k], "ready") == true) {
        has_running = true;
      }
    }
  }
  if (reason == "Completed" && has_running) {
    reason = "Running";
    const json& conds = at(status, "conditions");
    if (conds.is_array()) {
      for (const auto& c : conds) {
        if (at(c, "type") == "Ready" && at(c, "status") != "True") reason = "NotReady";
      }
    }
  }
  return reason;
}

// kubectl's translateTimestampSince: "<unknown>" for a missing time.
std::string since(const json& timestamp, base::SystemTime now) {
  auto t = parseTime(s(timestamp));
  if (!t) return "<unknown>";
  return humanDuration(now - *t);
}

size_t sizeOf(const json& v) { return v.is_object() || v.is_array() ? v.size() : 0; }

// printEvent as kube-apiserver runs it (wide): LAST SEEN TYPE REASON OBJECT SUBOBJECT SOURCE
// MESSAGE FIRST SEEN COUNT NAME.
json eventCells(const json& event, base::SystemTime now) {
  std::string first_seen = since(at(event, "firstTimestamp"), now);
  if (s(at(event, "firstTimestamp")).empty()) first_seen = since(at(event, "eventTime"), now);
  std::string last_seen = since(at(event, "lastTimestamp"), now);
  if (s(at(event, "lastTimestamp")).empty()) last_seen = first_seen;
  int64_t count = at(event, "count").is_number() ? at(event, "count").get<int64_t>() : 0;
  const json& series = at(event, "series");
  if (series.is_object()) {
    last_seen = since(at(series, "lastObservedTime"), now);
    count = at(series, "count").is_number() ? at(series, "count").get<int64_t>() : 0;
  } else if (count == 0) {
    count = 1;  // a singleton event of the events.k8s.io API has no count
  }
  const json& involved = at(event, "involvedObject");
  std::string target = s(at(involved, "kind"));
  for (char& c : target) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!s(at(involved, "name")).empty()) target += "/" + s(at(involved, "name"));
  auto firstNonEmpty = [](std::string a, std::string b) { return a.empty() ? b : a; };
  const json& source = at(event, "source");
  std::string component =
      firstNonEmpty(s(at(source, "component")), s(at(event, "reportingComponent")));
  std::string instance = firstNonEmpty(s(at(source, "host")), s(at(event, "reportingInstance")));
  std::string message = s(at(event, "message"));
  const auto first = message.find_first_not_of(" \t\r\n");
  const auto last = message.find_last_not_of(" \t\r\n");
  message = first == std::string::npos ? "" : message.substr(first, last - first + 1);
  return {last_seen,
          s(at(event, "type")),
          s(at(event, "reason")),
          target,
          s(at(involved, "fieldPath")),
          instance.empty() ? component : component + ", " + instance,
          message,
          first_seen,
          count,
          s(at(at(event, "metadata"), "name"))};
}

}  // namespace

std::string podStatusReason(const json& pod) {
  const json& status = at(pod, "status");
  const json& spec = at(pod, "spec");
  std::string reason = s(at(status, "phase"));
  if (!s(at(status, "reason")).empty()) reason = s(at(status, "reason"));
  if (std::optional<std::string> init = initContainersReason(status, spec)) {
    reason = std::move(*init);
  } else {
    reason = containersReason(status, std::move(reason));
  }
  const json& meta = at(pod, "metadata");
  if (!at(meta, "deletionTimestamp").is_null() && s(at(status, "reason")) != "NodeLost") {
    reason = "Terminating";
  }
  return reason;
}

json tableColumnDefinitions(const ResourceInfo& res) {
  const char* name_desc =
      "Name must be unique within a namespace. More info: "
      "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
  const char* age_desc =
      "CreationTimestamp is a timestamp representing the server time when this object was "
      "created.";
  if (res.plural == "pods") {
    return json::array(
        {column("Name", "string", name_desc, 0, "name"),
         column("Ready", "string",
                "The aggregate readiness state of this pod for accepting traffic."),
         column("Status", "string", "The aggregate status of the containers in this pod."),
         column("Restarts", "string",
                "The number of times the containers in this pod have been restarted and when the "
                "last container in this pod has restarted."),
         column("Age", "string", age_desc),
         column("IP", "string", "podIP is the IP address allocated to the pod.", 1),
         column("Node", "string", "NodeName indicates in which node this pod is scheduled.", 1),
         column("Nominated Node", "string",
                "nominatedNodeName is set only when this pod preempts other pods on the node.", 1),
         column("Readiness Gates", "string",
                "If specified, all readiness gates will be evaluated for pod readiness.", 1)});
  }
  if (res.plural == "nodes") {
    return json::array(
        {column("Name", "string", name_desc, 0, "name"),
         column("Status", "string", "The status of the node"),
         column("Roles", "string", "The roles of the node"), column("Age", "string", age_desc),
         column("Version", "string", "Kubelet Version reported by the node."),
         column("Internal-IP", "string", "List of internal IPs that are assigned to the node.", 1),
         column("External-IP", "string", "List of external IPs that are assigned to the node.", 1),
         column("OS-Image", "string",
                "OS image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 12 "
                "(bookworm)).",
                1),
         column("Kernel-Version", "string",
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                1),
         column("Container-Runtime", "string",
                "Container Runtime Version reported by the node through runtime remote API (e.g. "
                "containerd://1.4.2).",
                1)});
  }
  // NAME, the resource's own columns, AGE: the shape of most printers.
  auto name_age = [&](std::vector<json> own) {
    json columns = json::array({column("Name", "string", name_desc, 0, "name")});
    for (auto& c : own) columns.push_back(std::move(c));
    columns.push_back(column("Age", "string", age_desc));
    return columns;
  };
  if (res.plural == "namespaces") {
    return name_age({column("Status", "string", "The status of the namespace")});
  }
  if (res.plural == "leases")
    return name_age({column("Holder", "string", "The holder of the lease")});
  if (res.plural == "configmaps") {
    return name_age({column("Data", "string",
                            "Data contains the configuration data. Each key must consist of "
                            "alphanumeric characters, '-', '_' or '.'.")});
  }
  if (res.plural == "secrets") {
    return name_age(
        {column("Type", "string", "Used to facilitate programmatic handling of secret data."),
         column("Data", "string",
                "Data contains the secret data. Each key must consist of alphanumeric characters, "
                "'-', '_' or '.'.")});
  }
  if (res.plural == "serviceaccounts") {
    return name_age({column("Secrets", "string",
                            "Secrets is a list of the secrets in the same namespace that pods "
                            "running using this ServiceAccount are allowed to use.")});
  }
  if (res.plural == "certificatesigningrequests") {
    return json::array(
        {column("Name", "string", name_desc, 0, "name"), column("Age", "string", age_desc),
         column("SignerName", "string", "Only use this signer."),
         column("Requestor", "string", "Name of the user that created the request."),
         column("RequestedDuration", "string", "The requested validity of the certificate."),
         column("Condition", "string", "Approved, Denied or Pending, and Failed and Issued.")});
  }
  if (res.plural == "events") {
    return json::array(
        {column("Last Seen", "string",
                "The time at which the most recent occurrence of this event was recorded."),
         column("Type", "string",
                "Type of this event (Normal, Warning), new types could be added in the future"),
         column("Reason", "string",
                "This should be a short, machine understandable string that gives the reason for "
                "the transition into the object's current status."),
         column("Object", "string", "The object that this event is about."),
         column("Subobject", "string",
                "If referring to a piece of an object instead of an entire object, this string "
                "should contain a valid JSON/Go field access statement.",
                1),
         column("Source", "string",
                "The component reporting this event. Should be a short machine understandable "
                "string.",
                1),
         column("Message", "string",
                "A human-readable description of the status of this operation."),
         column("First Seen", "string",
                "The time at which the event was first recorded. (Time of server receipt is in "
                "TypeMeta.)",
                1),
         column("Count", "string", "The number of times this event has occurred.", 1),
         column("Name", "string", name_desc, 1, "name")});
  }
  return name_age({});
}

// kube's printCertificateSigningRequest: NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION
// CONDITION (Denied, Approved or Pending; then Failed and Issued).
json csrCells(const json& object, base::SystemTime now) {
  const json& spec = at(object, "spec");
  bool approved = false, denied = false, failed = false;
  const json& conditions = at(at(object, "status"), "conditions");
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      const std::string type = s(at(c, "type"));
      approved = approved || type == "Approved";
      denied = denied || type == "Denied";
      failed = failed || type == "Failed";
    }
  }
  std::string condition = denied ? "Denied" : approved ? "Approved" : "Pending";
  if (failed) condition += ",Failed";
  if (!s(at(at(object, "status"), "certificate")).empty()) condition += ",Issued";
  const std::string signer = s(at(spec, "signerName"));
  const json& seconds = at(spec, "expirationSeconds");
  const std::string duration = seconds.is_number_integer()
                                   ? humanDuration(std::chrono::seconds(seconds.get<int64_t>()))
                                   : "<none>";
  return {s(at(at(object, "metadata"), "name")),
          age(object, now),
          signer.empty() ? "<none>" : signer,
          s(at(spec, "username")),
          duration,
          condition};
}

json tableCells(const ResourceInfo& res, const json& object, base::SystemTime now) {
  if (res.plural == "pods") return podCells(object, now);
  if (res.plural == "nodes") return nodeCells(object, now);
  const std::string name = s(at(at(object, "metadata"), "name"));
  if (res.plural == "namespaces") {
    return {name, s(at(at(object, "status"), "phase")), age(object, now)};
  }
  if (res.plural == "leases") {
    std::string holder = s(at(at(object, "spec"), "holderIdentity"));
    return {name, holder.empty() ? "<unset>" : holder, age(object, now)};
  }
  if (res.plural == "configmaps") {
    return {name, sizeOf(at(object, "data")) + sizeOf(at(object, "binaryData")), age(object, now)};
  }
  if (res.plural == "secrets") {
    return {name, s(at(object, "type")), sizeOf(at(object, "data")), age(object, now)};
  }
  if (res.plural == "serviceaccounts") {
    return {name, sizeOf(at(object, "secrets")), age(object, now)};
  }
  if (res.plural == "events") return eventCells(object, now);
  if (res.plural == "certificatesigningrequests") return csrCells(object, now);
  return {name, age(object, now)};
}

json tableRow(const ResourceInfo& res, const json& object, base::SystemTime now,
              IncludeObject include) {
  json row = {{"cells", tableCells(res, object, now)}};
  if (include == IncludeObject::kObject) {
    row["object"] = object;
  } else if (include == IncludeObject::kMetadata) {
    row["object"] = {{"kind", "PartialObjectMetadata"},
                     {"apiVersion", "meta.k8s.io/v1"},
                     {"metadata", at(object, "metadata")}};
  }
  return row;
}

json makeTable(const ResourceInfo& res, const std::vector<const json*>& objects,
               base::SystemTime now, IncludeObject include, json list_metadata, bool with_columns) {
  json rows = json::array();
  for (const json* obj : objects) rows.push_back(tableRow(res, *obj, now, include));
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", std::move(list_metadata)},
          {"columnDefinitions", with_columns ? tableColumnDefinitions(res) : json::array()},
          {"rows", std::move(rows)}};
}

}  // namespace nodeagent::testapiserver
