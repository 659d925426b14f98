// The daemon's dealings with its host: the open-file limit, systemd's
// readiness and watchdog notifications, and the lock files' contention watch
// (--exit-on-lock-contention). Each piece runs on the daemon's io_context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"
#include "cmd/nodeagent/lock_file.h"

namespace nodeagent::cmd {

// The open-file limit: the agent holds descriptors for every container (its shim's pidfd, log and
// exec pipes) and connection, so its soft RLIMIT_NOFILE goes up to the hard limit at start, as
// containerd and systemd raise their own; the change is logged. Containers keep the soft limit
// the agent was started with (containerOpenFileLimit), as systemd gives its services: programs
// that walk every descriptor up to the limit stay fast.
void raiseOpenFileLimit();
// The soft limit from before raiseOpenFileLimit() raised it; nullopt when it did not (already at
// the hard limit, or not called).
std::optional<uint64_t> containerOpenFileLimit();

// systemd's sd_notify, written directly (no libsystemd); nothing without NOTIFY_SOCKET.
void sdNotify(const std::string& message);

// READY=1 once `ready()` first answers true (polled every 100 ms), and WATCHDOG=1 every half of
// systemd's WATCHDOG_USEC while `alive(why)` answers true (a stuck agent gets restarted).
class SystemdNotifier {
 public:
  SystemdNotifier(asio::any_io_executor ex, base::Clock& clock, std::function<bool()> ready,
                  std::function<bool(std::string* why)> alive);
  void start();
  void stop();
  // Half of systemd's WATCHDOG_USEC (how often WATCHDOG=1 is sent); zero without a watchdog.
  base::Duration watchdogPeriod() const { return watchdog_period_; }

 private:
  void checkReady();
  void feedWatchdog();
  std::function<bool()> ready_;
  std::function<bool(std::string* why)> alive_;
  base::TimerPtr ready_timer_;
  base::TimerPtr watchdog_timer_;
  base::Duration watchdog_period_{};
};

// --exit-on-lock-contention: another agent waiting for one of `locks` opens it; `on_contention`
// then runs once (the daemon stops; its containers keep running and are adopted by the next
// one), as kubelet does.
class LockContentionWatch {
 public:
  explicit LockContentionWatch(asio::io_context& ioc) : ioc_(ioc) {}
  // Watches the lock files with inotify; an error names the file.
  base::Status start(const std::vector<LockFile>& locks, std::function<void()> on_contention);
  void stop();

 private:
  asio::io_context& ioc_;
  std::shared_ptr<asio::posix::stream_descriptor> watch_;
};

}  // namespace nodeagent::cmd
