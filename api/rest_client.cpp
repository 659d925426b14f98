#include "api/rest_client.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <condition_variable>

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "api/api_errors.h"
#include "base/log.h"

namespace nodeagent::api {
namespace {

bool defaultWait(base::Duration d, std::stop_token stop) {
  if (stop.stop_requested()) return false;
  if (d <= base::Duration::zero()) return true;
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreDeleter {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
using StorePtr = std::unique_ptr<X509_STORE, StoreDeleter>;

std::string opensslError() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

base::StatusOr<std::vector<X509Ptr>> parseCerts(const std::string& pem, std::string_view what) {
  std::vector<X509Ptr> out;
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                &BIO_free);
  while (true) {
    X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (!x) break;
    out.emplace_back(x);
  }
  ERR_clear_error();
  if (out.empty()) {
    return base::invalidArgumentError(std::string(what) + ": no PEM certificate found");
  }
  return out;
}

base::StatusOr<PkeyPtr> parseKey(const std::string& pem, std::string_view what) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                &BIO_free);
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (!k) return base::invalidArgumentError(std::string(what) + ": " + opensslError());
  return PkeyPtr(k);
}

std::optional<std::chrono::seconds> parseRetryAfter(const httplib::Headers& headers) {
  auto it = headers.find("Retry-After");
  if (it == headers.end()) return std::nullopt;
  int64_t v = 0;
  const auto& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || v < 0) return std::nullopt;
  return std::chrono::seconds(v);
}

base::Status transportError(std::string_view what, httplib::Error err) {
  std::string msg = std::string(what) + ": " + httplib::to_string(err);
  switch (err) {
    case httplib::Error::Canceled: return base::cancelledError(msg);
    case httplib::Error::ConnectionTimeout: return base::deadlineExceededError(msg);
    case httplib::Error::SSLConnection:
      // Our own OpenSSL verification (see newConnection) fails the handshake itself.
      return base::unavailableError(msg + " (TLS handshake failed: is the server certificate "
                                          "signed by the kubeconfig's certificate-authority and "
                                          "valid for the server name or tls-server-name?)");
    case httplib::Error::SSLServerVerification:
    case httplib::Error::SSLLoadingCerts:
      return base::unauthenticatedError(msg + " (server certificate not trusted)");
    default: return base::unavailableError(msg);
  }
}

}  // namespace

std::string_view patchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge: return "application/merge-patch+json";
    case PatchType::kStrategicMerge: return "application/strategic-merge-patch+json";
    case PatchType::kJson: return "application/json-patch+json";
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

// What every TLS connection shares: the parsed client certificate and key, and the CA PEM.
struct RestClient::Tls {
  std::string ca_pem;
  X509Ptr client_cert;
  PkeyPtr client_key;
  std::string verify_name;  // hostname or IP the server certificate must match
  bool insecure = false;
};

RestClient::RestClient(RestConfig config, RestClientOptions options, base::Clock& clock)
    : config_(std::move(config)),
      options_(std::move(options)),
      clock_(clock),
      limiter_(options_.qps, options_.burst, clock) {
  user_agent_ = options_.user_agent.empty() ? std::string("nodeagent/") + NODEAGENT_VERSION
                                            : options_.user_agent;
  if (!options_.wait) options_.wait = defaultWait;
}

RestClient::~RestClient() { shutdown(); }

base::StatusOr<std::unique_ptr<RestClient>> RestClient::create(RestConfig config,
                                                               RestClientOptions options,
                                                               base::Clock& clock) {
  std::unique_ptr<RestClient> c(new RestClient(std::move(config), std::move(options), clock));
  RETURN_IF_ERROR(c->init());
  return c;
}

