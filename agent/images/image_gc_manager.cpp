#include "agent/images/image_gc_manager.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "agent/images/image_manager.h"
#include "base/duration.h"
#include "base/log.h"

namespace nodeagent::agent::images {
namespace {

NODEAGENT_LOGGER("images")

std::string percentFlagError(const char* flag, int64_t value) {
  return std::string("--") + flag + " " + std::to_string(value) +
         " must be between 0 and 100, inclusive";
}

// `ref` as a CRI runtime lists it among an image's repo tags or digests; "" for a reference
// that cannot name an image.
std::string fullReference(std::string_view ref) {
  auto tagged = applyDefaultImageTag(ref);
  if (!tagged.ok()) return {};
  std::string out = std::move(*tagged);
  const auto slash = out.find('/');
  const std::string first = slash == std::string::npos ? std::string() : out.substr(0, slash);
  const bool has_registry = first.find_first_of(".:") != std::string::npos || first == "localhost";
  if (!has_registry)
    out.insert(0, slash == std::string::npos ? "docker.io/library/" : "docker.io/");
  return out;
}

}  // namespace

bool imageNamedBy(const runtime::ImageInfo& image, std::string_view ref) {
  if (ref.empty()) return false;
  if (image.id == ref) return true;
  const std::string full = fullReference(ref);
  auto named = [&](const std::vector<std::string>& refs) {
    return std::any_of(refs.begin(), refs.end(),
                       [&](const std::string& r) { return r == ref || r == full; });
  };
  return named(image.repo_tags) || named(image.repo_digests);
}

base::Status validateImageGcPolicy(const ImageGcPolicy& policy) {
  if (policy.high_threshold_percent < 0 || policy.high_threshold_percent > 100) {
    return base::invalidArgumentError(
        percentFlagError("image-gc-high-threshold", policy.high_threshold_percent));
  }
  if (policy.low_threshold_percent < 0 || policy.low_threshold_percent > 100) {
    return base::invalidArgumentError(
        percentFlagError("image-gc-low-threshold", policy.low_threshold_percent));
  }
  if (policy.low_threshold_percent >= policy.high_threshold_percent) {
    return base::invalidArgumentError("--image-gc-low-threshold " +
                                      std::to_string(policy.low_threshold_percent) +
                                      " must be less than --image-gc-high-threshold " +
                                      std::to_string(policy.high_threshold_percent));
  }
  if (policy.min_age < base::Duration::zero()) {
    return base::invalidArgumentError("--minimum-image-ttl-duration must not be negative");
  }
  if (policy.max_age < base::Duration::zero()) {
    return base::invalidArgumentError(
        "--image-maximum-gc-age (imageMaximumGCAge) must not be negative");
  }
  if (policy.max_age > base::Duration::zero() && policy.max_age <= policy.min_age) {
    return base::invalidArgumentError(
        "--image-maximum-gc-age (imageMaximumGCAge) " + base::formatDuration(policy.max_age) +
        " must be greater than --minimum-image-ttl-duration (imageMinimumGCAge) " +
        base::formatDuration(policy.min_age));
  }
  return base::okStatus();
}

ImageGcManager::ImageGcManager(asio::any_io_executor executor, base::Clock& clock,
                               runtime::Runtime& runtime, ImageGcOptions options)
    : strand_(asio::make_strand(std::move(executor))),
      clock_(clock),
      runtime_(runtime),
      options_(std::move(options)) {}

void ImageGcManager::start() {
  asio::co_spawn(
      strand_,
      [](std::shared_ptr<ImageGcManager> self) -> asio::awaitable<void> {
        if (self->stopped_) co_return;
        self->detect_timer_ = self->clock_.makeTimer(self->strand_);
        self->gc_timer_ = self->clock_.makeTimer(self->strand_);
        self->list_timer_ = self->clock_.makeTimer(self->strand_);
        self->started_ = self->clock_.now();
        // The first refresh of the records also fills the image list.
        auto asking = self->imageFsInfo();
        if (auto fs = co_await std::move(asking); !fs.ok()) {
          log()->warn("Cannot read the image filesystem's usage err={}", fs.status().toString());
        }
        co_await self->refreshRecords();
        self->schedule(self->list_timer_, self->options_.list_period, Pass::kList);
        self->schedule(self->detect_timer_, self->options_.detect_period, Pass::kDetect);
        if (self->options_.policy.high_threshold_percent >= 100 &&
            self->options_.policy.max_age <= base::Duration::zero()) {
          log()->info(
              "Image garbage collection is off (--image-gc-high-threshold=100 and no "
              "--image-maximum-gc-age)");
          co_return;
        }
        const auto next = co_await self->periodicCollect();
        self->schedule(self->gc_timer_, next, Pass::kCollect);
      }(shared_from_this()),
      asio::detached);
}

void ImageGcManager::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    if (self->detect_timer_) self->detect_timer_->cancel();
    if (self->gc_timer_) self->gc_timer_->cancel();
    if (self->list_timer_) self->list_timer_->cancel();
  });
}

