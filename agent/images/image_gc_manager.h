// ImageGcManager: kubelet's image garbage collection (pkg/kubelet/images/image_gc_manager.go) for
// a runtime whose containers run images (the CRI runtime).
//
// It keeps a record of each image the runtime holds: when it was first seen, when a container
// last used it, its size. The records are refreshed every `detect_period` (5m); the images found
// at the first refresh count as seen long ago. Every `gc_period` (5m, kubelet's ImageGCPeriod)
// the image filesystem's usage is checked: at or above `high_threshold_percent`
// (--image-gc-high-threshold, 85) unused images are removed, least recently used first (then
// first seen first), until usage is down to `low_threshold_percent` (--image-gc-low-threshold,
// 80). An image is never removed while a container, running or exited, was created from it, while
// the runtime pins it (its sandbox image), nor before `min_age` (--minimum-image-ttl-duration, 2m)
// has passed since it was first seen: it may have just been pulled for a container about to
// start. A failed removal is reported and the next image tried. With a max age
// (imageMaximumGCAge, --image-maximum-gc-age; off by default) each collection first removes the
// unused images that nothing used for longer than it, whatever the usage, once the agent has run
// for that long (kubelet 1.30's rule; a never used image counts from when it was first seen).
//
// Node events as kubelet's: Warning FreeDiskSpaceFailed when not enough could be freed, Warning
// ImageGCFailed when a pass failed for the second time in a row, Warning InvalidDiskCapacity for
// an image filesystem of size 0. A high threshold of 100 without a max age turns the periodic
// collection off (the eviction manager may still ask for deleteUnusedImages).
//
// Unlike kubelet, the images that the containers of the pods the agent wants name are kept too,
// whether or not a container was created from them yet (`wanted_images`), and nothing is removed
// before the agent has seen every pod source (`ready`, for `ready_timeout` at most): an agent that
// starts on a full disk does not remove the image of a pod it is about to start.
//
// Threading: every pass runs on the manager's own strand, one at a time (a collection, a reclaim
// and a refresh of the records never interleave at their co_awaits); deleteUnusedImages and
// garbageCollect may be awaited from any executor. Create with std::make_shared; the clock and the
// runtime must outlive it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/images/image_gc_policy.h"
#include "agent/runtime/runtime.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::agent::images {

struct ImageGcOptions {
  ImageGcPolicy policy;
  base::Duration gc_period = std::chrono::minutes(5);
  base::Duration detect_period = std::chrono::minutes(5);
  // A Warning event about the node (reason, message). Optional; must not block.
  std::function<void(const std::string& reason, const std::string& message)> record_node_warning;
  // The images (references, as pods name them) of the containers of the pods the agent wants:
  // never removed. Optional; called on the manager's strand, must not block.
  std::function<std::vector<std::string>()> wanted_images;
  // Whether the agent knows every pod it wants (each pod source was seen). Until then no image
  // is removed, and the periodic collection is tried again every `ready_retry`. Optional
  // (always ready); called on the manager's strand, must not block.
  std::function<bool()> ready;
  base::Duration ready_retry = std::chrono::seconds(1);
  // How long after start() the manager waits for `ready` at most (an apiserver that never
  // answers must not keep a full disk from being freed).
  base::Duration ready_timeout = std::chrono::minutes(5);
  // How often imageList() is refreshed (kubelet's 30 s).
  base::Duration list_period = std::chrono::seconds(30);
};

// Whether `ref` (an image reference as a pod names it, or an image ID) names `image`: its ID, or
// one of its repo tags or digests, the reference taken as a CRI runtime lists it (a name without
// a registry is on docker.io, under library/ when it has no path; without a tag or digest it is
// ":latest": "busybox" names "docker.io/library/busybox:latest").
bool imageNamedBy(const runtime::ImageInfo& image, std::string_view ref);

class ImageGcManager : public std::enable_shared_from_this<ImageGcManager> {
 public:
  ImageGcManager(asio::any_io_executor executor, base::Clock& clock, runtime::Runtime& runtime,
                 ImageGcOptions options);

  // Refreshes the records and collects at once, then every period. Any thread, once.
  void start();
  // No pass starts after this (one in flight finishes). Any thread; idempotent.
  void stop();

