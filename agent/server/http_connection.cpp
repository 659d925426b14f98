#include "agent/server/http_connection.h"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include <algorithm>
#include <array>
#include <exception>
#include <limits>
#include <shared_mutex>

#include "agent/server/http_transport.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// After an error answer the peer may still be sending its request: it is read and dropped for
// this long (and this much) after the answer, so the peer reads the answer rather than a reset.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 1024 * 1024;
// One read's worth; the first read of a request is small, so that idle connections hold
// little memory.
constexpr size_t kReadSize = 16 * 1024;
constexpr size_t kFirstReadSize = 1024;
// A body in pieces is written a chunk of this size at a time: small enough to come from the
// heap (not a fresh mapping per answer), large enough that a megabyte takes a few dozen writes.
constexpr size_t kChunk = 64 * 1024;

std::string str(beast::string_view s) { return std::string(s.data(), s.size()); }

}  // namespace

HttpRequestParser::HttpRequestParser(const HttpServerOptions& options)
    : max_fields_(options.max_header_fields), max_body_(options.max_body_bytes) {
  header_limit(static_cast<std::uint32_t>(
      std::min<size_t>(options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  body_limit(max_body_);
}

void HttpRequestParser::on_request_impl(http::verb, beast::string_view method,
                                        beast::string_view target, int version, error_code&) {
  request_.method = str(method);
  request_.target = str(target);
  const size_t q = request_.target.find('?');
  request_.path = request_.target.substr(0, q);
  if (q != std::string::npos) request_.query = request_.target.substr(q + 1);
  version_ = version;
}

void HttpRequestParser::on_field_impl(http::field, beast::string_view name,
                                      beast::string_view value, error_code& ec) {
  if (++fields_ > max_fields_) {
    too_many_fields_ = true;
    ec = http::error::header_limit;
    return;
  }
  request_.headers.emplace_back(str(name), str(value));
}

void HttpRequestParser::on_body_init_impl(const boost::optional<std::uint64_t>& length,
                                          error_code&) {
  // Beast refuses a declared length over the body limit before this.
  if (length) request_.body.reserve(static_cast<size_t>(*length));
}

size_t HttpRequestParser::append(beast::string_view body, error_code& ec) {
  if (request_.body.size() + body.size() > max_body_) {
    ec = http::error::body_limit;
    return 0;
  }
  request_.body.append(body.data(), body.size());
  return body.size();
}

// The buffer has room for a whole header at its limit plus a read.
HttpConnection::HttpConnection(std::shared_ptr<HttpServer::State> state, tcp::socket socket)
    : state_(std::move(state)),
      socket_(std::move(socket)),
      timer_(state_->clock.makeTimer(socket_.get_executor())),
      buffer_(state_->options.max_header_bytes + kReadSize) {
  if (state_->tls_context) tls_ = std::make_unique<TlsTransport>(socket_, *state_->tls_context);
  parser_.emplace(state_->options);
}

HttpConnection::~HttpConnection() { state_->setPhase(*this, ConnectionPhase::kDropped); }

void HttpConnection::start() {
  // The first request's deadline counts from the accept: a peer that connects and sends
  // nothing, or sends slowly, is closed when it passes.
  arm(state_->options.header_timeout);
  if (tls_) {
    tls_->stream.async_handshake(
        asio::ssl::stream_base::server,
        [self = shared_from_this()](const error_code& ec) { self->onHandshake(ec); });
    return;
  }
  readMore();
}

void HttpConnection::onHandshake(const error_code& ec) {
  if (closed_) return;
  if (ec) {
    log()->debug("TLS handshake failed port={} err={}", state_->port, ec.message());
    close();
    return;
  }
  peer_ = verifiedPeer(*tls_);
  peer_rejected_ = !peer_ && presentedCertificate(*tls_);
  readMore();
}

void HttpConnection::close() {
  if (closed_) return;
  closed_ = true;
  state_->setPhase(*this, ConnectionPhase::kDropped);
  timer_->cancel();
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void HttpConnection::arm(base::Duration d) {
  timer_->asyncWaitFor(d, [weak = weak_from_this()] {
    if (auto self = weak.lock()) {
      log()->debug("Closing a connection that passed its deadline port={}", self->state_->port);
      self->close();
    }
  });
}

void HttpConnection::readMore() {
  if (closed_) return;
  const size_t room = buffer_.max_size() - buffer_.size();
  if (room == 0) {
    fail(431, "request header too large");
    return;
  }
  const size_t want = buffer_.size() == 0 ? kFirstReadSize : kReadSize;
  withStream(socket_, tls_.get(), [&](auto& stream) {
    stream.async_read_some(
        buffer_.prepare(std::min(room, want)),
        [self = shared_from_this()](const error_code& ec, size_t n) { self->onRead(ec, n); });
  });
}

void HttpConnection::onRead(const error_code& ec, size_t n) {
  if (closed_) return;
  if (ec) {
    close();  // the peer's end, a reset or a close by the deadline
    return;
  }
  buffer_.commit(n);
  if (lingering_) {
    lingered_ += buffer_.size();
    buffer_.consume(buffer_.size());
    if (lingered_ > kLingerBytes) {
      close();
    } else {
      readMore();
    }
    return;
  }
  parse();
}

void HttpConnection::parse() {
  if (between_requests_ && buffer_.size() > 0) {
    between_requests_ = false;
    state_->setPhase(*this, ConnectionPhase::kReading);
    if (rearm_on_first_byte_) arm(state_->options.header_timeout);
  }
  error_code ec;
  while (buffer_.size() > 0 && !parser_->is_done()) {
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == http::error::need_more) {
      ec = {};
      break;
    }
    if (ec || used == 0) break;
  }
  if (ec == http::error::header_limit) {
    fail(431,
         parser_->tooManyFields() ? "too many request header fields" : "request header too large");
  } else if (ec == http::error::body_limit) {
    fail(413, "request body too large");
  } else if (ec) {
    fail(400, "bad request: " + ec.message());
  } else if (parser_->is_done()) {
    respond();
  } else {
    readMore();
  }
}

void HttpConnection::respond() {
  state_->setPhase(*this, ConnectionPhase::kBusy);
  arm(state_->options.write_timeout);
  HttpRequest& request = parser_->request();
  request.peer = peer_;
  request.peer_rejected = peer_rejected_;
  HttpResponse response;
  {
    std::shared_lock lock(state_->handler_mu);
    if (state_->coroutine_handler) {
      HttpCoroutineHandler handler = state_->coroutine_handler;
      lock.unlock();
      startCall(std::move(handler));
      return;
    }
    if (!state_->handler) {
      close();  // stopping
      return;
    }
    try {
      response = state_->handler(request);
    } catch (const std::exception& e) {
      log()->warn("HTTP handler failed path={} err={}", request.path, e.what());
      response = HttpResponse{500, "text/plain", "internal error", nullptr};
    }
  }
  write(std::move(response), parser_->keep_alive(), request.method == "HEAD");
}

void HttpConnection::fail(int status, std::string why) {
  log()->debug("Refusing a request port={} status={} reason={}", state_->port, status, why);
  state_->setPhase(*this, ConnectionPhase::kBusy);
  arm(state_->options.write_timeout);
  linger_after_write_ = true;
  write(HttpResponse{status, "text/plain", why + "\n", nullptr}, /*keep_alive=*/false, false);
}

// Writes the head and the body; a body in pieces is never copied whole.
void HttpConnection::write(HttpResponse response, bool keep_alive, bool head_only) {
  response_ = std::move(response);
  const auto* pieces = response_.body_pieces.get();
  size_t length = response_.body.size();
  if (pieces != nullptr) {
    length = 0;
    for (std::string_view p : *pieces) length += p.size();
  }
  head_ = responseHead(response_.status, response_.content_type, length, keep_alive);
  keep_alive_ = keep_alive;
  if (pieces != nullptr && !head_only) {
    // The head and the first pieces go out in the first chunk.
    next_piece_ = 0;
    piece_offset_ = 0;
    chunk_ = std::move(head_);
    writeChunk();
    return;
  }
  const std::array<asio::const_buffer, 2> buffers{
      asio::buffer(head_), asio::buffer(head_only ? std::string_view() : response_.body)};
  withStream(socket_, tls_.get(), [&](auto& stream) {
    asio::async_write(stream, buffers, [self = shared_from_this()](const error_code& ec, size_t) {
      self->onWritten(ec);
    });
  });
}

std::string HttpConnection::responseHead(int status, const std::string& content_type,
                                         std::optional<size_t> length, bool keep_alive) const {
  std::string head = "HTTP/1.1 ";
  head += std::to_string(status);
  head += ' ';
  const auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  head.append(reason.data(), reason.size());
  head += "\r\nContent-Type: ";
  head += content_type;
  if (length) {
    head += "\r\nContent-Length: ";
    head += std::to_string(*length);
  } else {
    head += "\r\nTransfer-Encoding: chunked";
  }
  if (!keep_alive) {
    head += "\r\nConnection: close";
  } else if (parser_->version() < 11) {
    head += "\r\nConnection: keep-alive";
  }
  head += "\r\n\r\n";
  return head;
}

// Copies the next pieces into the chunk (after what it holds) up to kChunk and writes it.
// Pieces are small (a few hundred bytes each): one write per chunk rather than a gather write
// of many small buffers costs far fewer system calls.
void HttpConnection::writeChunk() {
  const auto& pieces = *response_.body_pieces;
  while (next_piece_ < pieces.size() && chunk_.size() < kChunk) {
    const std::string_view piece = pieces[next_piece_].substr(piece_offset_);
    const size_t take = std::min(piece.size(), kChunk - chunk_.size());
    chunk_.append(piece.substr(0, take));
    piece_offset_ += take;
    if (piece_offset_ == pieces[next_piece_].size()) {
      ++next_piece_;
      piece_offset_ = 0;
    }
  }
  auto done = [self = shared_from_this()](const error_code& ec, size_t) {
    if (ec || self->closed_ || self->next_piece_ == self->response_.body_pieces->size()) {
      self->onWritten(ec);
      return;
    }
    self->chunk_.clear();
    self->writeChunk();
  };
  withStream(socket_, tls_.get(), [&](auto& stream) {
    asio::async_write(stream, asio::buffer(chunk_), std::move(done));
  });
}

void HttpConnection::onWritten(const error_code& ec) {
  if (closed_) return;
  const bool keep_alive = keep_alive_;
  response_ = HttpResponse{};  // lets go of the body's owner
  if (chunk_.capacity() > 0) std::string().swap(chunk_);
  if (ec) {
    close();
    return;
  }
  if (!keep_alive) {
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    if (!linger_after_write_) {
      close();
      return;
    }
    lingering_ = true;
    arm(kLingerTime);
    buffer_.consume(buffer_.size());
    readMore();
    return;
  }
  nextRequest();
}

void HttpConnection::nextRequest() {
  // The next request on this connection; its bytes may be here already (pipelining).
  parser_.emplace(state_->options);
  between_requests_ = true;
  rearm_on_first_byte_ = true;
  state_->setPhase(*this, ConnectionPhase::kIdle);
  arm(state_->options.idle_timeout);
  if (buffer_.size() > 0) {
    parse();
  } else {
    readMore();
  }
}

}  // namespace nodeagent::agent
