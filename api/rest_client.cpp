#include "api/rest_client.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>

#include <nlohmann/json.hpp>

#include "api/api_errors.h"
#include "api/canonical_json.h"
#include "base/log.h"

namespace nodeagent::api {

bool waitOrStop(base::Duration d, std::stop_token stop) {
  if (stop.stop_requested()) return false;
  if (d <= base::Duration::zero()) return true;
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

namespace {

std::optional<std::chrono::seconds> parseRetryAfter(const HttpResponse& response) {
  const std::string s = response.header("Retry-After");
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return std::chrono::seconds(v);
}

}  // namespace

std::string_view patchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
  }
  return "application/merge-patch+json";
}

std::string urlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::optional<std::string> urlDecode(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] != '%') {
      out.push_back(s[i]);
    } else {
      if (i + 2 >= s.size() || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0) return std::nullopt;
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    }
  }
  return out;
}

base::StatusOr<Query> parseQuery(std::string_view query) {
  Query out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    auto name = urlDecode(pair.substr(0, eq));
    auto value = urlDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (!name || !value) {
      return base::invalidArgumentError("bad escape in \"" + std::string(pair) + "\"");
    }
    out.emplace_back(std::move(*name), std::move(*value));
  }
  return out;
}

Query toQuery(const ListOptions& o, bool watch) {
  Query q;
  if (watch) q.emplace_back("watch", "true");
  if (!o.field_selector.empty()) q.emplace_back("fieldSelector", o.field_selector);
  if (!o.label_selector.empty()) q.emplace_back("labelSelector", o.label_selector);
  if (o.resource_version) q.emplace_back("resourceVersion", *o.resource_version);
  if (o.allow_watch_bookmarks && watch) q.emplace_back("allowWatchBookmarks", "true");
  if (o.timeout_seconds) q.emplace_back("timeoutSeconds", std::to_string(*o.timeout_seconds));
  if (o.limit) q.emplace_back("limit", std::to_string(*o.limit));
  if (!o.continue_token.empty()) q.emplace_back("continue", o.continue_token);
  return q;
}

namespace {
std::string nsPart(std::string_view ns) {
  return ns.empty() ? std::string() : "/namespaces/" + urlEncode(ns);
}
}  // namespace

std::string podsPath(std::string_view ns) { return "/api/v1" + nsPart(ns) + "/pods"; }
std::string podPath(std::string_view ns, std::string_view name) {
  return podsPath(ns) + "/" + urlEncode(name);
}
std::string podStatusPath(std::string_view ns, std::string_view name) {
  return podPath(ns, name) + "/status";
}
std::string nodesPath() { return "/api/v1/nodes"; }
std::string nodePath(std::string_view name) { return nodesPath() + "/" + urlEncode(name); }
std::string nodeStatusPath(std::string_view name) { return nodePath(name) + "/status"; }
std::string leasesPath(std::string_view ns) {
  return "/apis/coordination.k8s.io/v1" + nsPart(ns) + "/leases";
}
std::string leasePath(std::string_view ns, std::string_view name) {
  return leasesPath(ns) + "/" + urlEncode(name);
}
std::string eventsPath(std::string_view ns) { return "/api/v1" + nsPart(ns) + "/events"; }

RestClient::RestClient(RestConfig config, RestClientOptions options, base::Clock& clock)
    : config_(std::move(config)),
      options_(std::move(options)),
      clock_(clock),
      limiter_(options_.qps, options_.burst, clock) {
  user_agent_ = options_.user_agent.empty() ? std::string("nodeagent/") + NODEAGENT_VERSION
                                            : options_.user_agent;
  if (!options_.wait) options_.wait = waitOrStop;
}

RestClient::~RestClient() { shutdown(); }

base::StatusOr<std::unique_ptr<RestClient>> RestClient::create(RestConfig config,
                                                               RestClientOptions options,
                                                               base::Clock& clock) {
  std::unique_ptr<RestClient> c(new RestClient(std::move(config), std::move(options), clock));
  RETURN_IF_ERROR(c->init());
  return c;
}

