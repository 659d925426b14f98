// FileSource::Impl: inotify watches of the manifest path (or its nearest existing ancestor while
// it is missing), of the directories holding symlink targets, their events, and the settle window.
#include "config/file_source_impl.h"

#include <sys/statfs.h>

namespace nodeagent::config {

void FileSource::Impl::close() {
  if (closed_) return;
  closed_ = true;
  relist_timer_->cancel();
  settle_timer_->cancel();
  retry_timer_->cancel();
  dropWatches();
}

void FileSource::Impl::dropWatches() {
  if (watcher_) watcher_->close();
  watcher_.reset();
  main_wd_ = -1;
  ancestor_wd_ = -1;
  ancestor_next_.clear();
  target_watches_.clear();
  target_wd_by_dir_.clear();
}

void FileSource::Impl::armRelist() {
  relist_timer_->asyncWaitFor(opts_.check_frequency, [self = shared_from_this()] {
    if (self->closed_) return;
    self->relist(/*force=*/false, /*check_mode=*/true);
    self->armRelist();
  });
}

void FileSource::Impl::scheduleRetry() {
  auto delay = backoff_.next();
  log()->debug("Retrying manifest path watch path={} in={}", path_, base::formatDuration(delay));
  retry_timer_->asyncWaitFor(delay, [self = shared_from_this()] {
    if (self->closed_) return;
    self->setupWatch();
  });
}

void FileSource::Impl::setupWatch() {
  ++watch_setups_;
  retry_timer_->cancel();
  dropWatches();
  last_sweep_.reset();  // a new watch (or a new directory) is trusted after its first sweep
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) {
    handleUnstattablePath(errno);
    return;
  }
  if (!adoptPathKind(st)) return;
  const bool watch_ok = !opts_.watch || watchPath();
  if (watch_ok) backoff_.reset();
  relist(/*force=*/true, /*check_mode=*/false);
  if (opts_.watch && !watch_ok) scheduleRetry();
}

void FileSource::Impl::handleUnstattablePath(int err) {
  if (err == ENOENT || err == ENOTDIR) {
    if (mode_ != Mode::kMissing) {
      log()->info("Manifest path does not exist, sending an empty set and waiting for it path={}",
                  path_);
    }
    mode_ = Mode::kMissing;
    path_problem_.clear();
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
    log()->warn("Cannot stat manifest path path={} reason={}", path_, std::strerror(err));
    path_problem_ = "cannot stat " + path_ + ": " + std::strerror(err);
    emitIfChanged();
  }
  scheduleRetry();
}

bool FileSource::Impl::adoptPathKind(const struct stat& st) {
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
      log()->warn("Manifest path is not a directory or file path={}", path_);
    }
    mode_ = Mode::kOther;
    path_problem_ = path_ + " is not a directory or a regular file";
    emitIfChanged();
    scheduleRetry();
    return false;
  }
  if (mode != mode_) removeAllEntries();  // entry names mean something else in the other mode
  mode_ = mode;
  path_problem_.clear();
  path_dev_ = st.st_dev;
  path_ino_ = st.st_ino;
  char real[PATH_MAX];
  dir_real_ = ::realpath(dir_.c_str(), real) != nullptr ? std::string(real) : dir_;
  struct statfs fs {};
  const bool local = ::statfs(dir_.c_str(), &fs) == 0 && watchSeesEveryChange(fs.f_type);
  if (!local && mode_ == Mode::kDir && !nonlocal_logged_) {
    nonlocal_logged_ = true;
    log()->info(
        "Manifest directory is not on a local filesystem: every relist stats every file "
        "path={} fs_type={:#x}",
        dir_, static_cast<uint64_t>(fs.f_type));
  }
  dir_local_ = local;
  return true;
}

bool FileSource::Impl::watchPath() {
  auto watcher = InotifyWatcher::create(strand_);
  if (!watcher.ok()) {
    log()->warn("Cannot watch manifest path, relying on the periodic relist path={} reason={}",
                path_, watcher.status().message());
    return false;
  }
  watcher_ = *watcher;
  auto wd = watcher_->addWatch(dir_, kDirMask);
  if (!wd.ok()) {
    log()->warn("Cannot watch manifest path path={} reason={}", dir_, wd.status().message());
    dropWatches();
    return false;
  }
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
          log()->warn("Manifest watch failed, rewatching path={} reason={}", self->path_,
                      status.message());
          self->dropWatches();
          self->scheduleRetry();
        }
      });
  return true;
}

