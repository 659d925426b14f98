#include "cmd/nodeagent-shim/attach.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/runtime/state_file.h"

namespace rt = nodeagent::runtime;

namespace nodeagent::shim {
namespace {

// More clients than this are refused (each holds a descriptor and a queue).
constexpr size_t kMaxClients = 16;
// While this much input for the container's stdin waits, clients are not read from.
constexpr size_t kStdinBuffer = 64 * 1024;

}  // namespace

bool AttachServer::listen(const std::string& dir, std::string& error) {
  // Bound through the directory's descriptor: a deep state directory may not fit in sun_path.
  const int dir_fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    error = "open " + dir + ": " + std::strerror(errno);
    return false;
  }
  const std::string via =
      "/proc/self/fd/" + std::to_string(dir_fd) + "/" + std::string(rt::kAttachSocketName);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, via.c_str(), via.size() + 1);
  ::unlink(via.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  // The single-threaded shim may change its umask for the bind: the socket is born 0600 (a socket
  // gets 0777 less the umask).
  const mode_t old_umask = ::umask(0177);
  const bool ok = listen_fd_ >= 0 &&
                  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::listen(listen_fd_, 8) == 0;
  const int err = errno;
  ::umask(old_umask);
  ::close(dir_fd);
  if (!ok) {
    error = "attach socket in " + dir + ": " + std::strerror(err);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    return false;
  }
  path_ = dir + "/" + std::string(rt::kAttachSocketName);
  return true;
}

void AttachServer::setStdin(int fd, bool once) {
  stdin_fd_ = fd;
  stdin_once_ = once;
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void AttachServer::addPollFds(std::vector<pollfd>& fds) {
  sweep();
  if (listen_fd_ >= 0) fds.push_back({listen_fd_, POLLIN, 0});
  const bool take_input = stdin_buf_.size() < kStdinBuffer;
  for (const auto& c : clients_) {
    short events = 0;
    if (c->input_open && take_input) events |= POLLIN;
    if (!c->out.empty()) events |= POLLOUT;
    fds.push_back({c->fd, events, 0});
  }
  if (stdin_fd_ >= 0 && !stdin_buf_.empty()) fds.push_back({stdin_fd_, POLLOUT, 0});
}

void AttachServer::handle(const std::vector<pollfd>& fds, size_t first) {
  for (size_t i = first; i < fds.size(); ++i) {
    const pollfd& p = fds[i];
    if (p.revents == 0) continue;
    if (p.fd == listen_fd_) {
      accept();
      continue;
    }
    if (p.fd == stdin_fd_) {
      flushStdin();
      continue;
    }
    auto it = std::find_if(clients_.begin(), clients_.end(),
                           [&](const auto& c) { return c->fd == p.fd && !c->dead; });
    if (it == clients_.end()) continue;
    Client& c = **it;
    if (p.revents & (POLLIN | POLLHUP)) readClient(c);
    if (!c.dead && (p.revents & POLLOUT)) flushClient(c);
    if (p.revents & POLLERR) c.dead = true;
    // Gone both ways: nothing to send to any more.
    if ((p.revents & POLLHUP) && !c.input_open) c.dead = true;
  }
}

void AttachServer::accept() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (clients_.size() >= kMaxClients) {
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Client>();
    c->fd = fd;
    clients_.push_back(std::move(c));
  }
}

void AttachServer::readClient(Client& c) {
  if (!c.input_open) return;
  char buf[16 * 1024];
  const ssize_t n = ::read(c.fd, buf, sizeof buf);
  if (n < 0) {
    if (errno != EINTR && errno != EAGAIN) {
      inputEnded(c);
      c.dead = true;
    }
    return;
  }
  if (n == 0) {
    inputEnded(c);
    return;
  }
  size_t at = 0;
  if (!c.hello) {
    c.hello = true;
    c.wants_stdin = (static_cast<unsigned char>(buf[0]) & rt::kAttachWantsStdin) != 0;
    at = 1;
  }
  if (c.wants_stdin && stdin_fd_ >= 0 && !stdin_closing_) {
    stdin_buf_.append(buf + at, static_cast<size_t>(n) - at);
    flushStdin();
  }
}

// A client's input ended: with stdinOnce, the first one that had stdin closes the container's.
void AttachServer::inputEnded(Client& c) {
  c.input_open = false;
  if (c.wants_stdin && stdin_once_) closeStdin();
}

void AttachServer::flushClient(Client& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) c.dead = true;
      return;
    }
    c.out.erase(0, static_cast<size_t>(n));
  }
}

void AttachServer::flushStdin() {
  while (stdin_fd_ >= 0 && !stdin_buf_.empty()) {
    const ssize_t n = ::write(stdin_fd_, stdin_buf_.data(), stdin_buf_.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return;
      // The container closed its stdin (or ended): what waits is lost.
      stdin_buf_.clear();
      break;
    }
    stdin_buf_.erase(0, static_cast<size_t>(n));
  }
  if (stdin_closing_ && stdin_buf_.empty()) closeStdin();
}

void AttachServer::closeStdin() {
  stdin_closing_ = true;
  if (stdin_fd_ < 0 || !stdin_buf_.empty()) return;
  ::close(stdin_fd_);
  stdin_fd_ = -1;
}

void AttachServer::broadcast(unsigned char stream, const char* data, size_t n) {
  if (clients_.empty() || n == 0) return;
  char header[rt::kAttachFrameHeader] = {
      static_cast<char>(stream), static_cast<char>((n >> 24) & 0xff),
      static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 8) & 0xff),
      static_cast<char>(n & 0xff)};
  for (auto& c : clients_) {
    if (c->dead) continue;
    if (c->out.size() + n + sizeof header > rt::kAttachClientBuffer) {
      c->dead = true;  // too slow: dropped, never waited for
      continue;
    }
    c->out.append(header, sizeof header);
    c->out.append(data, n);
    flushClient(*c);
  }
}

void AttachServer::sweep() {
  auto dead = std::remove_if(clients_.begin(), clients_.end(), [this](const auto& c) {
    if (!c->dead) return false;
    inputEnded(*c);
    ::close(c->fd);
    return true;
  });
  clients_.erase(dead, clients_.end());
}

void AttachServer::close() {
  for (auto& c : clients_) {
    if (!c->dead) flushClient(*c);
    c->dead = true;
  }
  sweep();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    ::unlink(path_.c_str());
  }
  stdin_buf_.clear();
  closeStdin();
}

}  // namespace nodeagent::shim