namespace {

// The server URL of a kubeconfig: scheme, host, port and path prefix. `where` names the config.
struct ServerUrl {
  HttpEndpoint endpoint;
  std::string path_prefix;  // without a trailing '/'
};

base::StatusOr<ServerUrl> parseServerUrl(const std::string& server, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return base::invalidArgumentError(where + ": server \"" + server + "\": " + what);
  };
  std::string_view url = server;
  bool https = false;
  if (url.rfind("https://", 0) == 0) {
    https = true;
    url.remove_prefix(8);
  } else if (url.rfind("http://", 0) == 0) {
    url.remove_prefix(7);
  } else {
    return bad("expected an http:// or https:// URL");
  }
  ServerUrl out;
  auto slash = url.find('/');
  std::string_view hostport = url.substr(0, slash);
  if (slash != std::string_view::npos) {
    out.path_prefix = std::string(url.substr(slash));
    while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();
  }
  std::string_view port_text;
  std::string host;
  if (!hostport.empty() && hostport.front() == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) return bad("bad IPv6 host");
    host = std::string(hostport.substr(1, close - 1));
    if (close + 1 < hostport.size() && hostport[close + 1] == ':') {
      port_text = hostport.substr(close + 2);
    }
  } else {
    auto colon = hostport.rfind(':');
    host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) port_text = hostport.substr(colon + 1);
  }
  if (host.empty()) return bad("no host");
  int port = https ? 443 : 80;
  if (!port_text.empty()) {
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port <= 0 ||
        port > 65535) {
      return bad("bad port");
    }
  }
  out.endpoint = HttpEndpoint{https, std::move(host), port};
  return out;
}

}  // namespace

base::Status RestClient::init() {
  const std::string where = config_.origin.empty() ? "rest config" : config_.origin;
  auto server = parseServerUrl(config_.server, where);
  if (!server.ok()) return server.status();
  endpoint_ = std::move(server->endpoint);
  path_prefix_ = std::move(server->path_prefix);
  const bool https = endpoint_.https;

  if (https) {
    ASSIGN_OR_RETURN(tls_, HttpTlsContext::create(tlsOptions(), where));
  } else if (!config_.client_cert_pem.empty()) {
    return base::invalidArgumentError(where + ": a client certificate needs an https:// server");
  }
  if (!config_.bearer_token.empty()) {
    authorization_ = "Bearer " + config_.bearer_token;
  } else if (!config_.username.empty()) {
    authorization_ = "Basic " + encodeBase64(config_.username + ":" + config_.password);
  }
  return base::okStatus();
}

HttpTlsOptions RestClient::tlsOptions() const {
  HttpTlsOptions tls;
  tls.ca_pem = config_.ca_pem;
  tls.insecure_skip_verify = config_.insecure_skip_tls_verify;
  tls.server_name = config_.tls_server_name;
  tls.client_cert_pem = config_.client_cert_pem;
  tls.client_key_pem = config_.client_key_pem;
  return tls;
}

base::Status RestClient::setClientCertificate(const std::string& cert_pem,
                                              const std::string& key_pem) {
  const std::string where = config_.origin.empty() ? "rest config" : config_.origin;
  if (!endpoint_.https) {
    return base::invalidArgumentError(where + ": a client certificate needs an https:// server");
  }
  HttpTlsOptions options = tlsOptions();
  options.client_cert_pem = cert_pem;
  options.client_key_pem = key_pem;
  ASSIGN_OR_RETURN(std::shared_ptr<HttpTlsContext> tls, HttpTlsContext::create(options, where));
  std::vector<std::unique_ptr<HttpConnection>> doomed;
  std::lock_guard lock(mu_);
  tls_ = std::move(tls);
  doomed.swap(idle_);
  for (HttpConnection* c : in_use_) {
    if (std::find(watches_.begin(), watches_.end(), c) != watches_.end()) {
      c->close("the client certificate was rotated");
    } else {
      retired_.push_back(c);
    }
  }
  return base::okStatus();
}

std::shared_ptr<HttpTlsContext> RestClient::tlsContext() {
  std::lock_guard lock(mu_);
  return tls_;
}

HttpClientOptions RestClient::connectionOptions() const {
  HttpClientOptions o;
  o.connect_timeout = options_.connect_timeout;
  o.write_timeout = options_.request_timeout;
  o.head_timeout = options_.request_timeout;
  o.read_timeout = options_.request_timeout;
  return o;
}

std::unique_ptr<HttpConnection> RestClient::newConnection() {
  return std::make_unique<HttpConnection>(endpoint_, tlsContext(), connectionOptions());
}

