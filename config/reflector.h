// client-go's Reflector for one collection (here: the pods bound to this node): LIST, then WATCH
// from the list's resourceVersion, re-opening the watch when it ends normally, relisting when the
// resourceVersion expired (410, as an HTTP status or an in-stream ERROR). Other failures wait an
// exponential backoff with jitter (800ms doubling to 30s, at least a Retry-After), then re-open the
// watch from the last resourceVersion when it can resume (connection refused, dropped or timed
// out; 429) and relist otherwise (a failed LIST, 5xx, 401/403, garbage in the stream, a watch that
// ends at once). Bookmarks only advance the resourceVersion. It never gives up and logs each new
// kind of failure once per streak of failures.
//
// A lost apiserver state (an etcd restore, another cluster behind the same address) shows as a
// resourceVersion that goes backwards: a LIST, a bookmark or an event older than the version the
// reflector holds. The reflector then reports it (Options::on_state_lost) and relists with a
// quorum read, forgetting the old version. The owner can also ask for such a relist (relist()) when
// it learns of the loss in other ways (our Node or Lease answering 404).
//
// Threading: the reflector's logic, its timers (injected Clock) and its Handler calls all run on
// one strand. The blocking LIST and the long WATCH run elsewhere (a ListerWatcher: a dedicated
// thread, or a pool and a strand, for the real client; a scripted fake in unit tests) and their
// completions are posted back to the strand; completions of abandoned calls are recognised and
// dropped.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/watch_decoder.h"
#include "base/asio.h"
#include "base/backoff.h"
#include "base/clock.h"
#include "base/random.h"
#include "base/status.h"

namespace spdlog {
class logger;
}

namespace nodeagent::api {
class AsyncWatch;
class RestClient;
}  // namespace nodeagent::api

namespace nodeagent::config {

struct ListResult {
  std::vector<nlohmann::json> items;
  std::string resource_version;
};

struct WatchRequest {
  std::string resource_version;
  int64_t timeout_seconds = 300;
  bool allow_watch_bookmarks = true;
};

// The blocking half of a reflector. Calls come from the reflector's strand, one at a time;
// completions may be invoked from any thread (the reflector posts them to its strand).
class ListerWatcher {
 public:
  using ListDone = std::function<void(base::StatusOr<ListResult>)>;
  using EventFn = std::function<void(api::RawWatchEvent)>;
  using WatchDone = std::function<void(base::Status)>;
  virtual ~ListerWatcher() = default;
  // Starts LIST with `resource_version` ("" = most recent, "0" = any); `done` runs once.
  virtual void list(std::string resource_version, ListDone done) = 0;
  // Starts WATCH. `on_event` gets ADDED/MODIFIED/DELETED/BOOKMARK in order, then `done` runs once
  // with OK (normal end), the typed error (isGone() for 410) or Cancelled.
  virtual void watch(WatchRequest request, EventFn on_event, WatchDone done) = 0;
  // Abandons the call in flight (its completions may still come, with Cancelled or not).
  virtual void cancel() = 0;
};

// Runs LIST and WATCH of one collection through a RestClient on a dedicated std::jthread.
// stop() (stop_token + the connection's stop + the receiver returning false) ends a watch at once.
class ThreadedListerWatcher final : public ListerWatcher {
 public:
  ThreadedListerWatcher(api::RestClient& client, std::string collection_path,
                        std::string field_selector);
  ~ThreadedListerWatcher() override;
  void list(std::string resource_version, ListDone done) override;
  void watch(WatchRequest request, EventFn on_event, WatchDone done) override;
  void cancel() override;
  // Ends the call in flight and joins the thread; later calls are dropped. Any thread but the
  // worker's own; idempotent.
  void stop();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::jthread thread_;
};

// Runs LIST and WATCH of one collection with no thread of its own: the LIST on `blocking` (a pool
// whose thread it holds while it waits for the client's rate limiter: not one that the node's
// lease needs), the WATCH on a strand of `executor` (api::RestClient::startWatch). For many
// reflectors at once (one per object a pod references). Completions are invoked on those
// executors. A cancelled LIST that has not started touches no client; the client must still
// outlive the drain of `blocking` and of `executor`'s handlers.
class AsyncListerWatcher final : public ListerWatcher {
 public:
  AsyncListerWatcher(api::RestClient& client, asio::any_io_executor executor,
                     asio::any_io_executor blocking, std::string collection_path,
                     std::string field_selector);
  ~AsyncListerWatcher() override;
  void list(std::string resource_version, ListDone done) override;
  void watch(WatchRequest request, EventFn on_event, WatchDone done) override;
  void cancel() override;

