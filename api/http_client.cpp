#include "api/http_client.h"

#include <poll.h>

#include <array>
#include <iterator>
#include <limits>
#include <mutex>

#include "base/asio.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "base/duration.h"
#include "base/strings.h"

namespace nodeagent::api {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;

// Bytes of body handed to a consumer per read.
constexpr size_t kChunkBytes = 64 * 1024;

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;

std::string opensslError(std::string_view fallback) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return std::string(fallback);
  std::array<char, 256> buf{};
  ERR_error_string_n(e, buf.data(), buf.size());
  return buf.data();
}

BioPtr memBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
}

base::StatusOr<std::vector<X509Ptr>> parseCerts(const std::string& pem, const std::string& what) {
  std::vector<X509Ptr> out;
  auto bio = memBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();
  if (out.empty()) return base::invalidArgumentError(what + ": no PEM certificate found");
  return out;
}

base::StatusOr<PkeyPtr> parseKey(const std::string& pem, const std::string& what) {
  auto bio = memBio(pem);
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (!k) return base::invalidArgumentError(what + ": " + opensslError("no PEM data found"));
  return PkeyPtr(k);
}

bool isIpAddress(const std::string& s) {
  ErrorCode ec;
  asio::ip::make_address(s, ec);
  return !ec;
}

std::string formatMs(std::chrono::milliseconds d) {
  return base::formatDuration(std::chrono::duration_cast<base::Duration>(d));
}

}  // namespace

std::string HttpEndpoint::hostPort() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string HttpResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (base::iequals(k, name)) return v;
  }
  return {};
}

// ---------------------------------------------------------------------------------------------

struct HttpTlsContext::Impl {
  asio::ssl::context ctx{asio::ssl::context::tls_client};
  bool insecure = false;
  std::string server_name;
  std::string trust;  // for messages: what the peer is verified against
};

HttpTlsContext::HttpTlsContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpTlsContext::~HttpTlsContext() = default;

base::StatusOr<std::shared_ptr<HttpTlsContext>> HttpTlsContext::create(
    const HttpTlsOptions& options, const std::string& where) {
  auto impl = std::make_unique<Impl>();
  SSL_CTX* ctx = impl->ctx.native_handle();
  impl->insecure = options.insecure_skip_verify;
  impl->server_name = options.server_name;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (!options.ca_pem.empty()) {
    ASSIGN_OR_RETURN(auto cas, parseCerts(options.ca_pem, where + ": certificate-authority"));
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    for (auto& x : cas) X509_STORE_add_cert(store, x.get());
    ERR_clear_error();  // a CA given twice is no error
    impl->trust = "the configured certificate-authority";
  } else {
    SSL_CTX_set_default_verify_paths(ctx);
    impl->trust = "the system roots";
    if (!options.ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(ctx, options.ca_file.c_str(), nullptr) != 1) {
        return base::invalidArgumentError(where + ": ca-file " + options.ca_file + ": " +
                                          opensslError("cannot load CA file"));
      }
      impl->trust += " and " + options.ca_file;
    }
    ERR_clear_error();
  }
  if (!options.client_cert_pem.empty()) {
    ASSIGN_OR_RETURN(auto chain,
                     parseCerts(options.client_cert_pem, where + ": client-certificate"));
    ASSIGN_OR_RETURN(auto key, parseKey(options.client_key_pem, where + ": client-key"));
    if (X509_check_private_key(chain[0].get(), key.get()) != 1) {
      ERR_clear_error();
      return base::invalidArgumentError(where + ": client-key does not match client-certificate");
    }
    bool ok = SSL_CTX_use_certificate(ctx, chain[0].get()) == 1 &&
              SSL_CTX_use_PrivateKey(ctx, key.get()) == 1;
    for (size_t i = 1; ok && i < chain.size(); ++i) {
      ok = SSL_CTX_add1_chain_cert(ctx, chain[i].get()) == 1;
    }
    if (!ok) {
      return base::invalidArgumentError(
          where + ": client-certificate: " + opensslError("cannot use the certificate"));
    }
  }
  SSL_CTX_set_verify(ctx, impl->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);
  return std::shared_ptr<HttpTlsContext>(new HttpTlsContext(std::move(impl)));
}

// ---------------------------------------------------------------------------------------------

