#include "agent/server/kubelet_port_forward.h"

#include <map>
#include <set>
#include <utility>

#include "agent/server/kubelet_port_forward_websocket.h"
#include "agent/server/kubelet_request.h"
#include "agent/server/pod_port.h"
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

using tcp = asio::ip::tcp;
using boost::system::error_code;

// The streams of one session, paired by request, and the connections their forwards made.
class Forwarder : public std::enable_shared_from_this<Forwarder> {
 public:
  Forwarder(asio::any_io_executor executor, PodPortTarget pod)
      : executor_(std::move(executor)), pod_(std::move(pod)) {}

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
  std::string requestId(const SpdyStream& stream, std::string_view type) const;

  asio::any_io_executor executor_;
  PodPortTarget pod_;
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
  const auto port = parsePodPort(stream->header("port"));
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
  auto dialing = dialPodPort(*socket, port, self->pod_);
  const std::optional<std::string> failure = co_await std::move(dialing);
  if (failure) {
    auto writing = pair.error->write(*failure);
    co_await std::move(writing);
  } else if (!self->stopped_) {
    asio::co_spawn(self->executor_, toPod(pair.data, socket), asio::detached);
    auto pumping = pumpFromPod(
        *socket, [data = pair.data](std::string_view bytes) { return data->write(bytes); });
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

// A WebSocket without the SPDY tunnel: kubelet's channel protocol, or a 400 saying why not.
asio::awaitable<void> serveChannels(std::shared_ptr<HttpCall> call, PodPortTarget pod) {
  const HttpRequest& request = call->request();
  auto ports = webSocketForwardPorts(request);
  std::optional<HttpResponse> refusal;
  if (!ports.ok()) {
    refusal = statusResponse(400, ports.status().message());
  } else if (hasHeader(request, "Sec-WebSocket-Protocol") &&
             !headerOffers(request, "Sec-WebSocket-Protocol", kPortForwardChannelProtocol)) {
    refusal = statusResponse(400,
                             "unable to upgrade: port forwarding over WebSocket needs the "
                             "subprotocol " +
                                 std::string(kPortForwardChannelProtocol) + " or " +
                                 std::string(kTunnelProtocol));
  }
  if (refusal) {
    auto refusing = call->respond(std::move(*refusal));
    co_await std::move(refusing);
    co_return;
  }
  auto serving = serveWebSocketPortForward(std::move(call), std::move(pod), std::move(*ports));
  co_await std::move(serving);
}

}  // namespace

asio::awaitable<void> servePortForward(std::shared_ptr<HttpCall> call, base::Clock& clock,
                                       PodPortTarget pod, SpdyLimits limits) {
  if (call->isWebSocketRequest() &&
      !headerOffers(call->request(), "Sec-WebSocket-Protocol", kTunnelProtocol)) {
    auto serving = serveChannels(std::move(call), std::move(pod));
    co_await std::move(serving);
    co_return;
  }
  auto upgrading = upgrade(*call);
  std::unique_ptr<ByteStream> transport = co_await std::move(upgrading);
  if (!transport) co_return;
  auto executor = co_await asio::this_coro::executor;
  auto session = std::make_shared<SpdySession>(std::move(transport), executor, clock, limits);
  auto forwarder = std::make_shared<Forwarder>(executor, std::move(pod));
  auto running = session->run(
      [forwarder](std::shared_ptr<SpdyStream> stream) { forwarder->onStream(std::move(stream)); });
  co_await std::move(running);
  forwarder->stop();
}

}  // namespace nodeagent::agent
