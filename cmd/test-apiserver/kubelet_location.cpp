#include "cmd/test-apiserver/kubelet_location.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

const std::vector<std::string>& knownAddressTypes() {
  static const std::vector<std::string> kTypes = {"Hostname", "InternalIP", "InternalDNS",
                                                  "ExternalIP", "ExternalDNS"};
  return kTypes;
}

// The container names of one list of the pod's spec ("containers", "initContainers"...).
std::vector<std::string> containerNames(const json& pod, const char* list) {
  std::vector<std::string> names;
  const json& spec = pod.contains("spec") ? pod["spec"] : json();
  if (!spec.is_object() || !spec.contains(list) || !spec[list].is_array()) return names;
  for (const json& c : spec[list]) names.push_back(stringAt(c, "name"));
  return names;
}

std::string bracketed(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? " " : "") + names[i];
  return out + "]";
}

// Go's strconv.ParseBool.
base::StatusOr<bool> parseBool(const std::string& key, const std::string& v) {
  if (v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True") return true;
  if (v == "0" || v == "f" || v == "F" || v == "false" || v == "FALSE" || v == "False") {
    return false;
  }
  return base::invalidArgumentError(key + ": invalid boolean value \"" + v + "\"");
}

base::StatusOr<int64_t> parseInt(const std::string& key, const std::string& v) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
    return base::invalidArgumentError(key + ": invalid integer value \"" + v + "\"");
  }
  return n;
}

// The last value of `key` (Go's conversion of a single-valued field takes the first; a repeated
// flag is rare enough that either is fine), nullptr when absent.
const std::string* lastValue(const QueryParams& query, const std::string& key) {
  const std::string* found = nullptr;
  for (const auto& [k, v] : query) {
    if (k == key) found = &v;
  }
  return found;
}

base::StatusOr<bool> flag(const QueryParams& query, const std::string& key) {
  const std::string* v = lastValue(query, key);
  return v ? parseBool(key, *v) : base::StatusOr<bool>(false);
}

std::string podName(const json& pod) { return stringAt(pod["metadata"], "name"); }
std::string podNamespace(const json& pod) { return stringAt(pod["metadata"], "namespace"); }
std::string podNode(const json& pod) { return stringAt(pod["spec"], "nodeName"); }

// validation.ValidatePodLogOptions, 422 PodLogOptions "<pod>" is invalid.
base::Status invalidLogOption(const json& pod, const std::string& what) {
  return base::failedPreconditionError("PodLogOptions \"" + podName(pod) +
                                       "\" is invalid: " + what);
}

// One integer log option (tailLines, sinceSeconds, limitBytes) checked against its minimum.
base::Status addLogInt(const json& pod, const QueryParams& query, const std::string& key,
                       int64_t min, QueryParams& out) {
  const std::string* v = lastValue(query, key);
  if (!v) return base::okStatus();
  ASSIGN_OR_RETURN(const int64_t n, parseInt(key, *v));
  if (n < min) {
    return invalidLogOption(
        pod, key + ": Invalid value: " + std::to_string(n) +
                 (min == 0 ? ": must be greater than or equal to 0" : ": must be greater than 0"));
  }
  out.emplace_back(key, std::to_string(n));
  return base::okStatus();
}

base::StatusOr<QueryParams> logParams(const json& pod, const QueryParams& query) {
  QueryParams out;
  for (const char* key : {"follow", "previous", "timestamps"}) {
    ASSIGN_OR_RETURN(const bool set, flag(query, key));
    if (set) out.emplace_back(key, "true");
  }
  RETURN_IF_ERROR(addLogInt(pod, query, "sinceSeconds", 1, out));
  if (const std::string* since = lastValue(query, "sinceTime")) {
    if (lastValue(query, "sinceSeconds")) {
      return invalidLogOption(
          pod, ": Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified");
    }
    auto t = parseTime(*since);
    if (!t) return base::invalidArgumentError("sinceTime: invalid time \"" + *since + "\"");
    out.emplace_back("sinceTime", formatTime(*t));
  }
  RETURN_IF_ERROR(addLogInt(pod, query, "tailLines", 0, out));
  RETURN_IF_ERROR(addLogInt(pod, query, "limitBytes", 1, out));
  return out;
}

std::string containerParam(const QueryParams& query) {
  const std::string* v = lastValue(query, "container");
  return v ? *v : "";
}

}  // namespace

std::vector<std::string> defaultPreferredAddressTypes() {
  return {"InternalIP", "Hostname", "InternalDNS", "ExternalDNS", "ExternalIP"};
}