bool FileSource::Impl::watchNearestAncestor() {
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
    log()->debug("Cannot watch parent of missing manifest path dir={} reason={}", parent,
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

void FileSource::Impl::watchSymlinkedDir() {
  struct stat lst;
  if (::lstat(path_.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return;
  auto wd = watcher_->addWatch(parentOf(path_), kAncestorMask);
  if (!wd.ok()) return;
  ancestor_wd_ = *wd;
  ancestor_next_ = baseOf(path_);
}

bool FileSource::Impl::ensureWatcher() {
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

void FileSource::Impl::updateTargetWatch(const std::string& name, Entry& e,
                                         const std::string& full) {
  if (!e.is_symlink) {
    dropTargetWatch(name, e);
    return;
  }
  char real[PATH_MAX];
  if (::realpath(full.c_str(), real) == nullptr) return;
  std::string target = real;
  std::string tdir = parentOf(target);
  std::string tname = baseOf(target);
  if (e.target && tdir == e.target->dir && tname == e.target->name &&
      target_wd_by_dir_.count(tdir)) {
    return;
  }
  dropTargetWatch(name, e);
  e.target = SymlinkTarget{tdir, tname};
  if (!watcher_) return;
  int wd;
  if (auto found = target_wd_by_dir_.find(tdir); found != target_wd_by_dir_.end()) {
    wd = found->second;
  } else {
    auto added = watcher_->addWatch(tdir, kTargetMask);
    if (!added.ok()) {
      log()->debug("Cannot watch symlink target directory dir={} reason={}", tdir,
                   added.status().message());
      return;
    }
    wd = *added;
    target_wd_by_dir_[tdir] = wd;
    target_watches_[wd].dir = tdir;
  }
  target_watches_[wd].entries.insert(name);
}

void FileSource::Impl::dropTargetWatch(const std::string& name, Entry& e) {
  if (!e.target) return;
  auto found = target_wd_by_dir_.find(e.target->dir);
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
  e.target.reset();
}

void FileSource::Impl::handleEvents(std::vector<InotifyEvent> events) {
  ++event_batches_;
  std::set<std::string> dirty;
  bool rewatch = false;
  bool full_relist = false;
  bool recheck_links = false;
  const auto now = clock_.now();
  for (const auto& e : events) {
    if (log()->should_log(spdlog::level::trace)) {
      log()->trace("inotify event wd={} mask={} name={}", e.wd, inotifyMaskString(e.mask),
                   base::goQuote(e.name));
    }
    if (e.mask & IN_Q_OVERFLOW) {
      log()->warn("Manifest watch queue overflowed, relisting path={}", path_);
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

void FileSource::Impl::handleMainEvent(const InotifyEvent& e, base::MonotonicTime now,
                                       std::set<std::string>& dirty, bool& rewatch,
                                       bool& recheck_links) {
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

void FileSource::Impl::handleTargetEvent(const InotifyEvent& e, const TargetWatch& tw,
                                         std::set<std::string>& dirty) {
  if (e.name.empty()) {
    if (e.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
      for (const auto& name : tw.entries) dirty.insert(name);
    }
    return;
  }
  if ((e.mask &
       (IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_ATTRIB)) == 0) {
    return;
  }
  for (const auto& name : tw.entries) {
    auto it = entries_.find(name);
    if (it == entries_.end() || !it->second.target) continue;
    if (it->second.target->name == e.name) dirty.insert(name);
  }
}

std::string FileSource::Impl::fullPathInDir(const std::string& name) const {
  return dir_ == "/" ? "/" + name : dir_ + "/" + name;
}

bool FileSource::Impl::isSymlink(const std::string& path) {
  struct stat lst;
  return ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode);
}

void FileSource::Impl::armSettleTimer() {
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

void FileSource::Impl::onSettled() {
  for (const auto& [name, kind] : settle_.takeDue(clock_.now())) {
    // A vanished file still gone is removed now; anything there is read.
    processName(name, /*force=*/true, /*settled=*/kind == SettleQueue::Kind::kVanished);
  }
  armSettleTimer();
  emitIfChanged();
}

}  // namespace nodeagent::config