base::Status RestClient::init() {
  const std::string where = config_.origin.empty() ? "rest config" : config_.origin;
  std::string_view url = config_.server;
  if (url.rfind("https://", 0) == 0) {
    https_ = true;
    url.remove_prefix(8);
  } else if (url.rfind("http://", 0) == 0) {
    url.remove_prefix(7);
  } else {
    return base::invalidArgumentError(where + ": server \"" + config_.server +
                                      "\": expected an http:// or https:// URL");
  }
  auto slash = url.find('/');
  std::string_view hostport = url.substr(0, slash);
  if (slash != std::string_view::npos) {
    path_prefix_ = std::string(url.substr(slash));
    while (!path_prefix_.empty() && path_prefix_.back() == '/') path_prefix_.pop_back();
  }
  std::string_view port_text;
  if (!hostport.empty() && hostport.front() == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) {
      return base::invalidArgumentError(where + ": server \"" + config_.server + "\": bad IPv6 host");
    }
    host_ = std::string(hostport.substr(1, close - 1));
    if (close + 1 < hostport.size() && hostport[close + 1] == ':') port_text = hostport.substr(close + 2);
  } else {
    auto colon = hostport.rfind(':');
    host_ = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos) port_text = hostport.substr(colon + 1);
  }
  if (host_.empty()) {
    return base::invalidArgumentError(where + ": server \"" + config_.server + "\": no host");
  }
  port_ = https_ ? 443 : 80;
  if (!port_text.empty()) {
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port_);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port_ <= 0 || port_ > 65535) {
      return base::invalidArgumentError(where + ": server \"" + config_.server + "\": bad port");
    }
  }

  if (https_) {
    tls_ = std::make_unique<Tls>();
    tls_->insecure = config_.insecure_skip_tls_verify;
    tls_->verify_name = config_.tls_server_name.empty() ? host_ : config_.tls_server_name;
    if (!config_.ca_pem.empty()) {
      auto certs = parseCerts(config_.ca_pem, where + ": certificate-authority");
      if (!certs.ok()) return certs.status();
      tls_->ca_pem = config_.ca_pem;
    }
    if (!config_.client_cert_pem.empty()) {
      auto certs = parseCerts(config_.client_cert_pem, where + ": client-certificate");
      if (!certs.ok()) return certs.status();
      auto key = parseKey(config_.client_key_pem, where + ": client-key");
      if (!key.ok()) return key.status();
      tls_->client_cert = std::move((*certs)[0]);
      tls_->client_key = std::move(*key);
      if (X509_check_private_key(tls_->client_cert.get(), tls_->client_key.get()) != 1) {
        ERR_clear_error();
        return base::invalidArgumentError(where +
                                          ": client-key does not match client-certificate");
      }
    }
  } else if (!config_.client_cert_pem.empty()) {
    return base::invalidArgumentError(where + ": a client certificate needs an https:// server");
  }
  return base::okStatus();
}

std::unique_ptr<httplib::ClientImpl> RestClient::newConnection(std::chrono::milliseconds read_timeout) {
  std::unique_ptr<httplib::ClientImpl> c;
  if (https_) {
    auto ssl = std::make_unique<httplib::SSLClient>(host_, port_, tls_->client_cert.get(),
                                                    tls_->client_key.get());
    // Verification is done by OpenSSL itself (chain against our CA store, name against
    // verify_name) so that only the kubeconfig's CA is trusted and tls-server-name works;
    // httplib's own check would also trust the system roots and the URL's host only.
    ssl->enable_server_certificate_verification(false);
    SSL_CTX* ctx = ssl->ssl_context();
    if (ctx) {
      if (!tls_->insecure) {
        if (!tls_->ca_pem.empty()) {
          StorePtr store(X509_STORE_new());
          auto certs = parseCerts(tls_->ca_pem, "ca");
          if (certs.ok()) {
            for (auto& x : *certs) X509_STORE_add_cert(store.get(), x.get());
          }
          SSL_CTX_set_cert_store(ctx, store.release());
        } else {
          SSL_CTX_set_default_verify_paths(ctx);
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
        X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx);
        if (X509_VERIFY_PARAM_set1_ip_asc(param, tls_->verify_name.c_str()) != 1) {
          ERR_clear_error();
          X509_VERIFY_PARAM_set1_host(param, tls_->verify_name.c_str(), 0);
        }
      }
    }
    c = std::move(ssl);
  } else {
    c = std::make_unique<httplib::ClientImpl>(host_, port_);
  }
  c->set_url_encode(false);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  c->set_follow_location(false);
  c->set_decompress(true);
  auto ct = options_.connect_timeout;
  c->set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(ct));
  c->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(read_timeout));
  c->set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options_.request_timeout));
  if (!config_.bearer_token.empty()) {
    c->set_bearer_token_auth(config_.bearer_token);
  } else if (!config_.username.empty()) {
    c->set_basic_auth(config_.username, config_.password);
  }
  c->set_default_headers({{"User-Agent", user_agent_}, {"Accept", "application/json"}});
  return c;
}