base::StatusOr<std::vector<std::string>> parsePreferredAddressTypes(const std::string& csv) {
  std::vector<std::string> types;
  size_t start = 0;
  while (start <= csv.size()) {
    const size_t comma = std::min(csv.find(',', start), csv.size());
    const std::string type = csv.substr(start, comma - start);
    const auto& known = knownAddressTypes();
    if (std::find(known.begin(), known.end(), type) == known.end()) {
      return base::invalidArgumentError("--kubelet-preferred-address-types: unknown type \"" +
                                        type + "\"");
    }
    types.push_back(type);
    start = comma + 1;
  }
  return types;
}

base::StatusOr<std::string> preferredNodeAddress(const json& node,
                                                 const std::vector<std::string>& types) {
  const json* addresses = nullptr;
  if (node.contains("status") && node["status"].is_object() &&
      node["status"].contains("addresses") && node["status"]["addresses"].is_array()) {
    addresses = &node["status"]["addresses"];
  }
  for (const std::string& type : types) {
    for (const json& a : addresses ? *addresses : json::array()) {
      if (stringAt(a, "type") == type && !stringAt(a, "address").empty()) {
        return stringAt(a, "address");
      }
    }
    if (type == "Hostname" && node.contains("metadata") && node["metadata"].contains("labels")) {
      const std::string label = stringAt(node["metadata"]["labels"], "kubernetes.io/hostname");
      if (!label.empty()) return label;
    }
  }
  std::string known;
  for (const json& a : addresses ? *addresses : json::array()) {
    known += (known.empty() ? "" : " ") + std::string("{") + stringAt(a, "type") + " " +
             stringAt(a, "address") + "}";
  }
  return base::notFoundError("no preferred addresses found; known addresses: [" + known + "]");
}

int kubeletPort(const json& node) {
  const json::json_pointer ptr("/status/daemonEndpoints/kubeletEndpoint/Port");
  if (!node.contains(ptr) || !node[ptr].is_number_integer()) return kDefaultKubeletPort;
  const int64_t port = node[ptr].get<int64_t>();
  return port > 0 && port <= 65535 ? static_cast<int>(port) : kDefaultKubeletPort;
}

base::StatusOr<std::string> podContainer(const json& pod, const std::string& requested) {
  const std::vector<std::string> containers = containerNames(pod, "containers");
  const std::vector<std::string> inits = containerNames(pod, "initContainers");
  const std::vector<std::string> ephemeral = containerNames(pod, "ephemeralContainers");
  const std::string name = podName(pod);
  if (!requested.empty()) {
    for (const auto* list : {&containers, &inits, &ephemeral}) {
      if (std::find(list->begin(), list->end(), requested) != list->end()) return requested;
    }
    return base::invalidArgumentError("container " + requested + " is not valid for pod " + name);
  }
  if (containers.size() == 1) return containers.front();
  if (containers.empty()) {
    return base::invalidArgumentError("a container name must be specified for pod " + name);
  }
  std::string message = "a container name must be specified for pod " + name +
                        ", choose one of: " + bracketed(containers);
  if (!inits.empty()) message += " or one of the init containers: " + bracketed(inits);
  return base::invalidArgumentError(message);
}

std::string encodeQuery(QueryParams params) {
  std::stable_sort(params.begin(), params.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  static const char kHex[] = "0123456789ABCDEF";
  auto escape = [](const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
        out += static_cast<char>(c);
      } else if (c == ' ') {
        out += '+';
      } else {
        out += '%';
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
    return out;
  };
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    out += escape(k) + "=" + escape(v);
  }
  return out;
}

base::StatusOr<std::string> podLogPath(const json& pod, const QueryParams& query) {
  ASSIGN_OR_RETURN(const std::string container, podContainer(pod, containerParam(query)));
  ASSIGN_OR_RETURN(const QueryParams params, logParams(pod, query));
  if (podNode(pod).empty()) return std::string();
  std::string path = "/containerLogs/" + podNamespace(pod) + "/" + podName(pod) + "/" + container;
  const std::string q = encodeQuery(params);
  return q.empty() ? path : path + "?" + q;
}

base::StatusOr<std::string> podStreamPath(const std::string& kind, const json& pod,
                                          const QueryParams& query) {
  ASSIGN_OR_RETURN(const std::string container, podContainer(pod, containerParam(query)));
  QueryParams params;
  for (const auto& [key, param] : {std::pair{"stdin", "input"}, std::pair{"stdout", "output"},
                                   std::pair{"stderr", "error"}, std::pair{"tty", "tty"}}) {
    ASSIGN_OR_RETURN(const bool set, flag(query, key));
    if (set) params.emplace_back(param, "1");
  }
  if (kind == "exec") {
    for (const auto& [k, v] : query) {
      if (k == "command") params.emplace_back("command", v);
    }
  }
  if (podNode(pod).empty()) {
    return base::invalidArgumentError("pod " + podName(pod) + " does not have a host assigned");
  }
  std::string path = "/" + kind + "/" + podNamespace(pod) + "/" + podName(pod) + "/" + container;
  const std::string q = encodeQuery(params);
  return q.empty() ? path : path + "?" + q;
}

