#include "agent/server/kubelet_port_forward.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <map>
#include <set>
#include <utility>

#include "agent/server/kubelet_request.h"
#include "agent/server/spdy_upgrade.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

constexpr std::string_view kPortForwardProtocol = "portforward.k8s.io";
constexpr std::string_view kTunnelProtocol = "SPDY/3.1+portforward.k8s.io";
// Pairs waiting for their second stream, at most (each holds an open stream, so the session's
// stream limit bounds them too).
constexpr size_t kMaxPendingPairs = 64;
constexpr size_t kPumpChunk = 32 * 1024;

using tcp = asio::ip::tcp;
using boost::system::error_code;

std::optional<uint16_t> parsePort(std::string_view s) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < 1 || value > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(value);
}

// Go's error text for a failed dial ("connect: connection refused").
std::string dialError(uint16_t port, const error_code& ec) {
  std::string why = ec.message();
  if (!why.empty()) why[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(why[0])));
  return fmt::format("dial tcp4 127.0.0.1:{}: connect: {}", port, why);
}

// The streams of one session, paired by request, and the connections their forwards made.
class Forwarder : public std::enable_shared_from_this<Forwarder> {
 public:
  Forwarder(asio::any_io_executor executor, std::string pod_uid)
      : executor_(std::move(executor)), pod_uid_(std::move(pod_uid)) {}

  void onStream(std::shared_ptr<SpdyStream> stream);
  // The session ended: every connection still open is closed (its pumps then end).
  void stop();

 private:
  struct Pair {
    std::shared_ptr<SpdyStream> data;
    std::shared_ptr<SpdyStream> error;
  };

  static asio::awaitable<void> forward(std::shared_ptr<Forwarder> self, Pair pair, uint16_t port);
  static asio::awaitable<void> toPod(std::shared_ptr<SpdyStream> data,
                                     std::shared_ptr<tcp::socket> socket);
  static asio::awaitable<void> fromPod(std::shared_ptr<tcp::socket> socket,
                                       std::shared_ptr<SpdyStream> data);
  std::string requestId(const SpdyStream& stream, std::string_view type) const;

  asio::any_io_executor executor_;
  std::string pod_uid_;
  std::map<std::string, Pair> pending_;
  std::set<std::shared_ptr<tcp::socket>> sockets_;
  bool stopped_ = false;
};

std::string Forwarder::requestId(const SpdyStream& stream, std::string_view type) const {
  std::string id(stream.header("requestID"));
  if (!id.empty()) return id;
  // Clients older than the requestID header open the error stream, then the data stream, with
  // consecutive (odd) ids: kubelet pairs them the same way.
  return std::to_string(type == "error" ? stream.id() : stream.id() - 2);
}

void Forwarder::onStream(std::shared_ptr<SpdyStream> stream) {
  const auto port = parsePort(stream->header("port"));
  const std::string_view type = stream->header("streamType");
  if (!port || (type != "error" && type != "data") || stopped_) {
    log()->debug("Port-forward stream refused id={} port={} streamType={}", stream->id(),
                 stream->header("port"), type);
    stream->reset(spdy::kCancel);
    return;
  }
  stream->reply();
  const std::string id = requestId(*stream, type);
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    if (pending_.size() >= kMaxPendingPairs) {
      std::erase_if(pending_, [](const auto& e) {
        const Pair& p = e.second;
        return (p.data == nullptr || p.data->broken()) && (p.error == nullptr || p.error->broken());
      });
    }
    if (pending_.size() >= kMaxPendingPairs) {
      stream->reset(spdy::kRefusedStream);
      return;
    }
    it = pending_.emplace(id, Pair{}).first;
  }
  auto& slot = type == "data" ? it->second.data : it->second.error;
  if (slot != nullptr) {
    log()->debug("Port-forward request has two {} streams request={}", type, id);
    stream->reset(spdy::kProtocolError);
    return;
  }
  slot = std::move(stream);
  if (it->second.data == nullptr || it->second.error == nullptr) return;
  Pair pair = std::move(it->second);
  pending_.erase(it);
  asio::co_spawn(executor_, forward(shared_from_this(), std::move(pair), *port), asio::detached);
}