std::unique_ptr<httplib::ClientImpl> RestClient::acquire() {
  std::unique_ptr<httplib::ClientImpl> c;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return nullptr;
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) c = newConnection(options_.request_timeout);
  std::lock_guard lock(mu_);
  if (shut_down_) return nullptr;
  in_use_.push_back(c.get());
  return c;
}

void RestClient::release(std::unique_ptr<httplib::ClientImpl> c) {
  std::lock_guard lock(mu_);
  std::erase(in_use_, c.get());
  if (!shut_down_ && idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(c));
}

void RestClient::closeIdleConnections() {
  std::vector<std::unique_ptr<httplib::ClientImpl>> doomed;
  std::lock_guard lock(mu_);
  doomed.swap(idle_);
}

void RestClient::shutdown() {
  std::vector<std::unique_ptr<httplib::ClientImpl>> doomed;
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    for (auto* c : in_use_) c->stop();
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

base::StatusOr<Response> RestClient::send(std::string_view method, std::string_view path,
                                          const Query& query, std::string_view body,
                                          std::string_view content_type, std::stop_token stop) {
  const std::string what = std::string(method) + " " + std::string(path);
  if (stop.stop_requested()) return base::cancelledError(what + ": cancelled");
  if (!waitRateLimit(stop)) return base::cancelledError(what + ": cancelled");
  auto conn = acquire();
  if (!conn) return base::cancelledError(what + ": client shut down");
  httplib::ClientImpl* raw = conn.get();
  // Must die before the connection goes back to the pool (where it may be destroyed).
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
  on_stop.emplace(stop, [raw] { raw->stop(); });

  httplib::Request req;
  req.method = std::string(method);
  req.path = target(path, query);
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req.body = std::string(body);
    req.set_header("Content-Type", content_type.empty() ? "application/json" : std::string(content_type));
  }
  Response out;
  bool too_big = false;
  const size_t cap = options_.max_body_bytes;
  // A stop that raced with connecting is caught at the latest when the answer starts.
  req.response_handler = [&](const httplib::Response&) { return !stop.stop_requested(); };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (stop.stop_requested()) return false;
    if (out.body.size() + n > cap) {
      too_big = true;
      return false;
    }
    out.body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool ok = conn->send(req, res, err);
  on_stop.reset();
  release(std::move(conn));
  if (too_big) {
    return base::resourceExhaustedError(what + ": response larger than " + std::to_string(cap) +
                                        " bytes");
  }
  if (stop.stop_requested()) return base::cancelledError(what + ": cancelled");
  if (!ok) return transportError(what, err);
  out.status = res.status;
  out.content_type = res.get_header_value("Content-Type");
  out.retry_after = parseRetryAfter(res.headers);
  return out;
}

