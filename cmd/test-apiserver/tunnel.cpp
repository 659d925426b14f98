#include "cmd/test-apiserver/tunnel.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace nodeagent::testapiserver {
namespace {

using Clock = std::chrono::steady_clock;

// How often a tunnel with nothing to do checks `stopping`.
constexpr int kTunnelPollMs = 500;
// The most one read or write moves.
constexpr size_t kIoChunk = 16 * 1024;

int portOf(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return -1;
}

std::string addressOf(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw =
      addr.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr);
  if (::inet_ntop(addr.ss_family, raw, text, sizeof(text)) == nullptr) return "";
  return text;
}

// Calls `fn` with a duplicate of each connection accepted on `port`; the duplicate is closed
// after the call unless `fn` returns true, which also ends the walk (the caller keeps it).
void forEachAcceptedConnection(int port, const std::function<bool(int)>& fn) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  const int dir_fd = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    const int dup = ::fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
    if (dup < 0) continue;
    if (acceptedOnPort(dup, port) && fn(dup)) break;
    ::close(dup);
  }
  ::closedir(dir);
}

std::string errnoText(int err) {
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(text[0]));
  return text;
}

std::string hostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

int remainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int r = ::poll(&p, 1, remainingMs(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;
  }
}

// A non-blocking connect to one resolved address: the socket, or -errno (-ETIMEDOUT when the
// deadline passed).
int connectOne(const addrinfo& ai, Clock::time_point deadline) {
  const int fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int err = 0;
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      socklen_t len = sizeof(err);
      err = waitFor(fd, POLLOUT, deadline) ? 0 : ETIMEDOUT;
      if (err == 0 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
  }
  if (err != 0) {
    ::close(fd);
    return -err;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

base::StatusOr<int> connectTcp(const std::string& host, int port, Clock::time_point deadline) {
  const std::string where = "error dialing backend: dial tcp " + hostPort(host, port) + ": ";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return base::unavailableError(where + "lookup " + host + ": " + gai_strerror(rc));
  int err = EHOSTUNREACH;
  for (const addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd = connectOne(*ai, deadline);
    if (fd >= 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    err = -fd;
  }
  ::freeaddrinfo(found);
  return base::unavailableError(
      where + (err == ETIMEDOUT ? std::string("i/o timeout") : "connect: " + errnoText(err)));
}

std::string opensslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out;
}

}  // namespace

bool acceptedOnPort(int fd, int port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (portOf(addr) != port) return false;
  int type = 0, listening = 1;
  socklen_t type_len = sizeof(type), listening_len = sizeof(listening);
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) == 0 && type == SOCK_STREAM &&
         ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &listening_len) == 0 &&
         listening == 0;
}

void shutdownAcceptedConnections(int port) {
  forEachAcceptedConnection(port, [](int fd) {
    ::shutdown(fd, SHUT_RDWR);
    return false;
  });
}

int dupAcceptedConnection(int port, const std::string& peer_addr, int peer_port) {
  int found = -1;
  forEachAcceptedConnection(port, [&](int fd) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return false;
    if (portOf(peer) != peer_port || addressOf(peer) != peer_addr) return false;
    found = fd;
    return true;
  });
  return found;
}

KubeletConnection::~KubeletConnection() {
  if (end_.ssl) SSL_free(end_.ssl);
  if (end_.fd >= 0) ::close(end_.fd);
}

base::StatusOr<std::unique_ptr<KubeletDialer>> KubeletDialer::create(KubeletClientOptions options) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) return base::internalError("cannot make a TLS context: " + opensslErrors());
  std::unique_ptr<KubeletDialer> dialer(new KubeletDialer(std::move(options), ctx));
  const KubeletClientOptions& o = dialer->options_;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (o.client_certificate.empty() != o.client_key.empty()) {
    return base::invalidArgumentError(
        "--kubelet-client-certificate and --kubelet-client-key must be given together");
  }
  if (!o.client_certificate.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, o.client_certificate.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, o.client_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return base::invalidArgumentError("cannot load kubelet client certificate " +
                                        o.client_certificate + " with key " + o.client_key + ": " +
                                        opensslErrors());
    }
  }
  if (!o.certificate_authority.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, o.certificate_authority.c_str(), nullptr) != 1) {
      return base::invalidArgumentError("cannot load kubelet certificate authority " +
                                        o.certificate_authority + ": " + opensslErrors());
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  return dialer;
}