void Forwarder::stop() {
  stopped_ = true;
  pending_.clear();
  for (const auto& socket : sockets_) {
    error_code ignored;
    socket->close(ignored);
  }
}

asio::awaitable<void> Forwarder::forward(std::shared_ptr<Forwarder> self, Pair pair,
                                         uint16_t port) {
  auto socket = std::make_shared<tcp::socket>(self->executor_);
  self->sockets_.insert(socket);
  error_code ec;
  const tcp::endpoint pod(asio::ip::address_v4::loopback(), port);
  co_await socket->async_connect(pod, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec && self->stopped_) ec = asio::error::operation_aborted;
  if (ec) {
    const std::string message = fmt::format("error forwarding port {} to pod {}, uid : {}", port,
                                            self->pod_uid_, dialError(port, ec));
    log()->debug("Port forward failed err={}", message);
    auto writing = pair.error->write(message);
    co_await std::move(writing);
  } else {
    asio::co_spawn(self->executor_, toPod(pair.data, socket), asio::detached);
    auto pumping = fromPod(socket, pair.data);
    co_await std::move(pumping);
  }
  pair.data->closeWrite();
  pair.error->closeWrite();
  self->sockets_.erase(socket);
  error_code ignored;
  socket->close(ignored);
}

asio::awaitable<void> Forwarder::toPod(std::shared_ptr<SpdyStream> data,
                                       std::shared_ptr<tcp::socket> socket) {
  while (true) {
    auto reading = data->read();
    std::optional<std::string> chunk = co_await std::move(reading);
    if (!chunk) break;
    error_code ec;
    co_await asio::async_write(*socket, asio::buffer(*chunk),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  error_code ignored;
  if (data->broken()) {
    socket->close(ignored);  // the client reset the stream: nothing more goes either way
  } else {
    socket->shutdown(tcp::socket::shutdown_send, ignored);  // the client's end of input
  }
}

asio::awaitable<void> Forwarder::fromPod(std::shared_ptr<tcp::socket> socket,
                                         std::shared_ptr<SpdyStream> data) {
  std::string buffer(kPumpChunk, '\0');
  while (true) {
    error_code ec;
    const size_t n = co_await socket->async_read_some(
        asio::buffer(buffer), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || n == 0) break;
    auto writing = data->write(std::string_view(buffer).substr(0, n));
    const bool written = co_await std::move(writing);
    if (!written) break;
  }
}

// Upgrades the call to a SPDY byte stream (plain, or tunnelled in a WebSocket); null when it was
// answered instead.
asio::awaitable<std::unique_ptr<ByteStream>> upgrade(HttpCall& call) {
  if (call.isWebSocketRequest()) {
    auto accepting = call.acceptWebSocket({std::string(kTunnelProtocol)});
    co_return co_await std::move(accepting);
  }
  // A client that names no protocol is an old one, served all the same.
  auto upgrading = acceptSpdyUpgrade(call, {std::string(kPortForwardProtocol)});
  SpdyUpgrade upgraded = co_await std::move(upgrading);
  co_return std::move(upgraded.transport);
}

}  // namespace

asio::awaitable<void> servePortForward(std::shared_ptr<HttpCall> call, base::Clock& clock,
                                       std::string pod_uid, SpdyLimits limits) {
  if (call->isWebSocketRequest() &&
      !headerOffers(call->request(), "Sec-WebSocket-Protocol", kTunnelProtocol)) {
    auto refusing = call->respond(statusResponse(
        400, "unable to upgrade: port forwarding over WebSocket needs the subprotocol " +
                 std::string(kTunnelProtocol)));
    co_await std::move(refusing);
    co_return;
  }
  auto upgrading = upgrade(*call);
  std::unique_ptr<ByteStream> transport = co_await std::move(upgrading);
  if (!transport) co_return;
  auto executor = co_await asio::this_coro::executor;
  auto session = std::make_shared<SpdySession>(std::move(transport), executor, clock, limits);
  auto forwarder = std::make_shared<Forwarder>(executor, std::move(pod_uid));
  auto running = session->run(
      [forwarder](std::shared_ptr<SpdyStream> stream) { forwarder->onStream(std::move(stream)); });
  co_await std::move(running);
  forwarder->stop();
}

}  // namespace nodeagent::agent
