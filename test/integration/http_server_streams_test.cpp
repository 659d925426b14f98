// The agent's HTTP server with coroutine handlers, as the kubelet API uses it: HTTPS with verified
// client certificates, whole answers on keep-alive connections, chunked streams that notice a
// client going away, and WebSocket upgrades with a chosen subprotocol.
#include <httplib.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>

#include "agent/server/http_server.h"
#include "base/clock.h"
#include "test/support/integration_env.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"
#include "test/support/ws_client.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

struct Server {
  explicit Server(agent::HttpCoroutineHandler handler, bool client_ca = true)
      : pki(dir.path() / "pki") {
    auto serving = pki.issueServing("server");
    agent::HttpServerOptions o;
    o.name = "kubelet";
    o.address = "127.0.0.1";
    o.port = 0;
    o.tls = agent::HttpTlsServerOptions{serving.cert_file.string(), serving.key_file.string(),
                                        client_ca ? pki.caFile().string() : ""};
    io.start(2);
    server = std::make_unique<agent::HttpServer>(io.executor(), base::realClock(), o,
                                                 std::move(handler));
    auto started = server->start();
    INFO(started.toString());
    REQUIRE(started.ok());
  }
  ~Server() {
    server->stop();
    REQUIRE(testing::eventually([&] { return server->activeCalls() == 0; }, 10s));
    io.stop();
  }
  std::unique_ptr<httplib::SSLClient> client(const testing::TestPki::Files* cert = nullptr) {
    auto c =
        cert ? std::make_unique<httplib::SSLClient>(
                   "127.0.0.1", server->port(), cert->cert_file.string(), cert->key_file.string())
             : std::make_unique<httplib::SSLClient>("127.0.0.1", server->port());
    c->enable_server_certificate_verification(false);
    c->set_read_timeout(10, 0);
    return c;
  }

  testing::TempDir dir;
  testing::TestPki pki;
  testing::IoThreads io;
  std::unique_ptr<agent::HttpServer> server;
};

asio::awaitable<void> sleepFor(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(asio::use_awaitable);
}

}  // namespace

TEST_CASE(
    "http server: a coroutine handler answers over HTTPS on a keep-alive connection, with "
    "the verified client certificate's user",
    "[integration][http_server]") {
  Server s([](std::shared_ptr<agent::HttpCall> call) -> asio::awaitable<void> {
    const auto& peer = call->request().peer;
    std::string who = "none";
    if (peer) {
      who = peer->common_name + "|";
      for (const auto& o : peer->organizations) who += o + ",";
    }
    auto respond = call->respond(agent::HttpResponse{200, "text/plain", who, nullptr});
    co_await std::move(respond);
  });
  auto alice = s.pki.issueClient("alice", {"dev", "ops"});
  auto client = s.client(&alice);
  client->set_keep_alive(true);
  for (int i = 0; i < 2; ++i) {
    auto res = client->Get("/whoami");
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->body == "alice|dev,ops,");
  }
  CHECK(s.server->connectionCount() == 1);  // both on one connection

  auto anonymous = s.client();
  auto res = anonymous->Get("/whoami");
  REQUIRE(res);
  CHECK(res->body == "none");

  // A certificate from another CA is no user (and no refused handshake).
  testing::TestPki other(s.dir.path() / "other", "other-ca");
  auto mallory = other.issueClient("mallory", {"system:masters"});
  auto forged = s.client(&mallory);
  res = forged->Get("/whoami");
  REQUIRE(res);
  CHECK(res->body == "none");
}

TEST_CASE("http server: a streamed body arrives chunked and a client that goes away is noticed",
          "[integration][http_server]") {
  std::atomic<bool> saw_close{false};
  Server s([&](std::shared_ptr<agent::HttpCall> call) -> asio::awaitable<void> {
    co_await call->beginStream(200, "text/plain");
    co_await call->writeStream("one\n");
    co_await call->writeStream("");
    co_await call->writeStream("two\n");
    if (call->request().path == "/forever") {
      for (int i = 0; i < 1000 && !call->closed(); ++i) co_await sleepFor(10ms);
      saw_close = call->closed();
    }
  });
  auto client = s.client();
  auto res = client->Get("/stream");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body == "one\ntwo\n");
  CHECK(res->get_header_value("Transfer-Encoding") == "chunked");

  std::string got;
  auto streaming = s.client();
  streaming->Get("/forever", [&](const char* data, size_t n) {
    got.append(data, n);
    return got.size() < 8;  // stop reading (and close) after the first pieces
  });
  CHECK(got == "one\ntwo\n");
  CHECK(testing::eventually([&] { return saw_close.load(); }, 10s));
}

TEST_CASE(
    "http server: a WebSocket upgrade settles on the client's first supported subprotocol "
    "and carries messages both ways",
    "[integration][http_server]") {
  Server s([](std::shared_ptr<agent::HttpCall> call) -> asio::awaitable<void> {
    if (!call->isWebSocketRequest()) {
      auto respond =
          call->respond(agent::HttpResponse{400, "text/plain", "not a websocket", nullptr});
      co_await std::move(respond);
      co_return;
    }
    auto accept = call->acceptWebSocket({"v5.channel.k8s.io", "v4.channel.k8s.io"});
    auto socket = co_await std::move(accept);
    if (!socket) co_return;
    const std::string hello = "protocol=" + socket->protocol();
    co_await socket->write(hello);
    while (true) {
      auto message = co_await socket->read();
      if (!message || *message == "bye") break;
      const std::string echo = "echo:" + *message;
      co_await socket->write(echo);
    }
    co_await socket->close();
  });
  testing::WsClient ws;
  testing::WsClientOptions o;
  o.protocols = {"v4.channel.k8s.io", "v5.channel.k8s.io"};
  REQUIRE(ws.connect(s.server->port(), "/ws", o));
  CHECK(ws.protocol() == "v4.channel.k8s.io");
  CHECK(ws.read() == std::optional<std::string>("protocol=v4.channel.k8s.io"));
  REQUIRE(ws.send(std::string("\x00hello", 6)));
  CHECK(ws.read() == std::optional<std::string>(std::string("echo:\x00hello", 11)));
  REQUIRE(ws.send("bye"));
  CHECK_FALSE(ws.read().has_value());  // the server closed it

  // A plain GET of the same path is answered as the handler decides.
  auto client = s.client();
  auto res = client->Get("/ws");
  REQUIRE(res);
  CHECK(res->status == 400);
}

TEST_CASE("http server: a TLS certificate or key that cannot be loaded fails start naming the file",
          "[integration][http_server]") {
  testing::TempDir dir;
  testing::IoThreads io;
  agent::HttpServerOptions o;
  o.name = "kubelet";
  o.port = 0;
  o.tls = agent::HttpTlsServerOptions{(dir.path() / "missing.crt").string(),
                                      (dir.path() / "missing.key").string(), ""};
  agent::HttpServer server(
      io.executor(), base::realClock(), o,
      [](std::shared_ptr<agent::HttpCall>) -> asio::awaitable<void> { co_return; });
  auto status = server.start();
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("missing.crt"));
  CHECK_THAT(status.message(), Catch::Contains("kubelet port"));
}
