#include "config/file_source.h"

#include "config/file_source_impl.h"

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
// FileSource::Impl: listing, reading and the pod set

namespace {

// Orders pointers to names (the claims, the set) by name.
bool byName(const std::string* a, const std::string& b) { return *a < b; }
// A sweep with this many files to read reads and decodes them on several threads (prefetch): the
// first list of a large directory is mostly that work, and each file's is its own.
constexpr size_t kParallelSweepMin = 64;
}  // namespace

void FileSource::Impl::relist(bool force, bool check_mode) {
  ++relists_;
  if (check_mode) {
    struct stat st;
    bool exists = ::stat(path_.c_str(), &st) == 0;
    Mode now_mode = !exists               ? Mode::kMissing
                    : S_ISDIR(st.st_mode) ? Mode::kDir
                    : S_ISREG(st.st_mode) ? Mode::kFile
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
    if (!force && watchTrusted()) {
      recheckUntrusted();
    } else {
      sweepDir(force);
    }
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

void FileSource::Impl::sweepDir(bool force) {
  ++stat_sweeps_;
  // The listing, sorted, is walked beside entries_ (sorted too): a merge, so no lookup per
  // file. Known files whose stat is unchanged need nothing more; the others (new, changed,
  // settling, symlinks, not regular files) go through processName in name order, and known
  // files no longer listed are gone.
  std::vector<std::string> names;
  std::vector<std::string> others;
  std::vector<std::string> gone;
  DIR* d = ::opendir(dir_.c_str());
  if (!d) {
    const std::string reason = std::strerror(errno);
    log()->warn("Cannot list manifest directory path={} reason={}", base::goQuote(dir_), reason);
    path_problem_ = "cannot list " + dir_ + ": " + reason;
    last_sweep_.reset();  // nothing is trusted until a sweep succeeds
    return;
  }
  last_sweep_ = clock_.now();
  while (dirent* de = ::readdir(d)) {
    if (!isIgnoredManifestName(de->d_name)) names.emplace_back(de->d_name);
  }
  std::sort(names.begin(), names.end());
  const int dir_fd = ::dirfd(d);
  auto it = entries_.begin();
  for (auto& name : names) {
    while (it != entries_.end() && it->first < name) gone.push_back((it++)->first);
    const bool known = it != entries_.end() && it->first == name;
    const bool unchanged = known && !force && unchangedInDir(dir_fd, name.c_str(), it->second);
    if (known) ++it;
    if (!unchanged) others.push_back(std::move(name));
  }
  for (; it != entries_.end(); ++it) gone.push_back(it->first);
  ::closedir(d);
  path_problem_.clear();
  // A file being written is read once quiet.
  std::erase_if(others, [this](const std::string& name) {
    return settle_.kindOf(name) == SettleQueue::Kind::kWriting;
  });
  std::vector<std::optional<Prefetched>> pre;
  if (others.size() >= kParallelSweepMin) pre = prefetch(others);
  for (size_t i = 0; i < others.size(); ++i) {
    processName(others[i], force, /*settled=*/false, i < pre.size() && pre[i] ? &*pre[i] : nullptr);
  }
  for (const auto& name : gone) fileGone(name, /*settled=*/false);
}

std::vector<std::optional<Prefetched>> FileSource::Impl::prefetch(
    const std::vector<std::string>& names) {
  // What the threads read of the entries: each file's known content.
  std::vector<std::optional<api::Hash128>> known(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = entries_.find(names[i]);
    if (it != entries_.end() && it->second.has_content) known[i] = it->second.content_hash;
  }
  const std::string seen = seenTime(clock_);
  std::vector<std::optional<Prefetched>> out(names.size());
  std::atomic<size_t> next{0};
  auto work = [&]() noexcept {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < names.size();) {
      try {
        const std::string full = fullPath(names[i]);
        struct stat st;
        if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
            static_cast<uintmax_t>(st.st_size) > opts_.max_manifest_bytes) {
          continue;
        }
        auto bytes = readManifestFile(full, opts_.max_manifest_bytes);
        if (!bytes.ok()) continue;
        Prefetched p;
        p.key = statKeyOf(st);
        p.bytes = std::move(*bytes);
        p.hash = api::hash128(p.bytes);
        if (known[i] != p.hash) p.decoded = decodeFile(p.bytes, full, seen);
        out[i] = std::move(p);
      } catch (const std::exception&) {
        out[i].reset();  // (out of memory) processName reads this one again
      }
    }
  };
  {
    const unsigned helpers = std::clamp(std::thread::hardware_concurrency(), 1U, 8U) - 1;
    std::vector<std::jthread> threads;  // joined before `work` and what it uses go
    try {
      threads.reserve(helpers);
      for (unsigned t = 0; t < helpers; ++t) threads.emplace_back(work);
    } catch (const std::exception& e) {  // no thread to be had: fewer do the work
      log()->debug("Manifest sweep runs on fewer threads err={}", e.what());
    }
    work();
  }
  return out;
}

