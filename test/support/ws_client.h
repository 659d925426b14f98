// A WebSocket client for tests of the kubelet API (Boost.Beast, TLS with an optional client
// certificate, or plain): blocking calls, each bounded by a deadline.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nodeagent::testing {

struct WsClientOptions {
  bool tls = true;
  std::filesystem::path client_cert;  // with client_key: presented to the server
  std::filesystem::path client_key;
  std::string bearer_token;
  std::vector<std::string> protocols;  // Sec-WebSocket-Protocol, in order
  std::chrono::milliseconds timeout{10'000};
};

class WsClient {
 public:
  WsClient();
  ~WsClient();
  // Connects to 127.0.0.1:`port` and upgrades `target`. On failure, error() says why and
  // httpStatus() is the refusing answer's status (0 when there was none).
  bool connect(int port, const std::string& target, const WsClientOptions& options);
  const std::string& protocol() const;
  int httpStatus() const;
  const std::string& httpBody() const;
  const std::string& error() const;
  bool send(const std::string& message);
  // The next message, or nullopt at the close (or the deadline).
  std::optional<std::string> read();
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// kubelet's channel protocol, client side: every message of a session until the server closes
// it, demultiplexed.
struct ChannelOutput {
  std::string stdout_data;
  std::string stderr_data;
  std::string error;  // channel 3
  bool closed = false;
};
ChannelOutput readChannels(WsClient& client);

}  // namespace nodeagent::testing