void ImageGcManager::schedule(base::TimerPtr& timer, base::Duration delay, Pass pass) {
  if (stopped_ || !timer) return;
  timer->asyncWaitFor(delay, [self = shared_from_this(), &timer, pass] {
    asio::co_spawn(
        self->strand_,
        [](std::shared_ptr<ImageGcManager> s, base::TimerPtr* t, Pass p) -> asio::awaitable<void> {
          if (s->stopped_) co_return;
          switch (p) {
            case Pass::kCollect: {
              const auto next = co_await s->periodicCollect();
              s->schedule(*t, next, p);
              break;
            }
            case Pass::kDetect:
              co_await s->refreshRecords();
              s->schedule(*t, s->options_.detect_period, p);
              break;
            case Pass::kList:
              co_await s->refreshList();
              s->schedule(*t, s->options_.list_period, p);
              break;
          }
        }(self, &timer, pass),
        asio::detached);
  });
}

asio::awaitable<void> ImageGcManager::refreshList() {
  auto asking = imageFsInfo();
  if (auto fs = co_await std::move(asking); !fs.ok()) {
    log()->warn("Cannot read the image filesystem's usage err={}", fs.status().toString());
  }
  auto listing = runtime_.listImages();
  auto images = co_await std::move(listing);
  if (!images.ok()) {
    log()->warn("Cannot update the image list err={}", images.status().toString());
    co_return;
  }
  storeList(std::move(*images));
}

void ImageGcManager::storeList(std::vector<runtime::ImageInfo> images) {
  std::stable_sort(images.begin(), images.end(),
                   [](const auto& a, const auto& b) { return a.size > b.size; });
  std::lock_guard lock(cache_mu_);
  image_list_ = std::move(images);
}

std::optional<std::vector<runtime::ImageInfo>> ImageGcManager::imageList() const {
  std::lock_guard lock(cache_mu_);
  return image_list_;
}