std::unique_ptr<HttpConnection> RestClient::acquire() {
  std::unique_ptr<HttpConnection> c;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return nullptr;
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) c = newConnection();
  std::lock_guard lock(mu_);
  if (shut_down_) return nullptr;
  in_use_.push_back(c.get());
  return c;
}

void RestClient::release(std::unique_ptr<HttpConnection> c) {
  const bool reusable = c->reusable();
  std::lock_guard lock(mu_);
  std::erase(in_use_, c.get());
  const bool retired = std::erase(retired_, c.get()) > 0;
  if (reusable && !retired && !shut_down_ && idle_.size() < options_.max_idle_connections) {
    idle_.push_back(std::move(c));
  }
}

void RestClient::closeIdleConnections() {
  std::vector<std::unique_ptr<HttpConnection>> doomed;
  std::lock_guard lock(mu_);
  doomed.swap(idle_);
}

void RestClient::shutdown() {
  std::vector<std::unique_ptr<HttpConnection>> doomed;
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    for (auto* c : in_use_) c->cancel();
    doomed.swap(idle_);
  }
  shutdown_source_.request_stop();
}

bool RestClient::waitRateLimit(std::stop_token stop) {
  auto delay = limiter_.reserve();
  if (delay <= base::Duration::zero()) return true;
  // Either stop (the caller's or shutdown) interrupts the wait.
  std::stop_source both;
  std::stop_callback a(stop, [&] { both.request_stop(); });
  std::stop_callback b(shutdown_source_.get_token(), [&] { both.request_stop(); });
  if (options_.wait(delay, both.get_token())) return true;
  limiter_.cancelReservation();
  return false;
}

std::string RestClient::target(std::string_view path, const Query& query) const {
  std::string t = path_prefix_;
  t += path;
  char sep = t.find('?') == std::string::npos ? '?' : '&';
  for (const auto& [k, v] : query) {
    t += sep;
    sep = '&';
    t += urlEncode(k);
    t += '=';
    t += urlEncode(v);
  }
  return t;
}

HttpRequest RestClient::newRequest(std::string_view method, std::string_view path,
                                   const Query& query) const {
  HttpRequest req;
  req.method = std::string(method);
  req.target = target(path, query);
  req.headers = {{"User-Agent", user_agent_}, {"Accept", "application/json"}};
  if (!authorization_.empty()) req.headers.emplace_back("Authorization", authorization_);
  return req;
}

base::StatusOr<Response> RestClient::send(std::string_view method, std::string_view path,
                                          const Query& query, std::string_view body,
                                          std::string_view content_type, std::stop_token stop) {
  const std::string what = std::string(method) + " " + std::string(path);
  if (stop.stop_requested()) return base::cancelledError(what + ": cancelled");
  if (!waitRateLimit(stop)) return base::cancelledError(what + ": cancelled");
  auto conn = acquire();
  if (!conn) return base::cancelledError(what + ": client shut down");
  HttpRequest req = newRequest(method, path, query);
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req.body = std::string(body);
    req.headers.emplace_back("Content-Type",
                             content_type.empty() ? "application/json" : std::string(content_type));
  }
  req.max_body_bytes = options_.max_body_bytes;
  base::StatusOr<HttpResponse> res = base::cancelledError("cancelled");
  {
    // Must die before the connection goes back to the pool (where it may be destroyed).
    HttpConnection* raw = conn.get();
    std::stop_callback on_stop(stop, [raw] { raw->cancel(); });
    if (!stop.stop_requested()) res = conn->roundTrip(req);
  }
  release(std::move(conn));
  if (stop.stop_requested()) return base::cancelledError(what + ": cancelled");
  if (!res.ok()) return res.status().withContext(what);
  Response out;
  out.status = res->status;
  out.content_type = res->header("Content-Type");
  out.retry_after = parseRetryAfter(*res);
  out.body = std::move(res->body);
  return out;
}

