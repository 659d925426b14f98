// kubelet's proxyStream for a streaming runtime (CRI Exec, Attach, PortForward): the runtime
// answers a URL on its own streaming server, and the kubelet API hands the client's connection
// over to it. The client's request (an upgrade to SPDY/3.1 or a WebSocket, with its protocol
// headers) is sent on to the URL as it came, less its credentials; from then on the bytes are
// copied both ways until either side ends, so every protocol version the runtime speaks reaches
// the client unchanged and the runtime answers the upgrade itself.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "agent/server/http_server.h"
#include "base/asio.h"
#include "base/status.h"

namespace nodeagent::agent {

// An http:// URL split into host, port and target (path and query). InvalidArgument for another
// scheme (the runtime's streaming server over TLS is not supported) or a malformed URL.
struct StreamUrl {
  std::string host;
  std::string port;
  std::string target;
};
base::StatusOr<StreamUrl> parseStreamUrl(std::string_view url);

// The request as it is sent to the runtime: `target` instead of the client's, Host set to the
// runtime's, and the client's headers otherwise, except Authorization and the proxy-only ones
// (Host, Proxy-Authorization, Content-Length, Transfer-Encoding: the request has no body).
std::string proxiedRequestHead(const HttpRequest& request, const StreamUrl& url);

// Connects to `url` (10 s at most), forwards the request and copies bytes both ways until
// either side closes. A URL that cannot be reached is answered with a 502 naming it. On the
// call's strand.
asio::awaitable<void> proxyStream(std::shared_ptr<HttpCall> call, std::string url);

}  // namespace nodeagent::agent
