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
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::agent {

struct HttpRequest {
  std::string method;                                        // as received: "GET"
  std::string target;                                        // "/pods?verbose"
  std::string path;                                          // "/pods"
  std::string query;                                         // "verbose" (without the '?')
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as received
  std::string body;
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
};

class HttpServer {
 public:
  HttpServer(asio::any_io_executor executor, base::Clock& clock, HttpServerOptions options,
             HttpHandler handler);
  // Stops the server.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds exclusively and starts accepting on the executor. An address:port that cannot be
  // bound (in use, no permission, bad address) is an unavailable error naming it and why.
  // Call once.
  base::Status start();
  // Stops accepting, closes every connection and waits for handlers that are running; no
  // handler runs once it returns. Any thread, but never from a handler. Idempotent.
  void stop();
  // The bound port (the chosen one when options.port was 0), 0 before start().
  int port() const;
  // Open connections (for tests and metrics), and those of them waiting for a request.
  size_t connectionCount() const;
  size_t idleConnectionCount() const;
  // The connection cap in force (options.max_connections, or the one derived from the
  // descriptor limit), once started.
  size_t maxConnections() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace nodeagent::agent
