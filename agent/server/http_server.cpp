#include "agent/server/http_server.h"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <exception>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <shared_mutex>

#include "base/log.h"

namespace nodeagent::agent {
namespace {

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
// The cap when none is given, and the floor of the one derived from the descriptor limit.
constexpr size_t kDefaultMaxConnections = 4096;
constexpr size_t kMinMaxConnections = 16;
// Pause before accepting again when the process is out of descriptors or memory.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

std::shared_ptr<spdlog::logger> log() {
  static auto logger = base::logger("server");
  return logger;
}

std::string str(beast::string_view s) { return std::string(s.data(), s.size()); }

// A request parser that keeps what the handler sees and counts header lines (Beast's limits are
// on bytes only).
class RequestParser final : public http::basic_parser<true> {
 public:
  explicit RequestParser(const HttpServerOptions& options)
      : max_fields_(options.max_header_fields), max_body_(options.max_body_bytes) {
    header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    body_limit(max_body_);
  }

  HttpRequest& request() { return request_; }
  bool tooManyFields() const { return too_many_fields_; }
  int version() const { return version_; }

 private:
  void on_request_impl(http::verb, beast::string_view method, beast::string_view target,
                       int version, error_code&) override {
    request_.method = str(method);
    request_.target = str(target);
    const size_t q = request_.target.find('?');
    request_.path = request_.target.substr(0, q);
    if (q != std::string::npos) request_.query = request_.target.substr(q + 1);
    version_ = version;
  }
  void on_response_impl(int, beast::string_view, int, error_code&) override {}
  void on_field_impl(http::field, beast::string_view name, beast::string_view value,
                     error_code& ec) override {
    if (++fields_ > max_fields_) {
      too_many_fields_ = true;
      ec = http::error::header_limit;
      return;
    }
    request_.headers.emplace_back(str(name), str(value));
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code&) override {
    // Beast refuses a declared length over the body limit before this.
    if (length) request_.body.reserve(static_cast<size_t>(*length));
  }
  size_t on_body_impl(beast::string_view body, error_code& ec) override { return append(body, ec); }
  void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, error_code& ec) override {
    return append(body, ec);
  }
  void on_finish_impl(error_code&) override {}

  size_t append(beast::string_view body, error_code& ec) {
    if (request_.body.size() + body.size() > max_body_) {
      ec = http::error::body_limit;
      return 0;
    }
    request_.body.append(body.data(), body.size());
    return body.size();
  }

  const size_t max_fields_;
  const size_t max_body_;
  size_t fields_ = 0;
  bool too_many_fields_ = false;
  int version_ = 11;
  HttpRequest request_;
};

class Connection;

// Where a connection is, for the connection cap: waiting for a request (idle), receiving one
// (reading), answering or lingering (busy), or out of the server's lists (dropped).
enum class Phase { kIdle, kReading, kBusy, kDropped };
using ConnectionList = std::list<Connection*>;

}  // namespace

struct HttpServer::State : std::enable_shared_from_this<HttpServer::State> {
  State(asio::any_io_executor ex, base::Clock& c, HttpServerOptions o, HttpHandler h)
      : executor(ex),
        clock(c),
        options(std::move(o)),
        handler(std::move(h)),
        acceptor_strand(asio::make_strand(ex)),
        acceptor(acceptor_strand),
        accept_retry(c.makeTimer(acceptor_strand)) {}

  // On the acceptor's strand.
  void accept();
  void onAccept(const error_code& ec, tcp::socket socket);
  void admit(tcp::socket socket);
  // Closes the oldest idle connection, if any, to free a descriptor.
  void dropOldestIdle();

  // Moves `c` to the end (the newest) of the list of `to`; a dropped connection stays dropped.
  void setPhase(Connection& c, Phase to);
  // Under `mu`: takes the oldest idle, else the oldest reading, live connection out of the
  // lists, or null when there is none.
  std::shared_ptr<Connection> takeVictimLocked(bool idle_only);
  size_t countLocked() const { return idle.size() + reading.size() + busy.size(); }
  ConnectionList& listLocked(Phase p) {
    return p == Phase::kIdle ? idle : p == Phase::kReading ? reading : busy;
  }
  void closeLater(const std::shared_ptr<Connection>& c, const char* why);

  const asio::any_io_executor executor;
  base::Clock& clock;
  const HttpServerOptions options;
  std::atomic<size_t> max_connections{0};  // set by start()

