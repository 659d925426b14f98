// A small asynchronous HTTP/1.1 server for the ports the agent serves (read-only, healthz), run
// on the agent's io_context: no thread of its own and none per connection; each connection runs
// on its own strand. Every request is bounded (header bytes and lines, body size, and the time
// from a request's first byte, or from the accept, to its end), an idle keep-alive connection
// times out, a response must be written within a deadline, and past a connection cap the
// oldest idle connections are dropped first, so slow or idle peers cannot starve the
// endpoints. The bind is exclusive (SO_REUSEADDR, never SO_REUSEPORT): a port already in use is
// an error naming it. Handlers see a request and return a response, nothing of the server.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::agent {

// A client certificate the TLS handshake verified against the server's client CA.
struct TlsPeer {
  std::string common_name;
  std::vector<std::string> organizations;
};

struct HttpRequest {
  std::string method;                                        // as received: "GET"
  std::string target;                                        // "/pods?verbose"
  std::string path;                                          // "/pods"
  std::string query;                                         // "verbose" (without the '?')
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as received
  std::string body;
  std::optional<TlsPeer> peer;  // HTTPS with a verified client certificate
  // HTTPS: the client presented a certificate that did not verify (another CA, expired, not for
  // client authentication). kubelet's authenticator refuses such a request outright.
  bool peer_rejected = false;

  // The first header named `name` (case-insensitive), or "".
  std::string_view header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain";
  std::string body;
  // When set, the body is these pieces in order instead of `body`, written as they are (never
  // copied into one buffer); the pointer must keep what they point into alive (an aliasing
  // shared_ptr to the owner does).
  std::shared_ptr<const std::vector<std::string_view>> body_pieces;
};

// Runs on the connection's strand, on any of the io_context's threads, concurrently with the
// requests of other connections: it must be thread-safe and must not block.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// The two-way byte channel of an upgraded request: a WebSocket (whole messages) or the raw
// connection after a 101 (chunks of the byte stream as they arrive, HttpCall::acceptUpgrade).
// On the connection's strand; one read() and one write() may be outstanding at the same time.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // The next message, or the next bytes (never empty for a raw stream); nullopt once the peer
  // closed or the connection failed.
  virtual asio::awaitable<std::optional<std::string>> read() = 0;
  // Sends `data` (one binary message on a WebSocket); false when the connection failed (or took
  // longer than the server's write timeout).
  virtual asio::awaitable<bool> write(std::string_view data) = 0;
  // Ends the connection (a WebSocket sends its close frame, normal closure, first).
  virtual asio::awaitable<void> close() = 0;
};

// A WebSocket a request was upgraded to (HttpCall::acceptWebSocket): whole messages in and out.
class WebSocket : public ByteStream {
 public:
  // The subprotocol agreed in the handshake.
  virtual const std::string& protocol() const = 0;
};

// One request answered by a coroutine (HttpCoroutineHandler), with a whole response, a streamed
// body or an upgrade to WebSocket. Only on the connection's strand (where the handler runs).
// Writes are each bounded by the server's write timeout; between writes nothing is (a followed
// log may be quiet for hours), but a peer that closes its end is noticed (closed()).
class HttpCall {
 public:
  virtual ~HttpCall() = default;
  virtual const HttpRequest& request() const = 0;
  // Answers the request; the connection then serves the next one (keep-alive).
  virtual asio::awaitable<void> respond(HttpResponse response) = 0;
  // Starts a chunked body with `status`; false when the connection failed.
  virtual asio::awaitable<bool> beginStream(int status, std::string content_type) = 0;
  // Writes one piece of the body (an empty piece is skipped); false when the connection failed.
  virtual asio::awaitable<bool> writeStream(std::string_view data) = 0;
  // True when the request asks for a WebSocket upgrade.
  virtual bool isWebSocketRequest() const = 0;
  // Completes the WebSocket handshake with the first subprotocol the client offers that is in
  // `protocols` (none offered or none in common: the handshake uses none, as Kubernetes'
  // wsstream does, and protocol() is ""); null when the handshake failed.
  virtual asio::awaitable<std::unique_ptr<WebSocket>> acceptWebSocket(
      std::vector<std::string> protocols) = 0;
  // The protocol the request asks to switch to (its Upgrade header, with Connection: Upgrade),
  // e.g. "SPDY/3.1"; "" when it asks for none.
  virtual std::string upgradeProtocol() const = 0;
  // Answers 101 Switching Protocols with `headers` and hands over the connection's bytes (those
  // the client sent after the request first); null when the 101 could not be written. The
  // call's write timeout bounds each write; reads have no deadline (the caller keeps its own).
  virtual asio::awaitable<std::unique_ptr<ByteStream>> acceptUpgrade(
      std::vector<std::pair<std::string, std::string>> headers) = 0;
  // Hands over the connection's bytes without answering (the request's own bytes were read; the
  // client's later bytes come first): the caller speaks HTTP from here, e.g. a proxy whose
  // backend answers the upgrade. Null when the call was already answered. Writes are bounded as
  // acceptUpgrade's.
  virtual asio::awaitable<std::unique_ptr<ByteStream>> takeOver() = 0;
  // The peer closed its end or the connection failed.
  virtual bool closed() const = 0;
};
using HttpCoroutineHandler = std::function<asio::awaitable<void>(std::shared_ptr<HttpCall>)>;