bool FileSource::Impl::watchTrusted() const {
  if (!opts_.watch || main_wd_ < 0 || !dir_local_ || !last_sweep_ ||
      opts_.full_check_period <= base::Duration::zero()) {
    return false;
  }
  return clock_.now() - *last_sweep_ < opts_.full_check_period;
}

void FileSource::Impl::recheckUntrusted() {
  // The watch reports every new, changed and removed file: only what it may not tell is looked
  // at (processName may change recheck_, hence the copy).
  const std::vector<std::string> names(recheck_.begin(), recheck_.end());
  for (const auto& name : names) {
    if (settle_.kindOf(name) == SettleQueue::Kind::kWriting) continue;
    processName(name, /*force=*/false, /*settled=*/false);
  }
}

void FileSource::Impl::noteRecheck(const std::string& name, const Entry& e) {
  if (e.is_symlink || !(e.has_content || e.oversize())) {
    recheck_.insert(name);
  } else {
    recheck_.erase(name);
  }
}

bool watchSeesEveryChange(int64_t fs_type) {
  switch (fs_type) {
    case 0xEF53:      // ext2, ext3, ext4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x01021994:  // tmpfs
    case 0x858458F6:  // ramfs
    case 0xF2F52010:  // f2fs
    case 0x2FC12FC1:  // zfs
    case 0x3153464A:  // jfs
    case 0xCA451A4E:  // bcachefs
      return true;
    default:
      return false;
  }
}

std::string FileSource::Impl::fullPath(const std::string& name) const {
  if (mode_ == Mode::kFile) return path_;
  return dir_ == "/" ? "/" + name : dir_ + "/" + name;
}

void FileSource::Impl::processName(const std::string& name, bool force, bool settled,
                                   Prefetched* pre) {
  const std::string full = fullPath(name);
  bool is_link = false;
  std::optional<StatKey> key =
      pre != nullptr ? std::optional(pre->key) : statManifest(name, full, settled, is_link);
  if (!key) return;
  settle_.clear(name);

  auto it = entries_.find(name);
  if (it != entries_.end() && it->second.oversizeAt(*key)) return;  // still too large
  if (!force && it != entries_.end() && it->second.has_content && it->second.key == *key) return;
  if (static_cast<uintmax_t>(key->size) > opts_.max_manifest_bytes) {
    recordOversize(name, *key);
    return;
  }

  auto bytes = pre != nullptr ? readPrefetched(*pre) : readManifest(full);
  if (!bytes.ok()) {
    if (bytes.status().code() == base::StatusCode::kNotFound) {
      fileGone(name, settled);
    } else if (bytes.status().code() == base::StatusCode::kResourceExhausted) {
      recordOversize(name, *key);  // it grew while being read
    } else {
      recordReadError(name, bytes.status().message());
    }
    return;
  }
  Entry& e = entries_[name];
  if (e.problem) e.problem->oversize_key.reset();
  e.key = *key;
  e.is_symlink = is_link;
  updateTargetWatch(name, e, full);
  noteRecheck(name, e);

  api::Hash128 hash = pre != nullptr ? pre->hash : api::hash128(*bytes);
  if (e.has_content && e.content_hash == hash) return;  // identical content: nothing to do
  e.has_content = true;
  e.content_hash = hash;
  noteRecheck(name, e);
  decodeContent(name, e, full, *bytes, pre != nullptr ? std::move(pre->decoded) : std::nullopt);
}

