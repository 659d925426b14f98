// kubelet's port forwarding (/portForward/{namespace}/{pod}[/{uid}]) over SPDY/3.1: either a
// plain upgrade (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version: portforward.k8s.io`) or a
// WebSocket with subprotocol `SPDY/3.1+portforward.k8s.io` carrying the same SPDY byte stream
// (what kubectl 1.30+ tries first). As kubelet's httpstream forwarder: the client opens a pair
// of streams per forwarded connection, `streamType: error` and `streamType: data`, both with
// `port` and `requestID` headers; the data stream is connected to 127.0.0.1:<port> and pumped
// both ways, a failure is written to the error stream
// ("error forwarding port P to pod <uid>, uid : <why>").
// A WebSocket without that subprotocol gets kubelet's own channel protocol instead
// (kubelet_port_forward_websocket.h): the ports in the query, a pair of channels each.
//
// Security: the process runtime's containers share the host's network, so the port is any port
// on the host's loopback, including the agent's own and other services bound to 127.0.0.1.
// kubelet authorizes /portForward as the `nodes/proxy` subresource: only users allowed that
// (cluster admins) can reach it.
#pragma once

#include <memory>
#include <string>

#include "agent/server/http_server.h"
#include "agent/server/pod_port.h"
#include "agent/server/spdy_session.h"
#include "base/clock.h"

namespace nodeagent::agent {

// Serves a port-forward request for the pod `pod` (already found and authorized): upgrades
// the call, runs the SPDY session and its forwards until the client goes away, closing every
// connection it made. A request that asks for neither upgrade, or a WebSocket whose ports or
// subprotocol are not served, is answered 400. On the call's strand.
asio::awaitable<void> servePortForward(std::shared_ptr<HttpCall> call, base::Clock& clock,
                                       PodPortTarget pod, SpdyLimits limits = {});

}  // namespace nodeagent::agent
