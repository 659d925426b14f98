// The test apiserver's connections as sockets: finding (and shutting down) the connections its
// httplib server accepted, dialing a kubelet over TLS with the apiserver's client certificate,
// and tunnelling bytes between a client connection taken over from httplib and the kubelet
// (kube-apiserver's UpgradeAwareHandler: the kubelet's answer, a 101 Switching Protocols and its
// stream, or a streamed log, goes to the client verbatim).
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace nodeagent::testapiserver {

// True when `fd` is a TCP connection whose local port is `port` and not a listening socket: a
// connection this process accepted on `port`. A client connection in this process to that port
// has an ephemeral local port and does not match.
bool acceptedOnPort(int fd, int port);

// Shuts down (SHUT_RDWR) every connection this process accepted on `port`. Each descriptor is
// checked and shut down through a duplicate, so a number that its owner closes and something
// else reuses in between is never touched.
void shutdownAcceptedConnections(int port);

// A duplicate (close-on-exec) of the connection accepted on `port` whose peer is
// `peer_addr`:`peer_port`; -1 when there is none.
int dupAcceptedConnection(int port, const std::string& peer_addr, int peer_port);

// One end of a tunnel: a connected socket, with the TLS session over it when there is one. The
// tunnel alone reads and writes it while it runs.
struct TunnelEnd {
  int fd = -1;
  SSL* ssl = nullptr;
};

// A TLS connection to a kubelet; closes on destruction.
class KubeletConnection {
 public:
  KubeletConnection(int fd, SSL* ssl) : end_{fd, ssl} {}
  ~KubeletConnection();
  KubeletConnection(const KubeletConnection&) = delete;
  KubeletConnection& operator=(const KubeletConnection&) = delete;
  TunnelEnd end() const { return end_; }

 private:
  TunnelEnd end_;
};

struct KubeletClientOptions {
  std::string client_certificate;     // PEM file; empty: no client certificate
  std::string client_key;             // PEM file, with client_certificate
  std::string certificate_authority;  // PEM file; empty: the kubelet's certificate is not checked
  std::chrono::milliseconds dial_timeout{std::chrono::seconds(10)};  // connect, then handshake
};

// Dials kubelets. Any thread; one SSL_CTX shared by every connection.
class KubeletDialer {
 public:
  // InvalidArgument naming the file that cannot be loaded.
  static base::StatusOr<std::unique_ptr<KubeletDialer>> create(KubeletClientOptions options);
  ~KubeletDialer();
  KubeletDialer(const KubeletDialer&) = delete;
  KubeletDialer& operator=(const KubeletDialer&) = delete;

  // TCP connect and TLS handshake, each within the dial timeout; the kubelet's certificate must
  // name `host` when a CA is set. Unavailable with kube-apiserver's wording ("error dialing
  // backend: dial tcp HOST:PORT: connect: connection refused") otherwise.
  base::StatusOr<std::unique_ptr<KubeletConnection>> dial(const std::string& host, int port);

 private:
  KubeletDialer(KubeletClientOptions options, SSL_CTX* ctx)
      : options_(std::move(options)), ctx_(ctx) {}
  base::Status handshake(SSL* ssl, const std::string& host, int port,
                         std::chrono::steady_clock::time_point deadline);

  KubeletClientOptions options_;
  SSL_CTX* ctx_;
};

// Moves bytes both ways between `client` and `backend`, `to_backend` first, until the client
// closes (or fails), the backend closes and what it sent has reached the client, either write
// fails, or `stopping` is set. Non-blocking sockets for the duration (flags restored after), one
// poll() loop, at most kTunnelBuffer bytes buffered per direction: a side that does not read holds
// the other back. Closes neither end.
inline constexpr size_t kTunnelBuffer = 64 * 1024;
struct TunnelResult {
  uint64_t to_client = 0;     // bytes the client got from the backend
  std::string backend_error;  // why reading or writing the backend failed ("" if it did not)
};
TunnelResult runTunnel(TunnelEnd client, TunnelEnd backend, std::string to_backend,
                       const std::atomic<bool>& stopping);

}  // namespace nodeagent::testapiserver
