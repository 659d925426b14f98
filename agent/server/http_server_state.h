// HttpServer's state, shared by its parts (agent/server/http_server.cpp: the listener, accepts and
// the connection cap; http_connection.cpp: the connections) and private to them.
#pragma once

#include <atomic>
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "agent/server/http_server.h"

namespace boost::asio::ssl {
class context;
}

namespace nodeagent::agent {

class HttpConnection;

// Where a connection is, for the connection cap: waiting for a request (idle), receiving one
// (reading), answering or lingering (busy), or out of the server's lists (dropped).
enum class ConnectionPhase { kIdle, kReading, kBusy, kDropped };
using ConnectionList = std::list<HttpConnection*>;

struct HttpServer::State : std::enable_shared_from_this<HttpServer::State> {
  State(asio::any_io_executor ex, base::Clock& c, HttpServerOptions o, HttpHandler h,
        HttpCoroutineHandler ch)
      : executor(ex),
        clock(c),
        options(std::move(o)),
        handler(std::move(h)),
        coroutine_handler(std::move(ch)),
        acceptor_strand(asio::make_strand(ex)),
        acceptor(acceptor_strand),
        accept_retry(c.makeTimer(acceptor_strand)) {}

  // On the acceptor's strand.
  void accept();
  void onAccept(const boost::system::error_code& ec, asio::ip::tcp::socket socket);
  void admit(asio::ip::tcp::socket socket);
  // Closes the oldest idle connection, if any, to free a descriptor.
  void dropOldestIdle();

  // Moves `c` to the end (the newest) of the list of `to`; a dropped connection stays dropped.
  void setPhase(HttpConnection& c, ConnectionPhase to);
  // Under `mu`: takes the oldest idle, else the oldest reading, live connection out of the
  // lists, or null when there is none.
  std::shared_ptr<HttpConnection> takeVictimLocked(bool idle_only);
  size_t countLocked() const { return idle.size() + reading.size() + busy.size(); }
  ConnectionList& listLocked(ConnectionPhase p) {
    return p == ConnectionPhase::kIdle ? idle : p == ConnectionPhase::kReading ? reading : busy;
  }
  void closeLater(const std::shared_ptr<HttpConnection>& c, const char* why);

  const asio::any_io_executor executor;
  base::Clock& clock;
  const HttpServerOptions options;
  std::atomic<size_t> max_connections{0};  // set by start()

  ~State();

  // Cleared by stop(); held shared while a handler runs (or a coroutine handler is copied).
  std::shared_mutex handler_mu;
  HttpHandler handler;
  HttpCoroutineHandler coroutine_handler;
  // Coroutine handlers running (they end once their connection closed).
  mutable std::mutex calls_mu;
  int calls = 0;
  // HTTPS (made by start()).
  std::unique_ptr<asio::ssl::context> tls_context;

  const asio::any_io_executor acceptor_strand;
  asio::ip::tcp::acceptor acceptor;
  base::TimerPtr accept_retry;
  std::atomic<int> port{0};
  bool warned_out_of_descriptors = false;  // acceptor strand

  mutable std::mutex mu;  // guards what follows and each connection's phase and place
  bool stopped = false;
  ConnectionList idle, reading, busy;  // each oldest first
};

}  // namespace nodeagent::agent
