// Blocking REST client for the Kubernetes API over api/http_client.h (every answer bounded in
// header size, body size and time): HTTPS with CA verification (CA from the kubeconfig, in memory),
// bearer token, client certificate or basic auth, per-request timeouts, `User-Agent:
// nodeagent/<version>`, a client-side token bucket (kubelet's
// --kube-api-qps/--kube-api-burst) and typed errors decoded from metav1.Status bodies
// (api/api_errors.h). 429 answers are retried after their Retry-After.
//
// Every call blocks: never call it on an io_context thread. Use AsyncRestClient
// (api/async_rest_client.h) from strands and coroutines. A long watch GET either blocks a thread
// of its own (watch()) or runs on a strand with no thread (startWatch()). RestClient is
// thread-safe: calls from several threads use separate keep-alive connections.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/http_client.h"
#include "api/kubeconfig.h"
#include "api/rate_limiter.h"
#include "api/watch_decoder.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::api {

using Query = std::vector<std::pair<std::string, std::string>>;

struct RestClientOptions {
  double qps = kDefaultKubeApiQps;
  int burst = kDefaultKubeApiBurst;
  std::chrono::milliseconds connect_timeout{10'000};
  // Whole-request read/write timeout for ordinary calls.
  std::chrono::milliseconds request_timeout{30'000};
  // Extra read slack on a watch beyond its timeoutSeconds (the server may stay silent that long).
  std::chrono::milliseconds watch_read_slack{30'000};
  // "" means "nodeagent/<NODEAGENT_VERSION>".
  std::string user_agent;
  size_t max_idle_connections = 4;
  // 429 (and 5xx carrying Retry-After) are retried this many times after the advertised delay.
  int max_retries = 3;
  std::chrono::seconds max_retry_after{10};
  // Largest body read for an ordinary call (a list of 10,000 pods is ~30 MiB).
  size_t max_body_bytes = 512 * 1024 * 1024;
  size_t max_watch_event_bytes = kDefaultMaxWatchEventBytes;
  // Waits `d` unless `stop` fires first (returns false then). Defaults to an interruptible
  // condition-variable wait; tests inject one that advances a fake clock.
  std::function<bool(base::Duration d, std::stop_token stop)> wait;
};

struct Response {
  int status = 0;
  std::string body;
  std::string content_type;
  std::optional<std::chrono::seconds> retry_after;
};

enum class PatchType { kMerge, kStrategicMerge, kJson };
std::string_view patchContentType(PatchType type);

// Query parameters of list and watch calls (metav1.ListOptions).
struct ListOptions {
  std::string field_selector;
  std::string label_selector;
  // nullopt: unset (most recent). "0": any (served from the cache).
  std::optional<std::string> resource_version;
  std::optional<int64_t> timeout_seconds;
  bool allow_watch_bookmarks = false;
  std::optional<int64_t> limit;
  std::string continue_token;
};
Query toQuery(const ListOptions& options, bool watch);

// Resource paths. Core v1: pods, pods/status, nodes, nodes/status, events; coordination.k8s.io
// v1: leases. `ns` "" means all namespaces (collections only).
std::string podsPath(std::string_view ns = "");
std::string podPath(std::string_view ns, std::string_view name);
std::string podStatusPath(std::string_view ns, std::string_view name);
std::string nodesPath();
std::string nodePath(std::string_view name);
std::string nodeStatusPath(std::string_view name);
std::string leasesPath(std::string_view ns);
std::string leasePath(std::string_view ns, std::string_view name);
std::string eventsPath(std::string_view ns);

// Percent-encodes a query component (RFC 3986 unreserved characters stay).
std::string urlEncode(std::string_view s);
// Decodes a query component as Go's url.QueryUnescape does: "%XX" escapes, '+' as a space.
// nullopt when an escape is malformed.
std::optional<std::string> urlDecode(std::string_view s);
// The decoded `name=value` pairs of a query string, in order, as Go's url.ParseQuery reads them
// (a name without '=' has value ""); InvalidArgument quoting the pair whose escape is malformed.
base::StatusOr<Query> parseQuery(std::string_view query);

// Waits `d` unless `stop` fires first (false then): RestClientOptions' default wait, for other
// blocking loops that retry. Any non-io thread.
bool waitOrStop(base::Duration d, std::stop_token stop);

// A watch started by RestClient::startWatch().
class AsyncWatch {
 public:
  virtual ~AsyncWatch() = default;
  // Any thread: ends the watch; its `done` gets Cancelled (unless it already ran).
  virtual void cancel() = 0;
};

class RestClient {
 public:
  // Validates the config (URL, PEM blocks) up front; errors name the kubeconfig field.
  static base::StatusOr<std::unique_ptr<RestClient>> create(RestConfig config,
                                                            RestClientOptions options,
                                                            base::Clock& clock);
  ~RestClient();
  RestClient(const RestClient&) = delete;
  RestClient& operator=(const RestClient&) = delete;

  // The raw exchange: any HTTP status is a Response; transport failures are Unavailable (or
  // DeadlineExceeded), a stop is Cancelled. Rate-limited. Blocking; any non-io thread.
  base::StatusOr<Response> send(std::string_view method, std::string_view path, const Query& query,
                                std::string_view body = {}, std::string_view content_type = {},
                                std::stop_token stop = {});
  // Like send(), but a non-2xx answer is a typed error (api_errors.h) and 429 is retried after
  // Retry-After. Returns the body.
  base::StatusOr<std::string> request(std::string_view method, std::string_view path,
                                      const Query& query, std::string_view body = {},
                                      std::string_view content_type = {},
                                      std::stop_token stop = {});

  // JSON conveniences over request(). Bodies and answers are whole objects.
  base::StatusOr<nlohmann::json> getJson(std::string_view path, const Query& query = {});
  base::StatusOr<nlohmann::json> list(std::string_view collection_path, const ListOptions& options,
                                      std::stop_token stop = {});
  base::StatusOr<nlohmann::json> createJson(std::string_view collection_path,
                                            const nlohmann::json& object);
  base::StatusOr<nlohmann::json> updateJson(std::string_view path, const nlohmann::json& object);
  base::StatusOr<nlohmann::json> patchJson(std::string_view path, const nlohmann::json& patch,
                                           PatchType type);
  // DELETE with an optional DeleteOptions body (e.g. {"gracePeriodSeconds":0,
  // "preconditions":{"uid":"..."}}); kind/apiVersion are filled in. Returns the answer (the
  // deleted/terminating object or a Status).
  base::StatusOr<nlohmann::json> deleteJson(std::string_view path,
                                            const nlohmann::json* delete_options = nullptr);

  // Streams a watch: GET <collection_path>?watch=true&<options>. `on_event` gets ADDED, MODIFIED,
  // DELETED and BOOKMARK events in order, on the calling thread; returning false ends the watch
  // (OK). Returns OK when the server ends the stream normally; an in-stream ERROR event or a
  // non-200 answer is its typed error (isGone() for 410 Expired); garbage is DataLoss; `stop`
  // (also closes the connection) gives Cancelled. Blocks for the life of the watch.
  base::Status watch(std::string_view collection_path, const ListOptions& options,
                     const std::function<bool(RawWatchEvent&&)>& on_event, std::stop_token stop);

  // watch() without a thread: the watch's connection runs on a strand of `executor` (as does the
  // rate limiter's wait, on the client's clock), and `on_event` and then `done` (once, with what
  // watch() returns) run there. A watch whose connection broke (Unavailable, DeadlineExceeded)
  // also drops the idle keep-alive connections, which are suspect too. Many watches share one
  // io_context. The client must outlive the watch or its cancel() (after which the watch touches
  // the client no more); shutdown() ends every watch (one waiting for the rate limiter when its
  // wait ends).
  std::shared_ptr<AsyncWatch> startWatch(asio::any_io_executor executor,
                                         std::string_view collection_path,
                                         const ListOptions& options,
                                         std::function<bool(RawWatchEvent&&)> on_event,
                                         std::function<void(base::Status)> done);

  // Drops the idle keep-alive connections, so the next calls connect afresh (after repeated
  // heartbeat failures a kept connection may be half-open). Any thread.
  void closeIdleConnections();

  // Aborts calls in flight and makes later calls fail with Cancelled. Any thread.
  void shutdown();

  // Swaps the client certificate (rotation): connections opened from now on offer the new one;
  // idle connections are dropped, calls in flight finish on their connection (which is then
  // dropped), and open watches are closed so that their owners re-open them with the new
  // certificate (they end as after a dropped connection, Unavailable). InvalidArgument when the
  // pair does not parse or the server is not https. Any thread.
  base::Status setClientCertificate(const std::string& cert_pem, const std::string& key_pem);

  const RestConfig& config() const { return config_; }
  RateLimiter& rateLimiter() { return limiter_; }
  const std::string& userAgent() const { return user_agent_; }

 private:
  RestClient(RestConfig config, RestClientOptions options, base::Clock& clock);
  base::Status init();

  class StartedWatch;

  HttpTlsOptions tlsOptions() const;
  HttpClientOptions connectionOptions() const;
  std::shared_ptr<HttpTlsContext> tlsContext();
  std::unique_ptr<HttpConnection> newConnection();
  HttpRequest newWatchRequest(std::string_view collection_path, const ListOptions& options) const;
  // A new connection for a watch (blocking, or on a strand of `executor`), counted as in use
  // so that setClientCertificate and shutdown close it; null once shut down.
  std::unique_ptr<HttpConnection> openWatchConnection(
      std::optional<asio::any_io_executor> executor);
  void unregisterWatch(HttpConnection* conn);
  std::unique_ptr<HttpConnection> acquire();
  void release(std::unique_ptr<HttpConnection> conn);
  bool waitRateLimit(std::stop_token stop);
  std::string target(std::string_view path, const Query& query) const;
  HttpRequest newRequest(std::string_view method, std::string_view path, const Query& query) const;

  RestConfig config_;
  RestClientOptions options_;
  base::Clock& clock_;
  RateLimiter limiter_;
  std::string user_agent_;
  std::string authorization_;  // the Authorization header's value, if any
  // Parsed from config_.server.
  HttpEndpoint endpoint_;
  std::string path_prefix_;

  std::mutex mu_;
  std::shared_ptr<HttpTlsContext> tls_;  // replaced by setClientCertificate()
  bool shut_down_ = false;
  std::vector<std::unique_ptr<HttpConnection>> idle_;
  std::vector<HttpConnection*> in_use_;
  std::vector<HttpConnection*> watches_;  // the subset of in_use_ that are watches
  // Connections in use when the certificate changed: dropped when they come back.
  std::vector<HttpConnection*> retired_;
  std::stop_source shutdown_source_;
};

}  // namespace nodeagent::api
