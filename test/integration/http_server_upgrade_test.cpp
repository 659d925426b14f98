// The agent's HTTP server handing a connection over after a 101 (HttpCall::acceptUpgrade), as
// SPDY port forwarding uses it: the answer's headers, the bytes the client sent right behind
// its request first, then both directions until the client hangs up.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "agent/server/http_server.h"
#include "base/clock.h"
#include "test/support/integration_env.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using tcp = asio::ip::tcp;

namespace {

// Echoes what an "echo/1" upgrade sends; refuses other requests.
asio::awaitable<void> echo(std::shared_ptr<agent::HttpCall> call) {
  if (call->upgradeProtocol() != "echo/1") {
    auto refusing = call->respond(agent::HttpResponse{400, "text/plain", "no upgrade\n", nullptr});
    co_await std::move(refusing);
    co_return;
  }
  auto accepting = call->acceptUpgrade({{"Connection", "Upgrade"}, {"Upgrade", "echo/1"}});
  std::unique_ptr<agent::ByteStream> stream = co_await std::move(accepting);
  if (!stream) co_return;
  while (true) {
    auto reading = stream->read();
    auto chunk = co_await std::move(reading);
    if (!chunk) break;
    auto writing = stream->write(*chunk);
    const bool written = co_await std::move(writing);
    if (!written) break;
  }
  auto closing = stream->close();
  co_await std::move(closing);
}

std::string readUntil(tcp::socket& socket, std::string& buffer, const std::string& end) {
  while (buffer.find(end) == std::string::npos) {
    char data[4096];
    boost::system::error_code ec;
    const size_t n = socket.read_some(asio::buffer(data), ec);
    if (ec) break;
    buffer.append(data, n);
  }
  const size_t at = buffer.find(end);
  if (at == std::string::npos) return std::exchange(buffer, std::string());
  std::string out = buffer.substr(0, at + end.size());
  buffer.erase(0, at + end.size());
  return out;
}

}  // namespace

TEST_CASE(
    "http server: a raw upgrade answers 101 with the handler's headers and hands over the "
    "connection, bytes sent behind the request first",
    "[integration][http_server]") {
  testing::IoThreads io;
  io.start(2);
  agent::HttpServerOptions o;
  o.name = "upgrade";
  agent::HttpServer server(io.executor(), base::realClock(), o, agent::HttpCoroutineHandler(echo));
  REQUIRE(server.start().ok());

  asio::io_context client_io;
  tcp::socket socket(client_io);
  socket.connect(
      tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(server.port())));
  asio::write(socket, asio::buffer(std::string("POST /x HTTP/1.1\r\nHost: a\r\nConnection: "
                                               "Upgrade\r\nUpgrade: echo/1\r\n\r\nearly|")));
  std::string buffer;
  const std::string head = readUntil(socket, buffer, "\r\n\r\n");
  CHECK(head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"));
  CHECK(head.find("Upgrade: echo/1\r\n") != std::string::npos);
  CHECK(readUntil(socket, buffer, "|") == "early|");
  const std::string big(1024 * 1024, 'z');
  asio::write(socket, asio::buffer(big + "|"));
  CHECK(readUntil(socket, buffer, "|") == big + "|");
  socket.shutdown(tcp::socket::shutdown_send);
  CHECK(readUntil(socket, buffer, "never").empty());  // the server ends its side too
  socket.close();
  CHECK(testing::eventually([&] { return server.activeCalls() == 0; }, 10s));

  // Without the upgrade the handler answers as usual.
  tcp::socket plain(client_io);
  plain.connect(
      tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(server.port())));
  asio::write(plain, asio::buffer(std::string("GET /x HTTP/1.1\r\nHost: a\r\n\r\n")));
  std::string rest;
  CHECK(readUntil(plain, rest, "\r\n").starts_with("HTTP/1.1 400"));
  server.stop();
  io.stop();
}