base::StatusOr<std::string> RestClient::request(std::string_view method, std::string_view path,
                                                const Query& query, std::string_view body,
                                                std::string_view content_type,
                                                std::stop_token stop) {
  const std::string what = std::string(method) + " " + std::string(path);
  for (int attempt = 0;; ++attempt) {
    auto res = send(method, path, query, body, content_type, stop);
    if (!res.ok()) return res.status();
    if (res->status >= 200 && res->status < 300) return std::move(res->body);
    bool retriable = res->status == 429 || (res->status >= 500 && res->retry_after.has_value());
    if (retriable && attempt < options_.max_retries) {
      auto delay = std::min<std::chrono::seconds>(
          res->retry_after.value_or(std::chrono::seconds(1)), options_.max_retry_after);
      std::stop_source both;
      std::stop_callback a(stop, [&] { both.request_stop(); });
      std::stop_callback b(shutdown_source_.get_token(), [&] { both.request_stop(); });
      if (!options_.wait(delay, both.get_token()))
        return base::cancelledError(what + ": cancelled");
      continue;
    }
    return apiErrorStatus(what, res->status, res->body, res->retry_after);
  }
}

namespace {
base::StatusOr<nlohmann::json> parseJson(base::StatusOr<std::string> body, std::string_view what) {
  if (!body.ok()) return body.status();
  auto j = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return base::dataLossError(std::string(what) + ": response is not valid JSON");
  }
  return j;
}
}  // namespace

base::StatusOr<nlohmann::json> RestClient::getJson(std::string_view path, const Query& query) {
  return parseJson(request("GET", path, query), "GET " + std::string(path));
}

base::StatusOr<nlohmann::json> RestClient::list(std::string_view collection_path,
                                                const ListOptions& options, std::stop_token stop) {
  return parseJson(request("GET", collection_path, toQuery(options, false), {}, {}, stop),
                   "GET " + std::string(collection_path));
}

base::StatusOr<nlohmann::json> RestClient::createJson(std::string_view collection_path,
                                                      const nlohmann::json& object) {
  return parseJson(request("POST", collection_path, {}, canonicalJson(object), "application/json"),
                   "POST " + std::string(collection_path));
}

base::StatusOr<nlohmann::json> RestClient::updateJson(std::string_view path,
                                                      const nlohmann::json& object) {
  return parseJson(request("PUT", path, {}, canonicalJson(object), "application/json"),
                   "PUT " + std::string(path));
}

base::StatusOr<nlohmann::json> RestClient::patchJson(std::string_view path,
                                                     const nlohmann::json& patch, PatchType type) {
  return parseJson(request("PATCH", path, {}, canonicalJson(patch), patchContentType(type)),
                   "PATCH " + std::string(path));
}

base::StatusOr<nlohmann::json> RestClient::deleteJson(std::string_view path,
                                                      const nlohmann::json* delete_options) {
  std::string body;
  if (delete_options) {
    nlohmann::json opts = *delete_options;
    if (!opts.contains("kind")) opts["kind"] = "DeleteOptions";
    if (!opts.contains("apiVersion")) opts["apiVersion"] = "v1";
    body = canonicalJson(opts);
  }
  return parseJson(request("DELETE", path, {}, body, body.empty() ? "" : "application/json"),
                   "DELETE " + std::string(path));
}

namespace {

// One watch's answer as it streams in: events go through the decoder to the consumer (an ERROR
// event ends the watch with its status); a non-200 answer keeps the first 64 KiB of its body for
// the error. A watch body has no overall limit: the decoder bounds each event.
class WatchStream {
 public:
  WatchStream(std::string what, const std::function<bool(RawWatchEvent&&)>& on_event,
              size_t max_event_bytes, std::stop_token stop)
      : what_(std::move(what)),
        on_event_(on_event),
        stop_(std::move(stop)),
        decoder_([this](RawWatchEvent&& ev) { return deliver(std::move(ev)); }, max_event_bytes) {}
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  HttpBodyStream body() {
    HttpBodyStream body;
    body.on_head = [this](const HttpResponse& h) {
      head_ = h;
      return !stop_.stop_requested();
    };
    body.on_chunk = [this](std::string_view chunk) { return onChunk(chunk); };
    return body;
  }

  // The watch's outcome once the connection's stream() returned `streamed`.
  base::Status result(base::Status streamed) {
    if (stop_.stop_requested()) return base::cancelledError(what_ + ": cancelled");
    if (!decode_error_.ok()) return decode_error_.withContext(what_);
    if (!stream_error_.ok()) return stream_error_;
    if (consumer_stopped_) return base::okStatus();
    if (!streamed.ok()) return streamed.withContext(what_);
    if (head_.status != 200) {
      return apiErrorStatus(what_, head_.status, error_body_, parseRetryAfter(head_));
    }
    if (auto st = decoder_.finish(); !st.ok()) return st.withContext(what_);
    return stream_error_;
  }