class HttpConnection::Impl : public std::enable_shared_from_this<HttpConnection::Impl> {
 public:
  // Blocking use: the exchange runs on a private io_context, on the calling thread.
  Impl(HttpEndpoint endpoint, std::shared_ptr<HttpTlsContext> tls, HttpClientOptions options)
      : Impl(std::nullopt, std::move(endpoint), std::move(tls), options) {}
  // Asynchronous use: the exchange runs on a strand of `executor`.
  Impl(std::optional<asio::any_io_executor> executor, HttpEndpoint endpoint,
       std::shared_ptr<HttpTlsContext> tls, HttpClientOptions options)
      : blocking_(!executor),
        ex_(executor ? asio::any_io_executor(asio::make_strand(*executor))
                     : asio::any_io_executor(ioc_.get_executor())),
        endpoint_(std::move(endpoint)),
        tls_ctx_(std::move(tls)),
        options_(options),
        // Room for the largest head plus one read; the body is consumed as it is parsed.
        buffer_(options_.max_header_bytes + 2 * kChunkBytes),
        chunk_(kChunkBytes) {}

  ~Impl() { closeStreams(); }

  // Runs the exchange to its end on the private io_context. What a callback throws reaches the
  // caller.
  base::Status exchangeBlocking(const HttpRequest& request, const HttpBodyStream& stream,
                                HttpResponse* head_out) {
    std::optional<base::Status> result;
    std::exception_ptr thrown;
    asio::co_spawn(ioc_, exchange(request, stream, head_out),
                   [&result, &thrown](std::exception_ptr e, base::Status st) {
                     thrown = e;
                     result = std::move(st);
                   });
    ioc_.restart();
    ioc_.run();
    if (thrown) std::rethrow_exception(thrown);
    return result.value_or(base::cancelledError("cancelled"));
  }

  // Starts the exchange on the connection's strand; `done` runs there. The connection lives
  // until then.
  void exchangeAsync(const HttpRequest& request, const HttpBodyStream& stream,
                     std::function<void(base::Status)> done) {
    asio::co_spawn(
        ex_, exchange(request, stream, nullptr),
        [self = shared_from_this(), done = std::move(done)](std::exception_ptr e, base::Status st) {
          done(e ? thrownError(e) : std::move(st));
        });
  }

