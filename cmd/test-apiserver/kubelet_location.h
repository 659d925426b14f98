// Where the test apiserver sends a request for a kubelet subresource, as kube-apiserver computes
// it (pkg/registry/core/pod/strategy.go LogLocation, ExecLocation, AttachLocation,
// PortForwardLocation; pkg/registry/core/node/strategy.go ResourceLocation): the node's address
// from its status.addresses in --kubelet-preferred-address-types order, its kubelet port from
// status.daemonEndpoints, and the kubelet path and query built from the request's options. Pure
// functions of the objects and the query; errors carry kube-apiserver's messages (InvalidArgument
// is a 400 BadRequest, FailedPrecondition a 422 Invalid).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

// kube-apiserver's kubelet port when a node reports none.
inline constexpr int kDefaultKubeletPort = 10250;

// The query of a request as received: decoded pairs in the client's order.
using QueryParams = std::vector<std::pair<std::string, std::string>>;

// InternalIP first, then Hostname, InternalDNS, ExternalDNS, ExternalIP.
std::vector<std::string> defaultPreferredAddressTypes();
// A comma-separated --kubelet-preferred-address-types; InvalidArgument naming an unknown type.
base::StatusOr<std::vector<std::string>> parsePreferredAddressTypes(const std::string& csv);

// The first status.addresses entry of the first type in `types` that has one (Hostname falls
// back to the kubernetes.io/hostname label); NotFound listing the known addresses otherwise.
base::StatusOr<std::string> preferredNodeAddress(const nlohmann::json& node,
                                                 const std::vector<std::string>& types);
// status.daemonEndpoints.kubeletEndpoint.Port, kDefaultKubeletPort when absent or not positive.
int kubeletPort(const nlohmann::json& node);

// The container a request means: the one named (which must exist, init and ephemeral containers
// included), else the pod's only container; InvalidArgument listing the names otherwise.
base::StatusOr<std::string> podContainer(const nlohmann::json& pod, const std::string& requested);

// Go's url.Values.Encode: keys sorted, each key's values in order, QueryEscape'd.
std::string encodeQuery(QueryParams params);

// "/containerLogs/<ns>/<pod>/<container>?..." for pods/log; "" when the pod has no node (kube-
// apiserver then answers an empty log).
base::StatusOr<std::string> podLogPath(const nlohmann::json& pod, const QueryParams& query);
// "/exec/..." or "/attach/..." (`kind` "exec" or "attach") with input/output/error/tty and the
// commands, as kube-apiserver's streamParams; InvalidArgument when the pod has no node.
base::StatusOr<std::string> podStreamPath(const std::string& kind, const nlohmann::json& pod,
                                          const QueryParams& query);
// "/portForward/<ns>/<pod>[?port=...]".
base::StatusOr<std::string> podPortForwardPath(const nlohmann::json& pod, const QueryParams& query);

// A nodes/<id>/proxy target: `id` is NAME, NAME:PORT or SCHEME:NAME:PORT.
struct NodeProxyId {
  std::string name;
  std::string scheme;
  std::string port;
};
base::StatusOr<NodeProxyId> parseNodeProxyId(const std::string& id);

// The kubelet path for nodes/<name>/proxy<raw_rest>: cleaned like Go's path.Join (".", ".."
// resolved, never above /), a trailing slash kept, and the raw query appended as it came.
std::string nodeProxyPath(const std::string& raw_rest, const std::string& raw_query);

// A request's headers as received, in order.
using HeaderList = std::vector<std::pair<std::string, std::string>>;

// httpstream.IsUpgradeRequest: a Connection header that names "upgrade" (any case).
bool isUpgradeRequest(const HeaderList& headers);

// The request line and headers the kubelet gets, through the empty line: the client's headers
// without Host, Authorization (the apiserver authenticates with its client certificate),
// Content-Length, Transfer-Encoding and hop-by-hop headers, except that an upgrade keeps
// Connection and Upgrade; a non-upgrade request asks for Connection: close (its answer ends the
// tunnel). X-Forwarded-For gains the client's address; Content-Length is the body's size.
std::string kubeletRequestHead(const std::string& method, const std::string& path_and_query,
                               const std::string& host_port, const HeaderList& headers,
                               size_t body_size, const std::string& client_addr);

}  // namespace nodeagent::testapiserver
