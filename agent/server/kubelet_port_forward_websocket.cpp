#include "agent/server/kubelet_port_forward_websocket.h"

#include <algorithm>
#include <cctype>

#include "agent/server/kubelet_request.h"
#include "agent/server/pod_port.h"
#include "agent/server/strand_event.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

// Two channels a port, numbered in one byte.
constexpr size_t kMaxPorts = 127;

using tcp = asio::ip::tcp;
using boost::system::error_code;

// Why `item` is no port, as Go's strconv.ParseUint(item, 10, 16) says it.
std::string parseError(std::string_view item) {
  const bool digits = !item.empty() && std::all_of(item.begin(), item.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
  return "strconv.ParseUint: parsing \"" + std::string(item) +
         "\": " + (digits ? "value out of range" : "invalid syntax");
}

// The forwards of one WebSocket: a connection per port, the socket's messages demultiplexed to
// them, their data and errors multiplexed onto it (one write at a time).
class ChannelForwarder : public std::enable_shared_from_this<ChannelForwarder> {
 public:
  ChannelForwarder(const asio::any_io_executor& executor, std::unique_ptr<WebSocket> socket,
                   PodPortTarget pod, const std::vector<uint16_t>& ports)
      : executor_(executor),
        socket_(std::move(socket)),
        pod_(std::move(pod)),
        changed_(executor),
        writable_(executor) {
    for (const uint16_t port : ports) ports_.push_back(Port{port, tcp::socket(executor)});
  }

  static asio::awaitable<void> run(std::shared_ptr<ChannelForwarder> self);

 private:
  struct Port {
    uint16_t number;
    tcp::socket connection;
    bool connecting = true;
    bool open = false;  // connected, and its forward not ended
  };

  static asio::awaitable<void> forward(std::shared_ptr<ChannelForwarder> self, size_t i);
  static asio::awaitable<void> readClient(std::shared_ptr<ChannelForwarder> self);
  asio::awaitable<void> toPod(size_t channel, std::string data);
  asio::awaitable<bool> send(size_t channel, std::string_view data);
  void closeConnections();

  asio::any_io_executor executor_;
  std::unique_ptr<WebSocket> socket_;
  PodPortTarget pod_;
  std::vector<Port> ports_;
  StrandEvent changed_;   // a port connected or ended, the client went away
  StrandEvent writable_;  // a write to the socket ended
  size_t forwarding_ = 0;
  bool writing_ = false;
  bool client_gone_ = false;
};

asio::awaitable<void> ChannelForwarder::run(std::shared_ptr<ChannelForwarder> self) {
  // kubelet's first message on every channel: its port.
  for (size_t i = 0; i < self->ports_.size(); ++i) {
    const uint16_t n = self->ports_[i].number;
    const std::string port{static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
    auto data = self->send(2 * i, port);
    co_await std::move(data);
    auto error = self->send(2 * i + 1, port);
    co_await std::move(error);
  }
  self->forwarding_ = self->ports_.size();
  for (size_t i = 0; i < self->ports_.size(); ++i) {
    asio::co_spawn(self->executor_, forward(self, i), asio::detached);
  }
  asio::co_spawn(self->executor_, readClient(self), asio::detached);
  while (self->forwarding_ > 0 && !self->client_gone_) co_await self->changed_.wait();
  self->closeConnections();
  auto closing = self->socket_->close();
  co_await std::move(closing);
  while (self->forwarding_ > 0 || !self->client_gone_) co_await self->changed_.wait();
}

asio::awaitable<void> ChannelForwarder::forward(std::shared_ptr<ChannelForwarder> self, size_t i) {
  Port& port = self->ports_[i];
  auto dialing = dialPodPort(port.connection, port.number, self->pod_);
  const std::optional<std::string> failure = co_await std::move(dialing);
  port.connecting = false;
  port.open = !failure && !self->client_gone_;
  self->changed_.notify();
  if (failure) {
    auto writing = self->send(2 * i + 1, *failure);
    co_await std::move(writing);
  } else if (port.open) {
    auto pumping = pumpFromPod(
        port.connection, [self, i](std::string_view bytes) { return self->send(2 * i, bytes); });
    co_await std::move(pumping);
  }
  port.open = false;
  error_code ignored;
  port.connection.close(ignored);
  --self->forwarding_;
  self->changed_.notify();
}

// The client's messages: data for a port's connection (waiting for it to be made; dropped once
// it failed or ended). Ends when the client goes away or the socket is closed.
asio::awaitable<void> ChannelForwarder::readClient(std::shared_ptr<ChannelForwarder> self) {
  while (true) {
    auto reading = self->socket_->read();
    std::optional<std::string> message = co_await std::move(reading);
    if (!message) break;
    if (message->size() < 2) continue;
    const auto channel = static_cast<unsigned char>((*message)[0]);
    // Error channels are the server's; other channels are not the client's to use.
    if (channel % 2 != 0 || channel / 2 >= self->ports_.size()) continue;
    auto writing = self->toPod(channel, message->substr(1));
    co_await std::move(writing);
  }
  self->client_gone_ = true;
  self->closeConnections();
  self->changed_.notify();
}

asio::awaitable<void> ChannelForwarder::toPod(size_t channel, std::string data) {
  Port& port = ports_[channel / 2];
  while (port.connecting && !client_gone_) co_await changed_.wait();
  if (!port.open) co_return;
  error_code ec;
  co_await asio::async_write(port.connection, asio::buffer(data),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) log()->debug("Port forward write failed port={} err={}", port.number, ec.message());
}

asio::awaitable<bool> ChannelForwarder::send(size_t channel, std::string_view data) {
  while (writing_) co_await writable_.wait();
  writing_ = true;
  std::string message;
  message.reserve(data.size() + 1);
  message.push_back(static_cast<char>(channel));
  message.append(data);
  auto writing = socket_->write(message);
  const bool written = co_await std::move(writing);
  writing_ = false;
  writable_.notify();
  co_return written;
}

void ChannelForwarder::closeConnections() {
  for (Port& port : ports_) {
    error_code ignored;
    port.connection.close(ignored);
  }
}

}  // namespace

base::StatusOr<std::vector<uint16_t>> webSocketForwardPorts(const HttpRequest& request) {
  std::vector<uint16_t> ports;
  bool asked = false;
  for (const auto& [name, value] : parseQuery(request.query)) {
    if (name != "port") continue;
    asked = true;
    if (value.empty())
      return base::invalidArgumentError("query parameter \"port\" cannot be empty");
    std::string_view list = value;
    while (true) {
      const size_t comma = list.find(',');
      const std::string_view item = list.substr(0, comma);
      if (!item.empty() && item.find_first_not_of('0') == std::string_view::npos) {
        return base::invalidArgumentError("port \"" + value + "\" must be > 0");
      }
      const auto port = parsePodPort(item);
      if (!port) {
        return base::invalidArgumentError("unable to parse \"" + value +
                                          "\" as a port: " + parseError(item));
      }
      ports.push_back(*port);
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  if (!asked) return base::invalidArgumentError("query parameter \"port\" is required");
  if (ports.size() > kMaxPorts) {
    return base::invalidArgumentError("at most " + std::to_string(kMaxPorts) +
                                      " ports can be forwarded over one WebSocket");
  }
  return ports;
}

asio::awaitable<void> serveWebSocketPortForward(std::shared_ptr<HttpCall> call, PodPortTarget pod,
                                                std::vector<uint16_t> ports) {
  auto accepting = call->acceptWebSocket({std::string(kPortForwardChannelProtocol)});
  std::unique_ptr<WebSocket> socket = co_await std::move(accepting);
  if (!socket) co_return;
  auto executor = co_await asio::this_coro::executor;
  auto forwarder =
      std::make_shared<ChannelForwarder>(executor, std::move(socket), std::move(pod), ports);
  auto running = ChannelForwarder::run(forwarder);
  co_await std::move(running);
}

}  // namespace nodeagent::agent