  void cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
    closeWhereRunning();
  }

  void close(std::string reason) {
    std::lock_guard lock(mu_);
    if (closed_reason_.empty()) closed_reason_ = std::move(reason);
    closeWhereRunning();
  }

  // A connection cancelled or closed after its last exchange is not reusable either.
  bool reusable() {
    std::lock_guard lock(mu_);
    return reusable_ && !cancelled_ && closed_reason_.empty();
  }

 private:
  // What a callback of an asynchronous exchange threw, as an error of the exchange.
  static base::Status thrownError(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      return base::internalError(std::string("HTTP exchange failed: ") + ex.what());
    } catch (...) {
      return base::internalError("HTTP exchange failed");
    }
  }

  asio::awaitable<base::Status> exchange(const HttpRequest& request, const HttpBodyStream& stream,
                                         HttpResponse* head_out) {
    for (int attempt = 0;; ++attempt) {
      // A close() or cancel() that came before the socket existed ends the exchange too.
      if (cancelled()) co_return base::cancelledError("cancelled");
      if (std::string reason = closedReason(); !reason.empty()) {
        reset();
        co_return base::unavailableError("connection closed by the client: " + reason);
      }
      bool reused = open() && !stale();
      if (!reused) {
        base::Status connected = co_await connect();
        if (!connected.ok()) co_return connected;
      }
      bool before_response = false;
      base::Status st = co_await exchangeOnce(request, stream, head_out, before_response);
      // A kept connection the server closed meanwhile fails before any answer: once more on a
      // fresh one. A request that may have been acted on (written whole, not idempotent) is not
      // sent twice.
      const std::string& m = request.method;
      const bool idempotent =
          m == "GET" || m == "HEAD" || m == "PUT" || m == "DELETE" || m == "OPTIONS";
      if (!st.ok() && reused && before_response && attempt == 0 && !cancelled() &&
          (idempotent || !written_)) {
        continue;
      }
      co_return st;
    }
  }

  bool cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  // Closes the sockets where the exchange runs: the operation in flight ends at once. The private
  // io_context runs only inside a blocking call, which the connection outlives; on a strand the
  // connection is kept until the close ran.
  void closeWhereRunning() {
    if (blocking_) {
      asio::post(ex_, [this] { closeStreams(); });
    } else {
      asio::post(ex_, [self = shared_from_this()] { self->closeStreams(); });
    }
  }

  std::string closedReason() {
    std::lock_guard lock(mu_);
    return closed_reason_;
  }

  std::string hostHeader() const {
    std::string h = endpoint_.hostPort();
    if (endpoint_.port == (endpoint_.https ? 443 : 80)) h.erase(h.rfind(':'));
    return h;
  }

  bool open() const { return tcp_ != nullptr || tls_ != nullptr; }

  beast::tcp_stream& lowest() { return tls_ ? tls_->next_layer() : *tcp_; }

  void closeStreams() {
    if (!open()) return;
    ErrorCode ignored;
    lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    lowest().close();
  }

  void reset() {
    closeStreams();
    tls_.reset();
    tcp_.reset();
    buffer_.consume(buffer_.size());
    reusable_ = false;
  }

  // Whether a kept connection was closed by the server (or holds bytes nobody asked for).
  bool stale() {
    if (!reusable_ || buffer_.size() > 0) return true;
    pollfd p{lowest().socket().native_handle(), POLLIN, 0};
    return ::poll(&p, 1, 0) != 0;
  }

  // The completion token of every operation: the error lands in `ec`, nothing throws. An
  // operation is not started once cancel() was called (a cancel() posted meanwhile closes the
  // socket under it).
  static auto into(ErrorCode& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

  base::Status failure(const ErrorCode& ec, const std::string& doing,
                       std::chrono::milliseconds timeout, std::optional<size_t> body_limit = {}) {
    if (cancelled()) return base::cancelledError("cancelled");
    if (std::string reason = closedReason(); !reason.empty()) {
      return base::unavailableError("connection closed by the client while " + doing + ": " +
                                    reason);
    }
    if (ec == beast::error::timeout) {
      return base::deadlineExceededError("timed out after " + formatMs(timeout) + " " + doing);
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return base::resourceExhaustedError("response headers larger than " +
                                          std::to_string(options_.max_header_bytes) + " bytes");
    }
    if (ec == http::error::body_limit) {
      return base::resourceExhaustedError("response body larger than " +
                                          std::to_string(body_limit.value_or(0)) + " bytes");
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof) {
      return base::unavailableError("connection closed by the server while " + doing);
    }
    return base::unavailableError(doing + ": " + ec.message());
  }

  asio::awaitable<base::Status> connect() {
    reset();
    const std::string where = "connecting to " + endpoint_.hostPort();
    if (cancelled()) co_return base::cancelledError("cancelled");
    ErrorCode ec;
    // A blocking call resolves on its own thread; on a strand, a name is looked up by Asio's
    // resolver thread (a numeric host resolves at once either way).
    tcp::resolver resolver(ex_);
    tcp::resolver::results_type results;
    if (blocking_) {
      results = resolver.resolve(endpoint_.host, std::to_string(endpoint_.port),
                                 tcp::resolver::numeric_service, ec);
    } else {
      results = co_await resolver.async_resolve(endpoint_.host, std::to_string(endpoint_.port),
                                                tcp::resolver::numeric_service, into(ec));
    }
    if (ec) co_return failure(ec, where, options_.connect_timeout);
    // A close() or cancel() posted while the name resolved found no socket to close.
    if (cancelled() || !closedReason().empty()) {
      co_return failure(asio::error::operation_aborted, where, options_.connect_timeout);
    }
    tcp_ = std::make_unique<beast::tcp_stream>(ex_);
    tcp_->expires_after(options_.connect_timeout);
    if (!cancelled()) {
      co_await tcp_->async_connect(results, into(ec));
    } else {
      ec = asio::error::operation_aborted;
    }
    if (ec) {
      auto st = failure(ec, where, options_.connect_timeout);
      reset();
      co_return st;
    }
    ErrorCode ignored;
    tcp_->socket().set_option(tcp::no_delay(true), ignored);
    if (!endpoint_.https) co_return base::okStatus();
    if (!tls_ctx_) co_return base::invalidArgumentError("https without a TLS configuration");
    co_return co_await handshake();
  }

  asio::awaitable<base::Status> handshake() {
    auto& tls = tls_ctx_->impl();
    tls_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(std::move(*tcp_), tls.ctx);
    tcp_.reset();
    SSL* ssl = tls_->native_handle();
    const std::string name = tls.server_name.empty() ? endpoint_.host : tls.server_name;
    const bool ip = isIpAddress(name);
    if (!tls.insecure) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      int set = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                   : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
      if (set != 1) {
        ERR_clear_error();
        reset();
        co_return base::invalidArgumentError("cannot verify the server name \"" + name + "\"");
      }
    }
    if (!ip) SSL_set_tlsext_host_name(ssl, name.c_str());
    tls_->next_layer().expires_after(options_.connect_timeout);
    ErrorCode ec = asio::error::operation_aborted;
    if (!cancelled()) co_await tls_->async_handshake(asio::ssl::stream_base::client, into(ec));
    if (!ec) co_return base::okStatus();
    if (cancelled()) co_return base::cancelledError("cancelled");
    if (ec == beast::error::timeout) {
      reset();
      co_return failure(ec, "in the TLS handshake with " + endpoint_.hostPort(),
                        options_.connect_timeout);
    }
    std::string detail = ec.message();
    long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK)
      detail += " (" + std::string(X509_verify_cert_error_string(verify)) + ")";
    ERR_clear_error();
    reset();
    co_return base::unavailableError("TLS handshake failed with " + endpoint_.hostPort() + ": " +
                                     detail + "; expected a certificate for \"" + name +
                                     "\" signed by " + (tls.insecure ? "anyone" : tls.trust));
  }

  asio::awaitable<base::Status> exchangeOnce(const HttpRequest& request,
                                             const HttpBodyStream& stream, HttpResponse* head_out,
                                             bool& before_response) {
    if (tls_) co_return co_await exchangeOn(*tls_, request, stream, head_out, before_response);
    co_return co_await exchangeOn(*tcp_, request, stream, head_out, before_response);
  }

  using ResponseParser = http::response_parser<http::buffer_body>;

  template <typename Stream>
  asio::awaitable<base::Status> exchangeOn(Stream& s, const HttpRequest& request,
                                           const HttpBodyStream& stream, HttpResponse* head_out,
                                           bool& before_response) {
    reusable_ = false;
    base::Status written = co_await writeRequest(s, request, before_response);
    if (!written.ok()) co_return written;
    ResponseParser parser;
    parser.header_limit(static_cast<std::uint32_t>(options_.max_header_bytes));
    // No limit is the largest one (Boost 1.74's body_limit() takes a plain integer).
    parser.body_limit(stream.max_body_bytes.value_or(std::numeric_limits<std::uint64_t>::max()));
    if (request.method == "HEAD") parser.skip(true);
    HttpResponse head;
    base::Status headed = co_await readHead(s, parser, stream, head, before_response);
    if (!headed.ok()) co_return headed;
    if (head_out) *head_out = head;
    if (stream.on_head && !stream.on_head(head)) {
      reset();
      co_return base::okStatus();
    }
    co_return co_await readBody(s, parser, stream,
                                request.read_timeout.value_or(options_.read_timeout));
  }

  // Sends the request line, headers and body. On failure the connection is closed and
  // `before_response` is set (nothing was answered).
  template <typename Stream>
  asio::awaitable<base::Status> writeRequest(Stream& s, const HttpRequest& request,
                                             bool& before_response) {
    http::request<http::string_body> req;
    req.version(11);
    req.method_string(request.method);
    req.target(request.target);
    req.set(http::field::host, hostHeader());
    for (const auto& [k, v] : request.headers) req.insert(k, v);
    const std::string& m = request.method;
    if (!request.body.empty() || m == "POST" || m == "PUT" || m == "PATCH") {
      req.body() = request.body;
      req.prepare_payload();
    }
    lowest().expires_after(options_.write_timeout);
    written_ = false;
    ErrorCode ec = asio::error::operation_aborted;
    if (!cancelled()) co_await http::async_write(s, req, into(ec));
    written_ = !ec;
    if (ec) {
      before_response = true;
      auto st = failure(ec, "sending the request", options_.write_timeout);
      reset();
      co_return st;
    }
    co_return base::okStatus();
  }

  // Reads the status line and headers into `head` (at most max_header_fields of them). On
  // failure the connection is closed; `before_response` tells whether the server closed it
  // before answering anything.
  template <typename Stream>
  asio::awaitable<base::Status> readHead(Stream& s, ResponseParser& parser,
                                         const HttpBodyStream& stream, HttpResponse& head,
                                         bool& before_response) {
    lowest().expires_after(options_.head_timeout);
    ErrorCode ec = asio::error::operation_aborted;
    if (!cancelled()) co_await http::async_read_header(s, buffer_, parser, into(ec));
    if (ec) {
      before_response = !parser.got_some() &&
                        (ec == http::error::end_of_stream || ec == asio::error::connection_reset);
      auto st =
          failure(ec, "reading the response headers", options_.head_timeout, stream.max_body_bytes);
      reset();
      co_return st;
    }
    auto& msg = parser.get();
    size_t fields = static_cast<size_t>(std::distance(msg.begin(), msg.end()));
    if (fields > options_.max_header_fields) {
      reset();
      co_return base::resourceExhaustedError("response has more than " +
                                             std::to_string(options_.max_header_fields) +
                                             " header fields");
    }
    head.status = static_cast<int>(msg.result_int());
    head.headers.reserve(fields);
    for (const auto& f : msg) head.headers.emplace_back(f.name_string(), f.value());
    co_return base::okStatus();
  }

  // Hands the body to `stream.on_chunk` as it arrives, each read within `read_timeout`. The
  // connection stays open for the next request when the server keeps it alive and the body was
  // read to its end.
  template <typename Stream>
  asio::awaitable<base::Status> readBody(Stream& s, ResponseParser& parser,
                                         const HttpBodyStream& stream,
                                         std::chrono::milliseconds read_timeout) {
    auto& msg = parser.get();
    while (!parser.is_done()) {
      msg.body().data = chunk_.data();
      msg.body().size = chunk_.size();
      msg.body().more = true;
      lowest().expires_after(read_timeout);
      ErrorCode ec = asio::error::operation_aborted;
      if (!cancelled()) co_await http::async_read_some(s, buffer_, parser, into(ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        auto st = failure(ec, "reading the response body", read_timeout, stream.max_body_bytes);
        reset();
        co_return st;
      }
      size_t n = chunk_.size() - msg.body().size;
      if (n > 0 && stream.on_chunk && !stream.on_chunk(std::string_view(chunk_.data(), n))) {
        reset();
        co_return base::okStatus();
      }
    }
    reusable_ = msg.keep_alive();
    if (!reusable_) reset();
    co_return base::okStatus();
  }

  // Declared first: destroyed last, after the streams that use it.
  asio::io_context ioc_{1};
  const bool blocking_;
  asio::any_io_executor ex_;  // where the exchange runs: ioc_, or a strand of the caller's
  HttpEndpoint endpoint_;
  std::shared_ptr<HttpTlsContext> tls_ctx_;
  HttpClientOptions options_;
  std::unique_ptr<beast::tcp_stream> tcp_;  // plain http
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls_;
  beast::flat_buffer buffer_;
  std::vector<char> chunk_;
  bool reusable_ = false;
  bool written_ = false;  // the last request was written whole
  std::mutex mu_;         // guards cancelled_ and closed_reason_ (set from any thread)
  bool cancelled_ = false;
  std::string closed_reason_;  // close()'s
};

