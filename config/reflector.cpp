#include "config/reflector.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "api/api_errors.h"
#include "api/rest_client.h"
#include "base/log.h"

namespace nodeagent::config {
namespace {

NODEAGENT_LOGGER("config")

std::string resourceVersionOf(const nlohmann::json& obj) {
  auto meta = obj.find("metadata");
  if (meta == obj.end() || !meta->is_object()) return {};
  auto rv = meta->find("resourceVersion");
  if (rv == meta->end() || !rv->is_string()) return {};
  return rv->get<std::string>();
}

// resourceVersions are opaque to clients, but kube-apiserver's (etcd revisions) and
// test-apiserver's are decimal counters; anything else is never compared.
std::optional<uint64_t> numericResourceVersion(const std::string& rv) {
  if (rv.empty() || rv.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : rv) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// "Too large resource version": the server has not reached the version we asked for.
bool isTooLargeResourceVersion(const base::Status& st) {
  auto e = api::apiErrorOf(st);
  return e && e->http_code == 504 &&
         e->message.find("Too large resource version") != std::string::npos;
}

// Failures after which the watch can be re-opened where it stopped: a connection failure, or the
// apiserver asked us to slow down. Anything else the server said (5xx, 401/403, a malformed or
// oversized event) relists.
bool canResumeWatch(const base::Status& st) {
  if (auto e = api::apiErrorOf(st)) return e->http_code == 429;
  return api::isConnectionFailure(st);
}

// A short, stable name for a kind of failure ("http 503 ServiceUnavailable", "UNAVAILABLE").
std::string failureKind(const base::Status& st) {
  if (auto e = api::apiErrorOf(st)) return "http " + std::to_string(e->http_code) + " " + e->reason;
  return std::string(base::statusCodeName(st.code()));
}

// One LIST of `path` (blocking): its items and resourceVersion.
base::StatusOr<ListResult> listOnce(api::RestClient& client, const std::string& path,
                                    const std::string& field_selector, std::string rv,
                                    std::stop_token stop) {
  api::ListOptions opts;
  opts.field_selector = field_selector;
  opts.resource_version = std::move(rv);
  ASSIGN_OR_RETURN(nlohmann::json body, client.list(path, opts, stop));
  ListResult result;
  auto items = body.find("items");
  if (!body.is_object() || (items != body.end() && !items->is_array() && !items->is_null())) {
    return base::dataLossError("GET " + path + ": response is not a list");
  }
  if (items != body.end() && items->is_array()) {
    result.items.reserve(items->size());
    for (auto& item : *items) result.items.push_back(std::move(item));
  }
  result.resource_version = resourceVersionOf(body);
  return result;
}

api::ListOptions watchOptions(const std::string& field_selector, const WatchRequest& request) {
  api::ListOptions opts;
  opts.field_selector = field_selector;
  opts.resource_version = request.resource_version;
  opts.timeout_seconds = request.timeout_seconds;
  opts.allow_watch_bookmarks = request.allow_watch_bookmarks;
  return opts;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ThreadedListerWatcher

struct ThreadedListerWatcher::State {
  api::RestClient& client;
  std::string path;
  std::string field_selector;
  std::mutex mu;
  std::condition_variable_any cv;
  std::deque<std::function<void(std::stop_token)>> tasks;
  std::stop_source current;  // stops the call in flight
  bool stopped = false;

  State(api::RestClient& c, std::string p, std::string f)
      : client(c), path(std::move(p)), field_selector(std::move(f)) {}

  void enqueue(std::function<void(std::stop_token)> task) {
    std::lock_guard lock(mu);
    if (stopped) return;
    tasks.push_back(std::move(task));
    cv.notify_one();
  }

  void run(std::stop_token thread_stop) {
    while (true) {
      std::function<void(std::stop_token)> task;
      std::stop_token call_stop;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, thread_stop, [&] { return !tasks.empty(); });
        if (thread_stop.stop_requested()) return;
        task = std::move(tasks.front());
        tasks.pop_front();
        current = std::stop_source();
        call_stop = current.get_token();
      }
      task(call_stop);
    }
  }
};

ThreadedListerWatcher::ThreadedListerWatcher(api::RestClient& client, std::string collection_path,
                                             std::string field_selector)
    : state_(
          std::make_shared<State>(client, std::move(collection_path), std::move(field_selector))) {
  thread_ = std::jthread([state = state_](std::stop_token st) { state->run(st); });
}

ThreadedListerWatcher::~ThreadedListerWatcher() { stop(); }

void ThreadedListerWatcher::list(std::string resource_version, ListDone done) {
  state_->enqueue([state = state_.get(), rv = std::move(resource_version),
                   done = std::move(done)](std::stop_token stop) {
    done(listOnce(state->client, state->path, state->field_selector, rv, stop));
  });
}

void ThreadedListerWatcher::watch(WatchRequest request, EventFn on_event, WatchDone done) {
  state_->enqueue([state = state_.get(), request = std::move(request),
                   on_event = std::move(on_event), done = std::move(done)](std::stop_token stop) {
    auto st = state->client.watch(
        state->path, watchOptions(state->field_selector, request),
        [&](api::RawWatchEvent&& ev) {
          on_event(std::move(ev));
          return !stop.stop_requested();
        },
        stop);
    // The connection broke without an answer: the apiserver may have restarted or gone away, so
    // the kept-alive connections to it are suspect too (dead, or holding a stopping server's
    // threads). The next calls connect afresh.
    if (api::isConnectionFailure(st)) state->client.closeIdleConnections();
    done(std::move(st));
  });
}

void ThreadedListerWatcher::cancel() {
  std::lock_guard lock(state_->mu);
  state_->tasks.clear();
  state_->current.request_stop();
}

void ThreadedListerWatcher::stop() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopped = true;
    state_->tasks.clear();
    state_->current.request_stop();
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.request_stop();
    thread_.join();
  }
}

