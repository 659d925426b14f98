// FileSource: static pods from `--pod-manifest-path`, a directory of manifests or one file
// (kubelet's config/file.go + file_linux.go, with the fixes users asked for; DESIGN.md).
//
// Change detection is inotify on the io_context (create, close-write, moved-to/from, delete,
// attrib, delete-self/move-self; queue overflow -> full relist) plus a relist every
// `check_frequency` as a safety net. While a directory on a local filesystem has a working watch,
// that relist trusts the watch and stats every file only once per `full_check_period` (a stat of
// every file is most of an idle node's CPU at tens of thousands of manifests); on a network or
// FUSE filesystem, whose remote changes inotify never reports, or without a watch, every relist
// stats every file. A missing path sends an empty SET (the source counts as
// seen) and is watched for again with backoff (1s doubling to 20s) and through its nearest
// existing parent, so its pods appear as soon as it does. Symlinked manifests are followed: the
// directory holding a link's target is watched too, and a swap of hidden entries (Kubernetes
// ConfigMap volumes: `..data -> ..2024_xx`, `web.yaml -> ..data/web.yaml`) rechecks every link.
//
// Every update is a SET of the whole pod set (as kubelet's file source sends), but only the file
// that changed is read and decoded: a per-file cache (name -> stat key, content hash, last good
// pod) keeps the cost of one change independent of the number of manifests, and nothing is sent
// when the set did not change (an identical rewrite is no op at all). Deliberate departures from
// kubelet:
//  - hidden, editor and temp files are ignored (isIgnoredManifestName); subdirectories are not
//  read;
//  - a file that fails to parse keeps its last good pod; the error is logged and kept in
//    ManifestErrors until the file is good again or gone;
//  - a manifest that disappears and reappears within `settle_window` (editors rename the old file
//    away before writing the new one) is a modification, not a REMOVE and an ADD; a new file is
//    read once it has been quiet for the window, so a temp file renamed away is never a pod;
//  - two files with the same pod full name: the first in sorted order wins, the other is reported.
// File reads are small and local and run on the source's strand; nothing else blocks there.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/asio.h"
#include "base/clock.h"
#include "config/inotify_watcher.h"
#include "config/manifest_errors.h"
#include "config/pod_source.h"

namespace nodeagent::config {

// True for names the file source never reads: `.*`, `*~`, `*.swp`, `*.swx`, `*.tmp`, `*.bak`,
// `*.orig`, `*.dpkg-*` and vim's `4913` probe.
bool isIgnoredManifestName(std::string_view name);

// Names waiting for the settle window to pass: files that vanished (removed only if they are
// still gone when the window ends) and files being written (read once quiet). Pure; the file
// source drives it from its strand with its clock.
class SettleQueue {
 public:
  enum class Kind { kVanished, kWriting };
  explicit SettleQueue(base::Duration window) : window_(window) {}

  // kVanished keeps the deadline of an earlier disappearance (the window counts from the first);
  // kWriting restarts it (the file must be quiet for a whole window).
  void mark(const std::string& name, Kind kind, base::MonotonicTime now);
  // Forgets `name`; true if it was queued.
  bool clear(const std::string& name);
  std::optional<Kind> kindOf(const std::string& name) const;
  // Removes and returns the names whose deadline is at or before `now`, in name order.
  std::vector<std::pair<std::string, Kind>> takeDue(base::MonotonicTime now);
  std::optional<base::MonotonicTime> nextDeadline() const;
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  base::Duration window() const { return window_; }

 private:
  struct Item {
    Kind kind;
    base::MonotonicTime deadline;
  };
  base::Duration window_;
  std::map<std::string, Item> items_;
};

struct FileSourceOptions {
  std::string path;       // --pod-manifest-path: a directory or a single file
  std::string node_name;  // for the pods' name suffix, nodeName and UID
  base::Duration check_frequency = std::chrono::seconds(20);  // --file-check-frequency
  // With a working inotify watch of a directory on a local filesystem, the relist stats every
  // file once per this period only (and in between re-checks only files that need it: symlinks,
  // files never read or unreadable). 0: every relist stats every file.
  base::Duration full_check_period = std::chrono::minutes(5);
  base::Duration settle_window = std::chrono::milliseconds(300);
  base::Duration watch_retry_initial = std::chrono::seconds(1);
  base::Duration watch_retry_max = std::chrono::seconds(20);
  size_t max_manifest_bytes = 10 * 1024 * 1024;
  // false: no inotify, only the periodic relist (and events injected by tests).
  bool watch = true;
  // Where parse and duplicate errors are kept (source "file", location = file path). Nullable.
  ManifestErrors* errors = nullptr;
};

// Counters for tests and benchmarks (any thread).
struct FileSourceStats {
  uint64_t files_read = 0;         // manifest files read from disk
  uint64_t manifests_decoded = 0;  // decodeManifest calls (content changed)
  uint64_t updates_pushed = 0;     // SETs sent to the sink
  uint64_t relists = 0;            // relists, periodic or not
  uint64_t stat_sweeps = 0;        // relists that listed the directory and stat'ed every file
  uint64_t event_batches = 0;      // inotify reads handled
  uint64_t watch_setups = 0;       // times the path was examined and (re)watched: start, retries
};

class FileSource final : public PodSource {
 public:
  // Runs on its own strand of `ex`; pushes SET updates for source "file" into `sink`.
  FileSource(asio::any_io_executor ex, base::Clock& clock, FileSourceOptions options,
             PodUpdateSink sink);
  // Calls stop(). Destroy it before the io_context; run the io_context afterwards (or destroy
  // it) so the handlers still holding the source's state release it.
  ~FileSource() override;

  // Any thread, once: lists the path (the first SET follows) and starts watching.
  void start() override;
  // Any thread, idempotent: no update is pushed after it returns; watches and timers are
  // released on the strand.
  void stop() override;

  FileSourceStats stats() const;

  // Handles `events` on the strand as if inotify had reported them for the watched directory
  // (their wd is ignored). For FakeClock tests with `watch = false`.
  void injectEventsForTest(std::vector<InotifyEvent> events);
  // Runs a relist on the strand now (as the periodic timer would).
  void relistForTest();

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Whether inotify sees every change of a filesystem of this type (statfs f_type): local disk and
// memory filesystems. Network, FUSE and overlay filesystems (whose changes may come from
// elsewhere) are not.
bool watchSeesEveryChange(int64_t fs_type);

std::unique_ptr<PodSource> makeFileSource(asio::any_io_executor ex, base::Clock& clock,
                                          FileSourceOptions options, PodUpdateSink sink);

}  // namespace nodeagent::config
