// A deliberately misbehaving HTTP server on 127.0.0.1:<ephemeral>, on raw sockets, for tests of
// the agent's HTTP clients: endless or oversized response headers, oversized bodies, answers
// dripped byte by byte. One connection at a time, on its own thread; every behaviour stops when
// the client goes away, when the server is destroyed, or at a cap of its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace nodeagent::testing {

// Per-connection view the behaviours write through.
class HostileConnection {
 public:
  HostileConnection(int fd, const std::atomic<bool>& stopping, std::atomic<uint64_t>& sent)
      : fd_(fd), stopping_(stopping), sent_(sent) {}
  // Writes everything; false once the peer is gone or the server stops.
  bool send(std::string_view data);
  bool stopping() const { return stopping_.load(); }
  // Waits up to `ms`, returning early (false) when the server stops.
  bool pause(int ms);

 private:
  int fd_;
  const std::atomic<bool>& stopping_;
  std::atomic<uint64_t>& sent_;
};

class HostileHttpServer {
 public:
  // Called for each connection after its request head was read.
  using Behaviour = std::function<void(HostileConnection&)>;

  explicit HostileHttpServer(Behaviour behaviour);
  ~HostileHttpServer();
  HostileHttpServer(const HostileHttpServer&) = delete;
  HostileHttpServer& operator=(const HostileHttpServer&) = delete;

  void setBehaviour(Behaviour behaviour);
  int port() const { return port_; }
  std::string url(const std::string& path = "/") const;
  uint64_t bytesSent() const { return sent_.load(); }
  int connections() const { return connections_.load(); }

  // Ready-made behaviours.
  // A status line, then header lines of ~1 KiB without end (up to `cap` bytes).
  static Behaviour endlessHeaders(uint64_t cap = 256ull << 20);
  // `count` short header lines, then an empty 200 answer.
  static Behaviour manyHeaders(int count);
  // One header line of `bytes` bytes.
  static Behaviour longHeaderLine(size_t bytes);
  // A 200 answer whose body is `bytes` bytes of `fill`; chunked encoding when `chunked`.
  static Behaviour bigBody(uint64_t bytes, bool chunked, char fill = 'x');
  // The status line, then one header byte every `interval_ms`.
  static Behaviour drip(int interval_ms);
  // A complete, well-formed 200 answer.
  static Behaviour ok(std::string body, std::string content_type = "application/json");

 private:
  void serve();

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> sent_{0};
  std::atomic<int> connections_{0};
  std::mutex mu_;
  Behaviour behaviour_;
  std::thread thread_;
};

// Resident-memory peak of this process since the last resetPeakRss(), in bytes. Returns the
// current RSS (and false from resetPeakRss) where the kernel cannot reset the peak.
bool resetPeakRss();
uint64_t peakRss();

}  // namespace nodeagent::testing