// ---------------------------------------------------------------------------------------------
// AsyncListerWatcher

AsyncListerWatcher::AsyncListerWatcher(api::RestClient& client, asio::any_io_executor executor,
                                       asio::any_io_executor blocking, std::string collection_path,
                                       std::string field_selector)
    : client_(client),
      executor_(std::move(executor)),
      blocking_(std::move(blocking)),
      path_(std::move(collection_path)),
      field_selector_(std::move(field_selector)) {}

AsyncListerWatcher::~AsyncListerWatcher() { cancel(); }

void AsyncListerWatcher::list(std::string resource_version, ListDone done) {
  auto stop = std::make_shared<std::stop_source>();
  {
    std::lock_guard lock(mu_);
    list_stop_ = stop;
  }
  asio::post(blocking_, [client = &client_, path = path_, selector = field_selector_, stop,
                         rv = std::move(resource_version), done = std::move(done)] {
    if (stop->stop_requested()) return done(base::cancelledError("LIST " + path + ": cancelled"));
    done(listOnce(*client, path, selector, rv, stop->get_token()));
  });
}

void AsyncListerWatcher::watch(WatchRequest request, EventFn on_event, WatchDone done) {
  auto on_raw = [on_event = std::move(on_event)](api::RawWatchEvent&& ev) {
    on_event(std::move(ev));
    return true;
  };
  // startWatch drops the client's idle connections after a broken watch, as the threaded watcher
  // does below.
  auto w = client_.startWatch(executor_, path_, watchOptions(field_selector_, request),
                              std::move(on_raw), std::move(done));
  std::lock_guard lock(mu_);
  watch_ = std::move(w);
}

void AsyncListerWatcher::cancel() {
  std::shared_ptr<std::stop_source> list_stop;
  std::shared_ptr<api::AsyncWatch> watch;
  {
    std::lock_guard lock(mu_);
    list_stop = std::move(list_stop_);
    watch = std::move(watch_);
  }
  if (list_stop) list_stop->request_stop();
  if (watch) watch->cancel();
}

// ---------------------------------------------------------------------------------------------
// Reflector

Reflector::Reflector(asio::any_io_executor ex, base::Clock& clock, base::Random& random,
                     std::shared_ptr<ListerWatcher> lister_watcher,
                     std::shared_ptr<Handler> handler, Options options)
    : ex_(std::move(ex)),
      clock_(clock),
      random_(random),
      lw_(std::move(lister_watcher)),
      handler_(std::move(handler)),
      options_(std::move(options)),
      backoff_(options_.backoff, random),
      timer_(clock.makeTimer(ex_)) {}

Reflector::~Reflector() = default;

void Reflector::start() {
  asio::post(ex_, [self = shared_from_this()] {
    if (self->stopped() || self->phase_ != Phase::kIdle) return;
    self->doList();
  });
}

void Reflector::relist(std::string reason) {
  asio::post(ex_, [self = shared_from_this(), reason = std::move(reason)] {
    if (self->stopped() || self->phase_ == Phase::kIdle || self->phase_ == Phase::kStopped) return;
    log()->warn("Apiserver state lost, relisting resource={} reason=\"{}\"", self->options_.name,
                reason);
    self->restartFromScratch();
  });
}