  // kubelet's GarbageCollect: one pass of the policy. An error says why it could not free what
  // the policy asks for.
  asio::awaitable<base::Status> garbageCollect();
  // kubelet's DeleteUnusedImages (the eviction manager's node-level reclaim): removes every
  // image the policy allows to remove, whatever the usage. The bytes freed (the images' sizes).
  asio::awaitable<base::StatusOr<uint64_t>> deleteUnusedImages();

  // The image filesystem as the runtime last reported it (asked at start, with each refresh of
  // the image list and by each collection), for the eviction manager's imagefs signals and the
  // summary's runtime.imageFs; nullopt until known. Any thread.
  std::optional<runtime::ImageFsInfo> imageFs() const;
  // The images the runtime holds, largest first, as listed at most `list_period` ago (kubelet's
  // image cache, which the Node's status.images shows); nullopt before the first listing. Any
  // thread.
  std::optional<std::vector<runtime::ImageInfo>> imageList() const;

 private:
  struct Record {
    // nullopt: there when the agent started (as old as any min age).
    std::optional<base::MonotonicTime> first_detected;
    base::MonotonicTime last_used{};
    uint64_t size = 0;
  };

  // What a timer runs: a collection, a refresh of the records, or of the image list.
  enum class Pass { kCollect, kDetect, kList };
  // Runs `pass` after `delay`, then schedules the next one.
  void schedule(base::TimerPtr& timer, base::Duration delay, Pass pass);
  asio::awaitable<void> refreshList();
  bool ready();
  // Passes that read or change the records run one at a time, as kubelet's hold its records'
  // lock (a collection's shortfall is then its own). Strand only.
  asio::awaitable<void> beginPass();
  void endPass();
  struct PassGuard {
    ImageGcManager* manager;
    ~PassGuard() { manager->endPass(); }
  };
  // Keeps `images`, largest first, for imageList().
  void storeList(std::vector<runtime::ImageInfo> images);
  // Strand only. One pass of the policy.
  asio::awaitable<base::Status> collectOnStrand();
  // A periodic pass: its failures logged and reported; the delay until the next one.
  asio::awaitable<base::Duration> periodicCollect();
  asio::awaitable<void> refreshRecords();
  // Refreshes the records (new images get `detect_time`, used ones `now`); the images not to
  // remove (used by a container, wanted or pinned) in `in_use`.
  asio::awaitable<base::Status> detectImages(std::optional<base::MonotonicTime> detect_time,
                                             std::set<std::string>* in_use);
  // kubelet's freeOldImages: removes the unused images not used for longer than the policy's
  // max age (none when it is zero). Strand only, within a pass.
  asio::awaitable<base::Status> freeOldImages(base::MonotonicTime free_time);
  // Removes unused images, oldest use first, until `bytes_to_free` are freed.
  asio::awaitable<base::StatusOr<uint64_t>> freeSpace(uint64_t bytes_to_free,
                                                      base::MonotonicTime free_time);
  void warn(const char* reason, const std::string& message) const;
  // ImageFsInfo, remembered for imageFs(). Strand only.
  asio::awaitable<base::StatusOr<runtime::ImageFsInfo>> imageFsInfo();

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  runtime::Runtime& runtime_;
  ImageGcOptions options_;
  base::TimerPtr detect_timer_;
  base::TimerPtr gc_timer_;
  base::TimerPtr list_timer_;
  std::atomic<bool> stopped_{false};
  // Strand only.
  std::map<std::string, Record> records_;  // by image ID
  bool pass_running_ = false;
  std::deque<std::shared_ptr<asio::steady_timer>> pass_waiters_;
  std::optional<base::MonotonicTime> started_;
  bool ready_timed_out_ = false;
  bool initialized_ = false;  // a first refresh succeeded
  bool previous_gc_failed_ = false;
  mutable std::mutex cache_mu_;                   // a leaf: the image filesystem and the image list
  std::optional<runtime::ImageFsInfo> image_fs_;  // guarded by cache_mu_
  std::optional<std::vector<runtime::ImageInfo>> image_list_;  // guarded by cache_mu_
};

}  // namespace nodeagent::agent::images