base::StatusOr<std::string> RestClient::request(std::string_view method, std::string_view path,
                                                const Query& query, std::string_view body,
                                                std::string_view content_type, std::stop_token stop) {
  const std::string what = std::string(method) + " " + std::string(path);
  for (int attempt = 0;; ++attempt) {
    auto res = send(method, path, query, body, content_type, stop);
    if (!res.ok()) return res.status();
    if (res->status >= 200 && res->status < 300) return std::move(res->body);
    bool retriable = res->status == 429 || (res->status >= 500 && res->retry_after.has_value());
    if (retriable && attempt < options_.max_retries) {
      auto delay = std::min<std::chrono::seconds>(res->retry_after.value_or(std::chrono::seconds(1)),
                                                  options_.max_retry_after);
      std::stop_source both;
      std::stop_callback a(stop, [&] { both.request_stop(); });
      std::stop_callback b(shutdown_source_.get_token(), [&] { both.request_stop(); });
      if (!options_.wait(delay, both.get_token())) return base::cancelledError(what + ": cancelled");
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
  return parseJson(request("POST", collection_path, {}, object.dump(), "application/json"),
                   "POST " + std::string(collection_path));
}

base::StatusOr<nlohmann::json> RestClient::updateJson(std::string_view path,
                                                      const nlohmann::json& object) {
  return parseJson(request("PUT", path, {}, object.dump(), "application/json"),
                   "PUT " + std::string(path));
}

base::StatusOr<nlohmann::json> RestClient::patchJson(std::string_view path,
                                                     const nlohmann::json& patch, PatchType type) {
  return parseJson(request("PATCH", path, {}, patch.dump(), patchContentType(type)),
                   "PATCH " + std::string(path));
}

base::StatusOr<nlohmann::json> RestClient::deleteJson(std::string_view path,
                                                      const nlohmann::json* delete_options) {
  std::string body;
  if (delete_options) {
    nlohmann::json opts = *delete_options;
    if (!opts.contains("kind")) opts["kind"] = "DeleteOptions";
    if (!opts.contains("apiVersion")) opts["apiVersion"] = "v1";
    body = opts.dump();
  }
  return parseJson(request("DELETE", path, {}, body, body.empty() ? "" : "application/json"),
                   "DELETE " + std::string(path));
}

base::Status RestClient::watch(std::string_view collection_path, const ListOptions& options,
                               const std::function<bool(RawWatchEvent&&)>& on_event,
                               std::stop_token stop) {
  const std::string what = "WATCH " + std::string(collection_path);
  if (stop.stop_requested()) return base::cancelledError(what + ": cancelled");
  if (!waitRateLimit(stop)) return base::cancelledError(what + ": cancelled");
  auto read_timeout = options_.request_timeout;
  if (options.timeout_seconds) {
    read_timeout = std::chrono::milliseconds(std::chrono::seconds(*options.timeout_seconds)) +
                   options_.watch_read_slack;
  }
  // A watch holds its connection for minutes: never from (or back into) the idle pool.
  auto conn = newConnection(read_timeout);
  httplib::ClientImpl* raw = conn.get();
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return base::cancelledError(what + ": client shut down");
    in_use_.push_back(raw);
  }
  struct Unregister {
    RestClient* self;
    httplib::ClientImpl* raw;
    ~Unregister() {
      std::lock_guard lock(self->mu_);
      std::erase(self->in_use_, raw);
    }
  } unregister{this, raw};
  std::stop_callback on_stop(stop, [raw] { raw->stop(); });

  base::Status stream_error;  // an in-stream ERROR event
  bool consumer_stopped = false;
  WatchDecoder decoder(
      [&](RawWatchEvent&& ev) {
        if (ev.type == WatchEventType::kError) {
          stream_error = apiErrorStatusFromObject(what, *ev.object);
          return false;
        }
        if (!on_event(std::move(ev))) {
          consumer_stopped = true;
          return false;
        }
        return true;
      },
      options_.max_watch_event_bytes);

  int status = 0;
  std::string error_body;
  base::Status decode_error;
  httplib::Request req;
  req.method = "GET";
  req.path = target(collection_path, toQuery(options, true));
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return !stop.stop_requested();
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (stop.stop_requested()) return false;
    if (status != 200) {
      if (error_body.size() < 64 * 1024) error_body.append(data, std::min<size_t>(n, 64 * 1024));
      return true;
    }
    auto st = decoder.feed(std::string_view(data, n));
    if (!st.ok()) {
      decode_error = st;
      return false;
    }
    return !decoder.finished();
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool ok = conn->send(req, res, err);
  if (stop.stop_requested()) return base::cancelledError(what + ": cancelled");
  if (!decode_error.ok()) return decode_error.withContext(what);
  if (!stream_error.ok()) return stream_error;
  if (consumer_stopped) return base::okStatus();
  if (!ok) return transportError(what, err);
  if (res.status != 200) {
    return apiErrorStatus(what, res.status, error_body, parseRetryAfter(res.headers));
  }
  auto st = decoder.finish();
  if (!st.ok()) return st.withContext(what);
  if (!stream_error.ok()) return stream_error;
  return base::okStatus();
}

AsyncRestClient::AsyncRestClient(RestClient& client, size_t threads)
    : client_(client), pool_(threads) {}

AsyncRestClient::~AsyncRestClient() {
  client_.shutdown();
  pool_.join();
}

asio::awaitable<base::StatusOr<std::string>> AsyncRestClient::request(std::string method,
                                                                      std::string path, Query query,
                                                                      std::string body,
                                                                      std::string content_type) {
  return run([method = std::move(method), path = std::move(path), query = std::move(query),
              body = std::move(body), content_type = std::move(content_type)](RestClient& c) {
    return c.request(method, path, query, body, content_type);
  });
}

void AsyncRestClient::request(std::string method, std::string path, Query query, std::string body,
                              std::string content_type, asio::any_io_executor ex,
                              std::function<void(base::StatusOr<std::string>)> done) {
  run(
      [method = std::move(method), path = std::move(path), query = std::move(query),
       body = std::move(body), content_type = std::move(content_type)](RestClient& c) {
        return c.request(method, path, query, body, content_type);
      },
      std::move(ex), std::move(done));
}

}  // namespace nodeagent::api