void Reflector::restartFromScratch() {
  lw_->cancel();
  timer_->cancel();
  last_rv_.clear();
  last_rv_unavailable_ = true;  // quorum read: the newest state, whatever the server's version
  consecutive_gone_ = 0;
  backoff_.reset();
  doList();
}

bool Reflector::wentBackwards(const std::string& rv, const char* seen_in) {
  auto held = numericResourceVersion(last_rv_);
  auto seen = numericResourceVersion(rv);
  if (!held || !seen || *seen >= *held) return false;
  const std::string reason = std::string("resourceVersion went backwards in a ") + seen_in +
                             " from " + last_rv_ + " to " + rv;
  log()->warn("Apiserver state lost resource={} reason=\"{}\"", options_.name, reason);
  if (options_.on_state_lost) options_.on_state_lost(reason);
  return true;
}

void Reflector::stop() {
  if (stopped_.exchange(true, std::memory_order_acq_rel)) return;
  lw_->cancel();
  asio::post(ex_, [self = shared_from_this()] {
    self->phase_ = Phase::kStopped;
    self->timer_->cancel();
  });
}

std::string Reflector::relistResourceVersion() const {
  if (last_rv_unavailable_) return "";  // quorum read
  if (last_rv_.empty()) return "0";     // any: served from the watch cache
  return last_rv_;
}

void Reflector::doList() {
  if (stopped()) return;
  phase_ = Phase::kListing;
  const uint64_t seq = ++seq_;
  ++lists_started_;
  std::string rv = relistResourceVersion();
  log()->debug("Listing resource={} resourceVersion=\"{}\"", options_.name, rv);
  std::weak_ptr<Reflector> weak = weak_from_this();
  lw_->list(rv, [weak, ex = ex_, seq](base::StatusOr<ListResult> result) {
    asio::post(ex, [weak, seq, result = std::move(result)]() mutable {
      if (auto self = weak.lock()) self->onListDone(seq, std::move(result));
    });
  });
  cancelIfStopped();
}

void Reflector::onListDone(uint64_t seq, base::StatusOr<ListResult> result) {
  if (stopped() || seq != seq_ || phase_ != Phase::kListing) return;
  if (!result.ok()) {
    const std::string rv = relistResourceVersion();
    // client-go: a LIST at a resourceVersion the server cannot serve (410 Expired, 504 "Too large
    // resource version") is retried as a quorum read.
    if (!rv.empty() && rv != "0" && api::apiErrorOf(result.status())) last_rv_unavailable_ = true;
    retryAfterBackoff("list " + failureKind(result.status()), result.status());
    return;
  }
  last_rv_unavailable_ = false;
  // The list is complete, so it replaces everything whatever happened; the report lets the owner
  // redo what the lost state held (registration, mirror pods, statuses).
  wentBackwards(result->resource_version, "list");
  last_rv_ = result->resource_version;
  log()->debug("Listed resource={} items={} resourceVersion={}", options_.name,
               result->items.size(), last_rv_);
  handler_->onReplace(std::move(result->items), last_rv_);
  doWatch();
}

void Reflector::doWatch() {
  if (stopped()) return;
  phase_ = Phase::kWatching;
  const uint64_t seq = ++seq_;
  ++watches_started_;
  WatchRequest req;
  req.resource_version = last_rv_;
  auto lo = options_.min_watch_timeout.count();
  auto hi = std::max(options_.max_watch_timeout.count(), lo);
  req.timeout_seconds =
      lo + static_cast<int64_t>(random_.uniform() * static_cast<double>(hi - lo + 1));
  if (req.timeout_seconds > hi) req.timeout_seconds = hi;
  req.allow_watch_bookmarks = true;
  watch_started_ = clock_.now();
  watch_events_ = 0;
  log()->debug("Watching resource={} resourceVersion={} timeoutSeconds={}", options_.name,
               req.resource_version, req.timeout_seconds);
  std::weak_ptr<Reflector> weak = weak_from_this();
  auto ex = ex_;
  lw_->watch(
      std::move(req),
      [weak, ex, seq](api::RawWatchEvent ev) {
        asio::post(ex, [weak, seq, ev = std::move(ev)]() mutable {
          if (auto self = weak.lock()) self->onWatchEvent(seq, std::move(ev));
        });
      },
      [weak, ex, seq](base::Status st) {
        asio::post(ex, [weak, seq, st = std::move(st)]() mutable {
          if (auto self = weak.lock()) self->onWatchDone(seq, std::move(st));
        });
      });
  cancelIfStopped();
}

