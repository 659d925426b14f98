#include "config/inotify_watcher.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace nodeagent::config {

std::string inotifyMaskString(uint32_t mask) {
  static constexpr std::pair<uint32_t, const char*> kBits[] = {
      {IN_ACCESS, "IN_ACCESS"},
      {IN_MODIFY, "IN_MODIFY"},
      {IN_ATTRIB, "IN_ATTRIB"},
      {IN_CLOSE_WRITE, "IN_CLOSE_WRITE"},
      {IN_CLOSE_NOWRITE, "IN_CLOSE_NOWRITE"},
      {IN_OPEN, "IN_OPEN"},
      {IN_MOVED_FROM, "IN_MOVED_FROM"},
      {IN_MOVED_TO, "IN_MOVED_TO"},
      {IN_CREATE, "IN_CREATE"},
      {IN_DELETE, "IN_DELETE"},
      {IN_DELETE_SELF, "IN_DELETE_SELF"},
      {IN_MOVE_SELF, "IN_MOVE_SELF"},
      {IN_UNMOUNT, "IN_UNMOUNT"},
      {IN_Q_OVERFLOW, "IN_Q_OVERFLOW"},
      {IN_IGNORED, "IN_IGNORED"},
      {IN_ISDIR, "IN_ISDIR"},
  };
  std::string out;
  for (const auto& [bit, name] : kBits) {
    if ((mask & bit) == 0) continue;
    if (!out.empty()) out += '|';
    out += name;
  }
  return out.empty() ? "0" : out;
}

base::StatusOr<std::shared_ptr<InotifyWatcher>> InotifyWatcher::create(asio::any_io_executor ex) {
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    return base::unavailableError(std::string("inotify_init1: ") + std::strerror(errno));
  }
  return std::shared_ptr<InotifyWatcher>(new InotifyWatcher(std::move(ex), fd));
}

InotifyWatcher::InotifyWatcher(asio::any_io_executor ex, int fd)
    : sd_(std::move(ex), fd), buffer_(64 * 1024) {}

InotifyWatcher::~InotifyWatcher() {
  boost::system::error_code ignored;
  sd_.close(ignored);
}

base::StatusOr<int> InotifyWatcher::addWatch(const std::string& path, uint32_t mask) {
  if (closed_) return base::failedPreconditionError("inotify watcher is closed");
  int wd = inotify_add_watch(sd_.native_handle(), path.c_str(), mask);
  if (wd < 0) {
    int err = errno;
    auto message = "inotify_add_watch path=" + path + ": " + std::strerror(err);
    if (err == ENOENT) return base::notFoundError(message);
    if (err == ENOSPC)
      return base::resourceExhaustedError(message + " (fs.inotify.max_user_watches)");
    return base::unavailableError(message);
  }
  return wd;
}

void InotifyWatcher::removeWatch(int wd) {
  if (closed_ || wd < 0) return;
  inotify_rm_watch(sd_.native_handle(), wd);
}

void InotifyWatcher::start(EventHandler on_events, ErrorHandler on_error) {
  on_events_ = std::move(on_events);
  on_error_ = std::move(on_error);
  arm();
}

void InotifyWatcher::close() {
  if (closed_) return;
  closed_ = true;
  on_events_ = nullptr;
  on_error_ = nullptr;
  boost::system::error_code ignored;
  sd_.cancel(ignored);
  sd_.close(ignored);
}

void InotifyWatcher::arm() {
  if (closed_) return;
  sd_.async_wait(
      asio::posix::stream_descriptor::wait_read,
      [self = shared_from_this()](const boost::system::error_code& ec) { self->onReadable(ec); });
}

void InotifyWatcher::onReadable(const boost::system::error_code& ec) {
  if (closed_ || ec == asio::error::operation_aborted) return;
  if (ec) {
    auto on_error = on_error_;
    close();
    if (on_error) on_error(base::unavailableError("inotify wait: " + ec.message()));
    return;
  }
  std::vector<InotifyEvent> events;
  while (true) {
    ssize_t n = ::read(sd_.native_handle(), buffer_.data(), buffer_.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      auto on_error = on_error_;
      auto status = base::unavailableError(std::string("inotify read: ") + std::strerror(errno));
      close();
      if (on_error) on_error(status);
      return;
    }
    if (n == 0) break;
    size_t off = 0;
    while (off + sizeof(inotify_event) <= static_cast<size_t>(n)) {
      inotify_event raw;
      std::memcpy(&raw, buffer_.data() + off, sizeof(raw));
      InotifyEvent e;
      e.wd = raw.wd;
      e.mask = raw.mask;
      e.cookie = raw.cookie;
      if (raw.len > 0) {
        const char* name = buffer_.data() + off + sizeof(inotify_event);
        e.name.assign(name, strnlen(name, raw.len));
      }
      events.push_back(std::move(e));
      off += sizeof(inotify_event) + raw.len;
    }
  }
  if (!events.empty() && on_events_) {
    // The handler may close the watcher (dropping on_events_): call a copy, and keep the
    // watcher alive until this frame ends.
    auto self = shared_from_this();
    EventHandler handler = on_events_;
    handler(std::move(events));
  }
  arm();
}

}  // namespace nodeagent::config
