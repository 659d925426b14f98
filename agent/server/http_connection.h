// One connection of HttpServer (private to agent/server/http_server*.cpp and
// http_connection.cpp): it reads a request through a bounded parser, calls the handler and writes
// the answer (a body in pieces a chunk at a time), keeps its place in the server's connection
// lists, and after an error answer lingers, reading what the peer still sends.
#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "agent/server/http_server_state.h"

namespace nodeagent::agent {

// A request parser that keeps what the handler sees and counts header lines (Beast's limits are
// on bytes only).
class HttpRequestParser final : public boost::beast::http::basic_parser<true> {
 public:
  explicit HttpRequestParser(const HttpServerOptions& options);

  HttpRequest& request() { return request_; }
  bool tooManyFields() const { return too_many_fields_; }
  int version() const { return version_; }

 private:
  using error_code = boost::system::error_code;
  using string_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, string_view method, string_view target,
                       int version, error_code&) override;
  void on_response_impl(int, string_view, int, error_code&) override {}
  void on_field_impl(boost::beast::http::field, string_view name, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) override;
  size_t on_body_impl(string_view body, error_code& ec) override { return append(body, ec); }
  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override {
    return append(body, ec);
  }
  void on_finish_impl(error_code&) override {}

  size_t append(string_view body, error_code& ec);

  const size_t max_fields_;
  const size_t max_body_;
  size_t fields_ = 0;
  bool too_many_fields_ = false;
  int version_ = 11;
  HttpRequest request_;
};

struct TlsTransport;
class HttpCallImpl;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(std::shared_ptr<HttpServer::State> state, asio::ip::tcp::socket socket);
  ~HttpConnection();

  asio::any_io_executor executor() { return socket_.get_executor(); }

  // On the connection's strand from here on. With TLS, the handshake comes first.
  void start();
  void close();

  // Guarded by State::mu.
  ConnectionPhase phase = ConnectionPhase::kIdle;
  ConnectionList::iterator where;

 private:
  friend class HttpCallImpl;
  using error_code = boost::system::error_code;

  void onHandshake(const error_code& ec);
  // Hands the request to the coroutine handler (HttpServer's second kind of handler).
  void startCall(HttpCoroutineHandler handler);
  // After the coroutine handler: the next request when it answered whole and the connection
  // stays open, else the connection ends.
  void finishCall(bool answered_whole);
  // Ready for the next request on this connection (keep-alive).
  void nextRequest();
  // The response head; `length` nullopt: a chunked body.
  std::string responseHead(int status, const std::string& content_type,
                           std::optional<size_t> length, bool keep_alive) const;

  // The deadline: the connection closes once `d` passes (replacing the one before).
  void arm(base::Duration d);
  void readMore();
  void onRead(const error_code& ec, size_t n);
  void parse();
  void respond();
  // Answers `status` with `why` as the body, then closes (lingering first).
  void fail(int status, std::string why);
  // Writes the head and the body; a body in pieces is never copied whole.
  void write(HttpResponse response, bool keep_alive, bool head_only);
  // Copies the next pieces into the chunk (after what it holds) up to kChunk and writes it.
  void writeChunk();
  void onWritten(const error_code& ec);

  const std::shared_ptr<HttpServer::State> state_;
  asio::ip::tcp::socket socket_;
  std::unique_ptr<TlsTransport> tls_;  // HTTPS
  std::optional<TlsPeer> peer_;        // the verified client certificate
  bool peer_rejected_ = false;         // a certificate was presented and did not verify
  base::TimerPtr timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<HttpRequestParser> parser_;
  bool closed_ = false;
  // No byte of the next request yet.
  bool between_requests_ = true;
  // The request's deadline starts at its first byte (not so for the first request: at the
  // accept).
  bool rearm_on_first_byte_ = false;
  bool linger_after_write_ = false;
  bool lingering_ = false;
  size_t lingered_ = 0;
  // The answer being written and what its buffers point into.
  std::string head_;
  HttpResponse response_;
  bool keep_alive_ = false;
  // Writing body pieces: the chunk being written and the next piece to copy.
  std::string chunk_;
  size_t next_piece_ = 0;
  size_t piece_offset_ = 0;
};

}  // namespace nodeagent::agent
