#include "config/file_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <filesystem>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "api/hash.h"
#include "base/backoff.h"
#include "base/duration.h"
#include "base/log.h"
#include "config/static_pod.h"

namespace nodeagent::config {

bool isIgnoredManifestName(std::string_view name) {
  if (name.empty() || name.front() == '.') return true;
  if (name == "4913") return true;
  if (name.back() == '~') return true;
  for (std::string_view suffix : {".swp", ".swx", ".tmp", ".bak", ".orig"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) return true;
  }
  return name.find(".dpkg-") != std::string_view::npos;
}

// ---------------------------------------------------------------------------------------------
// SettleQueue

void SettleQueue::mark(const std::string& name, Kind kind, base::MonotonicTime now) {
  auto it = items_.find(name);
  if (it != items_.end() && kind == Kind::kVanished && it->second.kind == Kind::kVanished) return;
  items_[name] = Item{kind, now + window_};
}

bool SettleQueue::clear(const std::string& name) { return items_.erase(name) > 0; }

std::optional<SettleQueue::Kind> SettleQueue::kindOf(const std::string& name) const {
  auto it = items_.find(name);
  if (it == items_.end()) return std::nullopt;
  return it->second.kind;
}

std::vector<std::pair<std::string, SettleQueue::Kind>> SettleQueue::takeDue(
    base::MonotonicTime now) {
  std::vector<std::pair<std::string, Kind>> due;
  for (auto it = items_.begin(); it != items_.end();) {
    if (it->second.deadline <= now) {
      due.emplace_back(it->first, it->second.kind);
      it = items_.erase(it);
    } else {
      ++it;
    }
  }
  return due;
}

std::optional<base::MonotonicTime> SettleQueue::nextDeadline() const {
  std::optional<base::MonotonicTime> next;
  for (const auto& [name, item] : items_) {
    if (!next || item.deadline < *next) next = item.deadline;
  }
  return next;
}

// ---------------------------------------------------------------------------------------------
// FileSource::Impl

namespace {

constexpr uint32_t kDirMask = IN_CREATE | IN_CLOSE_WRITE | IN_MODIFY | IN_MOVED_FROM |
                              IN_MOVED_TO | IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
// Directories holding symlink targets: only what changes a target's content or identity.
constexpr uint32_t kTargetMask = IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |
                                 IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF |
                                 IN_MASK_ADD;
// The nearest existing parent of a missing path, or the parent of a symlinked directory.
constexpr uint32_t kAncestorMask =
    IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF |
    IN_ONLYDIR | IN_MASK_ADD;

std::string parentOf(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

std::string baseOf(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

int64_t nanos(const timespec& ts) { return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec; }

// What the relist compares to decide whether a file needs reading again: the content's inode,
// size and times, and for a symlink the link's own inode and ctime (a retargeted link).
struct StatKey {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime = 0;
  int64_t ctime = 0;
  ino_t link_ino = 0;
  int64_t link_ctime = 0;
  bool operator==(const StatKey&) const = default;
};

struct Entry {
  StatKey key;
  bool is_symlink = false;
  std::string target_dir;   // symlinks: the directory holding the resolved target
  std::string target_name;  // symlinks: the resolved target's name in that directory
  bool has_content = false;
  api::Hash128 content_hash;
  api::PodPtr pod;      // the last good pod (null until the file first parsed)
  bool winner = false;  // pod is in the set (first in sorted order among same full names)
  std::string parse_error;
  bool parse_invalid = false;   // parse_error is about the content (not a read failure)
  ManifestPodRef invalid_pod;   // the pod the bad content names, if it could be read
  std::string duplicate_of;  // name of the file whose pod wins over this one's
};

struct TargetWatch {
  std::string dir;
  std::set<std::string> entries;  // names of the links resolving into `dir`
};

enum class Mode { kUnknown, kMissing, kDir, kFile, kOther };

}  // namespace

class FileSource::Impl : public std::enable_shared_from_this<FileSource::Impl> {
 public:
  Impl(asio::any_io_executor ex, base::Clock& clock, FileSourceOptions options,
       PodUpdateSink sink)
      : strand_(asio::make_strand(std::move(ex))),
        clock_(clock),
        opts_(std::move(options)),
        sink_(std::move(sink)),
        log_(base::logger("config")),
        settle_(opts_.settle_window),
        backoff_({.initial = opts_.watch_retry_initial,
                  .max = opts_.watch_retry_max,
                  .factor = 2.0,
                  .jitter = 0.0},
                 base::defaultRandom()) {
    // The path is part of every static pod's UID: make "manifests", "./manifests/" and the
    // absolute spelling name the same pods (as `nodeagent validate` does).
    std::error_code ec;
    auto absolute = std::filesystem::absolute(opts_.path, ec);
    path_ = ec ? opts_.path : absolute.lexically_normal().string();
    while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
    relist_timer_ = clock_.makeTimer(strand_);
    settle_timer_ = clock_.makeTimer(strand_);
    retry_timer_ = clock_.makeTimer(strand_);
  }

  void start() {
    asio::post(strand_, [self = shared_from_this()] {
      if (self->closed_) return;
      self->log_->info("Watching manifest path path={} check_frequency={} settle_window={}",
                       self->path_, base::formatDuration(self->opts_.check_frequency),
                       base::formatDuration(self->opts_.settle_window));
      self->setupWatch();
      self->armRelist();
    });
  }

  void stop() {
    {
      std::lock_guard lock(sink_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    asio::post(strand_, [self = shared_from_this()] { self->close(); });
  }

  FileSourceStats stats() const {
    FileSourceStats s;
    s.files_read = files_read_.load();
    s.manifests_decoded = manifests_decoded_.load();
    s.updates_pushed = updates_pushed_.load();
    s.relists = relists_.load();
    s.event_batches = event_batches_.load();
    s.watch_setups = watch_setups_.load();
    return s;
  }

  void injectEvents(std::vector<InotifyEvent> events) {
    asio::post(strand_, [self = shared_from_this(), events = std::move(events)]() mutable {
      if (self->closed_) return;
      for (auto& e : events) e.wd = self->main_wd_;
      self->handleEvents(std::move(events));
    });
  }

  void relistNow() {
    asio::post(strand_, [self = shared_from_this()] {
      if (self->closed_) return;
      self->relist(/*force=*/false, /*check_mode=*/true);
    });
  }

 private:
  // ---- lifecycle ----------------------------------------------------------------------------

  void close() {
    if (closed_) return;
    closed_ = true;
    relist_timer_->cancel();
    settle_timer_->cancel();
    retry_timer_->cancel();
    dropWatches();
  }

  void dropWatches() {
    if (watcher_) watcher_->close();
    watcher_.reset();
    main_wd_ = -1;
    ancestor_wd_ = -1;
    ancestor_next_.clear();
    target_watches_.clear();
    target_wd_by_dir_.clear();
  }

  void armRelist() {
    relist_timer_->asyncWaitFor(opts_.check_frequency, [self = shared_from_this()] {
      if (self->closed_) return;
      self->relist(/*force=*/false, /*check_mode=*/true);
      self->armRelist();
    });
  }

  void scheduleRetry() {
    auto delay = backoff_.next();
    log_->debug("Retrying manifest path watch path={} in={}", path_, base::formatDuration(delay));
    retry_timer_->asyncWaitFor(delay, [self = shared_from_this()] {
      if (self->closed_) return;
      self->setupWatch();
    });
  }

  // (Re)determines what the path is, watches it and lists it.
  void setupWatch() {
    ++watch_setups_;
    retry_timer_->cancel();
    dropWatches();
    struct stat st;
    if (::stat(path_.c_str(), &st) != 0) {
      int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        if (mode_ != Mode::kMissing) {
          log_->info("Manifest path does not exist, sending an empty set and waiting for it path={}",
                     path_);
        }
        mode_ = Mode::kMissing;
        removeAllEntries();
        // Watch first, then send: whoever reacts to the empty set (and creates the path) must
        // not be able to do it before the watch is there to see it.
        const bool appeared = watchNearestAncestor();
        emitIfChanged();
        if (appeared) {
          // It appeared between the stat and the watch: no event will tell, look again now.
          asio::post(strand_, [self = shared_from_this()] {
            if (!self->closed_) self->setupWatch();
          });
          return;
        }
      } else {
        log_->warn("Cannot stat manifest path path={} reason={}", path_, std::strerror(err));
      }
      scheduleRetry();
      return;
    }
    Mode mode;
    if (S_ISDIR(st.st_mode)) {
      mode = Mode::kDir;
      dir_ = path_;
      file_name_.clear();
    } else if (S_ISREG(st.st_mode)) {
      mode = Mode::kFile;
      dir_ = parentOf(path_);
      file_name_ = baseOf(path_);
    } else {
      if (mode_ != Mode::kOther) {
        log_->warn("Manifest path is not a directory or file path={}", path_);
      }
      mode_ = Mode::kOther;
      scheduleRetry();
      return;
    }
    if (mode != mode_) removeAllEntries();  // entry names mean something else in the other mode
    mode_ = mode;
    path_dev_ = st.st_dev;
    path_ino_ = st.st_ino;
    char real[PATH_MAX];
    dir_real_ = ::realpath(dir_.c_str(), real) != nullptr ? std::string(real) : dir_;

    bool watch_ok = true;
    if (opts_.watch) {
      auto watcher = InotifyWatcher::create(strand_);
      if (!watcher.ok()) {
        log_->warn("Cannot watch manifest path, relying on the periodic relist path={} reason={}",
                   path_, watcher.status().message());
        watch_ok = false;
      } else {
        watcher_ = *watcher;
        auto wd = watcher_->addWatch(dir_, kDirMask);
        if (!wd.ok()) {
          log_->warn("Cannot watch manifest path path={} reason={}", dir_, wd.status().message());
          watch_ok = false;
          dropWatches();
        } else {
          main_wd_ = *wd;
          if (mode_ == Mode::kDir) watchSymlinkedDir();
          std::weak_ptr<Impl> weak = weak_from_this();
          watcher_->start(
              [weak](std::vector<InotifyEvent> events) {
                if (auto self = weak.lock(); self && !self->closed_) {
                  self->handleEvents(std::move(events));
                }
              },
              [weak](base::Status status) {
                if (auto self = weak.lock(); self && !self->closed_) {
                  self->log_->warn("Manifest watch failed, rewatching path={} reason={}",
                                   self->path_, status.message());
                  self->dropWatches();
                  self->scheduleRetry();
                }
              });
        }
      }
    }
    if (watch_ok) backoff_.reset();
    relist(/*force=*/true, /*check_mode=*/false);
    if (opts_.watch && !watch_ok) scheduleRetry();
  }

  // A missing path: watch the nearest existing parent for the next component to appear, so the
  // path is picked up at once rather than at the next backoff retry. True when that component
  // (or the path itself) exists by the time the watch is in place: it appeared in between.
  bool watchNearestAncestor() {
    if (!opts_.watch) return false;
    std::string child = path_;
    std::string parent = parentOf(child);
    while (true) {
      struct stat st;
      if (::stat(parent.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) break;
      if (parent == "/" || parent == "." || parent == child) return false;
      child = parent;
      parent = parentOf(child);
    }
    if (!ensureWatcher()) return false;
    auto wd = watcher_->addWatch(parent, kAncestorMask);
    if (!wd.ok()) {
      log_->debug("Cannot watch parent of missing manifest path dir={} reason={}", parent,
                  wd.status().message());
      return false;
    }
    ancestor_wd_ = *wd;
    ancestor_next_ = baseOf(child);
    struct stat st;
    if (::stat(child.c_str(), &st) != 0) return false;
    // A file where a directory is needed is not an arrival; the watch sees it replaced.
    return child == path_ || S_ISDIR(st.st_mode);
  }

  // The manifest directory is itself a symlink: watch the link's directory so a retargeted
  // link is noticed at once.
  void watchSymlinkedDir() {
    struct stat lst;
    if (::lstat(path_.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return;
    auto wd = watcher_->addWatch(parentOf(path_), kAncestorMask);
    if (!wd.ok()) return;
    ancestor_wd_ = *wd;
    ancestor_next_ = baseOf(path_);
  }

  bool ensureWatcher() {
    if (watcher_) return true;
    auto watcher = InotifyWatcher::create(strand_);
    if (!watcher.ok()) return false;
    watcher_ = *watcher;
    std::weak_ptr<Impl> weak = weak_from_this();
    watcher_->start(
        [weak](std::vector<InotifyEvent> events) {
          if (auto self = weak.lock(); self && !self->closed_) self->handleEvents(std::move(events));
        },
        [](base::Status) {});
    return true;
  }

  // ---- listing ------------------------------------------------------------------------------

  // Reads what changed (every file when `force`), removes what is gone (after the settle
  // window), then sends the set if it changed (always the first time).
  void relist(bool force, bool check_mode) {
    ++relists_;
    if (check_mode) {
      struct stat st;
      bool exists = ::stat(path_.c_str(), &st) == 0;
      Mode now_mode = !exists                 ? Mode::kMissing
                      : S_ISDIR(st.st_mode)   ? Mode::kDir
                      : S_ISREG(st.st_mode)   ? Mode::kFile
                                              : Mode::kOther;
      bool same_object = exists && st.st_dev == path_dev_ && st.st_ino == path_ino_;
      bool needs_setup = now_mode != mode_ || (mode_ == Mode::kDir && !same_object) ||
                         (opts_.watch && main_wd_ < 0 && mode_ != Mode::kMissing);
      if (needs_setup) {
        if (now_mode == Mode::kMissing && mode_ == Mode::kMissing) {
          emitIfChanged();
          return;
        }
        setupWatch();
        return;
      }
    }
    if (mode_ == Mode::kDir) {
      std::set<std::string> seen;
      if (DIR* d = ::opendir(dir_.c_str())) {
        while (dirent* de = ::readdir(d)) {
          std::string name = de->d_name;
          if (isIgnoredManifestName(name)) continue;
          seen.insert(std::move(name));
        }
        ::closedir(d);
      } else {
        log_->warn("Cannot list manifest directory path={} reason={}", dir_, std::strerror(errno));
        return;
      }
      for (const auto& name : seen) {
        if (settle_.kindOf(name) == SettleQueue::Kind::kWriting) continue;  // read once quiet
        processName(name, force, /*settled=*/false);
      }
      std::vector<std::string> gone;
      for (const auto& [name, entry] : entries_) {
        if (!seen.count(name)) gone.push_back(name);
      }
      for (const auto& name : gone) fileGone(name, /*settled=*/false);
    } else if (mode_ == Mode::kFile) {
      if (settle_.kindOf(file_name_) != SettleQueue::Kind::kWriting) {
        processName(file_name_, force, /*settled=*/false);
      }
    } else if (mode_ == Mode::kMissing) {
      removeAllEntries();
    }
    armSettleTimer();
    emitIfChanged();
  }

  std::string fullPath(const std::string& name) const {
    if (mode_ == Mode::kFile) return path_;
    return dir_ == "/" ? "/" + name : dir_ + "/" + name;
  }

  // Brings the cache entry of `name` up to date with the file: read and decode it if its content
  // changed (or always when `force`). A file that is gone is handed to fileGone.
  void processName(const std::string& name, bool force, bool settled) {
    const std::string full = fullPath(name);
    struct stat lst;
    if (::lstat(full.c_str(), &lst) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) {
        fileGone(name, settled);
      } else {
        recordReadError(name, std::string("cannot stat: ") + std::strerror(errno));
      }
      return;
    }
    const bool is_link = S_ISLNK(lst.st_mode);
    struct stat st = lst;
    if (is_link && ::stat(full.c_str(), &st) != 0) {
      fileGone(name, settled);  // dangling link, e.g. mid ConfigMap swap
      return;
    }
    if (!S_ISREG(st.st_mode)) {
      if (entries_.count(name)) {
        fileGone(name, settled);
      } else if (S_ISDIR(st.st_mode)) {
        log_->debug("Not recursing into manifest path path={}", full);
      } else {
        log_->debug("Skipping manifest path that is not a regular file path={}", full);
      }
      return;
    }
    settle_.clear(name);

    StatKey key{st.st_dev, st.st_ino, st.st_size, nanos(st.st_mtim), nanos(st.st_ctim), 0, 0};
    if (is_link) {
      key.link_ino = lst.st_ino;
      key.link_ctime = nanos(lst.st_ctim);
    }
    auto it = entries_.find(name);
    if (!force && it != entries_.end() && it->second.has_content && it->second.key == key) return;

    auto bytes = readManifest(full);
    if (!bytes.ok()) {
      if (bytes.status().code() == base::StatusCode::kNotFound) {
        fileGone(name, settled);
      } else {
        recordReadError(name, bytes.status().message());
      }
      return;
    }
    Entry& e = entries_[name];
    e.key = key;
    e.is_symlink = is_link;
    updateTargetWatch(name, e, full);

    api::Hash128 hash = api::hash128(*bytes);
    if (e.has_content && e.content_hash == hash) return;  // identical content: nothing to do
    e.has_content = true;
    e.content_hash = hash;

    ++manifests_decoded_;
    DecodeResult result =
        decodeManifest(*bytes,
                       ManifestSource{opts_.node_name, full, /*is_file=*/true, seenTime(clock_)},
                       /*allow_list=*/false);
    if (!result.ok() || result.pods.size() != 1) {
      e.parse_error = result.ok() ? "expected exactly one pod, got " +
                                        std::to_string(result.pods.size())
                                  : result.errorText();
      e.parse_invalid = true;
      e.invalid_pod = result.invalid_pods.size() == 1 ? result.invalid_pods.front() : ManifestPodRef{};
      log_->warn("Could not process manifest file, keeping its last good pod file={} reason={}",
                 full, e.parse_error);
      refreshError(name, e);
      return;
    }
    bool had_error = !e.parse_error.empty();
    e.parse_error.clear();
    e.parse_invalid = false;
    e.invalid_pod = {};
    if (had_error) log_->info("Manifest file parses again file={}", full);
    setPod(name, e, result.pods.front());
    refreshError(name, e);
  }

  base::StatusOr<std::string> readManifest(const std::string& full) {
    ++files_read_;
    int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT) return base::notFoundError("gone");
      return base::unavailableError(std::string("cannot open: ") + std::strerror(err));
    }
    std::string out;
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      out.reserve(std::min<size_t>(static_cast<size_t>(st.st_size), opts_.max_manifest_bytes) + 1);
    }
    char buf[16384];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        return base::unavailableError(std::string("cannot read: ") + std::strerror(err));
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (out.size() > opts_.max_manifest_bytes) {
        ::close(fd);
        return base::resourceExhaustedError("manifest is larger than " +
                                            std::to_string(opts_.max_manifest_bytes) + " bytes");
      }
    }
    ::close(fd);
    return out;
  }

  // A file that cannot be read keeps its last good pod, like one that does not parse.
  void recordReadError(const std::string& name, const std::string& reason) {
    Entry& e = entries_[name];
    e.has_content = false;
    e.parse_error = reason;
    e.parse_invalid = false;
    e.invalid_pod = {};
    log_->warn("Could not read manifest file, keeping its last good pod file={} reason={}",
               fullPath(name), reason);
    refreshError(name, e);
  }

  // The file is not there (or no longer a regular file). Unless `settled`, it gets the settle
  // window to come back before its pod goes.
  void fileGone(const std::string& name, bool settled) {
    if (!entries_.count(name)) {
      settle_.clear(name);
      return;
    }
    if (settled || opts_.settle_window <= base::Duration::zero()) {
      settle_.clear(name);
      removeEntry(name);
      return;
    }
    settle_.mark(name, SettleQueue::Kind::kVanished, clock_.now());
  }

  void removeEntry(const std::string& name) {
    auto it = entries_.find(name);
    if (it == entries_.end()) return;
    log_->debug("Manifest file removed file={}", fullPath(name));
    setPod(name, it->second, nullptr);
    dropTargetWatch(name, it->second);
    if (opts_.errors) opts_.errors->clear(api::kFileSource, fullPath(name));
    entries_.erase(it);
  }

  void removeAllEntries() {
    while (!entries_.empty()) removeEntry(entries_.begin()->first);
    settle_ = SettleQueue(opts_.settle_window);
  }

  // ---- the pod set --------------------------------------------------------------------------

  void setPod(const std::string& name, Entry& e, api::PodPtr pod) {
    api::PodPtr old = e.pod;
    if (old && pod && old->fullName() == pod->fullName() &&
        old->content_hash == pod->content_hash && old->metadata.uid == pod->metadata.uid) {
      return;  // same pod (e.g. a bad edit reverted): keep the old object, the set is unchanged
    }
    e.pod = std::move(pod);
    if (old) {
      claimants_[old->fullName()].erase(name);
      reconcileClaims(old->fullName());
    }
    if (e.pod) {
      claimants_[e.pod->fullName()].insert(name);
      reconcileClaims(e.pod->fullName());
      log_->debug("Manifest file read file={} pod={} uid={}", fullPath(name), api::podRef(*e.pod),
                  e.pod->metadata.uid);
    } else {
      e.winner = false;
      e.duplicate_of.clear();
    }
    syncSetSlot(name, e);
  }

  // The first file in sorted order owns a pod full name; the others are reported.
  void reconcileClaims(const std::string& full_name) {
    auto it = claimants_.find(full_name);
    if (it == claimants_.end()) return;
    if (it->second.empty()) {
      claimants_.erase(it);
      return;
    }
    const std::string& first = *it->second.begin();
    for (const auto& name : it->second) {
      Entry& e = entries_[name];
      bool win = name == first;
      std::string dup = win ? std::string() : first;
      e.winner = win;
      syncSetSlot(name, e);
      if (e.duplicate_of != dup) {
        e.duplicate_of = dup;
        if (!dup.empty()) {
          log_->warn(
              "Two manifest files define the same pod, ignoring the later one in sorted order "
              "pod={} file={} used={}",
              full_name, fullPath(name), fullPath(dup));
        }
        refreshError(name, e);
      }
    }
  }

  // Keeps set_names_/set_pods_ (the pods sent, sorted by file name) in step with one entry, so
  // sending a SET costs a vector copy rather than a walk of every cache entry.
  void syncSetSlot(const std::string& name, const Entry& e) {
    const bool in_set = e.winner && e.pod;
    auto pos = std::lower_bound(set_names_.begin(), set_names_.end(), name);
    const auto idx = static_cast<size_t>(pos - set_names_.begin());
    const bool present = pos != set_names_.end() && *pos == name;
    if (in_set && present) {
      if (set_pods_[idx] != e.pod) {
        set_pods_[idx] = e.pod;
        changed_ = true;
      }
    } else if (in_set) {
      set_names_.insert(pos, name);
      set_pods_.insert(set_pods_.begin() + static_cast<std::ptrdiff_t>(idx), e.pod);
      changed_ = true;
    } else if (present) {
      set_names_.erase(pos);
      set_pods_.erase(set_pods_.begin() + static_cast<std::ptrdiff_t>(idx));
      changed_ = true;
    }
  }

  void refreshError(const std::string& name, const Entry& e) {
    if (!opts_.errors) return;
    std::string message = e.parse_error;
    ManifestErrorDetail detail;
    if (e.parse_invalid) {
      detail.invalid = e.parse_error;
      detail.pod = e.invalid_pod;
    }
    if (!e.duplicate_of.empty() && e.pod) {
      std::string duplicate = "pod " + e.pod->fullName() + " is also defined by " +
                              fullPath(e.duplicate_of) +
                              ", which comes first in sorted order and wins; this file is ignored";
      if (!message.empty()) message += "\n";
      message += duplicate;
      if (!detail.invalid.empty()) detail.invalid += "\n";
      detail.invalid += duplicate;
      if (detail.pod.name.empty()) {
        detail.pod = {e.pod->metadata.namespace_, e.pod->metadata.name, e.pod->metadata.uid};
      }
    }
    if (message.empty()) {
      opts_.errors->clear(api::kFileSource, fullPath(name));
    } else {
      opts_.errors->set(api::kFileSource, fullPath(name), std::move(message), clock_.wallNow(),
                        std::move(detail));
    }
  }

  void emitIfChanged() {
    if (emitted_ && !changed_) return;
    std::vector<api::PodPtr> pods = set_pods_;
    changed_ = false;
    if (!emitted_) {
      log_->info("Manifest path read path={} pods={}", path_, pods.size());
    }
    emitted_ = true;
    api::PodUpdate update{std::move(pods), api::PodOperation::kSet, std::string(api::kFileSource),
                          /*source_annotated=*/true};
    std::lock_guard lock(sink_mu_);
    if (stopped_) return;
    ++updates_pushed_;
    sink_(std::move(update));
  }

  // ---- symlink targets ----------------------------------------------------------------------

  void updateTargetWatch(const std::string& name, Entry& e, const std::string& full) {
    if (!e.is_symlink) {
      dropTargetWatch(name, e);
      return;
    }
    char real[PATH_MAX];
    if (::realpath(full.c_str(), real) == nullptr) return;
    std::string target = real;
    std::string tdir = parentOf(target);
    std::string tname = baseOf(target);
    if (tdir == e.target_dir && tname == e.target_name && target_wd_by_dir_.count(tdir)) return;
    dropTargetWatch(name, e);
    e.target_dir = tdir;
    e.target_name = tname;
    if (!watcher_) return;
    int wd;
    if (auto found = target_wd_by_dir_.find(tdir); found != target_wd_by_dir_.end()) {
      wd = found->second;
    } else {
      auto added = watcher_->addWatch(tdir, kTargetMask);
      if (!added.ok()) {
        log_->debug("Cannot watch symlink target directory dir={} reason={}", tdir,
                    added.status().message());
        return;
      }
      wd = *added;
      target_wd_by_dir_[tdir] = wd;
      target_watches_[wd].dir = tdir;
    }
    target_watches_[wd].entries.insert(name);
  }

  void dropTargetWatch(const std::string& name, Entry& e) {
    if (e.target_dir.empty()) return;
    auto found = target_wd_by_dir_.find(e.target_dir);
    if (found != target_wd_by_dir_.end()) {
      int wd = found->second;
      auto& tw = target_watches_[wd];
      tw.entries.erase(name);
      if (tw.entries.empty()) {
        if (watcher_ && wd != main_wd_ && wd != ancestor_wd_) watcher_->removeWatch(wd);
        target_watches_.erase(wd);
        target_wd_by_dir_.erase(found);
      }
    }
    e.target_dir.clear();
    e.target_name.clear();
  }

  // ---- events -------------------------------------------------------------------------------

  void handleEvents(std::vector<InotifyEvent> events) {
    ++event_batches_;
    std::set<std::string> dirty;
    bool rewatch = false;
    bool full_relist = false;
    bool recheck_links = false;
    const auto now = clock_.now();
    for (const auto& e : events) {
      if (log_->should_log(spdlog::level::trace)) {
        log_->trace("inotify event wd={} mask={} name={}", e.wd, inotifyMaskString(e.mask),
                    e.name);
      }
      if (e.mask & IN_Q_OVERFLOW) {
        log_->warn("Manifest watch queue overflowed, relisting path={}", path_);
        full_relist = true;
        continue;
      }
      if (e.wd == main_wd_ && e.wd >= 0) {
        handleMainEvent(e, now, dirty, rewatch, recheck_links);
      } else if (e.wd == main_wd_ && !opts_.watch) {
        handleMainEvent(e, now, dirty, rewatch, recheck_links);  // injected by a test
      }
      if (e.wd == ancestor_wd_ && e.wd >= 0) {
        if (e.name.empty() ? (e.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0
                           : e.name == ancestor_next_) {
          rewatch = true;
        }
      }
      if (auto tw = target_watches_.find(e.wd); tw != target_watches_.end()) {
        handleTargetEvent(e, tw->second, dirty);
        if (e.mask & IN_IGNORED) {
          target_wd_by_dir_.erase(tw->second.dir);
          target_watches_.erase(tw);
        }
      }
    }
    if (rewatch) {
      setupWatch();
      return;
    }
    if (full_relist) {
      relist(/*force=*/true, /*check_mode=*/true);
      return;
    }
    if (recheck_links) {
      for (const auto& [name, entry] : entries_) {
        if (entry.is_symlink) dirty.insert(name);
      }
    }
    for (const auto& name : dirty) processName(name, /*force=*/true, /*settled=*/false);
    armSettleTimer();
    emitIfChanged();
  }

  void handleMainEvent(const InotifyEvent& e, base::MonotonicTime now,
                       std::set<std::string>& dirty, bool& rewatch, bool& recheck_links) {
    if (e.name.empty()) {
      if (e.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) rewatch = true;
      return;
    }
    const std::string& name = e.name;
    const bool relevant = mode_ == Mode::kFile ? name == file_name_ : !isIgnoredManifestName(name);
    if (!relevant) {
      // Hidden directories and links (`..data`) may be what visible links resolve through.
      if (name.front() == '.' && (e.mask & (IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM)) &&
          ((e.mask & IN_ISDIR) || name.starts_with("..") || isSymlink(fullPathInDir(name)))) {
        recheck_links = true;
      }
      return;
    }
    const bool known = entries_.count(name) > 0;
    if (e.mask & IN_ISDIR) {
      if (known) dirty.insert(name);
      return;
    }
    if (e.mask & (IN_DELETE | IN_MOVED_FROM)) {
      dirty.erase(name);
      if (known) {
        fileGone(name, /*settled=*/false);
      } else {
        settle_.clear(name);  // a temp file renamed away before it settled: never a pod
      }
      return;
    }
    if (e.mask & IN_MOVED_TO) {
      dirty.insert(name);  // a rename delivers a complete file
      return;
    }
    if (e.mask & IN_CLOSE_WRITE) {
      if (known) {
        dirty.insert(name);
      } else {
        settle_.mark(name, SettleQueue::Kind::kWriting, now);
      }
      return;
    }
    if (e.mask & IN_CREATE) {
      if (isSymlink(fullPathInDir(name))) {
        dirty.insert(name);
      } else {
        settle_.mark(name, SettleQueue::Kind::kWriting, now);
      }
      return;
    }
    if (e.mask & IN_MODIFY) {
      dirty.erase(name);  // written again: wait for the close
      settle_.mark(name, SettleQueue::Kind::kWriting, now);
      return;
    }
    if (e.mask & IN_ATTRIB) {
      if (settle_.kindOf(name) != SettleQueue::Kind::kWriting) dirty.insert(name);
    }
  }

  void handleTargetEvent(const InotifyEvent& e, const TargetWatch& tw,
                         std::set<std::string>& dirty) {
    if (e.name.empty()) {
      if (e.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
        for (const auto& name : tw.entries) dirty.insert(name);
      }
      return;
    }
    if ((e.mask & (IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE |
                   IN_ATTRIB)) == 0) {
      return;
    }
    for (const auto& name : tw.entries) {
      auto it = entries_.find(name);
      if (it != entries_.end() && it->second.target_name == e.name) dirty.insert(name);
    }
  }

  std::string fullPathInDir(const std::string& name) const {
    return dir_ == "/" ? "/" + name : dir_ + "/" + name;
  }

  static bool isSymlink(const std::string& path) {
    struct stat lst;
    return ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
  }

  // ---- settle window ------------------------------------------------------------------------

  void armSettleTimer() {
    auto next = settle_.nextDeadline();
    if (!next) {
      settle_timer_->cancel();
      return;
    }
    auto delay = std::max<base::Duration>(*next - clock_.now(), base::Duration::zero());
    settle_timer_->asyncWaitFor(delay, [self = shared_from_this()] {
      if (self->closed_) return;
      self->onSettled();
    });
  }

  void onSettled() {
    for (const auto& [name, kind] : settle_.takeDue(clock_.now())) {
      // A vanished file still gone is removed now; anything there is read.
      processName(name, /*force=*/true, /*settled=*/kind == SettleQueue::Kind::kVanished);
    }
    armSettleTimer();
    emitIfChanged();
  }

  // ---- state (strand only unless noted) -----------------------------------------------------

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  FileSourceOptions opts_;
  PodUpdateSink sink_;
  std::shared_ptr<spdlog::logger> log_;
  std::string path_;

  std::mutex sink_mu_;   // any thread: guards stopped_ and calls into sink_
  bool stopped_ = false;
  bool closed_ = false;  // strand: close() ran

  Mode mode_ = Mode::kUnknown;
  std::string dir_;        // the directory holding the manifests (the path, or its parent)
  std::string dir_real_;   // dir_ with symlinks resolved
  std::string file_name_;  // single-file mode: the file's name in dir_
  dev_t path_dev_ = 0;
  ino_t path_ino_ = 0;

  std::shared_ptr<InotifyWatcher> watcher_;
  int main_wd_ = -1;
  int ancestor_wd_ = -1;
  std::string ancestor_next_;  // the name in the ancestor directory that leads to the path
  std::map<int, TargetWatch> target_watches_;
  std::map<std::string, int> target_wd_by_dir_;

  std::map<std::string, Entry> entries_;  // by file name, sorted: the order duplicates resolve in
  std::unordered_map<std::string, std::set<std::string>> claimants_;  // full name -> file names
  std::vector<std::string> set_names_;  // files whose pod is in the set, sorted
  std::vector<api::PodPtr> set_pods_;   // their pods, in the same order
  SettleQueue settle_;
  base::TimerPtr relist_timer_;
  base::TimerPtr settle_timer_;
  base::TimerPtr retry_timer_;
  base::Backoff backoff_;
  bool emitted_ = false;  // the first SET went out (the source is seen)
  bool changed_ = false;  // the set differs from the last one sent

  std::atomic<uint64_t> files_read_{0};
  std::atomic<uint64_t> manifests_decoded_{0};
  std::atomic<uint64_t> updates_pushed_{0};
  std::atomic<uint64_t> relists_{0};
  std::atomic<uint64_t> event_batches_{0};
  std::atomic<uint64_t> watch_setups_{0};
};

// ---------------------------------------------------------------------------------------------
// FileSource

FileSource::FileSource(asio::any_io_executor ex, base::Clock& clock, FileSourceOptions options,
                       PodUpdateSink sink)
    : impl_(std::make_shared<Impl>(std::move(ex), clock, std::move(options), std::move(sink))) {}

FileSource::~FileSource() { impl_->stop(); }

void FileSource::start() { impl_->start(); }
void FileSource::stop() { impl_->stop(); }
FileSourceStats FileSource::stats() const { return impl_->stats(); }
void FileSource::injectEventsForTest(std::vector<InotifyEvent> events) {
  impl_->injectEvents(std::move(events));
}
void FileSource::relistForTest() { impl_->relistNow(); }

std::unique_ptr<PodSource> makeFileSource(asio::any_io_executor ex, base::Clock& clock,
                                          FileSourceOptions options, PodUpdateSink sink) {
  return std::make_unique<FileSource>(std::move(ex), clock, std::move(options), std::move(sink));
}

}  // namespace nodeagent::config