 private:
  api::RestClient& client_;
  asio::any_io_executor executor_;
  asio::any_io_executor blocking_;
  const std::string path_;
  const std::string field_selector_;
  std::mutex mu_;
  std::shared_ptr<std::stop_source> list_stop_;  // the LIST in flight
  std::shared_ptr<api::AsyncWatch> watch_;       // the WATCH in flight
};

class Reflector : public std::enable_shared_from_this<Reflector> {
 public:
  // Called on the reflector's strand.
  class Handler {
   public:
    virtual ~Handler() = default;
    // A (re)list: the complete current set of objects.
    virtual void onReplace(std::vector<nlohmann::json> items,
                           const std::string& resource_version) = 0;
    // One ADDED, MODIFIED or DELETED watch event.
    virtual void onWatchEvent(api::WatchEventType type, nlohmann::json object) = 0;
  };

  struct Options {
    // Watch timeoutSeconds is drawn uniformly from [min, max] (client-go: 5 min * (1 + rand)).
    std::chrono::seconds min_watch_timeout{300};
    std::chrono::seconds max_watch_timeout{600};
    // client-go's reflector backoff: 800ms doubling to 30s, with up to 100% jitter.
    base::Backoff::Options backoff{std::chrono::milliseconds(800), std::chrono::seconds(30), 2.0,
                                   1.0};
    // A watch that ends normally sooner than this with no event is treated as a failure (a
    // server or proxy that closes at once must not make us spin).
    base::Duration min_healthy_watch = std::chrono::seconds(1);
    std::string name = "pods";  // for logs
    // Called on the strand when the apiserver's resourceVersion went backwards (its state was
    // lost); `reason` says what was seen. Optional.
    std::function<void(const std::string& reason)> on_state_lost;
  };

  // `ex` must be a strand (or a single-threaded executor).
  Reflector(asio::any_io_executor ex, base::Clock& clock, base::Random& random,
            std::shared_ptr<ListerWatcher> lister_watcher, std::shared_ptr<Handler> handler,
            Options options);
  ~Reflector();

  // Posts the first LIST. Any thread, once.
  void start();
  // Stops: no Handler call starts after stop() returns (from any thread; a call already running
  // on the strand may finish). Cancels the call in flight; timers die on the strand. Idempotent.
  void stop();
  // Drops the call in flight and the resourceVersion held, and relists at once with a quorum read
  // (the apiserver's state was lost, so nothing it said before can be resumed from). Any thread;
  // ignored before start() and after stop().
  void relist(std::string reason);

  // Strand only (tests): the resourceVersion the next watch or relist starts from.
  const std::string& lastSyncResourceVersion() const { return last_rv_; }
  // Strand only (tests): number of LISTs and WATCHes started.
  int listsStarted() const { return lists_started_; }
  int watchesStarted() const { return watches_started_; }

 private:
  enum class Phase { kIdle, kListing, kWatching, kWaiting, kStopped };

  void doList();
  void onListDone(uint64_t seq, base::StatusOr<ListResult> result);
  void doWatch();
  void onWatchEvent(uint64_t seq, api::RawWatchEvent event);
  void onWatchDone(uint64_t seq, base::Status status);
  void cancelIfStopped();
  enum class Next { kList, kWatch };
  void retryAfterBackoff(const std::string& kind, const base::Status& status,
                         Next next = Next::kList);
  void noteFailure(const std::string& kind, const base::Status& status);
  void noteHealthy();
  // True (and reported) when `rv` is older than the resourceVersion held: the state was lost.
  bool wentBackwards(const std::string& rv, const char* seen_in);
  void restartFromScratch();
  std::string relistResourceVersion() const;
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }

  asio::any_io_executor ex_;
  base::Clock& clock_;
  base::Random& random_;
  std::shared_ptr<ListerWatcher> lw_;
  std::shared_ptr<Handler> handler_;
  Options options_;
  base::Backoff backoff_;
  base::TimerPtr timer_;

  std::atomic<bool> stopped_{false};
  Phase phase_ = Phase::kIdle;
  uint64_t seq_ = 0;  // the call in flight; completions of older calls are dropped
  std::string last_rv_;
  bool last_rv_unavailable_ = false;  // a LIST at last_rv_ failed: relist at "" (quorum)
  base::MonotonicTime watch_started_;
  size_t watch_events_ = 0;
  int consecutive_gone_ = 0;
  std::set<std::string> streak_;  // failure kinds already logged in this streak
  int lists_started_ = 0;
  int watches_started_ = 0;
};

}  // namespace nodeagent::config
