#include "cmd/nodeagent/daemon_support.h"

#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/duration.h"
#include "base/log.h"
#include "base/readable_wait.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("nodeagent")

std::optional<uint64_t> g_container_open_files;

}  // namespace

void raiseOpenFileLimit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  const rlim_t before = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
    log()->warn("Cannot raise the open-file limit (RLIMIT_NOFILE) soft={} hard={} err={}", before,
                lim.rlim_max, std::strerror(errno));
    return;
  }
  g_container_open_files = before;
  log()->info(
      "Raised the open-file limit (RLIMIT_NOFILE) to the hard limit from={} to={} "
      "containers={}",
      before, lim.rlim_max, before);
}

std::optional<uint64_t> containerOpenFileLimit() { return g_container_open_files; }

void sdNotify(const std::string& message) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return;
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string p = path;
  if (p[0] == '@') p[0] = '\0';  // abstract namespace
  std::memcpy(addr.sun_path, p.data(), std::min(p.size(), sizeof(addr.sun_path) - 1));
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + p.size());
  (void)sendto(fd, message.data(), message.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
               len);
  close(fd);
}

SystemdNotifier::SystemdNotifier(asio::any_io_executor ex, base::Clock& clock,
                                 std::function<bool()> ready,
                                 std::function<bool(std::string* why)> alive)
    : ready_(std::move(ready)),
      alive_(std::move(alive)),
      ready_timer_(clock.makeTimer(ex)),
      watchdog_timer_(clock.makeTimer(ex)) {
  if (const char* usec = std::getenv("WATCHDOG_USEC"); usec != nullptr) {
    watchdog_period_ = std::chrono::microseconds(std::strtoll(usec, nullptr, 10)) / 2;
  }
}

void SystemdNotifier::start() {
  checkReady();
  if (watchdog_period_.count() > 0) feedWatchdog();
}

void SystemdNotifier::stop() {
  ready_timer_->cancel();
  watchdog_timer_->cancel();
}

void SystemdNotifier::checkReady() {
  if (ready_()) {
    sdNotify("READY=1");
    return;
  }
  ready_timer_->asyncWaitFor(std::chrono::milliseconds(100), [this] { checkReady(); });
}

void SystemdNotifier::feedWatchdog() {
  std::string why;
  if (alive_(&why)) {
    sdNotify("WATCHDOG=1");
  } else {
    log()->warn("Not feeding the systemd watchdog reason={}", why);
  }
  watchdog_timer_->asyncWaitFor(watchdog_period_, [this] { feedWatchdog(); });
}

base::Status LockContentionWatch::start(const std::vector<LockFile>& locks,
                                        std::function<void()> on_contention) {
  int ifd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (ifd < 0) {
    return base::internalError(std::string("cannot watch the lock files for contention: ") +
                               std::strerror(errno));
  }
  watch_ = std::make_shared<asio::posix::stream_descriptor>(ioc_, ifd);
  for (const auto& lock : locks) {
    if (::inotify_add_watch(ifd, lock.path().c_str(), IN_OPEN | IN_DELETE_SELF) < 0) {
      return base::internalError("cannot watch the lock file " + lock.path() + ": " +
                                 std::strerror(errno));
    }
  }
  base::asyncWaitReadable(
      watch_, [on_contention = std::move(on_contention)](const boost::system::error_code& ec) {
        if (ec) return;
        log()->info("Another process wants the lock file, stopping (--exit-on-lock-contention)");
        on_contention();
      });
  return base::okStatus();
}

void LockContentionWatch::stop() {
  if (!watch_) return;
  boost::system::error_code ec;
  watch_->cancel(ec);
}

}  // namespace nodeagent::cmd
