// A forwarded connection's pod end, shared by kubelet's two port-forward protocols (SPDY streams,
// WebSocket channels): the port parsed, the connection made (the process runtime's containers
// share the host's network: 127.0.0.1:<port>) or kubelet's error message for the client, and the
// pod's bytes pumped to the client.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/pod.h"
#include "base/asio.h"

namespace nodeagent::agent {

// Which ports of a pod a client may reach. The process runtime's containers share the node's
// network, so a forward goes to the node's 127.0.0.1: a pod without hostNetwork is reached only
// on the ports its containers declare (containerPort), so that the right to forward to a pod
// (pods/portforward) is not a way to every service listening on the node's loopback. A
// hostNetwork pod (whose creation is itself a node-level right) is reached on any port, as kubelet
// does.
struct PodPortTarget {
  std::string uid;
  bool host_network = false;
  std::vector<uint16_t> declared;  // TCP containerPorts of its containers and init containers

  static PodPortTarget of(const api::Pod& pod);
  bool allows(uint16_t port) const;
};

// A port number 1..65535 in decimal, or nullopt.
std::optional<uint16_t> parsePodPort(std::string_view s);

// Connects `socket` to the pod's `port`; nullopt once connected, else the message kubelet writes
// on the error stream ("error forwarding port P to pod UID, uid : dial tcp4 127.0.0.1:P: connect:
// connection refused"), also for a port the pod does not allow.
asio::awaitable<std::optional<std::string>> dialPodPort(asio::ip::tcp::socket& socket,
                                                        uint16_t port, const PodPortTarget& pod);

// Hands what the pod sends to `sink` until the pod closes its end, the socket fails or `sink`
// returns false.
using PodDataSink = std::function<asio::awaitable<bool>(std::string_view)>;
asio::awaitable<void> pumpFromPod(asio::ip::tcp::socket& socket, PodDataSink sink);

}  // namespace nodeagent::agent
