// HttpServer: the listener, accepts, the connection cap and stop (the connections themselves are
// in http_connection.cpp).
#include "agent/server/http_server.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <shared_mutex>

#include "agent/server/http_connection.h"
#include "agent/server/http_server_state.h"
#include "agent/server/http_transport.h"
#include "base/log.h"
#include "base/strings.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

using tcp = asio::ip::tcp;
using boost::system::error_code;

// The cap when none is given, and the floor of the one derived from the descriptor limit.
constexpr size_t kDefaultMaxConnections = 4096;
constexpr size_t kMinMaxConnections = 16;
// Pause before accepting again when the process is out of descriptors or memory.
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);

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

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (base::iequals(n, name)) return v;
  }
  return {};
}

HttpServer::State::~State() = default;

void HttpServer::State::setPhase(HttpConnection& c, ConnectionPhase to) {
  std::lock_guard lock(mu);
  if (c.phase == ConnectionPhase::kDropped) return;
  ConnectionList& from = listLocked(c.phase);
  if (to == ConnectionPhase::kDropped) {
    from.erase(c.where);
  } else {
    ConnectionList& dest = listLocked(to);
    dest.splice(dest.end(), from, c.where);
  }
  c.phase = to;
}

std::shared_ptr<HttpConnection> HttpServer::State::takeVictimLocked(bool idle_only) {
  for (ConnectionList* list : {&idle, &reading}) {
    if (idle_only && list != &idle) break;
    while (!list->empty()) {
      HttpConnection* c = list->front();
      // A connection whose destructor has begun waits for `mu` to leave the list: it is still
      // whole, and taking it out here leaves it nothing to do.
      auto alive = c->weak_from_this().lock();
      list->pop_front();
      c->phase = ConnectionPhase::kDropped;
      if (alive) return alive;
    }
  }
  return nullptr;
}

void HttpServer::State::closeLater(const std::shared_ptr<HttpConnection>& c, const char* why) {
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
  std::vector<std::shared_ptr<HttpConnection>> victims;
  std::shared_ptr<HttpConnection> conn;
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
      conn = std::make_shared<HttpConnection>(shared_from_this(), std::move(socket));
      idle.push_back(conn.get());
      conn->where = std::prev(idle.end());
      conn->phase = ConnectionPhase::kIdle;
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
  std::shared_ptr<HttpConnection> victim;
  {
    std::lock_guard lock(mu);
    victim = takeVictimLocked(/*idle_only=*/true);
  }
  if (victim) closeLater(victim, "out of descriptors");
}

HttpServer::HttpServer(asio::any_io_executor executor, base::Clock& clock,
                       HttpServerOptions options, HttpHandler handler)
    : state_(std::make_shared<State>(std::move(executor), clock, std::move(options),
                                     std::move(handler), nullptr)) {}

HttpServer::HttpServer(asio::any_io_executor executor, base::Clock& clock,
                       HttpServerOptions options, HttpCoroutineHandler handler)
    : state_(std::make_shared<State>(std::move(executor), clock, std::move(options), nullptr,
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
  if (s.options.tls) {
    auto context = makeTlsServerContext(*s.options.tls);
    if (!context.ok()) {
      return base::invalidArgumentError("cannot serve the " + s.options.name + " port " + where +
                                        ": " + context.status().message());
    }
    s.tls_context = std::move(*context);
  }
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
  log()->info("Serving {} port={} address={} max_connections={}", s.tls_context ? "HTTPS" : "HTTP",
              s.options.name, where, s.max_connections.load());
  asio::post(s.acceptor_strand, [state = state_] { state->accept(); });
  return base::okStatus();
}

void HttpServer::stop() {
  State& s = *state_;
  {
    std::unique_lock lock(s.handler_mu);
    s.handler = nullptr;
    s.coroutine_handler = nullptr;
  }
  std::vector<std::shared_ptr<HttpConnection>> open;
  {
    std::lock_guard lock(s.mu);
    s.stopped = true;
    for (ConnectionList* list : {&s.idle, &s.reading, &s.busy}) {
      for (HttpConnection* c : *list) {
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

size_t HttpServer::activeCalls() const {
  std::lock_guard lock(state_->calls_mu);
  return static_cast<size_t>(state_->calls);
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