  // Cleared by stop(); held shared while a handler runs.
  std::shared_mutex handler_mu;
  HttpHandler handler;

  const asio::any_io_executor acceptor_strand;
  tcp::acceptor acceptor;
  base::TimerPtr accept_retry;
  std::atomic<int> port{0};
  bool warned_out_of_descriptors = false;  // acceptor strand

  mutable std::mutex mu;  // guards what follows and each connection's phase and place
  bool stopped = false;
  ConnectionList idle, reading, busy;  // each oldest first
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<HttpServer::State> state, tcp::socket socket)
      : state_(std::move(state)),
        socket_(std::move(socket)),
        timer_(state_->clock.makeTimer(socket_.get_executor())),
        // Room for a whole header at its limit plus a read.
        buffer_(state_->options.max_header_bytes + kReadSize) {
    parser_.emplace(state_->options);
  }
  ~Connection() { state_->setPhase(*this, Phase::kDropped); }

  asio::any_io_executor executor() { return socket_.get_executor(); }

  // On the connection's strand from here on.
  void start() {
    // The first request's deadline counts from the accept: a peer that connects and sends
    // nothing, or sends slowly, is closed when it passes.
    arm(state_->options.header_timeout);
    readMore();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    state_->setPhase(*this, Phase::kDropped);
    timer_->cancel();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  // Guarded by State::mu.
  Phase phase = Phase::kIdle;
  ConnectionList::iterator where;

 private:
  void arm(base::Duration d) {
    timer_->asyncWaitFor(d, [weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        log()->debug("Closing a connection that passed its deadline port={}", self->state_->port);
        self->close();
      }
    });
  }

  void readMore() {
    if (closed_) return;
    const size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0) {
      fail(431, "request header too large");
      return;
    }
    const size_t want = buffer_.size() == 0 ? kFirstReadSize : kReadSize;
    socket_.async_read_some(
        buffer_.prepare(std::min(room, want)),
        [self = shared_from_this()](const error_code& ec, size_t n) { self->onRead(ec, n); });
  }

  void onRead(const error_code& ec, size_t n) {
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

  void parse() {
    if (between_requests_ && buffer_.size() > 0) {
      between_requests_ = false;
      state_->setPhase(*this, Phase::kReading);
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
      fail(431, parser_->tooManyFields() ? "too many request header fields"
                                         : "request header too large");
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

  void respond() {
    state_->setPhase(*this, Phase::kBusy);
    arm(state_->options.write_timeout);
    HttpRequest& request = parser_->request();
    HttpResponse response;
    {
      std::shared_lock lock(state_->handler_mu);
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

  void fail(int status, std::string why) {
    log()->debug("Refusing a request port={} status={} reason={}", state_->port, status, why);
    state_->setPhase(*this, Phase::kBusy);
    arm(state_->options.write_timeout);
    linger_after_write_ = true;
    write(HttpResponse{status, "text/plain", why + "\n", nullptr}, /*keep_alive=*/false, false);
  }

  // Writes the head and the body; a body in pieces is never copied whole.
  void write(HttpResponse response, bool keep_alive, bool head_only) {
    response_ = std::move(response);
    const auto* pieces = response_.body_pieces.get();
    size_t length = response_.body.size();
    if (pieces != nullptr) {
      length = 0;
      for (std::string_view p : *pieces) length += p.size();
    }
    head_.clear();
    head_ += "HTTP/1.1 ";
    head_ += std::to_string(response_.status);
    head_ += ' ';
    const auto reason =
        http::obsolete_reason(http::int_to_status(static_cast<unsigned>(response_.status)));
    head_.append(reason.data(), reason.size());
    head_ += "\r\nContent-Type: ";
    head_ += response_.content_type;
    head_ += "\r\nContent-Length: ";
    head_ += std::to_string(length);
    if (!keep_alive) {
      head_ += "\r\nConnection: close";
    } else if (parser_->version() < 11) {
      head_ += "\r\nConnection: keep-alive";
    }
    head_ += "\r\n\r\n";
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
    asio::async_write(socket_, buffers, [self = shared_from_this()](const error_code& ec, size_t) {
      self->onWritten(ec);
    });
  }

  // Copies the next pieces into the chunk (after what it holds) up to kChunk and writes it.
  // Pieces are small (a few hundred bytes each): one write per chunk rather than a gather write
  // of many small buffers costs far fewer system calls.
  void writeChunk() {
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
    asio::async_write(
        socket_, asio::buffer(chunk_), [self = shared_from_this()](const error_code& ec, size_t) {
          if (ec || self->closed_ || self->next_piece_ == self->response_.body_pieces->size()) {
            self->onWritten(ec);
            return;
          }
          self->chunk_.clear();
          self->writeChunk();
        });
  }

  void onWritten(const error_code& ec) {
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
    // The next request on this connection; its bytes may be here already (pipelining).
    parser_.emplace(state_->options);
    between_requests_ = true;
    rearm_on_first_byte_ = true;
    state_->setPhase(*this, Phase::kIdle);
    arm(state_->options.idle_timeout);
    if (buffer_.size() > 0) {
      parse();
    } else {
      readMore();
    }
  }

  const std::shared_ptr<HttpServer::State> state_;
  tcp::socket socket_;
  base::TimerPtr timer_;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
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

bool outOfResources(const error_code& ec) {
  if (ec.category() != boost::system::system_category()) return false;
  const int v = ec.value();
  return v == EMFILE || v == ENFILE || v == ENOBUFS || v == ENOMEM;
}

size_t connectionCap(size_t configured) {
  if (configured > 0) return configured;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    return kDefaultMaxConnections;
  }
  return std::clamp<size_t>(static_cast<size_t>(lim.rlim_cur / 4), kMinMaxConnections,
                            kDefaultMaxConnections);
}

std::string hostPort(const std::string& address, int port) {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

}  // namespace

void HttpServer::State::setPhase(Connection& c, Phase to) {
  std::lock_guard lock(mu);
  if (c.phase == Phase::kDropped) return;
  ConnectionList& from = listLocked(c.phase);
  if (to == Phase::kDropped) {
    from.erase(c.where);
  } else {
    ConnectionList& dest = listLocked(to);
    dest.splice(dest.end(), from, c.where);
  }
  c.phase = to;
}

std::shared_ptr<Connection> HttpServer::State::takeVictimLocked(bool idle_only) {
  for (ConnectionList* list : {&idle, &reading}) {
    if (idle_only && list != &idle) break;
    while (!list->empty()) {
      Connection* c = list->front();
      // A connection whose destructor has begun waits for `mu` to leave the list: it is still
      // whole, and taking it out here leaves it nothing to do.
      auto alive = c->weak_from_this().lock();
      list->pop_front();
      c->phase = Phase::kDropped;
      if (alive) return alive;
    }
  }
  return nullptr;
}

void HttpServer::State::closeLater(const std::shared_ptr<Connection>& c, const char* why) {
  log()->debug("Dropping a connection port={} reason={}", port.load(), why);
  asio::post(c->executor(), [c] { c->close(); });
}

void HttpServer::State::accept() {
  // Each connection on its own strand.
  acceptor.async_accept(asio::any_io_executor(asio::make_strand(executor)),
                        [self = shared_from_this()](const error_code& ec, tcp::socket socket) {
                          self->onAccept(ec, std::move(socket));
                        });
}

void HttpServer::State::onAccept(const error_code& ec, tcp::socket socket) {
  {
    std::lock_guard lock(mu);
    if (stopped) return;
  }
  if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
  if (outOfResources(ec)) {
    // Accepting again at once would spin: free a descriptor and wait a little.
    if (!warned_out_of_descriptors) {
      log()->warn("Cannot accept connections port={} err={}", port.load(), ec.message());
      warned_out_of_descriptors = true;
    }
    dropOldestIdle();
    accept_retry->asyncWaitFor(kAcceptRetry, [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->accept();
    });
    return;
  }
  if (ec) {
    log()->debug("Accept failed port={} err={}", port.load(), ec.message());
  } else {
    warned_out_of_descriptors = false;
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    admit(std::move(socket));
  }
  accept();
}

void HttpServer::State::admit(tcp::socket socket) {
  std::vector<std::shared_ptr<Connection>> victims;
  std::shared_ptr<Connection> conn;
  {
    std::lock_guard lock(mu);
    if (stopped) return;
    const size_t cap = max_connections.load();
    while (countLocked() >= cap) {
      auto victim = takeVictimLocked(/*idle_only=*/false);
      if (!victim) break;
      victims.push_back(std::move(victim));
    }
    if (countLocked() < cap) {
      conn = std::make_shared<Connection>(shared_from_this(), std::move(socket));
      idle.push_back(conn.get());
      conn->where = std::prev(idle.end());
      conn->phase = Phase::kIdle;
    }
  }
  for (const auto& victim : victims) closeLater(victim, "connection cap");
  if (!conn) {
    log()->debug("Refusing a connection: every connection is busy port={}", port.load());
    error_code ignored;
    socket.close(ignored);
    return;
  }
  asio::post(conn->executor(), [conn] { conn->start(); });
}

void HttpServer::State::dropOldestIdle() {
  std::shared_ptr<Connection> victim;
  {
    std::lock_guard lock(mu);
    victim = takeVictimLocked(/*idle_only=*/true);
  }
  if (victim) closeLater(victim, "out of descriptors");
}

HttpServer::HttpServer(asio::any_io_executor executor, base::Clock& clock,
                       HttpServerOptions options, HttpHandler handler)
    : state_(std::make_shared<State>(std::move(executor), clock, std::move(options),
                                     std::move(handler))) {}

HttpServer::~HttpServer() { stop(); }

base::Status HttpServer::start() {
  State& s = *state_;
  const std::string address = s.options.address.empty() ? "0.0.0.0" : s.options.address;
  const std::string where = hostPort(address, s.options.port);
  auto fail = [&](const std::string& why) {
    error_code ignored;
    s.acceptor.close(ignored);
    return base::unavailableError("cannot serve the " + s.options.name + " port " + where + ": " +
                                  why);
  };
  error_code ec;
  tcp::endpoint endpoint;
  const auto ip = asio::ip::make_address(address, ec);
  if (!ec) {
    endpoint = tcp::endpoint(ip, static_cast<unsigned short>(s.options.port));
  } else {
    // A host name (such as localhost): resolved once, here, before the server runs.
    tcp::resolver resolver(s.executor);
    auto results = resolver.resolve(address, std::to_string(s.options.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      return fail("cannot resolve " + address + (ec ? ": " + ec.message() : ""));
    }
    endpoint = results.begin()->endpoint();
  }
  if (s.acceptor.open(endpoint.protocol(), ec); ec) return fail(ec.message());
  // SO_REUSEADDR lets a restarted agent bind past its old connections in TIME_WAIT; it never
  // lets two listeners share the port (SO_REUSEPORT would, and is never set).
  if (s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec); ec) return fail(ec.message());
  if (s.acceptor.bind(endpoint, ec); ec) {
    if (ec == asio::error::address_in_use) {
      return fail("port " + std::to_string(s.options.port) + " is in use (" + ec.message() + ")");
    }
    return fail(ec.message());
  }
  if (s.acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return fail(ec.message());
  }
  const auto local = s.acceptor.local_endpoint(ec);
  if (ec) return fail(ec.message());
  s.port = local.port();
  s.max_connections = connectionCap(s.options.max_connections);
  log()->info("Serving HTTP port={} address={} max_connections={}", s.options.name, where,
              s.max_connections.load());
  asio::post(s.acceptor_strand, [state = state_] { state->accept(); });
  return base::okStatus();
}

void HttpServer::stop() {
  State& s = *state_;
  {
    std::unique_lock lock(s.handler_mu);
    s.handler = nullptr;
  }
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(s.mu);
    s.stopped = true;
    for (ConnectionList* list : {&s.idle, &s.reading, &s.busy}) {
      for (Connection* c : *list) {
        if (auto alive = c->weak_from_this().lock()) open.push_back(std::move(alive));
      }
    }
  }
  asio::post(s.acceptor_strand, [state = state_] {
    state->accept_retry->cancel();
    error_code ignored;
    state->acceptor.close(ignored);
  });
  for (const auto& c : open) asio::post(c->executor(), [c] { c->close(); });
}

int HttpServer::port() const { return state_->port.load(); }

size_t HttpServer::maxConnections() const { return state_->max_connections.load(); }

size_t HttpServer::connectionCount() const {
  std::lock_guard lock(state_->mu);
  return state_->countLocked();
}

size_t HttpServer::idleConnectionCount() const {
  std::lock_guard lock(state_->mu);
  return state_->idle.size();
}

}  // namespace nodeagent::agent
