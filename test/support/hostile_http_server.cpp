#include "test/support/hostile_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace nodeagent::testing {

bool HostileConnection::send(std::string_view data) {
  while (!data.empty()) {
    if (stopping_.load()) return false;
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, 100) <= 0) continue;  // the client is not reading: check stopping again
    ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent_ += static_cast<uint64_t>(n);
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool HostileConnection::pause(int ms) {
  for (int waited = 0; waited < ms; waited += 10) {
    if (stopping_.load()) return false;
    ::poll(nullptr, 0, 10);
  }
  return !stopping_.load();
}

HostileHttpServer::HostileHttpServer(Behaviour behaviour) : behaviour_(std::move(behaviour)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("hostile server: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

HostileHttpServer::~HostileHttpServer() {
  stopping_ = true;
  thread_.join();
  ::close(listen_fd_);
}

void HostileHttpServer::setBehaviour(Behaviour behaviour) {
  std::lock_guard lock(mu_);
  behaviour_ = std::move(behaviour);
}

std::string HostileHttpServer::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void HostileHttpServer::serve() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ++connections_;
    // Read the request head (bounded), then misbehave.
    std::string head;
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536 && !stopping_) {
      pollfd r{fd, POLLIN, 0};
      if (::poll(&r, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    Behaviour b;
    {
      std::lock_guard lock(mu_);
      b = behaviour_;
    }
    HostileConnection conn(fd, stopping_, sent_);
    if (b) b(conn);
    ::close(fd);
  }
}

HostileHttpServer::Behaviour HostileHttpServer::endlessHeaders(uint64_t cap) {
  return [cap](HostileConnection& c) {
    if (!c.send("HTTP/1.1 200 OK\r\n")) return;
    const std::string value(1000, 'a');
    for (uint64_t sent = 0, i = 0; sent < cap; ++i) {
      std::string line = "X-Filler-" + std::to_string(i) + ": " + value + "\r\n";
      if (!c.send(line)) return;
      sent += line.size();
    }
  };
}

HostileHttpServer::Behaviour HostileHttpServer::manyHeaders(int count) {
  return [count](HostileConnection& c) {
    std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n";
    for (int i = 0; i < count; ++i) head += "X-" + std::to_string(i) + ": v\r\n";
    c.send(head + "\r\n");
  };
}

HostileHttpServer::Behaviour HostileHttpServer::longHeaderLine(size_t bytes) {
  return [bytes](HostileConnection& c) {
    c.send("HTTP/1.1 200 OK\r\nX-Long: " + std::string(bytes, 'b') +
           "\r\nContent-Length: 0\r\n\r\n");
  };
}

HostileHttpServer::Behaviour HostileHttpServer::bigBody(uint64_t bytes, bool chunked, char fill) {
  return [bytes, chunked, fill](HostileConnection& c) {
    std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
    head += chunked ? "Transfer-Encoding: chunked\r\n\r\n"
                    : "Content-Length: " + std::to_string(bytes) + "\r\n\r\n";
    if (!c.send(head)) return;
    const std::string block(64 * 1024, fill);
    for (uint64_t sent = 0; sent < bytes; sent += block.size()) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), bytes - sent));
      std::string_view piece(block.data(), n);
      if (chunked) {
        std::ostringstream line;
        line << std::hex << n << "\r\n";
        if (!c.send(line.str()) || !c.send(piece) || !c.send("\r\n")) return;
      } else if (!c.send(piece)) {
        return;
      }
    }
    if (chunked) c.send("0\r\n\r\n");
  };
}

HostileHttpServer::Behaviour HostileHttpServer::drip(int interval_ms) {
  return [interval_ms](HostileConnection& c) {
    if (!c.send("HTTP/1.1 200 OK\r\n")) return;
    // Sends "X-Slow: aaaa..." one byte at a time, never ending the head (capped at ~2 min).
    if (!c.send("X-Slow: ")) return;
    for (int i = 0; i < 120'000 / interval_ms && c.pause(interval_ms); ++i) {
      if (!c.send("a")) return;
    }
  };
}

HostileHttpServer::Behaviour HostileHttpServer::ok(std::string body, std::string content_type) {
  return [body = std::move(body), content_type = std::move(content_type)](HostileConnection& c) {
    c.send("HTTP/1.1 200 OK\r\nContent-Type: " + content_type +
           "\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
           body);
  };
}

namespace {
uint64_t statusKb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}
bool g_peak_resettable = true;
}  // namespace

bool resetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  g_peak_resettable = static_cast<bool>(out);
  return g_peak_resettable;
}

uint64_t peakRss() { return statusKb(g_peak_resettable ? "VmHWM" : "VmRSS"); }

}  // namespace nodeagent::testing