asio::awaitable<void> ImageGcManager::beginPass() {
  while (pass_running_) {
    // Woken (cancelled) by endPass; it never expires by itself.
    auto waiter =
        std::make_shared<asio::steady_timer>(strand_, asio::steady_timer::time_point::max());
    pass_waiters_.push_back(waiter);
    boost::system::error_code ec;
    co_await waiter->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  pass_running_ = true;
}

void ImageGcManager::endPass() {
  pass_running_ = false;
  if (pass_waiters_.empty()) return;
  pass_waiters_.front()->cancel();
  pass_waiters_.pop_front();
}

asio::awaitable<void> ImageGcManager::refreshRecords() {
  co_await beginPass();
  const PassGuard guard{this};
  // Until a first listing succeeded, the images found count as there since the agent started.
  const auto when = initialized_ ? std::optional(clock_.now()) : std::nullopt;
  auto detecting = detectImages(when, nullptr);
  if (auto detected = co_await std::move(detecting); detected.ok()) {
    initialized_ = true;
  } else {
    log()->warn("Cannot list images for image garbage collection err={}", detected.toString());
  }
}

bool ImageGcManager::ready() {
  if (!options_.ready || ready_timed_out_ || options_.ready()) return true;
  if (started_ && clock_.now() - *started_ >= options_.ready_timeout) {
    log()->warn("Pod sources not all seen after {}s: image garbage collection goes on without them",
                std::chrono::duration_cast<std::chrono::seconds>(options_.ready_timeout).count());
    ready_timed_out_ = true;
    return true;
  }
  return false;
}

asio::awaitable<base::Duration> ImageGcManager::periodicCollect() {
  if (!ready()) {
    // The pods the agent wants are not all known yet: their images must not go.
    co_return options_.ready_retry;
  }
  auto collecting = collectOnStrand();
  auto collected = co_await std::move(collecting);
  if (collected.ok()) {
    if (previous_gc_failed_) log()->info("Image garbage collection succeeded");
    previous_gc_failed_ = false;
    co_return options_.gc_period;
  }
  if (previous_gc_failed_) {
    log()->error("Image garbage collection failed multiple times in a row err={}",
                 collected.toString());
    // Only repeated failures make an event, as kubelet's.
    warn("ImageGCFailed", collected.message());
  } else {
    log()->warn("Image garbage collection failed once err={}", collected.toString());
  }
  previous_gc_failed_ = true;
  co_return options_.gc_period;
}

asio::awaitable<base::Status> ImageGcManager::garbageCollect() {
  auto on_strand = [](std::shared_ptr<ImageGcManager> self) -> asio::awaitable<base::Status> {
    co_return co_await self->collectOnStrand();
  };
  return asio::co_spawn(strand_, on_strand(shared_from_this()), asio::use_awaitable);
}

asio::awaitable<base::StatusOr<uint64_t>> ImageGcManager::deleteUnusedImages() {
  // co_spawn needs a default-constructible result: StatusOr travels in an optional.
  auto on_strand = [](std::shared_ptr<ImageGcManager> self)
      -> asio::awaitable<std::optional<base::StatusOr<uint64_t>>> {
    co_await self->beginPass();
    const PassGuard guard{self.get()};
    auto freeing = self->freeSpace(std::numeric_limits<uint64_t>::max(), self->clock_.now());
    co_return co_await std::move(freeing);
  };
  auto result =
      co_await asio::co_spawn(strand_, on_strand(shared_from_this()), asio::use_awaitable);
  co_return std::move(*result);
}

std::optional<runtime::ImageFsInfo> ImageGcManager::imageFs() const {
  std::lock_guard lock(cache_mu_);
  return image_fs_;
}

asio::awaitable<base::StatusOr<runtime::ImageFsInfo>> ImageGcManager::imageFsInfo() {
  auto asking = runtime_.imageFsInfo();
  auto fs = co_await std::move(asking);
  if (fs.ok() && !fs->mountpoint.empty()) {
    std::lock_guard lock(cache_mu_);
    image_fs_ = *fs;
  }
  co_return fs;
}

asio::awaitable<base::Status> ImageGcManager::collectOnStrand() {
  // Waits for a pass in flight: the usage read below is then after its removals.
  co_await beginPass();
  const PassGuard guard{this};
  auto removing_old = freeOldImages(clock_.now());
  CO_RETURN_IF_ERROR(co_await std::move(removing_old));
  auto asking = imageFsInfo();
  auto fs = co_await std::move(asking);
  if (!fs.ok()) {
    co_return base::Status(fs.status().code(),
                           "cannot read the image filesystem's usage: " + fs.status().message());
  }
  const uint64_t capacity = fs->capacity_bytes;
  uint64_t available = fs->available_bytes;
  if (available > capacity) {
    log()->warn("Image filesystem available {} is larger than capacity {}", available, capacity);
    available = capacity;
  }
  if (capacity == 0) {
    const std::string message = "invalid capacity 0 on image filesystem " + fs->mountpoint.string();
    warn("InvalidDiskCapacity", message);
    co_return base::failedPreconditionError(message);
  }
  // Whole percents as kubelet's (exact below 180 PB).
  const auto usage_percent = 100 - static_cast<int64_t>(available * 100 / capacity);
  if (usage_percent < options_.policy.high_threshold_percent) co_return base::okStatus();

  const auto low = static_cast<uint64_t>(100 - options_.policy.low_threshold_percent);
  const uint64_t target_available = capacity * low / 100;
  const uint64_t to_free = target_available > available ? target_available - available : 0;
  log()->info(
      "Disk usage on the image filesystem {} is at {}%, over the high threshold ({}%): freeing "
      "{} bytes, down to the low threshold ({}%)",
      fs->mountpoint.string(), usage_percent, options_.policy.high_threshold_percent, to_free,
      options_.policy.low_threshold_percent);
  auto freeing = freeSpace(to_free, clock_.now());
  auto freed = co_await std::move(freeing);
  if (!freed.ok()) co_return freed.status();
  if (*freed < to_free) {
    const std::string message =
        "failed to garbage collect required amount of images. Wanted to free " +
        std::to_string(to_free) + " bytes, but freed " + std::to_string(*freed) + " bytes";
    warn("FreeDiskSpaceFailed", message);
    co_return base::resourceExhaustedError(message);
  }
  co_return base::okStatus();
}

asio::awaitable<base::Status> ImageGcManager::detectImages(
    std::optional<base::MonotonicTime> detect_time, std::set<std::string>* in_use) {
  auto listing = runtime_.listImages();
  auto images = co_await std::move(listing);
  if (!images.ok()) co_return images.status();
  storeList(*images);
  auto asking = runtime_.imagesInUse();
  auto used = co_await std::move(asking);
  if (!used.ok()) co_return used.status();
  const auto wanted =
      options_.wanted_images ? options_.wanted_images() : std::vector<std::string>();
  for (const auto& image : *images) {
    const bool is_wanted = std::any_of(wanted.begin(), wanted.end(), [&](const std::string& ref) {
      return imageNamedBy(image, ref);
    });
    if (image.pinned || is_wanted) used->insert(image.id);
  }

  const auto now = clock_.now();
  std::set<std::string> current;
  for (const auto& image : *images) {
    current.insert(image.id);
    auto [it, added] = records_.try_emplace(image.id);
    if (added) it->second.first_detected = detect_time;
    if (used->count(image.id) != 0) it->second.last_used = now;
    it->second.size = image.size;
  }
  std::erase_if(records_, [&](const auto& kv) { return current.count(kv.first) == 0; });
  if (in_use) *in_use = std::move(*used);
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<uint64_t>> ImageGcManager::freeSpace(uint64_t bytes_to_free,
                                                                    base::MonotonicTime free_time) {
  if (!ready()) {
    log()->info("Not removing images before every pod source was seen");
    co_return uint64_t{0};
  }
  std::set<std::string> in_use;
  auto detecting = detectImages(free_time, &in_use);
  CO_RETURN_IF_ERROR(co_await std::move(detecting));

  struct Candidate {
    std::string id;
    Record record;
  };
  std::vector<Candidate> candidates;
  for (const auto& [id, record] : records_) {
    if (in_use.count(id) == 0) candidates.push_back({id, record});
  }
  // Least recently used first; ties by first seen (the images there at start first).
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.record.last_used != b.record.last_used) return a.record.last_used < b.record.last_used;
    return a.record.first_detected.value_or(base::MonotonicTime::min()) <
           b.record.first_detected.value_or(base::MonotonicTime::min());
  });

  uint64_t freed = 0;
  std::vector<std::string> errors;
  for (const auto& c : candidates) {
    // Used since the listing above (a newer last use), or just pulled: kept.
    if (c.record.last_used >= free_time) continue;
    if (c.record.first_detected && free_time - *c.record.first_detected < options_.policy.min_age) {
      continue;
    }
    log()->info("Removing image to free {} bytes image={}", c.record.size, c.id);
    auto removing = runtime_.removeImage(c.id);
    auto removed = co_await std::move(removing);
    if (!removed.ok()) {
      errors.push_back(c.id + ": " + removed.toString());
      continue;
    }
    records_.erase(c.id);
    freed += c.record.size;
    if (freed >= bytes_to_free) break;
  }
  if (!errors.empty()) {
    std::string message = "wanted to free " + std::to_string(bytes_to_free) + " bytes, but freed " +
                          std::to_string(freed) + " bytes space with errors in image deletion: ";
    for (size_t i = 0; i < errors.size(); ++i) message += (i ? "; " : "") + errors[i];
    co_return base::unknownError(message);
  }
  co_return freed;
}

