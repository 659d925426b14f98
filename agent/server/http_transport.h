// HttpServer's byte transport, private to agent/server/: a connection's TCP socket, or a TLS
// stream over it, and the server's TLS context. Only the server's .cpp files include it (Asio's
// SSL headers are heavy).
#pragma once

#include <boost/asio/ssl.hpp>

#include <memory>
#include <optional>
#include <utility>

#include "agent/server/http_server.h"
#include "base/status.h"

namespace nodeagent::agent {

struct TlsTransport {
  TlsTransport(asio::ip::tcp::socket& socket, asio::ssl::context& context)
      : stream(socket, context) {}
  asio::ssl::stream<asio::ip::tcp::socket&> stream;
};

// Calls `op` with the TLS stream when there is one, else with the socket.
template <typename Op>
decltype(auto) withStream(asio::ip::tcp::socket& socket, TlsTransport* tls, Op&& op) {
  if (tls != nullptr) return op(tls->stream);
  return op(socket);
}

// The server's TLS context from `options` (certificate chain, key, client CA): errors name the
// file.
base::StatusOr<std::unique_ptr<asio::ssl::context>> makeTlsServerContext(
    const HttpTlsServerOptions& options);

// The client certificate the handshake verified against the client CA, when it allows client
// authentication.
std::optional<TlsPeer> verifiedPeer(TlsTransport& tls);
// The client presented a certificate (verified or not).
bool presentedCertificate(TlsTransport& tls);

// Makes the WebSocket of an upgraded request (agent/server/websocket.cpp): the handshake with
// the request, the subprotocol chosen from `protocols`. `keep` holds the connection (which owns
// the socket and TLS stream) while the WebSocket lives; null when the handshake failed.
asio::awaitable<std::unique_ptr<WebSocket>> acceptWebSocket(std::shared_ptr<void> keep,
                                                            asio::ip::tcp::socket& socket,
                                                            TlsTransport* tls,
                                                            const HttpRequest& request,
                                                            std::vector<std::string> protocols);

// The subprotocol a WebSocket handshake settles on: the first the client offers (its
// Sec-WebSocket-Protocol values in order) that is in `supported`, "" when none.
std::string chooseSubprotocol(std::string_view offered, const std::vector<std::string>& supported);

}  // namespace nodeagent::agent