base::StatusOr<std::string> podPortForwardPath(const json& pod, const QueryParams& query) {
  std::string ports;
  for (const auto& [k, v] : query) {
    if (k != "ports") continue;
    ASSIGN_OR_RETURN(const int64_t port, parseInt("ports", v));
    ports += (ports.empty() ? "" : ",") + std::to_string(port);
  }
  if (podNode(pod).empty()) {
    return base::invalidArgumentError("pod " + podName(pod) + " does not have a host assigned");
  }
  std::string path = "/portForward/" + podNamespace(pod) + "/" + podName(pod);
  return ports.empty() ? path : path + "?" + encodeQuery({{"port", ports}});
}

base::StatusOr<NodeProxyId> parseNodeProxyId(const std::string& id) {
  const std::vector<std::string> parts = splitString(id, ':');
  NodeProxyId out;
  if (parts.size() == 1) {
    out.name = parts[0];
  } else if (parts.size() == 2) {
    out = {parts[0], "", parts[1]};
  } else if (parts.size() == 3 && (parts[0].empty() || parts[0] == "http" || parts[0] == "https")) {
    out = {parts[1], parts[0], parts[2]};
  } else {
    return base::invalidArgumentError("invalid node request \"" + id + "\"");
  }
  if (out.name.empty() || (parts.size() > 1 && !parseInt("port", out.port).ok())) {
    return base::invalidArgumentError("invalid node request \"" + id + "\"");
  }
  return out;
}

std::string nodeProxyPath(const std::string& raw_rest, const std::string& raw_query) {
  std::vector<std::string> segs;
  size_t start = 0;
  while (start <= raw_rest.size()) {
    const size_t slash = std::min(raw_rest.find('/', start), raw_rest.size());
    const std::string seg = raw_rest.substr(start, slash - start);
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segs.push_back(seg);
    }
    start = slash + 1;
  }
  std::string path;
  for (const auto& s : segs) path += "/" + s;
  if (path.empty() || (raw_rest.ends_with('/') && !segs.empty())) path += "/";
  return raw_query.empty() ? path : path + "?" + raw_query;
}

bool isUpgradeRequest(const HeaderList& headers) {
  for (const auto& [k, v] : headers) {
    if (asciiLower(k) == "connection" && asciiLower(v).find("upgrade") != std::string::npos)
      return true;
  }
  return false;
}

std::string kubeletRequestHead(const std::string& method, const std::string& path_and_query,
                               const std::string& host_port, const HeaderList& headers,
                               size_t body_size, const std::string& client_addr) {
  // httplib adds the connection's addresses as pseudo headers.
  static const std::vector<std::string> kDropped = {"host",
                                                    "authorization",
                                                    "content-length",
                                                    "transfer-encoding",
                                                    "keep-alive",
                                                    "te",
                                                    "trailer",
                                                    "proxy-connection",
                                                    "proxy-authorization",
                                                    "proxy-authenticate",
                                                    "remote_addr",
                                                    "remote_port",
                                                    "local_addr",
                                                    "local_port"};
  const bool upgrade = isUpgradeRequest(headers);
  std::string forwarded;
  std::string head = method + " " + path_and_query + " HTTP/1.1\r\nHost: " + host_port + "\r\n";
  for (const auto& [k, v] : headers) {
    const std::string name = asciiLower(k);
    if (std::find(kDropped.begin(), kDropped.end(), name) != kDropped.end()) continue;
    if (!upgrade && (name == "connection" || name == "upgrade")) continue;
    if (name == "x-forwarded-for") {
      forwarded += (forwarded.empty() ? "" : ", ") + v;
      continue;
    }
    head += k + ": " + v + "\r\n";
  }
  forwarded += (forwarded.empty() ? "" : ", ") + client_addr;
  head += "X-Forwarded-For: " + forwarded + "\r\n";
  if (!upgrade) head += "Connection: close\r\n";
  if (body_size > 0 || method == "POST" || method == "PUT" || method == "PATCH") {
    head += "Content-Length: " + std::to_string(body_size) + "\r\n";
  }
  return head + "\r\n";
}

}  // namespace nodeagent::testapiserver