KubeletDialer::~KubeletDialer() { SSL_CTX_free(ctx_); }

base::StatusOr<std::unique_ptr<KubeletConnection>> KubeletDialer::dial(const std::string& host,
                                                                       int port) {
  const auto deadline = Clock::now() + options_.dial_timeout;
  ASSIGN_OR_RETURN(const int fd, connectTcp(host, port, deadline));
  SSL* ssl = SSL_new(ctx_);
  auto conn = std::make_unique<KubeletConnection>(fd, ssl);
  if (!ssl) return base::internalError("cannot make a TLS session: " + opensslErrors());
  SSL_set_fd(ssl, fd);
  RETURN_IF_ERROR(handshake(ssl, host, port, deadline));
  return conn;
}

base::Status KubeletDialer::handshake(SSL* ssl, const std::string& host, int port,
                                      Clock::time_point deadline) {
  in6_addr ip{};
  const bool is_ip =
      ::inet_pton(AF_INET, host.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, host.c_str(), &ip) == 1;
  if (!is_ip) SSL_set_tlsext_host_name(ssl, host.c_str());
  if (!options_.certificate_authority.empty()) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (is_ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
    }
  }
  const std::string where =
      "error dialing backend: TLS handshake with kubelet at " + hostPort(host, port) + ": ";
  while (true) {
    ERR_clear_error();
    const int r = SSL_connect(ssl);
    if (r == 1) return base::okStatus();
    const int e = SSL_get_error(ssl, r);
    const short wait = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (wait == 0) {
      const long verify = SSL_get_verify_result(ssl);
      std::string why = verify != X509_V_OK ? std::string("certificate verify failed: ") +
                                                  X509_verify_cert_error_string(verify)
                                            : opensslErrors();
      return base::unavailableError(where + (why.empty() ? "connection closed" : why));
    }
    if (!waitFor(SSL_get_fd(ssl), wait, deadline)) return base::unavailableError(where + "timeout");
  }
}

namespace {

enum class Io { kDone, kBlocked, kEof, kError };

// One side of the tunnel: what its blocked read and write wait for (POLLIN/POLLOUT, 0 when the
// operation was not tried or did not block) and whether it ended.
struct Side {
  TunnelEnd end;
  short read_wait = 0;
  short write_wait = 0;
  bool eof = false;
  bool failed = false;
  std::string error;  // why its read or write failed
};

// Bytes read from one side and not yet written to the other. `retry` is the length of a TLS
// write that blocked: OpenSSL wants it repeated with the same bytes.
struct Pipe {
  std::string buf;
  size_t off = 0;
  int retry = 0;
  uint64_t moved = 0;  // bytes written to the other side
  size_t pending() const { return buf.size() - off; }
};

Io sslResult(SSL* ssl, int r, short& wait) {
  switch (SSL_get_error(ssl, r)) {
    case SSL_ERROR_WANT_READ:
      wait = POLLIN;
      return Io::kBlocked;
    case SSL_ERROR_WANT_WRITE:
      wait = POLLOUT;
      return Io::kBlocked;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kEof;
    default:
      return Io::kError;
  }
}

Io readSome(Side& s, char* data, size_t cap, size_t& n) {
  if (s.end.ssl) {
    ERR_clear_error();
    const int r = SSL_read(s.end.ssl, data, static_cast<int>(cap));
    if (r > 0) {
      n = static_cast<size_t>(r);
      return Io::kDone;
    }
    const Io io = sslResult(s.end.ssl, r, s.read_wait);
    if (io != Io::kError) return io;
    // A peer that closes the TCP connection without close_notify ends the stream all the same.
    const int err = errno;
    s.error = opensslErrors();
    if (s.error.empty() && err != 0) s.error = errnoText(err);
    return Io::kEof;
  }
  const ssize_t r = ::recv(s.end.fd, data, cap, 0);
  if (r > 0) {
    n = static_cast<size_t>(r);
    return Io::kDone;
  }
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    s.read_wait = POLLIN;
    return Io::kBlocked;
  }
  if (r < 0) s.error = errnoText(errno);
  return Io::kEof;
}