 private:
  static constexpr size_t kMaxErrorBody = 64 * 1024;

  bool deliver(RawWatchEvent&& ev) {
    if (ev.type == WatchEventType::kError) {
      stream_error_ = apiErrorStatusFromObject(what_, *ev.object);
      return false;
    }
    if (!on_event_(std::move(ev))) {
      consumer_stopped_ = true;
      return false;
    }
    return true;
  }

  bool onChunk(std::string_view chunk) {
    if (stop_.stop_requested()) return false;
    if (head_.status != 200) {
      error_body_.append(
          chunk.substr(0, kMaxErrorBody - std::min(kMaxErrorBody, error_body_.size())));
      return error_body_.size() < kMaxErrorBody;  // enough to report; never the whole of it
    }
    auto st = decoder_.feed(chunk);
    if (!st.ok()) {
      decode_error_ = st;
      return false;
    }
    return !decoder_.finished();
  }

  const std::string what_;
  const std::function<bool(RawWatchEvent&&)>& on_event_;
  std::stop_token stop_;
  WatchDecoder decoder_;
  HttpResponse head_;
  std::string error_body_;
  base::Status decode_error_;
  base::Status stream_error_;  // an in-stream ERROR event
  bool consumer_stopped_ = false;
};

}  // namespace

base::Status RestClient::watch(std::string_view collection_path, const ListOptions& options,
                               const std::function<bool(RawWatchEvent&&)>& on_event,
                               std::stop_token stop) {
  const std::string what = "WATCH " + std::string(collection_path);
  if (stop.stop_requested()) return base::cancelledError(what + ": cancelled");
  if (!waitRateLimit(stop)) return base::cancelledError(what + ": cancelled");
  HttpRequest req = newWatchRequest(collection_path, options);
  // A watch holds its connection for minutes: never from (or back into) the idle pool.
  auto conn = openWatchConnection(std::nullopt);
  if (!conn) return base::cancelledError(what + ": client shut down");
  HttpConnection* raw = conn.get();
  struct Unregister {
    RestClient* self;
    HttpConnection* raw;
    ~Unregister() { self->unregisterWatch(raw); }
  } unregister{this, raw};
  std::stop_callback on_stop(stop, [raw] { raw->cancel(); });

  WatchStream stream(what, on_event, options_.max_watch_event_bytes, stop);
  HttpBodyStream body = stream.body();
  base::Status st =
      stop.stop_requested() ? base::cancelledError("cancelled") : conn->stream(req, body);
  return stream.result(st);
}

HttpRequest RestClient::newWatchRequest(std::string_view collection_path,
                                        const ListOptions& options) const {
  HttpRequest req = newRequest("GET", collection_path, toQuery(options, true));
  if (options.timeout_seconds) {
    req.read_timeout = std::chrono::milliseconds(std::chrono::seconds(*options.timeout_seconds)) +
                       options_.watch_read_slack;
  }
  return req;
}

std::unique_ptr<HttpConnection> RestClient::openWatchConnection(
    std::optional<asio::any_io_executor> executor) {
  // Made and registered under one lock: a certificate rotation either comes before (and the
  // connection has the new one) or finds it registered (and closes it).
  std::lock_guard lock(mu_);
  if (shut_down_) return nullptr;
  auto conn =
      executor ? std::make_unique<HttpConnection>(*executor, endpoint_, tls_, connectionOptions())
               : std::make_unique<HttpConnection>(endpoint_, tls_, connectionOptions());
  in_use_.push_back(conn.get());
  watches_.push_back(conn.get());
  return conn;
}

void RestClient::unregisterWatch(HttpConnection* conn) {
  std::lock_guard lock(mu_);
  std::erase(in_use_, conn);
  std::erase(watches_, conn);
}