bool FileSource::Impl::unchangedInDir(int dir_fd, const char* name, const Entry& entry) const {
  // processName would stat, clear the name from the settle queue and compare: a queued name, a
  // symlink (its target is stat'ed too) or anything not a regular file takes that path.
  if (!settle_.empty() && settle_.kindOf(std::string(name))) return false;
  if (entry.is_symlink) return false;
  struct stat st;
  if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
    return false;
  }
  const StatKey key = statKeyOf(st);
  if (entry.oversizeAt(key)) return true;  // still too large
  return entry.has_content && entry.key == key;
}

std::optional<StatKey> FileSource::Impl::statManifest(const std::string& name,
                                                      const std::string& full, bool settled,
                                                      bool& is_link) {
  struct stat lst;
  if (::lstat(full.c_str(), &lst) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      fileGone(name, settled);
    } else {
      recordReadError(name, std::string("cannot stat: ") + std::strerror(errno));
    }
    return std::nullopt;
  }
  is_link = S_ISLNK(lst.st_mode);
  struct stat st = lst;
  if (is_link && ::stat(full.c_str(), &st) != 0) {
    fileGone(name, settled);  // dangling link, e.g. mid ConfigMap swap
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    if (entries_.count(name)) {
      fileGone(name, settled);
    } else if (S_ISDIR(st.st_mode)) {
      log()->debug("Not recursing into manifest path path={}", base::goQuote(full));
    } else {
      log()->debug("Skipping manifest path that is not a regular file path={}",
                   base::goQuote(full));
    }
    return std::nullopt;
  }
  StatKey key = statKeyOf(st);
  if (is_link) {
    key.link_ino = lst.st_ino;
    key.link_ctime = nanos(lst.st_ctim);
  }
  return key;
}

void FileSource::Impl::decodeContent(const std::string& name, Entry& e, const std::string& full,
                                     const std::string& bytes,
                                     std::optional<DecodeResult> decoded) {
  ++manifests_decoded_;
  DecodeResult result = decoded ? std::move(*decoded) : decodeFile(bytes, full, seenTime(clock_));
  if (!result.ok() || result.pods.size() != 1) {
    EntryProblem& p = e.mutableProblem();
    p.parse_error = result.ok()
                        ? "expected exactly one pod, got " + std::to_string(result.pods.size())
                        : result.errorText();
    p.parse_invalid = true;
    p.invalid_pod =
        result.invalid_pods.size() == 1 ? result.invalid_pods.front() : ManifestPodRef{};
    if (!e.pod && !p.bad_since) p.bad_since = clock_.now();
    log()->warn("Could not process manifest file, keeping its last good pod file={} reason={}",
                base::goQuote(full), base::goQuote(p.parse_error));
    refreshError(name, e);
    return;
  }
  bool had_error = e.problem.has_value();
  e.problem.reset();
  if (had_error) log()->info("Manifest file parses again file={}", base::goQuote(full));
  setPod(name, e, result.pods.front());
  refreshError(name, e);
}

base::StatusOr<std::string> FileSource::Impl::readManifest(const std::string& full) {
  ++files_read_;
  return readManifestFile(full, opts_.max_manifest_bytes);
}

base::StatusOr<std::string> FileSource::Impl::readPrefetched(Prefetched& pre) {
  ++files_read_;
  return std::move(pre.bytes);
}