asio::awaitable<base::Status> ImageGcManager::freeOldImages(base::MonotonicTime free_time) {
  const base::Duration max_age = options_.policy.max_age;
  // As kubelet: nothing before the agent has run for the max age (the records' last uses start
  // with it), nor before every pod source was seen.
  if (max_age <= base::Duration::zero() || !started_ || free_time - *started_ <= max_age ||
      !ready()) {
    co_return base::okStatus();
  }
  std::set<std::string> in_use;
  auto detecting = detectImages(free_time, &in_use);
  CO_RETURN_IF_ERROR(co_await std::move(detecting));
  std::vector<std::pair<std::string, uint64_t>> old_images;
  for (const auto& [id, record] : records_) {
    if (in_use.count(id) != 0) continue;
    // Unused since: its last use, or when it was first seen if that is later (an image pulled
    // for a pod and not run yet is not old; kubelet counts such an image as unused forever).
    // The images there at the start count from the start.
    const base::MonotonicTime since =
        std::max(record.last_used, record.first_detected.value_or(*started_));
    if (free_time - since > max_age) old_images.emplace_back(id, record.size);
  }
  std::vector<std::string> errors;
  for (const auto& [id, size] : old_images) {
    log()->info("Removing image unused for longer than the max age image={} size={} maxAge={}", id,
                size, base::formatDuration(max_age));
    auto removing = runtime_.removeImage(id);
    if (auto removed = co_await std::move(removing); !removed.ok()) {
      errors.push_back(id + ": " + removed.toString());
      continue;
    }
    records_.erase(id);
  }
  if (!errors.empty()) {
    std::string message = "wanted to free images older than " + base::formatDuration(max_age) +
                          ", encountered errors in image deletion: ";
    for (size_t i = 0; i < errors.size(); ++i) message += (i ? "; " : "") + errors[i];
    co_return base::unknownError(message);
  }
  co_return base::okStatus();
}

void ImageGcManager::warn(const char* reason, const std::string& message) const {
  if (options_.record_node_warning) options_.record_node_warning(reason, message);
}

}  // namespace nodeagent::agent::images