Io writeSome(Side& s, const char* data, size_t len, size_t& n) {
  if (s.end.ssl) {
    ERR_clear_error();
    const int r = SSL_write(s.end.ssl, data, static_cast<int>(len));
    if (r > 0) {
      n = static_cast<size_t>(r);
      return Io::kDone;
    }
    const Io io = sslResult(s.end.ssl, r, s.write_wait);
    if (io == Io::kError) {
      const int err = errno;
      s.error = opensslErrors();
      if (s.error.empty() && err != 0) s.error = errnoText(err);
    }
    return io;
  }
  const ssize_t r = ::send(s.end.fd, data, len, MSG_NOSIGNAL);
  if (r >= 0) {
    n = static_cast<size_t>(r);
    return Io::kDone;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    s.write_wait = POLLOUT;
    return Io::kBlocked;
  }
  s.error = errnoText(errno);
  return Io::kError;
}

// Reads from `src` into `p` while there is room; true when bytes moved.
bool fill(Side& src, Pipe& p) {
  src.read_wait = 0;
  if (src.eof || src.failed || p.pending() >= kTunnelBuffer) return false;
  char chunk[kIoChunk];
  size_t n = 0;
  const Io io = readSome(src, chunk, std::min(kIoChunk, kTunnelBuffer - p.pending()), n);
  if (io == Io::kEof) src.eof = true;
  if (io != Io::kDone) return false;
  if (p.off > 0 && p.off == p.buf.size()) {
    p.buf.clear();
    p.off = 0;
  }
  p.buf.append(chunk, n);
  return true;
}

// Writes what `p` holds to `dst`; true when bytes moved.
bool drain(Pipe& p, Side& dst) {
  dst.write_wait = 0;
  if (dst.failed || p.pending() == 0) return false;
  const size_t len = p.retry ? static_cast<size_t>(p.retry) : std::min(p.pending(), kIoChunk);
  size_t n = 0;
  const Io io = writeSome(dst, p.buf.data() + p.off, len, n);
  if (io == Io::kBlocked && dst.end.ssl) p.retry = static_cast<int>(len);
  if (io == Io::kError || io == Io::kEof) dst.failed = true;
  if (io != Io::kDone) return false;
  p.retry = 0;
  p.off += n;
  p.moved += n;
  if (p.off >= kTunnelBuffer) {
    p.buf.erase(0, p.off);
    p.off = 0;
  }
  return n > 0;
}

short eventsOf(const Side& s) { return static_cast<short>(s.read_wait | s.write_wait); }

// Restores a descriptor's flags when the tunnel ends.
class NonBlocking {
 public:
  explicit NonBlocking(int fd) : fd_(fd), flags_(::fcntl(fd, F_GETFL)) {
    if (flags_ >= 0) ::fcntl(fd_, F_SETFL, flags_ | O_NONBLOCK);
  }
  ~NonBlocking() {
    if (flags_ >= 0) ::fcntl(fd_, F_SETFL, flags_);
  }
  NonBlocking(const NonBlocking&) = delete;
  NonBlocking& operator=(const NonBlocking&) = delete;

 private:
  int fd_;
  int flags_;
};

}  // namespace

TunnelResult runTunnel(TunnelEnd client, TunnelEnd backend, std::string to_backend,
                       const std::atomic<bool>& stopping) {
  NonBlocking client_mode(client.fd), backend_mode(backend.fd);
  if (client.ssl) {
    SSL_set_mode(client.ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }
  Side c, b;
  c.end = client;
  b.end = backend;
  Pipe up{std::move(to_backend)}, down;
  // The client's hangup is watched even while its reads wait for room (a kubelet that reads
  // nothing must not keep the tunnel of a client that left); it ends the tunnel once nothing
  // more moves.
  bool hangup = false;
  while (!stopping.load()) {
    // Every possible read and write is tried before waiting: a TLS session's already decrypted
    // bytes (SSL_pending) are read without the socket becoming readable.
    bool progress = drain(up, b);
    progress |= fill(c, up);
    progress |= drain(up, b);
    progress |= fill(b, down);
    progress |= drain(down, c);
    if (c.eof || c.failed || b.failed) break;
    if (b.eof && down.pending() == 0) break;
    if (progress) continue;
    if (hangup) break;
    pollfd fds[2] = {{c.end.fd, static_cast<short>(eventsOf(c) | POLLRDHUP), 0},
                     {eventsOf(b) ? b.end.fd : -1, eventsOf(b), 0}};
    if (::poll(fds, 2, kTunnelPollMs) < 0 && errno != EINTR) break;
    hangup = (fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }
  return {down.moved, b.error};
}

}  // namespace nodeagent::testapiserver
