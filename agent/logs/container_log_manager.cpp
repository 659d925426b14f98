#include "agent/logs/container_log_manager.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "agent/runtime/cri_log.h"
#include "base/blocking.h"
#include "base/log.h"

namespace nodeagent::logs {
namespace {

NODEAGENT_LOGGER("logs")

// The rename half of a rotation, on the blocking pool: the rotated name, "" when the log is still
// under the limit, or an error.
base::StatusOr<std::string> renameIfFull(const std::filesystem::path& path, int64_t max_size,
                                         int64_t now_nanos) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::string();  // not written yet, or just rotated
    return base::unknownError("stat " + path.string() + ": " + std::strerror(errno));
  }
  if (st.st_size < max_size) return std::string();
  std::string rotated;
  if (!runtime::rotateLogFile(path.string(), now_nanos, rotated)) {
    return base::unknownError("rotating " + path.string() + ": " + std::strerror(errno));
  }
  return rotated;
}

}  // namespace

ContainerLogManager::ContainerLogManager(asio::any_io_executor executor, base::Clock& clock,
                                         runtime::Runtime& runtime,
                                         ContainerLogManagerOptions options)
    : strand_(asio::make_strand(std::move(executor))),
      clock_(clock),
      runtime_(runtime),
      options_(std::move(options)) {}

void ContainerLogManager::start() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->stopped_) return;
    self->timer_ = self->clock_.makeTimer(self->strand_);
    self->schedule();
  });
}

void ContainerLogManager::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    if (self->timer_) self->timer_->cancel();
  });
}

void ContainerLogManager::schedule() {
  if (stopped_ || !timer_) return;
  timer_->asyncWaitFor(options_.period, [self = shared_from_this()] {
    asio::co_spawn(
        self->strand_,
        [](std::shared_ptr<ContainerLogManager> s) -> asio::awaitable<void> {
          co_await s->rotateLogs();
          s->schedule();
        }(self),
        asio::detached);
  });
}

asio::awaitable<void> ContainerLogManager::rotateLogs() {
  auto listing = runtime_.getPods(/*all=*/false);
  auto pods = co_await std::move(listing);
  if (!pods.ok()) {
    log()->warn("Cannot list containers to rotate their logs err={}", pods.status().toString());
    co_return;
  }
  for (const auto& pod : *pods) {
    auto fetch = runtime_.getPodStatus(pod.uid, pod.name, pod.namespace_);
    auto status = co_await std::move(fetch);
    if (!status.ok()) continue;  // gone meanwhile; the next pass sees it again
    for (const auto* c : status->runningContainerStatuses()) {
      if (c->log_path.empty()) continue;
      auto rotating = rotateLog(c->id, c->log_path);
      co_await std::move(rotating);
    }
  }
}

asio::awaitable<RotateOutcome> ContainerLogManager::rotateLog(runtime::ContainerId id,
                                                              std::filesystem::path path) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.wallNow().time_since_epoch())
          .count();
  auto renaming = base::runBlocking(options_.blocking_executor, [path, now, this] {
    return renameIfFull(path, options_.max_size, now);
  });
  auto renamed = co_await std::move(renaming);
  if (!renamed.ok()) {
    log()->warn("Cannot rotate a container log id={} err={}", id.toString(),
                renamed.status().toString());
    co_return RotateOutcome::kFailed;
  }
  if (renamed->empty()) co_return RotateOutcome::kNotNeeded;
  auto reopening = runtime_.reopenContainerLog(id);
  auto reopened = co_await std::move(reopening);
  const std::string rotated = *renamed;
  const int max_files = options_.max_files;
  auto finishing = base::runBlocking(options_.blocking_executor, [=]() -> base::Status {
    if (!reopened.ok()) {
      // The runtime still writes to the renamed file: give it its name back.
      std::rename(rotated.c_str(), path.c_str());
      return reopened;
    }
    runtime::pruneRotatedLogs(path.string(), max_files);
    return base::okStatus();
  });
  auto finished = co_await std::move(finishing);
  if (!finished.ok()) {
    log()->warn("The runtime did not reopen a rotated container log id={} err={}", id.toString(),
                finished.toString());
    co_return RotateOutcome::kFailed;
  }
  rotations_.fetch_add(1);
  log()->info("Rotated a container log id={} path={}", id.toString(), path.string());
  co_return RotateOutcome::kRotated;
}

}  // namespace nodeagent::logs