void Reflector::cancelIfStopped() {
  // stop() from another thread between this call's stopped() check and its start cancelled
  // nothing (or the call before): this one ends here.
  if (stopped()) lw_->cancel();
}

void Reflector::onWatchEvent(uint64_t seq, api::RawWatchEvent ev) {
  if (stopped() || seq != seq_ || phase_ != Phase::kWatching || !ev.object) return;
  ++watch_events_;
  std::string rv = resourceVersionOf(*ev.object);
  // Everything a watch from version V sends is newer than V: an older version means the server
  // never had ours, so what we hold describes a state it has lost.
  if (ev.type != api::WatchEventType::kError &&
      wentBackwards(rv, ev.type == api::WatchEventType::kBookmark ? "bookmark" : "watch event")) {
    restartFromScratch();
    return;
  }
  switch (ev.type) {
    case api::WatchEventType::kBookmark:
      break;
    case api::WatchEventType::kAdded:
    case api::WatchEventType::kModified:
    case api::WatchEventType::kDeleted:
      handler_->onWatchEvent(ev.type, std::move(*ev.object));
      break;
    case api::WatchEventType::kError:
      return;  // the ListerWatcher turns ERROR into the watch's end status
  }
  if (!rv.empty()) last_rv_ = std::move(rv);
  if (watch_events_ == 1) noteHealthy();
}

void Reflector::onWatchDone(uint64_t seq, base::Status st) {
  if (stopped() || seq != seq_ || phase_ != Phase::kWatching) return;
  if (st.ok()) {
    if (watch_events_ == 0 && clock_.now() - watch_started_ < options_.min_healthy_watch) {
      retryAfterBackoff(
          "very short watch",
          base::unavailableError("watch of " + options_.name + " ended at once without events"));
      return;
    }
    noteHealthy();
    doWatch();
    return;
  }
  if (st.code() == base::StatusCode::kCancelled) return;
  if (canResumeWatch(st)) {
    // client-go: a refused or dropped connection and 429 re-open the watch from the last
    // resourceVersion after backoff; a full LIST (every pod of the node) is not needed for that.
    retryAfterBackoff("watch " + failureKind(st), st, Next::kWatch);
    return;
  }
  if (isTooLargeResourceVersion(st)) {
    // The server is behind the version we hold (client-go: relist with a quorum read); the list's
    // version tells whether it lost its state.
    last_rv_unavailable_ = true;
    retryAfterBackoff("watch " + failureKind(st), st);
    return;
  }
  if (api::isGone(st)) {
    // The history we resume from is gone: relist (at our last resourceVersion, like client-go).
    // Only a 410 streak with nothing in between waits, so a server that always answers 410 cannot
    // make us spin.
    if (consecutive_gone_++ == 0) {
      log()->info("Watch expired, relisting resource={} resourceVersion={} reason=\"{}\"",
                  options_.name, last_rv_, st.message());
      doList();
      return;
    }
    retryAfterBackoff("watch expired", st);
    return;
  }
  retryAfterBackoff("watch " + failureKind(st), st);
}

void Reflector::retryAfterBackoff(const std::string& kind, const base::Status& status, Next next) {
  noteFailure(kind, status);
  phase_ = Phase::kWaiting;
  auto delay = backoff_.next();
  // A 429 (or 5xx) asking for more time gets at least that.
  if (auto retry_after = api::retryAfterOf(status); retry_after && *retry_after > delay) {
    delay = std::chrono::duration_cast<base::Duration>(*retry_after);
  }
  log()->debug("{} after backoff resource={} delay_ms={}",
               next == Next::kWatch ? "Re-watching" : "Relisting", options_.name,
               std::chrono::duration_cast<std::chrono::milliseconds>(delay).count());
  std::weak_ptr<Reflector> weak = weak_from_this();
  timer_->asyncWaitFor(delay, [weak, next] {
    auto self = weak.lock();
    if (!self || self->stopped() || self->phase_ != Phase::kWaiting) return;
    if (next == Next::kWatch) {
      self->doWatch();
    } else {
      self->doList();
    }
  });
}

void Reflector::noteFailure(const std::string& kind, const base::Status& status) {
  if (streak_.insert(kind).second) {
    log()->warn("Apiserver {} failed, retrying with backoff kind=\"{}\" error=\"{}\"",
                options_.name, kind, status.toString());
  }
}

void Reflector::noteHealthy() {
  consecutive_gone_ = 0;
  if (!streak_.empty()) {
    log()->info("Apiserver {} watch recovered resourceVersion={}", options_.name, last_rv_);
    streak_.clear();
  }
  backoff_.reset();
}

}  // namespace nodeagent::config
