// FileSource's implementation, shared by its two parts and private to them: file_source.cpp
// (listing, reading and the pod set) and file_source_watch.cpp (inotify watches of the path, its
// ancestors and symlink targets, events and the settle window).
#pragma once

#include "config/file_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "api/chunked_pods.h"
#include "api/hash.h"
#include "api/pods_by_full_name.h"
#include "base/backoff.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/printable.h"
#include "config/static_pod.h"

namespace nodeagent::config {
// Helpers shared by the file source's parts (this header is private to them).

NODEAGENT_LOGGER("config")

inline constexpr uint32_t kDirMask = IN_CREATE | IN_CLOSE_WRITE | IN_MODIFY | IN_MOVED_FROM |
                                     IN_MOVED_TO | IN_DELETE | IN_ATTRIB | IN_DELETE_SELF |
                                     IN_MOVE_SELF;
// Directories holding symlink targets: only what changes a target's content or identity.
inline constexpr uint32_t kTargetMask = IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO |
                                        IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF |
                                        IN_MASK_ADD;
// The nearest existing parent of a missing path, or the parent of a symlinked directory.
inline constexpr uint32_t kAncestorMask = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                                          IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_MASK_ADD;

inline std::string parentOf(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

inline std::string baseOf(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

inline int64_t nanos(const timespec& ts) { return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec; }

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

inline StatKey statKeyOf(const struct stat& st) {
  return StatKey{st.st_dev, st.st_ino, st.st_size, nanos(st.st_mtim), nanos(st.st_ctim), 0, 0};
}

// What only a manifest that cannot be used has (boxed in Entry: most entries never do).
struct EntryProblem {
  std::string parse_error;     // never empty
  bool parse_invalid = false;  // parse_error is about the content (not a read failure)
  ManifestPodRef invalid_pod;  // the pod the bad content names, if it could be read
  // Set while a file that never gave a pod is unreadable or unparseable: when it first was. A
  // directory's answer waits one check period for it (it may be being written), then goes out
  // complete without it.
  std::optional<base::MonotonicTime> bad_since;
  // Set while the file is over max_manifest_bytes: the stat it was refused at. A file refused
  // and unchanged is neither read nor warned about again.
  std::optional<StatKey> oversize_key;
};

// Where a symlinked manifest resolves to.
struct SymlinkTarget {
  std::string dir;   // the directory holding the resolved target
  std::string name;  // the resolved target's name in that directory
};

struct Entry {
  StatKey key;
  bool is_symlink = false;
  bool has_content = false;
  bool winner = false;  // pod is in the set (last in sorted order among same full names)
  api::Hash128 content_hash;
  api::PodPtr pod;                   // the last good pod (null until the file first parsed)
  std::string duplicate_of;          // name of the file whose pod wins over this one's
  api::Boxed<SymlinkTarget> target;  // symlinks whose target resolved
  api::Boxed<EntryProblem> problem;  // set while the file cannot be used as it is

  bool oversize() const { return problem && problem->oversize_key; }
  bool oversizeAt(const StatKey& k) const { return problem && problem->oversize_key == k; }
  // The problem, made if there is none yet.
  EntryProblem& mutableProblem() { return problem ? *problem : problem.emplace(); }
};

// A regular file read (and its content decoded unless it is the known one) ahead of processName,
// by one of the threads a large sweep uses (the first list of a large directory).
struct Prefetched {
  StatKey key;
  std::string bytes;
  api::Hash128 hash;
  std::optional<DecodeResult> decoded;  // unset when the content is the entry's known content
};

struct TargetWatch {
  std::string dir;
  std::set<std::string> entries;  // names of the links resolving into `dir`
};

enum class Mode { kUnknown, kMissing, kDir, kFile, kOther };

class FileSource::Impl : public std::enable_shared_from_this<FileSource::Impl> {
 public:
  Impl(asio::any_io_executor ex, base::Clock& clock, FileSourceOptions options, PodUpdateSink sink)
      : strand_(asio::make_strand(std::move(ex))),
        clock_(clock),
        opts_(std::move(options)),
        sink_(std::move(sink)),
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
      log()->info("Watching manifest path path={} check_frequency={} settle_window={}", self->path_,
                  base::formatDuration(self->opts_.check_frequency),
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
    s.stat_sweeps = stat_sweeps_.load();
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
  // An entry with its file name (a node of entries_).
  using EntryNode = std::map<std::string, Entry>::value_type;
  // ---- lifecycle ----------------------------------------------------------------------------

  void close();
  void dropWatches();
  void armRelist();
  void scheduleRetry();

  // (Re)determines what the path is, watches it and lists it.
  void setupWatch();
  // setupWatch's steps: the path cannot be stat'ed (missing: send an empty set and watch for
  // it; otherwise report it), the kind of what is there (false when neither a directory nor a
  // regular file), and the inotify watch of the directory (false when it could not be set up).
  void handleUnstattablePath(int err);
  bool adoptPathKind(const struct stat& st);
  bool watchPath();

  // A missing path: watch the nearest existing parent for the next component to appear, so the
  // path is picked up at once rather than at the next backoff retry. True when that component
  // (or the path itself) exists by the time the watch is in place: it appeared in between.
  bool watchNearestAncestor();

  // The manifest directory is itself a symlink: watch the link's directory so a retargeted
  // link is noticed at once.
  void watchSymlinkedDir();

  bool ensureWatcher();

  // ---- listing ------------------------------------------------------------------------------

  // Reads what changed (every file when `force`), removes what is gone (after the settle
  // window), then sends the set if it changed (always the first time).
  void relist(bool force, bool check_mode);
  // The directory relist's two ways: list and stat every file, or trust the watch.
  void sweepDir(bool force);
  void recheckUntrusted();
  // Keeps recheck_ in step with one entry: what a trusted relist still re-checks are symlinks
  // (a target may be swapped in a way only a stat tells) and files with no good content yet
  // (unreadable, or never read).
  void noteRecheck(const std::string& name, const Entry& e);
  // The watch of the directory reports every change, and the last sweep is recent enough.
  bool watchTrusted() const;
  std::string fullPath(const std::string& name) const;

  // Brings the cache entry of `name` up to date with the file: read and decode it if its content
  // changed (or always when `force`). A file that is gone is handed to fileGone.
  // `pre`, when given, is the file as prefetch read it.
  void processName(const std::string& name, bool force, bool settled, Prefetched* pre = nullptr);
  // Reads (and decodes what is new of) the regular files among `names` on several threads; the
  // others (gone, symlinks, too large, unreadable) are left unset, for processName to handle
  // and report. The strand waits: nothing else touches the entries meanwhile.
  std::vector<std::optional<Prefetched>> prefetch(const std::vector<std::string>& names);
  // The relist's fast path: the file `name` (in the directory open as `dir_fd`) is known and its
  // stat is unchanged, so processName would do nothing. Stats relative to the directory.
  bool unchangedInDir(int dir_fd, const char* name, const Entry& entry) const;
  // The stat key of a regular file (through a symlink); nullopt, having handed the file to
  // fileGone or recordReadError (or skipped a directory), when it is not one.
  std::optional<StatKey> statManifest(const std::string& name, const std::string& full,
                                      bool settled, bool& is_link);
  // Decodes the file's new content: its pod replaces the entry's, or the entry keeps its last
  // good pod and records the parse error.
  void decodeContent(const std::string& name, Entry& e, const std::string& full,
                     const std::string& bytes, std::optional<DecodeResult> decoded = {});
  base::StatusOr<std::string> readManifest(const std::string& full);
  // The content prefetch read (counted as read here).
  base::StatusOr<std::string> readPrefetched(Prefetched& pre);
  // decodeManifest of a file's content, stamped `seen` (config.seen).
  DecodeResult decodeFile(const std::string& bytes, const std::string& full,
                          std::string seen) const;

  // A file that cannot be read keeps its last good pod, like one that does not parse.
  void recordReadError(const std::string& name, const std::string& reason);
  void recordOversize(const std::string& name, const StatKey& key);

  // The file is not there (or no longer a regular file). Unless `settled`, it gets the settle
  // window to come back before its pod goes.
  void fileGone(const std::string& name, bool settled);
  void removeEntry(const std::string& name);
  void removeAllEntries();

  // ---- the pod set --------------------------------------------------------------------------

  void setPod(const std::string& name, Entry& e, api::PodPtr pod);

  // The last file in sorted order owns a pod full name (kubelet's rule); the others are reported.
  void reconcileClaims(const std::string& full_name);
  // Takes the claim of `node` out of claims_ (hashed by its pod: call before the pod changes).
  void dropClaim(EntryNode& node);

  // Keeps set_names_/set_pods_ (the pods sent, sorted by file name) in step with one entry, so
  // sending a SET costs a copy of the chunk pointers rather than a walk of every cache entry.
  // `key` is the entry's own key in entries_.
  void syncSetSlot(const std::string& key, const Entry& e);
  void refreshError(const std::string& name, const Entry& e);
  // Sends the set when it changed, when it never went out, or when it became complete.
  void emitIfChanged();
  // Why the set is not the whole answer (empty when it is): the path cannot be used, or a
  // manifest has never parsed in this run (after a restart its pod may still be running, and an
  // incomplete answer must not get its containers killed as orphans).
  std::string incompleteReason() const;

  // ---- symlink targets ----------------------------------------------------------------------

  void updateTargetWatch(const std::string& name, Entry& e, const std::string& full);
  void dropTargetWatch(const std::string& name, Entry& e);

  // ---- events -------------------------------------------------------------------------------

  void handleEvents(std::vector<InotifyEvent> events);
  void handleMainEvent(const InotifyEvent& e, base::MonotonicTime now, std::set<std::string>& dirty,
                       bool& rewatch, bool& recheck_links);
  void handleTargetEvent(const InotifyEvent& e, const TargetWatch& tw,
                         std::set<std::string>& dirty);
  std::string fullPathInDir(const std::string& name) const;
  static bool isSymlink(const std::string& path);

  // ---- settle window ------------------------------------------------------------------------

  void armSettleTimer();
  void onSettled();

  // ---- state (strand only unless noted) -----------------------------------------------------

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  FileSourceOptions opts_;
  PodUpdateSink sink_;
  std::string path_;

  std::mutex sink_mu_;  // any thread: guards stopped_ and calls into sink_
  bool stopped_ = false;
  bool closed_ = false;  // strand: close() ran

  Mode mode_ = Mode::kUnknown;
  std::string dir_;        // the directory holding the manifests (the path, or its parent)
  std::string dir_real_;   // dir_ with symlinks resolved
  std::string file_name_;  // single-file mode: the file's name in dir_
  dev_t path_dev_ = 0;
  ino_t path_ino_ = 0;
  // dir_ is on a filesystem whose changes the watch sees (watchSeesEveryChange).
  bool dir_local_ = false;
  bool nonlocal_logged_ = false;  // said once that dir_ is not on such a filesystem
  // When every file was last listed and stat'ed.
  std::optional<base::MonotonicTime> last_sweep_;

  std::shared_ptr<InotifyWatcher> watcher_;
  int main_wd_ = -1;
  int ancestor_wd_ = -1;
  std::string ancestor_next_;  // the name in the ancestor directory that leads to the path
  std::map<int, TargetWatch> target_watches_;
  std::map<std::string, int> target_wd_by_dir_;

  std::map<std::string, Entry> entries_;  // by file name, sorted: the order duplicates resolve in
  std::set<std::string> recheck_;         // entries a trusted relist re-checks (noteRecheck)
  // The claims and the set point into entries_ (std::map nodes do not move), and an entry
  // leaves both before it is erased (removeEntry), so each file's name is kept once.
  // The claims: every entry that has a pod, hashed and compared by that pod's full name, so that
  // the files defining a pod of one full name are found together (nearly always one) without a
  // copy of the name. An entry's claim is taken out before its pod changes (setPod).
  struct ClaimHash : api::PodFullNameHash {
    using api::PodFullNameHash::operator();
    size_t operator()(const EntryNode* node) const noexcept { return (*this)(node->second.pod); }
  };
  struct ClaimEqual {
    using is_transparent = void;
    static const api::PodPtr& podOf(const EntryNode* node) { return node->second.pod; }
    static std::string_view podOf(std::string_view full_name) { return full_name; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return api::PodFullNameEqual{}(podOf(a), podOf(b));
    }
  };
  std::unordered_multiset<EntryNode*, ClaimHash, ClaimEqual> claims_;
  std::vector<const std::string*> set_names_;  // files whose pod is in the set, sorted by name
  api::ChunkedPods set_pods_;  // their pods, in the same order; the chunks are shared with the
                               // SETs sent, an edit copies one chunk
  SettleQueue settle_;
  base::TimerPtr relist_timer_;
  base::TimerPtr settle_timer_;
  base::TimerPtr retry_timer_;
  base::Backoff backoff_;
  bool emitted_ = false;  // the first SET went out
  bool changed_ = false;  // the set differs from the last one sent
  // Why the path itself cannot be used right now (cannot be stat'ed or listed, not a directory
  // or a regular file); empty when it can.
  std::string path_problem_;
  // The last SET sent was complete (see incompleteReason).
  bool emitted_complete_ = false;

  std::atomic<uint64_t> files_read_{0};
  std::atomic<uint64_t> manifests_decoded_{0};
  std::atomic<uint64_t> updates_pushed_{0};
  std::atomic<uint64_t> relists_{0};
  std::atomic<uint64_t> stat_sweeps_{0};
  std::atomic<uint64_t> event_batches_{0};
  std::atomic<uint64_t> watch_setups_{0};
};

}  // namespace nodeagent::config
