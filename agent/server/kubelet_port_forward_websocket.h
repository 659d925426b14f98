// kubelet's own port-forward protocol over a WebSocket (its portforward/websocket.go), what a
// client without SPDY speaks: /portForward/{namespace}/{pod}?port=8080,9090 (the `port` query
// parameter, repeated or comma-separated) with subprotocol v4.channel.k8s.io, or none. Each
// binary message is a channel byte and data; port i (in the query's order) has channel 2i for
// its data (both ways) and 2i+1 for its errors (server to client). The server's first message
// on each of them is the port, 2 bytes little-endian. One connection per port is made when the
// WebSocket opens; a port that cannot be reached gets kubelet's error message on its error
// channel. A port's forward ends when the pod closes its end; the WebSocket is closed when every
// port's forward ended, and every connection when the client goes away.
//
// Not served: the base64 variant (v4.base64.channel.k8s.io), which needs text messages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/server/http_server.h"
#include "agent/server/pod_port.h"

namespace nodeagent::agent {

// The subprotocol of the channel protocol.
inline constexpr std::string_view kPortForwardChannelProtocol = "v4.channel.k8s.io";

// kubelet's NewV4Options: the ports the query asks for; an error names what is wrong (none, one
// that is no port, more than the channel numbers allow).
base::StatusOr<std::vector<uint16_t>> webSocketForwardPorts(const HttpRequest& request);

// Upgrades the call to a WebSocket and forwards `ports` (from webSocketForwardPorts) until every
// forward ended or the client went away. On the call's strand.
asio::awaitable<void> serveWebSocketPortForward(std::shared_ptr<HttpCall> call, PodPortTarget pod,
                                                std::vector<uint16_t> ports);

}  // namespace nodeagent::agent