HttpConnection::HttpConnection(HttpEndpoint endpoint, std::shared_ptr<HttpTlsContext> tls,
                               HttpClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(endpoint), std::move(tls), options)) {}

HttpConnection::HttpConnection(asio::any_io_executor executor, HttpEndpoint endpoint,
                               std::shared_ptr<HttpTlsContext> tls, HttpClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(endpoint), std::move(tls),
                                   options)) {}

HttpConnection::~HttpConnection() = default;

base::StatusOr<HttpResponse> HttpConnection::roundTrip(const HttpRequest& request) {
  HttpResponse response;
  HttpBodyStream stream;
  stream.max_body_bytes = request.max_body_bytes;
  stream.on_chunk = [&response](std::string_view chunk) {
    response.body.append(chunk);
    return true;
  };
  RETURN_IF_ERROR(impl_->exchangeBlocking(request, stream, &response));
  return response;
}

base::Status HttpConnection::stream(const HttpRequest& request, const HttpBodyStream& stream) {
  return impl_->exchangeBlocking(request, stream, nullptr);
}

void HttpConnection::streamAsync(const HttpRequest& request, const HttpBodyStream& stream,
                                 std::function<void(base::Status)> done) {
  impl_->exchangeAsync(request, stream, std::move(done));
}

void HttpConnection::cancel() { impl_->cancel(); }

void HttpConnection::close(std::string reason) { impl_->close(std::move(reason)); }

bool HttpConnection::reusable() { return impl_->reusable(); }

}  // namespace nodeagent::api
