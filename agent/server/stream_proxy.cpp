#include "agent/server/stream_proxy.h"

#include <array>
#include <chrono>

#include "agent/server/kubelet_request.h"
#include "agent/server/strand_event.h"
#include "base/log.h"
#include "base/strings.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr size_t kReadSize = 16 * 1024;

using tcp = asio::ip::tcp;
using boost::system::error_code;

bool dropped(std::string_view name) {
  for (std::string_view h :
       {"host", "authorization", "proxy-authorization", "content-length", "transfer-encoding"}) {
    if (base::iequals(name, h)) return true;
  }
  return false;
}

// Copies what the client sends to the runtime's socket until either ends.
asio::awaitable<void> clientToRuntime(ByteStream& client, tcp::socket& runtime) {
  for (;;) {
    auto reading = client.read();
    auto data = co_await std::move(reading);
    if (!data) break;
    error_code ec;
    co_await asio::async_write(runtime, asio::buffer(*data),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  error_code ignored;
  runtime.shutdown(tcp::socket::shutdown_send, ignored);
}

// Copies what the runtime answers to the client until either ends.
asio::awaitable<void> runtimeToClient(tcp::socket& runtime, ByteStream& client) {
  std::string buffer(kReadSize, '\0');
  for (;;) {
    error_code ec;
    const size_t n = co_await runtime.async_read_some(
        asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || n == 0) break;
    auto writing = client.write(std::string_view(buffer.data(), n));
    if (!co_await std::move(writing)) break;
  }
}

// Connects to url within kConnectTimeout; an error names the URL.
asio::awaitable<base::StatusOr<std::unique_ptr<tcp::socket>>> connectTo(const StreamUrl& url) {
  auto executor = co_await asio::this_coro::executor;
  tcp::resolver resolver(executor);
  error_code ec;
  auto endpoints = co_await resolver.async_resolve(url.host, url.port,
                                                   asio::redirect_error(asio::use_awaitable, ec));
  const std::string where = url.host + ":" + url.port;
  if (ec) co_return base::unavailableError("cannot resolve " + where + ": " + ec.message());
  auto socket = std::make_unique<tcp::socket>(executor);
  asio::steady_timer timer(executor, kConnectTimeout);
  timer.async_wait([s = socket.get()](const error_code& e) {
    if (!e) s->close();
  });
  co_await asio::async_connect(*socket, endpoints, asio::redirect_error(asio::use_awaitable, ec));
  timer.cancel();
  if (ec || !socket->is_open()) {
    co_return base::unavailableError("cannot connect to the runtime's streaming server at " +
                                     where + ": " + (ec ? ec.message() : "timed out"));
  }
  co_return socket;
}

}  // namespace

base::StatusOr<StreamUrl> parseStreamUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) {
    return base::invalidArgumentError("the runtime's streaming URL \"" + std::string(url) +
                                      "\" is not http:// (a streaming server over TLS is not "
                                      "supported)");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  StreamUrl out;
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  const size_t colon = authority.rfind(':');
  const bool bracketed = authority.starts_with('[');
  if (colon == std::string_view::npos || (bracketed && authority[colon - 1] != ']')) {
    out.host = std::string(authority);
    out.port = "80";
  } else {
    out.host = std::string(authority.substr(0, colon));
    out.port = std::string(authority.substr(colon + 1));
  }
  if (bracketed && out.host.size() >= 2) out.host = out.host.substr(1, out.host.size() - 2);
  if (out.host.empty() || out.port.empty() ||
      out.target.find_first_of("\r\n ") != std::string::npos) {
    return base::invalidArgumentError("the runtime's streaming URL \"" + std::string(url) +
                                      "\" is malformed");
  }
  return out;
}

std::string proxiedRequestHead(const HttpRequest& request, const StreamUrl& url) {
  std::string head = request.method + " " + url.target + " HTTP/1.1\r\n";
  const bool v6 = url.host.find(':') != std::string::npos;
  head += "Host: " + (v6 ? "[" + url.host + "]" : url.host) + ":" + url.port + "\r\n";
  for (const auto& [name, value] : request.headers) {
    if (dropped(name)) continue;
    head += name + ": " + value + "\r\n";
  }
  head += "\r\n";
  return head;
}

asio::awaitable<void> proxyStream(std::shared_ptr<HttpCall> call, std::string url_text) {
  auto url = parseStreamUrl(url_text);
  if (!url.ok()) {
    auto respond = call->respond(statusResponse(500, url.status().message()));
    co_await std::move(respond);
    co_return;
  }
  auto connecting = connectTo(*url);
  auto runtime = co_await std::move(connecting);
  if (!runtime.ok()) {
    log()->warn("Cannot proxy a stream to the runtime url={} err={}", url_text,
                runtime.status().toString());
    auto respond = call->respond(statusResponse(502, runtime.status().message()));
    co_await std::move(respond);
    co_return;
  }
  // Both directions at once, on the call's strand; the pipe outlives whichever ends last.
  struct Pipe {
    Pipe(std::unique_ptr<tcp::socket> s, const asio::any_io_executor& ex)
        : socket(std::move(s)), done(ex) {}
    std::unique_ptr<tcp::socket> socket;
    std::unique_ptr<ByteStream> client;
    bool upstream_ended = false;
    StrandEvent done;
  };
  auto executor = co_await asio::this_coro::executor;
  auto pipe = std::make_shared<Pipe>(std::move(*runtime), executor);
  const std::string head = proxiedRequestHead(call->request(), *url);
  error_code ec;
  co_await asio::async_write(*pipe->socket, asio::buffer(head),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    auto respond = call->respond(
        statusResponse(502, "cannot send the request to " + url_text + ": " + ec.message()));
    co_await std::move(respond);
    co_return;
  }
  auto taking = call->takeOver();
  pipe->client = co_await std::move(taking);
  if (!pipe->client) co_return;
  asio::co_spawn(
      executor,
      [pipe]() -> asio::awaitable<void> {
        co_await clientToRuntime(*pipe->client, *pipe->socket);
        pipe->upstream_ended = true;
        pipe->done.notify();
      },
      asio::detached);
  auto downstream = runtimeToClient(*pipe->socket, *pipe->client);
  co_await std::move(downstream);
  // The runtime ended (or the client did): end both, then wait for the other direction.
  auto closing = pipe->client->close();
  co_await std::move(closing);
  pipe->socket->close(ec);
  while (!pipe->upstream_ended) {
    auto waiting = pipe->done.wait();
    co_await std::move(waiting);
  }
}

}  // namespace nodeagent::agent
