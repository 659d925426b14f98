// The WebSocket of an upgraded request, on Boost.Beast, over the connection's socket or TLS
// stream.
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>

#include "agent/server/http_transport.h"

namespace nodeagent::agent {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace ws = boost::beast::websocket;
using boost::system::error_code;

// kubectl sends stdin in messages of at most 32 KiB; a larger message is a protocol error.
constexpr size_t kMaxMessage = 4 * 1024 * 1024;
constexpr std::chrono::hours kIdleTimeout{4};

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

template <typename Next>
class BeastWebSocket final : public WebSocket {
 public:
  BeastWebSocket(std::shared_ptr<void> keep, Next& next, std::string protocol)
      : keep_(std::move(keep)), ws_(next), protocol_(std::move(protocol)) {
    ws_.read_message_max(kMaxMessage);
    ws_.binary(true);
    // kubelet's streamingConnectionIdleTimeout (4h): an exec without stdin or an attach that
    // only reads sends nothing for long; pings keep such a connection known alive.
    auto timeout = ws::stream_base::timeout::suggested(beast::role_type::server);
    timeout.idle_timeout = kIdleTimeout;
    timeout.keep_alive_pings = true;
    ws_.set_option(timeout);
    ws_.set_option(ws::stream_base::decorator([p = protocol_](ws::response_type& res) {
      if (!p.empty()) res.set(http::field::sec_websocket_protocol, p);
    }));
  }

  asio::awaitable<bool> accept(const HttpRequest& request) {
    http::request<http::empty_body> req;
    req.method_string(request.method);
    req.target(request.target);
    req.version(11);
    for (const auto& [name, value] : request.headers) req.insert(name, value);
    error_code ec;
    co_await ws_.async_accept(req, asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec;
  }

  const std::string& protocol() const override { return protocol_; }

  asio::awaitable<std::optional<std::string>> read() override {
    beast::flat_buffer buffer;
    error_code ec;
    co_await ws_.async_read(buffer, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return std::nullopt;
    co_return beast::buffers_to_string(buffer.data());
  }

  asio::awaitable<bool> write(std::string_view message) override {
    error_code ec;
    co_await ws_.async_write(asio::buffer(message.data(), message.size()),
                             asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec;
  }

  asio::awaitable<void> close() override {
    if (!ws_.is_open()) co_return;
    error_code ec;
    co_await ws_.async_close(ws::close_code::normal, asio::redirect_error(asio::use_awaitable, ec));
  }

 private:
  std::shared_ptr<void> keep_;
  ws::stream<Next&> ws_;
  std::string protocol_;
};

template <typename Next>
asio::awaitable<std::unique_ptr<WebSocket>> accept(std::shared_ptr<void> keep, Next& next,
                                                   const HttpRequest& request,
                                                   std::string protocol) {
  auto socket = std::make_unique<BeastWebSocket<Next>>(std::move(keep), next, std::move(protocol));
  const bool ok = co_await socket->accept(request);
  if (!ok) co_return nullptr;
  co_return std::move(socket);
}

}  // namespace

std::string chooseSubprotocol(std::string_view offered, const std::vector<std::string>& supported) {
  while (!offered.empty()) {
    const size_t comma = offered.find(',');
    const std::string candidate = trim(offered.substr(0, comma));
    for (const auto& s : supported) {
      if (s == candidate) return s;
    }
    if (comma == std::string_view::npos) break;
    offered.remove_prefix(comma + 1);
  }
  return "";
}

asio::awaitable<std::unique_ptr<WebSocket>> acceptWebSocket(std::shared_ptr<void> keep,
                                                            asio::ip::tcp::socket& socket,
                                                            TlsTransport* tls,
                                                            const HttpRequest& request,
                                                            std::vector<std::string> protocols) {
  std::string protocol = chooseSubprotocol(request.header("Sec-WebSocket-Protocol"), protocols);
  if (tls != nullptr) {
    auto task = accept(std::move(keep), tls->stream, request, std::move(protocol));
    co_return co_await std::move(task);
  }
  auto task = accept(std::move(keep), socket, request, std::move(protocol));
  co_return co_await std::move(task);
}

}  // namespace nodeagent::agent
