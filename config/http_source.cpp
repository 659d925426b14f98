#include "config/http_source.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <set>

#include "api/hash.h"
#include "api/http_client.h"
#include "base/duration.h"
#include "base/log.h"
#include "base/strings.h"
#include "config/static_pod.h"

namespace nodeagent::config {
namespace {

NODEAGENT_LOGGER("config")

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// RFC 9110 token characters.
bool isTokenChar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool hasControlChar(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
  });
}

}  // namespace

base::StatusOr<HttpHeaders> parseManifestUrlHeaders(const std::vector<std::string>& values) {
  HttpHeaders out;
  for (const auto& value : values) {
    auto bad = [&](const std::string& why) {
      return base::invalidArgumentError("invalid --manifest-url-header value \"" + value +
                                        "\": " + why);
    };
    std::string last_key;
    std::string_view rest = value;
    while (true) {
      auto comma = rest.find(',');
      std::string_view piece = trim(rest.substr(0, comma));
      if (!piece.empty()) {
        auto colon = piece.find(':');
        std::string key;
        std::string_view val;
        if (colon == std::string_view::npos) {
          if (last_key.empty()) {
            return bad("malformed pair \"" + std::string(piece) + "\", expected Key:Value");
          }
          key = last_key;
          val = piece;
        } else {
          key = std::string(trim(piece.substr(0, colon)));
          val = trim(piece.substr(colon + 1));
          if (key.empty()) return bad("empty header name in \"" + std::string(piece) + "\"");
          if (!std::all_of(key.begin(), key.end(), isTokenChar)) {
            return bad("header name \"" + key + "\" has characters not allowed in a header name");
          }
        }
        if (hasControlChar(val)) return bad("header " + key + " has control characters");
        out.emplace_back(key, std::string(val));
        last_key = key;
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return out;
}

std::string ParsedUrl::origin() const {
  bool v6 = host.find(':') != std::string::npos;
  return scheme + "://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

base::StatusOr<ParsedUrl> parseHttpUrl(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return base::invalidArgumentError("invalid manifest URL \"" + std::string(url) + "\": " + why);
  };
  auto sep = url.find("://");
  if (sep == std::string_view::npos) return bad("expected http:// or https://");
  ParsedUrl out;
  out.scheme = base::asciiLower(url.substr(0, sep));
  if (out.scheme != "http" && out.scheme != "https") {
    return bad("unsupported scheme \"" + out.scheme + "\"");
  }
  std::string_view rest = url.substr(sep + 3);
  auto end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, end);
  std::string_view tail = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  if (auto hash = tail.find('#'); hash != std::string_view::npos) tail = tail.substr(0, hash);
  if (authority.find('@') != std::string_view::npos) return bad("user info is not supported");
  if (authority.empty()) return bad("missing host");
  std::string_view port_text;
  if (authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("unexpected text after the IPv6 address");
      port_text = after.substr(1);
    }
  } else {
    auto colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) return bad("missing host");
  out.port = out.scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    int port = 0;
    for (char c : port_text) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || port > 65535) return bad("invalid port");
      port = port * 10 + (c - '0');
    }
    if (port <= 0 || port > 65535) return bad("invalid port");
    out.port = port;
  }
  out.path = tail.empty() ? "/" : std::string(tail);
  if (out.path.front() == '?') out.path.insert(0, "/");
  if (hasControlChar(out.path) || out.path.find(' ') != std::string::npos) {
    return bad("the path has spaces or control characters");
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

namespace {

struct FetchResult {
  std::string error;  // transport error or a limit hit, naming the URL; empty when an answer came
  int status = 0;
  std::string body;
  std::string etag;
  std::string last_modified;
};

// The GET in flight, so a deadline or stop() on the strand can abort it from another thread.
struct InFlight {
  std::mutex mu;
  api::HttpConnection* conn = nullptr;
  bool aborted = false;
  void abort() {
    std::lock_guard lock(mu);
    aborted = true;
    if (conn) conn->cancel();
  }
};

// The TLS configuration (system roots plus the optional CA file), made on the blocking pool at
// the first https request and kept.
class TlsCache {
 public:
  base::StatusOr<std::shared_ptr<api::HttpTlsContext>> get(const std::string& ca_file) {
    std::lock_guard lock(mu_);
    if (!ctx_) {
      api::HttpTlsOptions tls;
      tls.ca_file = ca_file;
      auto made = api::HttpTlsContext::create(tls, "manifest URL");
      if (!made.ok()) return made.status();
      ctx_ = std::move(*made);
    }
    return ctx_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<api::HttpTlsContext> ctx_;
};

struct FetchRequest {
  ParsedUrl url;
  HttpHeaders headers;
  std::string if_none_match;
  std::string if_modified_since;
  base::Duration timeout;
  size_t max_body_bytes;
  std::string ca_file;
  std::shared_ptr<TlsCache> tls;
};

// One GET, without following redirects. Every limit of the answer (head size and fields, body
// size, each timeout) is enforced by HttpConnection.
FetchResult fetchOnce(const FetchRequest& req, const ParsedUrl& url, InFlight& inflight,
                      std::string* location) {
  FetchResult out;
  const std::string what = "GET " + url.origin() + url.path;
  std::shared_ptr<api::HttpTlsContext> tls;
  if (url.scheme == "https") {
    auto ctx = req.tls->get(req.ca_file);
    if (!ctx.ok()) {
      out.error = ctx.status().message();
      return out;
    }
    tls = std::move(*ctx);
  }
  api::HttpClientOptions copts;
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(req.timeout);
  copts.connect_timeout = copts.write_timeout = copts.head_timeout = copts.read_timeout = timeout;
  api::HttpConnection conn(api::HttpEndpoint{url.scheme == "https", url.host, url.port},
                           std::move(tls), copts);
  api::HttpRequest get;
  get.target = url.path;
  get.max_body_bytes = req.max_body_bytes;
  get.headers = req.headers;
  get.headers.emplace_back("Connection", "close");
  if (!req.if_none_match.empty()) get.headers.emplace_back("If-None-Match", req.if_none_match);
  if (!req.if_modified_since.empty()) {
    get.headers.emplace_back("If-Modified-Since", req.if_modified_since);
  }
  {
    std::lock_guard lock(inflight.mu);
    if (inflight.aborted) {
      out.error = what + ": aborted";
      return out;
    }
    inflight.conn = &conn;
  }
  auto result = conn.roundTrip(get);
  {
    std::lock_guard lock(inflight.mu);
    inflight.conn = nullptr;
  }
  if (!result.ok()) {
    out.error = what + ": " + result.status().message();
    return out;
  }
  out.status = result->status;
  out.body = std::move(result->body);
  out.etag = result->header("ETag");
  out.last_modified = result->header("Last-Modified");
  if (location) *location = result->header("Location");
  return out;
}

// Runs on the blocking pool. Follows up to 10 redirects, as Go's http.Client does.
FetchResult fetch(const FetchRequest& req, InFlight& inflight) {
  ParsedUrl url = req.url;
  for (int hop = 0;; ++hop) {
    std::string location;
    FetchResult out = fetchOnce(req, url, inflight, &location);
    bool redirect =
        out.error.empty() && (out.status == 301 || out.status == 302 || out.status == 303 ||
                              out.status == 307 || out.status == 308);
    if (!redirect) return out;
    if (location.empty()) {
      out.error = "redirect (HTTP " + std::to_string(out.status) + ") without a Location";
      return out;
    }
    if (hop >= 10) {
      out.error = "stopped after 10 redirects";
      return out;
    }
    if (location.front() == '/') {
      url.path = location;
    } else {
      auto next = parseHttpUrl(location);
      if (!next.ok()) {
        out.error = "bad redirect: " + next.status().message();
        return out;
      }
      url = *next;
    }
    out = FetchResult{};
  }
}

}  // namespace

class HttpSource::Impl : public std::enable_shared_from_this<HttpSource::Impl> {
 public:
  Impl(asio::any_io_executor ex, asio::any_io_executor blocking, base::Clock& clock,
       HttpSourceOptions options, ParsedUrl url, PodUpdateSink sink)
      : strand_(asio::make_strand(std::move(ex))),
        blocking_(std::move(blocking)),
        clock_(clock),
        opts_(std::move(options)),
        url_(std::move(url)),
        sink_(std::move(sink)) {
    poll_timer_ = clock_.makeTimer(strand_);
    deadline_timer_ = clock_.makeTimer(strand_);
  }

  void start() {
    asio::post(strand_, [self = shared_from_this()] {
      if (self->closed_) return;
      log()->info("Polling manifest URL url={} check_frequency={} timeout={}", self->opts_.url,
                  base::formatDuration(self->opts_.check_frequency),
                  base::formatDuration(self->opts_.timeout));
      self->poll();
    });
  }

  void stop() {
    {
      std::lock_guard lock(sink_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    std::shared_ptr<InFlight> inflight;
    {
      std::lock_guard lock(inflight_mu_);
      inflight = inflight_;
    }
    if (inflight) inflight->abort();
    asio::post(strand_, [self = shared_from_this()] {
      self->closed_ = true;
      ++self->generation_;
      self->poll_timer_->cancel();
      self->deadline_timer_->cancel();
    });
  }

  HttpSourceStats stats() const {
    HttpSourceStats s;
    s.polls = polls_.load();
    s.not_modified = not_modified_.load();
    s.failures = failures_.load();
    s.failure_warnings = failure_warnings_.load();
    s.decodes = decodes_.load();
    s.updates_pushed = updates_pushed_.load();
    return s;
  }

 private:
  void poll() {
    if (closed_) return;
    ++polls_;
    const uint64_t gen = ++generation_;
    auto inflight = std::make_shared<InFlight>();
    {
      std::lock_guard lock(inflight_mu_);
      inflight_ = inflight;
    }
    FetchRequest req{url_,          opts_.headers,        etag_,         last_modified_,
                     opts_.timeout, opts_.max_body_bytes, opts_.ca_file, tls_cache_};
    deadline_timer_->asyncWaitFor(opts_.timeout,
                                  [self = shared_from_this(), gen] { self->onDeadline(gen); });
    asio::post(blocking_, [self = shared_from_this(), gen, inflight, req = std::move(req)] {
      FetchResult result = fetch(req, *inflight);
      asio::post(self->strand_, [self, gen, result = std::move(result)]() mutable {
        self->onResult(gen, std::move(result));
      });
    });
  }

  void onDeadline(uint64_t gen) {
    if (closed_ || gen != generation_) return;
    ++generation_;  // the late answer, if any, is ignored
    std::shared_ptr<InFlight> inflight;
    {
      std::lock_guard lock(inflight_mu_);
      inflight.swap(inflight_);
    }
    if (inflight) inflight->abort();
    failure("timed out after " + base::formatDuration(opts_.timeout));
    armNext();
  }

  void onResult(uint64_t gen, FetchResult r) {
    if (closed_ || gen != generation_) return;
    deadline_timer_->cancel();
    {
      std::lock_guard lock(inflight_mu_);
      inflight_.reset();
    }
    handle(std::move(r));
    armNext();
  }

  void armNext() {
    if (closed_) return;
    poll_timer_->asyncWaitFor(opts_.check_frequency, [self = shared_from_this()] { self->poll(); });
  }

  void handle(FetchResult r) {
    if (!r.error.empty()) {
      failure(r.error);
      return;
    }
    if (r.status == 304) {
      ++not_modified_;
      success();
      return;
    }
    if (r.status != 200) {
      failure("HTTP status " + std::to_string(r.status));
      return;
    }
    etag_ = r.etag;
    last_modified_ = r.last_modified;
    success();

    api::Hash128 hash = api::hash128(r.body);
    if (have_body_ && hash == body_hash_) return;  // unchanged: nothing to say
    // Remembered before decoding, as kubelet does: a bad body is not decoded again until it
    // changes, and the pods of the last good body stay.
    have_body_ = true;
    body_hash_ = hash;
    if (r.body.empty()) {
      log()->warn("Manifest URL returned an empty body, removing its pods url={}", opts_.url);
      parse_error_.clear();
      refreshError();
      push({});
      return;
    }
    decodeBody(r.body);
  }

  // A new, non-empty body: its pods are sent, or the last good set stays and the parse error
  // is reported.
  void decodeBody(const std::string& body) {
    ++decodes_;
    DecodeResult decoded = decodeManifest(
        body, ManifestSource{opts_.node_name, opts_.url, /*is_file=*/false, seenTime(clock_)},
        /*allow_list=*/true);
    if (!decoded.ok()) {
      parse_error_ = decoded.errorText();
      invalid_pod_ =
          decoded.invalid_pods.size() == 1 ? decoded.invalid_pods.front() : ManifestPodRef{};
      log()->warn(
          "Could not parse pods from manifest URL, keeping the last good set url={} "
          "reason={}",
          opts_.url, parse_error_);
      refreshError();
      pushIncomplete("cannot use the pods of " + opts_.url + ": " + parse_error_);
      return;
    }
    parse_error_.clear();
    invalid_pod_ = {};
    reportDuplicateNames(decoded.pods);
    refreshError();
    log()->debug("Read pods from manifest URL url={} pods={}", opts_.url, decoded.pods.size());
    push(std::move(decoded.pods));
  }

  // Pods with a full name an earlier item already has are ignored by the merge (the first
  // wins, as in kubelet); say so here too, so the problem is visible and gets its event.
  void reportDuplicateNames(const std::vector<api::PodPtr>& pods) {
    std::set<std::string> names;
    for (size_t i = 0; i < pods.size(); ++i) {
      const auto& pod = *pods[i];
      if (names.insert(pod.fullName()).second) continue;
      if (!parse_error_.empty()) parse_error_ += "\n";
      parse_error_ += "items[" + std::to_string(i) + "]: pod " + api::podRef(pod) +
                      ": duplicate pod name \"" + pod.metadata.name + "\", ignoring";
      if (invalid_pod_.name.empty()) {
        invalid_pod_ = {pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid};
      }
    }
  }

  void failure(const std::string& reason) {
    ++failures_;
    ++streak_;
    fetch_error_ = reason;
    refreshError();
    pushIncomplete("cannot read " + opts_.url + ": " + reason);
    auto now = clock_.now();
    if (streak_ == 1 || now - last_warn_ >= opts_.failure_log_interval) {
      last_warn_ = now;
      ++failure_warnings_;
      log()->warn(
          "Failed to read pods from manifest URL, keeping its pods url={} reason={} "
          "failures_in_a_row={}",
          opts_.url, reason, streak_);
    } else {
      log()->debug("Failed to read pods from manifest URL url={} reason={} failures_in_a_row={}",
                   opts_.url, reason, streak_);
    }
  }

  void success() {
    if (streak_ == 0) return;
    log()->info("Successfully read pods from manifest URL url={} after_failures={}", opts_.url,
                streak_);
    streak_ = 0;
    fetch_error_.clear();
    refreshError();
  }

  void refreshError() {
    if (!opts_.errors) return;
    std::string message = fetch_error_;
    ManifestErrorDetail detail;
    if (!parse_error_.empty()) {
      if (!message.empty()) message += "\n";
      message += parse_error_;
      detail.invalid = parse_error_;
      detail.pod = invalid_pod_;
    }
    if (message.empty()) {
      opts_.errors->clear(api::kHttpSource, opts_.url);
    } else {
      opts_.errors->set(api::kHttpSource, opts_.url, std::move(message), clock_.wallNow(),
                        std::move(detail));
    }
  }

  void push(std::vector<api::PodPtr> pods, std::string incomplete_reason = {}) {
    api::PodUpdate update{std::move(pods), api::PodOperation::kSet, std::string(api::kHttpSource),
                          /*source_annotated=*/true};
    update.complete = incomplete_reason.empty();
    update.incomplete_reason = std::move(incomplete_reason);
    std::lock_guard lock(sink_mu_);
    if (stopped_) return;
    if (update.complete) pushed_complete_ = true;
    ++updates_pushed_;
    sink_(std::move(update));
  }

  // Until the URL has given a usable answer, a failure is an empty, incomplete SET: the source
  // has answered (the agent's readiness need not wait for it) but is not seen (nothing is cleaned
  // up on the strength of it). It goes out when the reason changes, not on every poll.
  // Afterwards a failure sends nothing: the pods stay.
  void pushIncomplete(std::string reason) {
    if (pushed_complete_ || reason == pushed_incomplete_reason_) return;
    pushed_incomplete_reason_ = reason;
    push({}, std::move(reason));
  }

  bool pushed_complete_ = false;          // strand: a usable answer went out (the source is seen)
  std::string pushed_incomplete_reason_;  // strand: the last incomplete SET's reason
  asio::strand<asio::any_io_executor> strand_;
  asio::any_io_executor blocking_;
  base::Clock& clock_;
  HttpSourceOptions opts_;
  ParsedUrl url_;
  PodUpdateSink sink_;

  std::mutex sink_mu_;  // any thread: guards stopped_ and calls into sink_
  bool stopped_ = false;
  std::mutex inflight_mu_;  // any thread: guards inflight_
  std::shared_ptr<InFlight> inflight_;
  std::shared_ptr<TlsCache> tls_cache_ = std::make_shared<TlsCache>();

  // Strand only.
  bool closed_ = false;
  uint64_t generation_ = 0;  // the poll whose answer is awaited
  base::TimerPtr poll_timer_;
  base::TimerPtr deadline_timer_;
  std::string etag_;
  std::string last_modified_;
  bool have_body_ = false;
  api::Hash128 body_hash_;
  std::string parse_error_;
  ManifestPodRef invalid_pod_;  // the pod the bad body names, if exactly one could be read
  std::string fetch_error_;
  int streak_ = 0;
  base::MonotonicTime last_warn_{};

  std::atomic<uint64_t> polls_{0};
  std::atomic<uint64_t> not_modified_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> failure_warnings_{0};
  std::atomic<uint64_t> decodes_{0};
  std::atomic<uint64_t> updates_pushed_{0};
};

base::StatusOr<std::unique_ptr<HttpSource>> HttpSource::create(asio::any_io_executor ex,
                                                               asio::any_io_executor blocking,
                                                               base::Clock& clock,
                                                               HttpSourceOptions options,
                                                               PodUpdateSink sink) {
  auto url = parseHttpUrl(options.url);
  if (!url.ok()) return url.status();
  auto impl = std::make_shared<Impl>(std::move(ex), std::move(blocking), clock, std::move(options),
                                     std::move(*url), std::move(sink));
  return std::unique_ptr<HttpSource>(new HttpSource(std::move(impl)));
}

HttpSource::~HttpSource() { impl_->stop(); }
void HttpSource::start() { impl_->start(); }
void HttpSource::stop() { impl_->stop(); }
HttpSourceStats HttpSource::stats() const { return impl_->stats(); }

}  // namespace nodeagent::config