// HTTPS: the server's certificate (the file may hold its chain) and key, PEM. With a client CA,
// clients are asked for a certificate; one that verifies against the CA (and allows client
// authentication) becomes HttpRequest::peer. Handshakes failing or without a certificate are
// not refused: the handler decides (kubelet's x509 authenticator).
struct HttpTlsServerOptions {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

struct HttpServerOptions {
  std::string name = "http";  // names the port in logs and errors ("read-only", "healthz")
  std::string address = "127.0.0.1";
  int port = 0;                         // 0 picks a free port
  size_t max_header_bytes = 64 * 1024;  // request line and header fields; more is a 431
  size_t max_header_fields = 100;       // more is a 431
  size_t max_body_bytes = 64 * 1024;    // more is a 413
  // From the accept (for the first request) or a request's first byte to its last.
  base::Duration header_timeout = std::chrono::seconds(5);
  // Between requests on a keep-alive connection.
  base::Duration idle_timeout = std::chrono::seconds(60);
  // To write one response.
  base::Duration write_timeout = std::chrono::seconds(30);
  // Open connections at most; accepting one more drops the oldest idle one (else the oldest
  // still sending its request; when every connection is busy writing, the new one is closed).
  // 0: 4096, or a quarter of the process's descriptor limit (RLIMIT_NOFILE) when that is less,
  // so that connections to one port never leave the agent without descriptors.
  size_t max_connections = 0;
  // Set: HTTPS only.
  std::optional<HttpTlsServerOptions> tls;
};

class HttpServer {
 public:
  HttpServer(asio::any_io_executor executor, base::Clock& clock, HttpServerOptions options,
             HttpHandler handler);
  // Each request is answered by `handler`, a coroutine spawned on the connection's strand.
  HttpServer(asio::any_io_executor executor, base::Clock& clock, HttpServerOptions options,
             HttpCoroutineHandler handler);
  // Stops the server.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds exclusively and starts accepting on the executor. An address:port that cannot be
  // bound (in use, no permission, bad address) is an unavailable error naming it and why; a
  // certificate, key or client CA that cannot be loaded is an error naming the file. Call once.
  base::Status start();
  // Stops accepting, closes every connection and waits for (plain) handlers that are running;
  // no plain handler runs once it returns. Coroutine handlers end once their reads and writes
  // fail on the closed connection (activeCalls() counts them down); the io_context must run
  // for that. Any thread, but never from a handler. Idempotent.
  void stop();
  // The bound port (the chosen one when options.port was 0), 0 before start().
  int port() const;
  // Open connections (for tests and metrics), and those of them waiting for a request.
  size_t connectionCount() const;
  size_t idleConnectionCount() const;
  // Coroutine handlers still running.
  size_t activeCalls() const;
  // The connection cap in force (options.max_connections, or the one derived from the
  // descriptor limit), once started.
  size_t maxConnections() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace nodeagent::agent
