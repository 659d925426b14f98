// kubelet's container log manager (pkg/kubelet/logs/container_log_manager.go) for a runtime that
// writes its containers' logs itself (a CRI runtime): every `period` (10 s) the running
// containers' log files are looked at; one that reached `max_size` (--container-log-max-size) is
// renamed to `<log>.<timestamp>` and the runtime asked to reopen it (CRI ReopenContainerLog;
// when that fails the rename is undone), and rotated files beyond `max_files`
// (--container-log-max-files, the live one included) are deleted, oldest first. The names are
// the ones the process runtime's shim rotates to, so the kubelet API reads both alike. Rotated
// files are not compressed.
//
// Threading: start/stop from any thread; a pass runs on the manager's own strand, its file work
// on the blocking executor. Create with std::make_shared; the clock and the runtime must outlive
// it.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "agent/runtime/runtime.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::logs {

struct ContainerLogManagerOptions {
  int64_t max_size = 10 * 1024 * 1024;
  int max_files = 5;
  base::Duration period = std::chrono::seconds(10);
  asio::any_io_executor blocking_executor;  // required
};

// What rotating one log did.
enum class RotateOutcome { kNotNeeded, kRotated, kFailed };

class ContainerLogManager : public std::enable_shared_from_this<ContainerLogManager> {
 public:
  ContainerLogManager(asio::any_io_executor executor, base::Clock& clock, runtime::Runtime& runtime,
                      ContainerLogManagerOptions options);

  void start();
  void stop();

  // One pass over the running containers (start() runs them; tests call it directly).
  asio::awaitable<void> rotateLogs();
  // Rotates the log of the running container `id` at `path` when it reached the size limit.
  asio::awaitable<RotateOutcome> rotateLog(runtime::ContainerId id, std::filesystem::path path);

  uint64_t rotations() const { return rotations_.load(); }

 private:
  void schedule();

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  runtime::Runtime& runtime_;
  ContainerLogManagerOptions options_;
  base::TimerPtr timer_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> rotations_{0};
};

}  // namespace nodeagent::logs
