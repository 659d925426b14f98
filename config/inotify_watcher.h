// InotifyWatcher: one inotify instance on the io_context. The fd is non-blocking and wrapped in
// an asio stream_descriptor, so waiting for events never holds a thread; each wake-up reads every
// queued event and hands them to the owner as one batch, which lets the file source treat an
// editor's burst of events (rename away, create, write, close) as one change.
#pragma once

#include <sys/inotify.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/asio.h"
#include "base/status.h"

namespace nodeagent::config {

struct InotifyEvent {
  int wd = -1;          // -1 for IN_Q_OVERFLOW
  uint32_t mask = 0;    // IN_* bits
  uint32_t cookie = 0;  // pairs IN_MOVED_FROM with IN_MOVED_TO
  std::string name;     // entry name inside the watched directory; "" for the directory itself
};

// Human-readable mask ("IN_CREATE|IN_ISDIR") for trace logs and test messages.
std::string inotifyMaskString(uint32_t mask);

class InotifyWatcher : public std::enable_shared_from_this<InotifyWatcher> {
 public:
  using EventHandler = std::function<void(std::vector<InotifyEvent>)>;
  // Called once when reading fails for good; the watcher is closed afterwards.
  using ErrorHandler = std::function<void(base::Status)>;

  // Creates the inotify instance; handlers will run on `ex` (the owner's strand).
  static base::StatusOr<std::shared_ptr<InotifyWatcher>> create(asio::any_io_executor ex);
  ~InotifyWatcher();
  InotifyWatcher(const InotifyWatcher&) = delete;
  InotifyWatcher& operator=(const InotifyWatcher&) = delete;

  // inotify_add_watch. Watching the same inode twice returns the same descriptor (and replaces
  // its mask). Errors name the path. Call on the executor.
  base::StatusOr<int> addWatch(const std::string& path, uint32_t mask);
  // inotify_rm_watch; unknown descriptors are ignored (the kernel may have dropped it already).
  void removeWatch(int wd);

  // Starts delivering batches. Call once, on the executor.
  void start(EventHandler on_events, ErrorHandler on_error);
  // Stops delivery and closes the fd; no handler runs afterwards. Call on the executor.
  void close();

 private:
  InotifyWatcher(asio::any_io_executor ex, int fd);
  void arm();
  void onReadable(const boost::system::error_code& ec);

  asio::posix::stream_descriptor sd_;
  EventHandler on_events_;
  ErrorHandler on_error_;
  bool closed_ = false;
  std::vector<char> buffer_;
};

}  // namespace nodeagent::config