DecodeResult FileSource::Impl::decodeFile(const std::string& bytes, const std::string& full,
                                          std::string seen) const {
  return decodeManifest(bytes,
                        ManifestSource{opts_.node_name, full, /*is_file=*/true, std::move(seen)},
                        /*allow_list=*/false);
}

void FileSource::Impl::recordOversize(const std::string& name, const StatKey& key) {
  recordReadError(name, "manifest is larger than " + std::to_string(opts_.max_manifest_bytes) +
                            " bytes; not read again until it changes");
  Entry& e = entries_[name];
  e.mutableProblem().oversize_key = key;
  noteRecheck(name, e);
}

void FileSource::Impl::recordReadError(const std::string& name, const std::string& reason) {
  Entry& e = entries_[name];
  EntryProblem& p = e.mutableProblem();
  p.oversize_key.reset();
  e.has_content = false;
  noteRecheck(name, e);
  p.parse_error = reason;
  p.parse_invalid = false;
  p.invalid_pod = {};
  if (!e.pod && !p.bad_since) p.bad_since = clock_.now();
  log()->warn("Could not read manifest file, keeping its last good pod file={} reason={}",
              base::goQuote(fullPath(name)), base::goQuote(reason));
  refreshError(name, e);
}

void FileSource::Impl::fileGone(const std::string& name, bool settled) {
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

void FileSource::Impl::removeEntry(const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  log()->debug("Manifest file removed file={}", base::goQuote(fullPath(name)));
  setPod(name, it->second, nullptr);
  dropTargetWatch(name, it->second);
  if (opts_.errors) opts_.errors->clear(api::kFileSource, fullPath(name));
  recheck_.erase(name);
  entries_.erase(it);
}

void FileSource::Impl::removeAllEntries() {
  while (!entries_.empty()) removeEntry(entries_.begin()->first);
  settle_ = SettleQueue(opts_.settle_window);
}

void FileSource::Impl::setPod(const std::string& name, Entry& e, api::PodPtr pod) {
  api::PodPtr old = e.pod;
  if (old && pod && old->fullName() == pod->fullName() && old->content_hash == pod->content_hash &&
      old->metadata.uid == pod->metadata.uid) {
    return;  // same pod (e.g. a bad edit reverted): keep the old object, the set is unchanged
  }
  EntryNode& node = *entries_.find(name);  // `e` is the entry of `name`
  if (old) dropClaim(node);                // (found by its pod's full name: before the pod changes)
  e.pod = std::move(pod);
  if (old) reconcileClaims(old->fullName());
  if (e.pod) {
    claims_.insert(&node);
    reconcileClaims(e.pod->fullName());
    log()->debug("Manifest file read file={} pod={} uid={}", base::goQuote(fullPath(name)),
                 api::podRef(*e.pod), e.pod->metadata.uid);
  } else {
    e.winner = false;
    e.duplicate_of.clear();
  }
  syncSetSlot(node.first, e);
}

void FileSource::Impl::dropClaim(EntryNode& node) {
  auto [it, end] = claims_.equal_range(&node);
  for (; it != end; ++it) {
    if (*it == &node) {
      claims_.erase(it);
      return;
    }
  }
}

void FileSource::Impl::reconcileClaims(const std::string& full_name) {
  auto [first, end] = claims_.equal_range(std::string_view(full_name));
  if (first == end) return;
  // kubelet 1.18 keeps the directory's pods in a store keyed by namespace/name and replaces it
  // with the files in sorted order: the last file in sorted order wins.
  std::vector<EntryNode*> claimants(first, end);
  std::sort(claimants.begin(), claimants.end(),
            [](const EntryNode* a, const EntryNode* b) { return a->first < b->first; });
  const std::string& last = claimants.back()->first;
  for (EntryNode* claimant : claimants) {
    const std::string& name = claimant->first;
    Entry& e = claimant->second;
    bool win = name == last;
    std::string dup = win ? std::string() : last;
    e.winner = win;
    syncSetSlot(name, e);
    if (e.duplicate_of != dup) {
      e.duplicate_of = dup;
      if (!dup.empty()) {
        log()->warn(
            "Two manifest files define the same pod, ignoring the earlier one in sorted order "
            "pod={} file={} used={}",
            full_name, base::goQuote(fullPath(name)), base::goQuote(fullPath(dup)));
      }
      refreshError(name, e);
    }
  }
}

void FileSource::Impl::syncSetSlot(const std::string& key, const Entry& e) {
  const bool in_set = e.winner && e.pod;
  auto pos = std::lower_bound(set_names_.begin(), set_names_.end(), key, byName);
  const auto idx = static_cast<size_t>(pos - set_names_.begin());
  const bool present = pos != set_names_.end() && **pos == key;
  if (in_set && present) {
    if (set_pods_[idx] != e.pod) {
      set_pods_.set(idx, e.pod);
      changed_ = true;
    }
  } else if (in_set) {
    set_names_.insert(pos, &key);
    set_pods_.insert(idx, e.pod);
    changed_ = true;
  } else if (present) {
    set_names_.erase(pos);
    set_pods_.erase(idx);
    changed_ = true;
  }
}

void FileSource::Impl::refreshError(const std::string& name, const Entry& e) {
  if (!opts_.errors) return;
  std::string message = e.problem ? e.problem->parse_error : std::string();
  ManifestErrorDetail detail;
  if (e.problem && e.problem->parse_invalid) {
    detail.invalid = e.problem->parse_error;
    detail.pod = e.problem->invalid_pod;
  }
  if (!e.duplicate_of.empty() && e.pod) {
    std::string duplicate = "pod " + e.pod->fullName() + " is also defined by " +
                            fullPath(e.duplicate_of) +
                            ", which comes later in sorted order and wins (as in kubelet); this "
                            "file is ignored";
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

std::string FileSource::Impl::incompleteReason() const {
  if (!path_problem_.empty()) return path_problem_;
  if (mode_ == Mode::kMissing) return {};
  // A single manifest file that never parsed keeps the source unseen (kubelet's
  // TestExtractFromBadDataFile); in a directory, a bad file holds the answer back for one check
  // period only, so that one broken manifest cannot stop the cleanup of every other pod.
  const base::MonotonicTime now = clock_.now();
  for (const auto& [name, e] : entries_) {
    if (e.pod || !e.problem) continue;
    const EntryProblem& p = *e.problem;
    if (mode_ == Mode::kDir && p.bad_since && now - *p.bad_since >= opts_.check_frequency) continue;
    return "manifest " + fullPath(name) +
           " has not been read successfully since the agent "
           "started: " +
           p.parse_error;
  }
  return {};
}

void FileSource::Impl::emitIfChanged() {
  // Once a complete answer went out the source is seen for good: no need to look again.
  std::string incomplete = emitted_complete_ ? std::string() : incompleteReason();
  const bool complete = incomplete.empty();
  if (emitted_ && !changed_ && complete == emitted_complete_) return;
  api::ChunkedPods pods = set_pods_;  // shares the chunks: no pod pointer is copied
  changed_ = false;
  if (!emitted_) {
    log()->info("Manifest path read path={} pods={} complete={}", base::goQuote(path_), pods.size(),
                complete);
  } else if (complete && !emitted_complete_) {
    log()->info("Manifest path read completely path={} pods={}", base::goQuote(path_), pods.size());
  }
  emitted_ = true;
  emitted_complete_ = complete;
  api::PodUpdate update{std::move(pods), api::PodOperation::kSet, std::string(api::kFileSource),
                        /*source_annotated=*/true};
  update.complete = complete;
  update.incomplete_reason = std::move(incomplete);
  std::lock_guard lock(sink_mu_);
  if (stopped_) return;
  ++updates_pushed_;
  sink_(std::move(update));
}

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
