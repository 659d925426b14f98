// Bounded blocking HTTP/1.1 client connections, on Boost.Beast's parser. Every response read is
// bounded: the status line and headers in bytes (64 KiB) and in fields (100), the body in bytes
// (a limit per request, or a streaming consumer that bounds what it keeps), and in time (connect
// and TLS handshake, writing the request, the whole response head, each read of the body). A
// server that streams headers without end, or drips them, costs at most those bounds.
//
// TLS through OpenSSL: the peer is verified against the given CA PEM (only it) or the system
// roots plus an optional CA file, its certificate must match the server name (an IP address or a
// DNS name; the name is also sent as SNI unless it is an IP), client certificates are offered,
// and `insecure_skip_verify` turns verification off. OpenSSL is first touched when a TLS context
// is created, never for plain http.
//
// HttpConnection is one keep-alive connection, used by one thread at a time; cancel() may be
// called from any thread and makes the call in flight (and every later one) fail with
// Cancelled. Errors name what failed ("connect to 127.0.0.1:8080: Connection refused",
// "response headers larger than 65536 bytes"); callers add the URL or the API path.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/asio.h"
#include "base/status.h"

namespace nodeagent::api {

inline constexpr size_t kMaxResponseHeaderBytes = 64 * 1024;
inline constexpr size_t kMaxResponseHeaderFields = 100;

using HttpHeaderList = std::vector<std::pair<std::string, std::string>>;

// Where requests go. `https` selects TLS.
struct HttpEndpoint {
  bool https = false;
  std::string host;  // a name or an IP address (IPv6 without brackets)
  int port = 0;
  // "host:port" with IPv6 in brackets, for messages and the Host header.
  std::string hostPort() const;
};

struct HttpTlsOptions {
  // Trusted CAs (PEM, one or more). Empty: the system roots, plus `ca_file` when set.
  std::string ca_pem;
  std::string ca_file;
  bool insecure_skip_verify = false;
  // The name the server certificate must carry, also sent as SNI. Empty: the endpoint's host.
  std::string server_name;
  std::string client_cert_pem;  // with client_key_pem: offered to servers that ask
  std::string client_key_pem;
};

// A client TLS configuration (an SSL_CTX), shared by every connection to one endpoint.
class HttpTlsContext {
 public:
  // Parses and checks the PEM data. Errors start with `where` and name the field
  // ("certificate-authority", "client-certificate", "client-key", "ca-file").
  static base::StatusOr<std::shared_ptr<HttpTlsContext>> create(const HttpTlsOptions& options,
                                                                const std::string& where);
  ~HttpTlsContext();
  HttpTlsContext(const HttpTlsContext&) = delete;
  HttpTlsContext& operator=(const HttpTlsContext&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit HttpTlsContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct HttpClientOptions {
  std::chrono::milliseconds connect_timeout{10'000};  // TCP connect and TLS handshake, each
  std::chrono::milliseconds write_timeout{30'000};    // writing the whole request
  std::chrono::milliseconds head_timeout{30'000};     // the whole status line and headers
  std::chrono::milliseconds read_timeout{30'000};     // each read of the body (idle time)
  size_t max_header_bytes = kMaxResponseHeaderBytes;
  size_t max_header_fields = kMaxResponseHeaderFields;
};

struct HttpRequest {
  std::string method = "GET";
  std::string target = "/";  // path and query, sent as given
  HttpHeaderList headers;    // Host and Content-Length are added
  std::string body;
  // Largest body roundTrip() reads; more is ResourceExhausted.
  size_t max_body_bytes = 10 * 1024 * 1024;
  // Overrides the options' read_timeout (a watch may be silent for minutes).
  std::optional<std::chrono::milliseconds> read_timeout;
};

struct HttpResponse {
  int status = 0;
  HttpHeaderList headers;
  std::string body;
  // The first value of a header (case-insensitive name); "" when absent.
  std::string header(std::string_view name) const;
};

// How stream() hands a body over as it arrives.
struct HttpBodyStream {
  // The status and headers (body empty); false stops before the body is read.
  std::function<bool(const HttpResponse& head)> on_head;
  // Each piece of the body as it arrives (at most 64 KiB); false stops reading.
  std::function<bool(std::string_view chunk)> on_chunk;
  // nullopt: no limit on the whole body; the consumer bounds what it keeps.
  std::optional<size_t> max_body_bytes;
};

class HttpConnection {
 public:
  // `tls` is required for an https endpoint and ignored otherwise. Connects lazily. For the
  // blocking calls (roundTrip, stream), on the caller's thread.
  HttpConnection(HttpEndpoint endpoint, std::shared_ptr<HttpTlsContext> tls,
                 HttpClientOptions options);
  // For streamAsync(): the connection's I/O runs on a strand of `executor`, no thread of its own.
  HttpConnection(asio::any_io_executor executor, HttpEndpoint endpoint,
                 std::shared_ptr<HttpTlsContext> tls, HttpClientOptions options);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends the request and reads the whole response (any status). Reconnects when the kept
  // connection was closed by the server. Transport failures are Unavailable, timeouts
  // DeadlineExceeded, limits ResourceExhausted, cancel() Cancelled.
  base::StatusOr<HttpResponse> roundTrip(const HttpRequest& request);

  // Like roundTrip() but the body goes to `stream` as it arrives. OK when the body ended or a
  // callback stopped it (the connection is then closed).
  base::Status stream(const HttpRequest& request, const HttpBodyStream& stream);

  // stream() without blocking, for a connection made with an executor: the callbacks and then
  // `done` run on the connection's strand. `request` and `stream` must live until `done`; the
  // connection itself is kept alive until then even when its owner drops it (cancel() first).
  void streamAsync(const HttpRequest& request, const HttpBodyStream& stream,
                   std::function<void(base::Status)> done);

  // Any thread: aborts the call in flight; this and later calls fail with Cancelled.
  void cancel();
  // Any thread: closes the connection under the call in flight, which fails with Unavailable
  // naming `reason` (a caller retries as after a dropped connection; the connection is not
  // reused).
  void close(std::string reason);

  // Whether the last exchange left the connection open for another request.
  // Not after cancel(). Owner thread.
  bool reusable();

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace nodeagent::api