// One watch of startWatch(): waits for the rate limiter on a timer, then streams on a connection
// of its own; everything runs on `strand_`. cancel() detaches it from the client at once (the
// owner may cancel and then destroy the client before the strand runs again): what follows
// touches no client.
class RestClient::StartedWatch final : public AsyncWatch,
                                       public std::enable_shared_from_this<StartedWatch> {
 public:
  StartedWatch(RestClient& client, asio::any_io_executor executor, std::string_view collection_path,
               const ListOptions& options, std::function<bool(RawWatchEvent&&)> on_event,
               std::function<void(base::Status)> done)
      : client_(&client),
        strand_(asio::make_strand(executor)),
        what_("WATCH " + std::string(collection_path)),
        on_event_(std::move(on_event)),
        done_(std::move(done)),
        request_(client.newWatchRequest(collection_path, options)),
        stream_(what_, on_event_, client.options_.max_watch_event_bytes, stop_.get_token()),
        body_(stream_.body()),
        timer_(client.clock_.makeTimer(strand_)) {}

  ~StartedWatch() override { detach(); }

  void start() {
    asio::dispatch(strand_, [self = shared_from_this()] { self->waitRateLimit(); });
  }

  void cancel() override {
    stop_.request_stop();
    detach();
    asio::post(strand_, [self = shared_from_this()] {
      if (self->timer_->armed()) {
        self->timer_->cancel();
        self->finish(base::cancelledError(self->what_ + ": cancelled"));
      }
    });
  }

 private:
  void waitRateLimit() {
    base::Duration delay{};
    {
      std::lock_guard lock(mu_);
      if (client_ == nullptr || stop_.stop_requested()) {
        return finish(base::cancelledError(what_ + ": cancelled"));
      }
      delay = client_->limiter_.reserve();
      reserved_ = delay > base::Duration::zero();
    }
    if (delay <= base::Duration::zero()) return open();
    timer_->asyncWaitFor(delay, [self = shared_from_this()] { self->open(); });
  }

  void open() {
    HttpConnection* conn = nullptr;
    {
      std::lock_guard lock(mu_);
      reserved_ = false;
      if (client_ == nullptr || stop_.stop_requested()) {
        return finish(base::cancelledError(what_ + ": cancelled"));
      }
      // Made now, not when the watch started: a certificate rotated during the wait is used.
      conn_ = client_->openWatchConnection(strand_);
      if (!conn_) return finish(base::cancelledError(what_ + ": client shut down"));
      conn = conn_.get();
    }
    conn->streamAsync(request_, body_, [self = shared_from_this()](base::Status st) {
      base::Status result = self->stream_.result(std::move(st));
      // A connection that broke without an answer: the apiserver may have restarted or gone.
      self->detach(isConnectionFailure(result));
      self->finish(std::move(result));
    });
  }

  // Ends the connection's part in the client (its registration, a rate limiter reservation not
  // used) and forgets the client. `broken`: the client's kept-alive connections are suspect too
  // (as after a dropped watch) and are closed, so the next calls connect afresh. Any thread.
  void detach(bool broken = false) {
    std::lock_guard lock(mu_);
    if (client_ == nullptr) return;
    if (conn_) {
      if (stop_.stop_requested()) conn_->cancel();
      client_->unregisterWatch(conn_.get());
    }
    if (broken) client_->closeIdleConnections();
    if (reserved_) client_->limiter_.cancelReservation();
    reserved_ = false;
    client_ = nullptr;
  }

  void finish(base::Status st) {
    if (!done_) return;
    auto done = std::move(done_);
    done_ = nullptr;
    done(std::move(st));
  }

  std::mutex mu_;  // guards client_, conn_ and reserved_ (cancel() comes from any thread)
  RestClient* client_;
  std::unique_ptr<HttpConnection> conn_;
  bool reserved_ = false;  // the rate limiter's reservation is being waited for
  asio::strand<asio::any_io_executor> strand_;
  std::stop_source stop_;
  const std::string what_;
  std::function<bool(RawWatchEvent&&)> on_event_;
  std::function<void(base::Status)> done_;
  HttpRequest request_;
  WatchStream stream_;
  HttpBodyStream body_;
  base::TimerPtr timer_;
};

std::shared_ptr<AsyncWatch> RestClient::startWatch(asio::any_io_executor executor,
                                                   std::string_view collection_path,
                                                   const ListOptions& options,
                                                   std::function<bool(RawWatchEvent&&)> on_event,
                                                   std::function<void(base::Status)> done) {
  auto watch = std::make_shared<StartedWatch>(*this, std::move(executor), collection_path, options,
                                              std::move(on_event), std::move(done));
  watch->start();
  return watch;
}

}  // namespace nodeagent::api
