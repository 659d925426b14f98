// HttpCall: a request answered by a coroutine handler (a whole response, a chunked stream, an
// upgrade to WebSocket or a raw upgrade after a 101), and how a connection runs one.
#include <array>
#include <cstdio>
#include <exception>
#include <shared_mutex>
#include <utility>

#include "agent/server/http_connection.h"
#include "agent/server/http_transport.h"
#include "base/log.h"
#include "base/strings.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

using boost::system::error_code;

bool containsToken(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (base::iequals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

class HttpCallImpl final : public HttpCall {
 public:
  HttpCallImpl(std::shared_ptr<HttpConnection> conn, HttpRequest request, bool keep_alive)
      : conn_(std::move(conn)), request_(std::move(request)), keep_alive_(keep_alive) {}

  const HttpRequest& request() const override { return request_; }

  asio::awaitable<void> respond(HttpResponse response) override {
    if (phase_ != Phase::kFresh) co_return;
    phase_ = Phase::kAnswered;
    std::string body = std::move(response.body);
    if (response.body_pieces) {
      for (std::string_view piece : *response.body_pieces) body.append(piece);
    }
    const std::string head =
        conn_->responseHead(response.status, response.content_type, body.size(), keep_alive_);
    const bool head_only = request_.method == "HEAD";
    const std::array<asio::const_buffer, 2> buffers{
        asio::buffer(head), asio::buffer(head_only ? std::string_view() : std::string_view(body))};
    answered_whole_ = co_await writeAll(buffers);
  }

  asio::awaitable<bool> beginStream(int status, std::string content_type) override {
    if (phase_ != Phase::kFresh) co_return false;
    phase_ = Phase::kStreaming;
    const std::string head = conn_->responseHead(status, content_type, std::nullopt, false);
    const std::array<asio::const_buffer, 1> buffers{asio::buffer(head)};
    const bool ok = co_await writeAll(buffers);
    if (ok) watchForClose();
    co_return ok;
  }

  asio::awaitable<bool> writeStream(std::string_view data) override {
    if (phase_ != Phase::kStreaming) co_return false;
    if (data.empty()) co_return !closed();
    char size[24];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    const std::array<asio::const_buffer, 3> buffers{asio::buffer(size, static_cast<size_t>(n)),
                                                    asio::buffer(data.data(), data.size()),
                                                    asio::buffer("\r\n", 2)};
    co_return co_await writeAll(buffers);
  }

  bool isWebSocketRequest() const override {
    return containsToken(request_.header("Connection"), "upgrade") &&
           containsToken(request_.header("Upgrade"), "websocket");
  }

  asio::awaitable<std::unique_ptr<WebSocket>> acceptWebSocket(
      std::vector<std::string> protocols) override {
    if (phase_ != Phase::kFresh || !isWebSocketRequest()) co_return nullptr;
    phase_ = Phase::kUpgraded;
    auto task = agent::acceptWebSocket(conn_, conn_->socket_, conn_->tls_.get(), request_,
                                       std::move(protocols));
    co_return co_await std::move(task);
  }

  std::string upgradeProtocol() const override {
    if (!containsToken(request_.header("Connection"), "upgrade")) return "";
    std::string_view value = request_.header("Upgrade");
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    return std::string(value);
  }

  asio::awaitable<std::unique_ptr<ByteStream>> acceptUpgrade(
      std::vector<std::pair<std::string, std::string>> headers) override {
    if (phase_ != Phase::kFresh) co_return nullptr;
    phase_ = Phase::kUpgraded;
    std::string head = "HTTP/1.1 101 Switching Protocols\r\n";
    for (const auto& [name, value] : headers) {
      // A name or value that could end the head early is the caller's bug; never sent.
      if (name.find_first_of("\r\n:") != std::string::npos ||
          value.find_first_of("\r\n") != std::string::npos) {
        continue;
      }
      head += name + ": " + value + "\r\n";
    }
    head += "\r\n";
    const std::array<asio::const_buffer, 1> buffers{asio::buffer(head)};
    const bool ok = co_await writeAll(buffers);
    if (!ok) co_return nullptr;
    co_return rawStream();
  }

  asio::awaitable<std::unique_ptr<ByteStream>> takeOver() override {
    if (phase_ != Phase::kFresh) co_return nullptr;
    phase_ = Phase::kUpgraded;
    co_return rawStream();
  }

  bool closed() const override { return conn_->closed_; }

  // After the handler: a handler that did not answer gets a 500; a stream ends with its last
  // chunk. Then the connection serves its next request or ends.
  asio::awaitable<void> finish() {
    if (phase_ == Phase::kFresh && !closed()) {
      log()->warn("HTTP handler gave no answer path={}", request_.path);
      auto task = respond(HttpResponse{500, "text/plain", "internal error\n", nullptr});
      co_await std::move(task);
    }
    if (phase_ == Phase::kStreaming && !closed()) {
      const std::array<asio::const_buffer, 1> last{asio::buffer("0\r\n\r\n", 5)};
      co_await writeAll(last);
    }
    conn_->finishCall(phase_ == Phase::kAnswered && answered_whole_ && keep_alive_);
  }

 private:
  enum class Phase { kFresh, kAnswered, kStreaming, kUpgraded };

  // The connection's bytes from here; what the client sent after the request (it may not wait
  // for an answer) comes first.
  std::unique_ptr<ByteStream> rawStream() {
    std::string early(static_cast<const char*>(conn_->buffer_.data().data()),
                      conn_->buffer_.size());
    conn_->buffer_.consume(conn_->buffer_.size());
    return std::make_unique<RawStream>(conn_, std::move(early));
  }

  // One write, bounded by the server's write timeout (which closes the connection).
  template <typename Buffers>
  asio::awaitable<bool> writeAll(const Buffers& buffers) {
    if (closed()) co_return false;
    conn_->arm(conn_->state_->options.write_timeout);
    error_code ec;
    auto task = withStream(conn_->socket_, conn_->tls_.get(), [&](auto& stream) {
      return asio::async_write(stream, buffers, asio::redirect_error(asio::use_awaitable, ec));
    });
    co_await std::move(task);
    conn_->timer_->cancel();
    if (ec) conn_->close();
    co_return !ec && !closed();
  }

  // While a body streams the peer sends nothing more; a read that ends is the peer gone.
  void watchForClose() { watchForClose(conn_, std::make_shared<std::array<char, 512>>()); }
  static void watchForClose(std::shared_ptr<HttpConnection> conn,
                            std::shared_ptr<std::array<char, 512>> buffer) {
    if (conn->closed_) return;
    withStream(conn->socket_, conn->tls_.get(), [&](auto& stream) {
      stream.async_read_some(asio::buffer(*buffer),
                             [conn, buffer](const error_code& ec, size_t) mutable {
                               if (ec) {
                                 conn->close();
                                 return;
                               }
                               watchForClose(std::move(conn), std::move(buffer));
                             });
    });
  }

  // The connection's bytes after a raw upgrade. Holds the connection, which ends with the call.
  class RawStream final : public ByteStream {
   public:
    RawStream(std::shared_ptr<HttpConnection> conn, std::string early)
        : conn_(std::move(conn)), early_(std::move(early)) {}

    asio::awaitable<std::optional<std::string>> read() override {
      if (!early_.empty()) co_return std::exchange(early_, std::string());
      if (conn_->closed_) co_return std::nullopt;
      std::string data(kRawReadSize, '\0');
      error_code ec;
      size_t n = 0;
      auto task = withStream(conn_->socket_, conn_->tls_.get(), [&](auto& stream) {
        return stream.async_read_some(asio::buffer(data),
                                      asio::redirect_error(asio::use_awaitable, ec));
      });
      n = co_await std::move(task);
      if (ec || n == 0) co_return std::nullopt;
      data.resize(n);
      co_return data;
    }

    asio::awaitable<bool> write(std::string_view data) override {
      if (conn_->closed_) co_return false;
      conn_->arm(conn_->state_->options.write_timeout);
      error_code ec;
      auto task = withStream(conn_->socket_, conn_->tls_.get(), [&](auto& stream) {
        return asio::async_write(stream, asio::buffer(data.data(), data.size()),
                                 asio::redirect_error(asio::use_awaitable, ec));
      });
      co_await std::move(task);
      conn_->timer_->cancel();
      if (ec) conn_->close();
      co_return !ec && !conn_->closed_;
    }

    asio::awaitable<void> close() override {
      conn_->close();
      co_return;
    }

   private:
    static constexpr size_t kRawReadSize = 16 * 1024;
    std::shared_ptr<HttpConnection> conn_;
    std::string early_;
  };

  std::shared_ptr<HttpConnection> conn_;
  HttpRequest request_;
  const bool keep_alive_;
  Phase phase_ = Phase::kFresh;
  bool answered_whole_ = false;
};

namespace {

asio::awaitable<void> runCall(HttpCoroutineHandler handler, std::shared_ptr<HttpCallImpl> call) {
  try {
    auto task = handler(call);
    co_await std::move(task);
  } catch (const std::exception& e) {
    log()->warn("HTTP handler failed path={} err={}", call->request().path, e.what());
  }
  co_await call->finish();
}

}  // namespace

void HttpConnection::startCall(HttpCoroutineHandler handler) {
  timer_->cancel();  // the handler's writes are timed one by one
  {
    std::lock_guard lock(state_->calls_mu);
    ++state_->calls;
  }
  const bool keep_alive = parser_->keep_alive();
  auto call =
      std::make_shared<HttpCallImpl>(shared_from_this(), std::move(parser_->request()), keep_alive);
  asio::co_spawn(socket_.get_executor(), runCall(std::move(handler), std::move(call)),
                 [state = state_](std::exception_ptr) {
                   std::lock_guard lock(state->calls_mu);
                   --state->calls;
                 });
}

void HttpConnection::finishCall(bool answered_whole) {
  if (closed_) return;
  if (!answered_whole) {
    close();
    return;
  }
  nextRequest();
}

}  // namespace nodeagent::agent
