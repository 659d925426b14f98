#include "agent/server/pod_port.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

constexpr size_t kPumpChunk = 32 * 1024;

using boost::system::error_code;

// Go's error text for a failed dial ("connect: connection refused").
std::string dialError(uint16_t port, const error_code& ec) {
  std::string why = ec.message();
  if (!why.empty()) why[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(why[0])));
  return fmt::format("dial tcp4 127.0.0.1:{}: connect: {}", port, why);
}

}  // namespace

std::optional<uint16_t> parsePodPort(std::string_view s) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < 1 || value > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(value);
}

PodPortTarget PodPortTarget::of(const api::Pod& pod) {
  PodPortTarget target;
  target.uid = pod.metadata.uid;
  target.host_network = pod.spec->host_network;
  for (const auto* containers : {&pod.spec->containers, &pod.spec->init_containers}) {
    for (const auto& c : *containers) {
      for (const auto& p : c.ports) {
        if (p.protocol == "TCP" && p.container_port > 0 && p.container_port <= 65535) {
          target.declared.push_back(static_cast<uint16_t>(p.container_port));
        }
      }
    }
  }
  return target;
}

bool PodPortTarget::allows(uint16_t port) const {
  return host_network || std::find(declared.begin(), declared.end(), port) != declared.end();
}

asio::awaitable<std::optional<std::string>> dialPodPort(asio::ip::tcp::socket& socket,
                                                        uint16_t port, const PodPortTarget& pod) {
  const std::string_view pod_uid = pod.uid;
  if (!pod.allows(port)) {
    std::string message = fmt::format(
        "error forwarding port {} to pod {}, uid : port {} is not a containerPort of the pod "
        "(its containers share the node's network: only declared ports are forwarded, any port "
        "only for a hostNetwork pod)",
        port, pod_uid, port);
    log()->info("Refusing a port forward to an undeclared port port={} pod_uid={}", port, pod_uid);
    co_return message;
  }
  error_code ec;
  const asio::ip::tcp::endpoint endpoint(asio::ip::address_v4::loopback(), port);
  co_await socket.async_connect(endpoint, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) co_return std::nullopt;
  std::string message = fmt::format("error forwarding port {} to pod {}, uid : {}", port, pod_uid,
                                    dialError(port, ec));
  log()->debug("Port forward failed err={}", message);
  co_return message;
}

asio::awaitable<void> pumpFromPod(asio::ip::tcp::socket& socket, PodDataSink sink) {
  std::string buffer(kPumpChunk, '\0');
  while (true) {
    error_code ec;
    const size_t n = co_await socket.async_read_some(asio::buffer(buffer),
                                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec || n == 0) break;
    auto writing = sink(std::string_view(buffer).substr(0, n));
    const bool written = co_await std::move(writing);
    if (!written) break;
  }
}

}  // namespace nodeagent::agent
