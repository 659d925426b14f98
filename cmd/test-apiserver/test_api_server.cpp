#include "cmd/test-apiserver/test_api_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/protobuf.h"
#include "cmd/test-apiserver/table.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {

using nlohmann::json;

namespace {

constexpr size_t kMaxRecordedRequests = 10000;
// kube-apiserver's limit on a request body (its maxRequestBodyBytes, 3 MiB): larger bodies are
// refused with 413 before any of them is read.
constexpr size_t kMaxRequestBodyBytes = 3 * 1024 * 1024;
// An idle watch wakes this often to notice a stopping server.
constexpr std::chrono::milliseconds kWatchPoll{250};
// A watch response chunk holds at most this many events (batching keeps syscalls down).
constexpr size_t kMaxEventsPerChunk = 256;
// httplib listens with a backlog of 5: a burst of clients connecting at once (a hundred
// watchers) overflows it and waits out SYN retransmissions (1 s, 3 s, 7 s...) whenever the
// accepting thread is slow to run. The kernel caps this at net.core.somaxconn.
constexpr int kListenBacklog = 4096;
// While stopping, connections are shut down again this often until every request thread ended
// (covers one accepted in the moment the listening socket closed).
constexpr std::chrono::milliseconds kStopRescan{100};

std::vector<std::string> splitPath(const std::string& path) {
  std::vector<std::string> segs;
  std::string cur;
  for (char c : path) {
    if (c == '/') {
      if (!cur.empty()) segs.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) segs.push_back(cur);
  return segs;
}

std::string param(const httplib::Request& req, const char* key) {
  return req.has_param(key) ? req.get_param_value(key) : "";
}

// Go's strconv.ParseBool, which kube-apiserver uses for query flags (python sends "True").
bool truthy(const std::string& v) {
  return v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True";
}

std::string mediaType(const std::string& content_type) {
  auto semi = content_type.find(';');
  std::string mt = content_type.substr(0, semi);
  while (!mt.empty() && mt.back() == ' ') mt.pop_back();
  return mt;
}

// True when `fd` is a TCP connection whose local port is `port` and not a listening socket: a
// connection this process accepted on `port`. A client connection in this process to that
// port has an ephemeral local port and does not match.
bool acceptedOnPort(int fd, int port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  int local_port = -1;
  if (addr.ss_family == AF_INET) {
    local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  if (local_port != port) return false;
  int type = 0, listening = 1;
  socklen_t type_len = sizeof(type), listening_len = sizeof(listening);
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) == 0 && type == SOCK_STREAM &&
         ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &listening_len) == 0 &&
         listening == 0;
}

// httplib (0.11) gives every accepted connection a thread that waits for the next request up
// to the keep-alive timeout, and does not wake it on stop(): joining the server would wait out
// every idle keep-alive client. shutdown() of the server's connections wakes those waits (the
// read sees end of stream) and fails any blocked write at once; httplib still owns the
// descriptors and closes them. Each one is checked and shut down through a duplicate, so a
// descriptor number that httplib closes and something else reuses in between is never touched.
void shutdownAcceptedConnections(int port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  const int dir_fd = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    const int dup = ::fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
    if (dup < 0) continue;
    if (acceptedOnPort(dup, port)) ::shutdown(dup, SHUT_RDWR);
    ::close(dup);
  }
  ::closedir(dir);
}

}  // namespace

base::StatusOr<std::vector<TokenUser>> parseTokenAuthFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return base::invalidArgumentError("cannot read token auth file " + path.string());
  std::vector<TokenUser> tokens;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::string cur;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        fields.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    fields.push_back(cur);
    if (quoted || fields.size() < 3 || fields[0].empty() || fields[1].empty()) {
      return base::invalidArgumentError("token auth file " + path.string() + " line " +
                                        std::to_string(lineno) +
                                        ": want token,user,uid[,\"groups\"]");
    }
    TokenUser user{fields[0], fields[1], fields[2], {}};
    if (fields.size() >= 4) {
      std::string group;
      std::istringstream groups(fields[3]);
      while (std::getline(groups, group, ',')) {
        if (!group.empty()) user.groups.push_back(group);
      }
    }
    tokens.push_back(std::move(user));
  }
  return tokens;
}

class TestApiServer::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)),
        clock_(options_.clock ? *options_.clock : base::realClock()),
        store_(clock_, options_.store) {}

  ~Impl() { stop(); }

  base::Status start() {
    RETURN_IF_ERROR(loadTokens());
    RETURN_IF_ERROR(createServer());
    configureServer();
    RETURN_IF_ERROR(bindListener());
    std::promise<void> listener_done;
    listener_done_ = listener_done.get_future();
    listener_ = std::thread([this, done = std::move(listener_done)]() mutable {
      server_->listen_after_bind();
      done.set_value();
    });
    return base::okStatus();
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    stopping_ = true;
    latency_cv_.notify_all();
    store_.closeAllWatches("server stopping");
    if (listener_.joinable()) {
      // httplib's stop() does nothing until the listener thread has marked the server running.
      while (!server_->is_running() &&
             listener_done_.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
      }
      server_->stop();
      // The listening socket is closed: no new connection gets a request served. The open ones
      // are shut down until httplib's request threads (joined by the listener) have ended.
      do {
        shutdownAcceptedConnections(port_);
      } while (listener_done_.wait_for(kStopRescan) != std::future_status::ready);
      listener_.join();
    }
    store_.closeAllWatches("server stopped");
  }

  int port() const { return port_; }
  std::string host() const {
    return options_.bind_address == "0.0.0.0" || options_.bind_address.empty()
               ? "127.0.0.1"
               : options_.bind_address;
  }
  std::string url() const {
    return std::string(tls_ ? "https" : "http") + "://" + host() + ":" + std::to_string(port_);
  }
  bool tls() const { return tls_; }
  Store& store() { return store_; }

  std::string kubeconfig() const {
    std::ostringstream out;
    out << "apiVersion: v1\nkind: Config\nclusters:\n- name: test-apiserver\n  cluster:\n"
        << "    server: " << url() << "\n";
    if (tls_) out << "    certificate-authority-data: " << base64Encode(ca_pem_) << "\n";
    out << "users:\n- name: test-user\n  user:";
    if (!first_token_.empty()) {
      out << "\n    token: " << first_token_ << "\n";
    } else {
      out << " {}\n";
    }
    out << "contexts:\n- name: test-apiserver\n  context:\n    cluster: test-apiserver\n"
        << "    user: test-user\n    namespace: default\n"
        << "current-context: test-apiserver\npreferences: {}\n";
    return out.str();
  }

  void failNext(int code, int count, std::string prefix) {
    std::lock_guard lock(mu_);
    fail_code_ = code;
    fail_count_ = count;
    fail_prefix_ = std::move(prefix);
  }
  void setLatency(std::chrono::milliseconds ms) {
    std::lock_guard lock(mu_);
    latency_ = ms;
  }
  std::vector<RecordedRequest> requests() const {
    std::lock_guard lock(mu_);
    return {requests_.begin(), requests_.end()};
  }
  void clearRequests() {
    std::lock_guard lock(mu_);
    requests_.clear();
  }

 private:
  // The --token-auth-file's tokens; the first one goes into the written kubeconfig.
  base::Status loadTokens() {
    if (options_.token_auth_file.empty()) return base::okStatus();
    ASSIGN_OR_RETURN(auto tokens, parseTokenAuthFile(options_.token_auth_file));
    if (tokens.empty()) {
      return base::invalidArgumentError("token auth file " + options_.token_auth_file +
                                        " has no tokens");
    }
    first_token_ = tokens.front().token;
    for (auto& t : tokens) tokens_[t.token] = t.user;
    return base::okStatus();
  }

  // An HTTPS server when a certificate and key are given (the certificate is also the CA the
  // written kubeconfig trusts), plain HTTP otherwise.
  base::Status createServer() {
    if (options_.tls_cert_file.empty() != options_.tls_private_key_file.empty()) {
      return base::invalidArgumentError(
          "--tls-cert-file and --tls-private-key-file must be given together");
    }
    if (options_.tls_cert_file.empty()) {
      server_ = std::make_unique<httplib::Server>();
      return base::okStatus();
    }
    std::ifstream cert(options_.tls_cert_file);
    if (!cert) {
      return base::invalidArgumentError("cannot read TLS certificate " + options_.tls_cert_file);
    }
    std::stringstream ss;
    ss << cert.rdbuf();
    ca_pem_ = ss.str();
    auto ssl = std::make_unique<httplib::SSLServer>(options_.tls_cert_file.c_str(),
                                                    options_.tls_private_key_file.c_str());
    if (!ssl->is_valid()) {
      return base::invalidArgumentError("cannot load TLS certificate " + options_.tls_cert_file +
                                        " with key " + options_.tls_private_key_file);
    }
    server_ = std::move(ssl);
    tls_ = true;
    return base::okStatus();
  }

  // Threads, timeouts, limits and the one handler every method goes to.
  void configureServer() {
    const int threads = options_.threads;
    server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    // Without TCP_NODELAY every small response or watch event can sit out a delayed ACK (40 ms).
    server_->set_tcp_nodelay(true);
    server_->set_keep_alive_max_count(100000);
    server_->set_keep_alive_timeout(30);
    server_->set_read_timeout(30);
    server_->set_write_timeout(options_.write_timeout.count());
    // Runs on the request line and headers, before any body is read: an unauthenticated or
    // oversized request is answered at once and its connection closed, so its body is never read.
    server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      return refuseBeforeBody(req, res) ? httplib::Server::HandlerResponse::Handled
                                        : httplib::Server::HandlerResponse::Unhandled;
    });
    // A backstop: httplib's own limit on the Content-Length it reads.
    server_->set_payload_max_length(kMaxRequestBodyBytes);
    auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res);
    };
    server_->Get(".*", handler);
    server_->Post(".*", handler);
    server_->Put(".*", handler);
    server_->Patch(".*", handler);
    server_->Delete(".*", handler);
    server_->Options(".*", handler);
  }

  // Binds the configured address and port (any free port for 0) with a large listen backlog.
  base::Status bindListener() {
    // httplib offers no backlog setting, but hands each listening socket it creates to this
    // hook before binding it; listen() again on the bound socket raises the backlog.
    int listen_fd = -1;
    server_->set_socket_options([&listen_fd](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = sock;
    });
    if (options_.port == 0) {
      port_ = server_->bind_to_any_port(options_.bind_address);
    } else {
      port_ = server_->bind_to_port(options_.bind_address, options_.port) ? options_.port : -1;
    }
    server_->set_socket_options(httplib::default_socket_options);
    if (port_ <= 0) {
      return base::unavailableError("cannot listen on " + options_.bind_address + ":" +
                                    std::to_string(options_.port));
    }
    if (listen_fd >= 0) ::listen(listen_fd, kListenBacklog);
    return base::okStatus();
  }

  void sendJson(httplib::Response& res, int code, const json& body) {
    res.status = code;
    res.set_content(body.dump(), "application/json");
  }
  void sendError(httplib::Response& res, const base::Status& err, std::string_view name = "",
                 std::string_view kind = "") {
    json body = statusFromError(err, name, kind);
    if (err.code() == base::StatusCode::kDeadlineExceeded &&
        err.message().starts_with("Too large resource version")) {
      body["details"]["causes"] = {
          {{"reason", "ResourceVersionTooLarge"}, {"message", "Too large resource version"}}};
      body["details"]["retryAfterSeconds"] = 1;
      res.set_header("Retry-After", "1");
    }
    sendJson(res, body["code"].get<int>(), body);
  }
  void sendCode(httplib::Response& res, int code, const std::string& message) {
    if (code == 429) res.set_header("Retry-After", "1");
    sendJson(res, code, statusObject(code, message));
  }

  void record(const httplib::Request& req) {
    RecordedRequest r;
    r.method = req.method;
    r.path = req.path;
    for (const auto& [k, v] : req.params) {
      if (!r.query.empty()) r.query += '&';
      r.query += k + "=" + v;
    }
    r.content_type = req.get_header_value("Content-Type");
    r.body = req.body;
    std::lock_guard lock(mu_);
    if (requests_.size() >= kMaxRecordedRequests) requests_.pop_front();
    requests_.push_back(std::move(r));
  }

  bool authenticated(const httplib::Request& req) const {
    if (tokens_.empty()) return true;
    if (req.path == "/healthz" || req.path == "/livez" || req.path == "/readyz") return true;
    std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    return auth.starts_with(prefix) && tokens_.contains(auth.substr(prefix.size()));
  }

  // The Content-Length header's value (0 when absent or not a number).
  static uint64_t declaredLength(const httplib::Request& req) {
    const std::string value = req.get_header_value("Content-Length");
    uint64_t n = 0;
    std::from_chars(value.data(), value.data() + value.size(), n);
    return n;
  }

  // Why a request is refused from its line and headers: {code, message}, code 0 when it is not.
  std::pair<int, std::string> refusal(const httplib::Request& req) const {
    // /_test/ endpoints need no authentication; every body is bounded.
    if (!req.path.starts_with("/_test/") && !authenticated(req)) return {401, "Unauthorized"};
    if (declaredLength(req) > kMaxRequestBodyBytes) {
      return {413, "the request body is larger than the limit of " +
                       std::to_string(kMaxRequestBodyBytes) + " bytes"};
    }
    // httplib reads a chunked body without bound: only sized bodies are accepted.
    if (req.has_header("Transfer-Encoding"))
      return {411, "a request body must have a Content-Length"};
    return {0, ""};
  }

  // The pre-routing check: true when the request was answered (401, 413, 411) from its headers.
  bool refuseBeforeBody(const httplib::Request& req, httplib::Response& res) {
    auto [code, message] = refusal(req);
    if (code == 0) return false;
    record(req);
    sendAndClose(res, code, statusObject(code, message).dump());
    return true;
  }

  // Answers and then drops the connection: the body the client may still be sending is unread,
  // and httplib would otherwise parse it as the next request. A content provider that reports
  // failure after writing everything makes httplib close the socket once the answer is out.
  static void sendAndClose(httplib::Response& res, int code, std::string body) {
    res.status = code;
    res.set_header("Connection", "close");
    const size_t size = body.size();
    res.set_content_provider(
        size, "application/json",
        [body = std::move(body)](size_t offset, size_t length, httplib::DataSink& sink) {
          sink.write(body.data() + offset, length);
          return false;
        });
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache, private");
    if (req.path.starts_with("/_test/")) return handleTest(req, res);
    record(req);
    std::chrono::milliseconds latency{0};
    {
      std::lock_guard lock(mu_);
      if (fail_count_ > 0 && req.path.starts_with(fail_prefix_)) {
        --fail_count_;
        const int code = fail_code_;
        // The lock is released by the return; the response is built outside it.
        res.status = code;
        if (code == 429) res.set_header("Retry-After", "1");
        res.set_content(statusObject(code, "injected failure (test-apiserver /_test/fail)").dump(),
                        "application/json");
        return;
      }
      latency = latency_;
    }
    if (latency.count() > 0) {
      std::unique_lock lock(mu_);
      latency_cv_.wait_for(lock, latency, [this] { return stopping_.load(); });
    }
    route(req, res);
  }

  void handleTest(const httplib::Request& req, httplib::Response& res) {
    json body = req.body.empty() ? json::object() : json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return sendCode(res, 400, "the body of a /_test/ request must be a JSON object");
    }
    if (req.path == "/_test/status") {
      return sendJson(res, 200,
                      {{"watches", store_.watcherCount()},
                       {"resourceVersion", std::to_string(store_.resourceVersion())}});
    }
    if (req.method != "POST") return sendCode(res, 405, "use POST");
    if (req.path == "/_test/close-watches") {
      const size_t n = store_.watcherCount();
      store_.closeAllWatches("closed by /_test/close-watches");
      return sendJson(res, 200, {{"closed", n}});
    }
    if (req.path == "/_test/fail") {
      const int code = body.value("code", 500);
      const int count = body.value("count", 1);
      if (code < 400 || code > 599) return sendCode(res, 400, "code must be 4xx or 5xx");
      failNext(code, count, body.value("pathPrefix", std::string()));
      return sendJson(res, 200, {{"code", code}, {"count", count}});
    }
    if (req.path == "/_test/latency") {
      const int ms = body.value("ms", 0);
      if (ms < 0) return sendCode(res, 400, "ms must not be negative");
      setLatency(std::chrono::milliseconds(ms));
      return sendJson(res, 200, {{"ms", ms}});
    }
    if (req.path == "/_test/compact") {
      store_.compact();
      return sendJson(res, 200, {{"resourceVersion", std::to_string(store_.resourceVersion())}});
    }
    return sendCode(res, 404, "unknown test endpoint " + req.path);
  }

  // Where a resource request points: /api/v1/... or /apis/<group>/v1/..., with an optional
  // watch/ prefix, namespace, name and subresource.
  struct ResourcePath {
    const ResourceInfo* resource = nullptr;
    std::string ns;
    bool ns_given = false;
    std::string name;
    std::string sub;
    bool watch = false;
  };

  void route(const httplib::Request& req, httplib::Response& res) {
    if (serveDiscovery(req, res)) return;
    std::optional<ResourcePath> target = resolveResourcePath(req, res);
    if (!target) return;
    const std::string& m = req.method;
    if (m == "GET") return serveGet(req, res, *target);
    if (m == "POST") return serveCreate(req, res, *target);
    if (m == "PUT") return serveUpdate(req, res, *target);
    if (m == "PATCH") return servePatch(req, res, *target);
    if (m == "DELETE") return serveDelete(req, res, *target);
    return sendCode(res, 405, "method " + m + " is not allowed");
  }

  // Health checks, /version, /api and /apis. True when the request was answered.
  bool serveDiscovery(const httplib::Request& req, httplib::Response& res) {
    const std::string& path = req.path;
    if (path == "/healthz" || path == "/livez" || path == "/readyz" ||
        path.starts_with("/healthz/") || path.starts_with("/livez/") ||
        path.starts_with("/readyz/")) {
      res.status = 200;
      res.set_content("ok", "text/plain; charset=utf-8");
      return true;
    }
    if (req.method != "GET" && (path == "/version" || path == "/api" || path == "/apis")) {
      sendCode(res, 405, "the server does not allow this method on the requested resource");
      return true;
    }
    if (path == "/version") {
      sendJson(res, 200, versionDocument());
      return true;
    }
    if (path == "/api" || path == "/api/") {
      sendJson(res, 200, apiVersionsDocument(host() + ":" + std::to_string(port_)));
      return true;
    }
    if (path == "/apis" || path == "/apis/") {
      sendJson(res, 200, apiGroupListDocument());
      return true;
    }
    return false;
  }

  // The resource a path names. Answers the request itself (a group's or a version's discovery
  // document, 404, 405) and returns nullopt when the path names no resource to act on.
  std::optional<ResourcePath> resolveResourcePath(const httplib::Request& req,
                                                  httplib::Response& res) {
    std::vector<std::string> segs = splitPath(req.path);
    std::string group;
    size_t i = 0;
    if (!segs.empty() && segs[0] == "api") {
      if (segs.size() < 2 || segs[1] != "v1") return notFoundPath(res);
      i = 2;
    } else if (!segs.empty() && segs[0] == "apis" && segs.size() >= 2) {
      group = segs[1];
      if (segs.size() == 2) {
        json doc = apiGroupDocument(group);
        if (doc.is_null()) return notFoundPath(res);
        sendJson(res, 200, doc);
        return std::nullopt;
      }
      if (segs[2] != "v1") return notFoundPath(res);
      i = 3;
    } else {
      // Includes /openapi/v2 and /openapi/v3: kubectl then skips validation.
      return notFoundPath(res);
    }
    if (i == segs.size()) {
      json doc = apiResourceListDocument(group, "v1");
      if (doc.is_null()) return notFoundPath(res);
      if (req.method != "GET") {
        sendCode(res, 405, "method not allowed");
      } else {
        sendJson(res, 200, doc);
      }
      return std::nullopt;
    }
    return resolveResourceSegments(req, res, segs, i, group);
  }

  // The part of a resource path after the group version: [watch/][namespaces/<ns>/]<resource>
  // [/<name>[/<subresource>]], from segs[i] on.
  std::optional<ResourcePath> resolveResourceSegments(const httplib::Request& req,
                                                      httplib::Response& res,
                                                      const std::vector<std::string>& segs,
                                                      size_t i, const std::string& group) {
    ResourcePath target;
    if (segs[i] == "watch") {
      target.watch = true;
      ++i;
    }
    if (segs.size() - i >= 3 && segs[i] == "namespaces") {
      const ResourceInfo* inner = findResource(group, segs[i + 2]);
      if (inner && inner->namespaced) {
        target.ns = segs[i + 1];
        target.ns_given = true;
        i += 2;
      }
    }
    if (i >= segs.size()) return notFoundPath(res);
    target.resource = findResource(group, segs[i]);
    if (!target.resource || segs.size() - i > 3) return notFoundPath(res);
    if (target.ns_given && !target.resource->namespaced) return notFoundPath(res);
    target.name = segs.size() - i >= 2 ? segs[i + 1] : "";
    target.sub = segs.size() - i >= 3 ? segs[i + 2] : "";
    if (!target.sub.empty() && !target.resource->hasSubresource(target.sub)) {
      return notFoundPath(res);
    }
    if (target.watch && (req.method != "GET" || !target.sub.empty())) {
      sendCode(res, 405, "watch paths only support GET");
      return std::nullopt;
    }
    return target;
  }

  std::optional<ResourcePath> notFoundPath(httplib::Response& res) {
    notFound(res);
    return std::nullopt;
  }

  // GET: a watch, a list, or one object (as a Table when asked).
  void serveGet(const httplib::Request& req, httplib::Response& res, const ResourcePath& t) {
    const ResourceInfo& resource = *t.resource;
    if (t.watch || (t.name.empty() && truthy(param(req, "watch")))) {
      return serveWatch(req, res, resource, t.ns, t.name);
    }
    if (t.name.empty()) return serveList(req, res, resource, t.ns);
    auto obj = store_.get(resource.plural, t.ns, t.name);
    if (!obj.ok()) return sendError(res, obj.status(), t.name, resource.plural);
    if (wantsTable(req)) {
      json meta = {{"resourceVersion", (*obj)["metadata"].value("resourceVersion", "")}};
      return sendJson(res, 200,
                      makeTable(resource, {&*obj}, clock_.wallNow(), includeObject(req), meta));
    }
    return sendJson(res, 200, *obj);
  }

  void serveCreate(const httplib::Request& req, httplib::Response& res, const ResourcePath& t) {
    if (!t.name.empty()) return sendCode(res, 405, "POST is not allowed on a named object");
    if (t.resource->namespaced && !t.ns_given) {
      return sendCode(res, 405, "POST needs the namespace in the path");
    }
    auto body = parseBody(req, res);
    if (!body) return;
    auto created = store_.create(t.resource->plural, t.ns, std::move(*body));
    if (!created.ok()) return sendError(res, created.status(), "", t.resource->plural);
    return sendJson(res, 201, *created);
  }

  void serveUpdate(const httplib::Request& req, httplib::Response& res, const ResourcePath& t) {
    if (t.name.empty()) return sendCode(res, 405, "PUT needs an object name");
    auto body = parseBody(req, res);
    if (!body) return;
    auto updated = store_.update(t.resource->plural, t.ns, t.name, std::move(*body), t.sub);
    if (!updated.ok()) return sendError(res, updated.status(), t.name, t.resource->plural);
    return sendJson(res, 200, *updated);
  }

  void servePatch(const httplib::Request& req, httplib::Response& res, const ResourcePath& t) {
    if (t.name.empty()) return sendCode(res, 405, "PATCH needs an object name");
    const std::string ct = req.get_header_value("Content-Type");
    auto type = patchTypeFromContentType(ct);
    if (!type) {
      return sendCode(res, 415,
                      "the body of the request was in an unknown format - accepted "
                      "media types include: application/json-patch+json, "
                      "application/merge-patch+json, "
                      "application/strategic-merge-patch+json");
    }
    json patch_doc = json::parse(req.body, nullptr, false);
    if (patch_doc.is_discarded()) return sendCode(res, 400, "the patch is not valid JSON");
    auto patched = store_.patch(t.resource->plural, t.ns, t.name, *type, patch_doc, t.sub);
    if (!patched.ok()) return sendError(res, patched.status(), t.name, t.resource->plural);
    return sendJson(res, 200, *patched);
  }

  // DELETE of one object or (without a name) of a collection. A deleted pod, or an object that
  // only got a deletion timestamp, is answered with the object; anything else with a Status.
  void serveDelete(const httplib::Request& req, httplib::Response& res, const ResourcePath& t) {
    if (!t.sub.empty()) return sendCode(res, 405, "DELETE is not allowed on a subresource");
    std::optional<DeleteOptions> opts = parseDeleteOptions(req, res);
    if (!opts) return;
    const ResourceInfo& resource = *t.resource;
    if (t.name.empty()) return serveDeleteCollection(req, res, resource, t.ns, *opts);
    auto deleted = store_.remove(resource.plural, t.ns, t.name, *opts);
    if (!deleted.ok()) return sendError(res, deleted.status(), t.name, resource.plural);
    if (resource.plural == "pods" || !deleted->removed) return sendJson(res, 200, deleted->object);
    return sendJson(res, 200,
                    successStatus({{"name", t.name},
                                   {"kind", resource.plural},
                                   {"uid", deleted->object["metadata"].value("uid", "")}}));
  }

  // DeleteOptions from the body and the gracePeriodSeconds parameter (which wins). Answers 400
  // and returns nullopt when either is malformed.
  std::optional<DeleteOptions> parseDeleteOptions(const httplib::Request& req,
                                                  httplib::Response& res) {
    DeleteOptions opts;
    if (!req.body.empty()) {
      json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) {
        sendCode(res, 400, "the DeleteOptions body is not a JSON object");
        return std::nullopt;
      }
      if (body.contains("gracePeriodSeconds") && body["gracePeriodSeconds"].is_number_integer()) {
        opts.grace_period_seconds = body["gracePeriodSeconds"].get<int64_t>();
      }
      if (body.contains("preconditions") && body["preconditions"].is_object()) {
        const json& p = body["preconditions"];
        if (p.contains("uid") && p["uid"].is_string()) opts.precondition_uid = p["uid"];
        if (p.contains("resourceVersion") && p["resourceVersion"].is_string()) {
          opts.precondition_resource_version = p["resourceVersion"];
        }
      }
    }
    if (req.has_param("gracePeriodSeconds")) {
      try {
        opts.grace_period_seconds = std::stoll(param(req, "gracePeriodSeconds"));
      } catch (const std::exception&) {
        sendCode(res, 400, "gracePeriodSeconds must be an integer");
        return std::nullopt;
      }
    }
    return opts;
  }

  void notFound(httplib::Response& res) {
    sendJson(res, 404,
             statusObject(404, "the server could not find the requested resource", "NotFound",
                          json::object()));
  }

  std::optional<json> parseBody(const httplib::Request& req, httplib::Response& res) {
    const std::string ct = mediaType(req.get_header_value("Content-Type"));
    if (ct == kProtobufContentType) {
      auto decoded = decodeProtobufObject(req.body);
      if (!decoded.ok()) {
        sendCode(res, decoded.status().code() == base::StatusCode::kUnimplemented ? 415 : 400,
                 decoded.status().message());
        return std::nullopt;
      }
      return *decoded;
    }
    if (!ct.empty() && ct != "application/json" && ct != "*/*") {
      sendCode(res, 415,
               "the body of the request was in an unknown format - accepted media "
               "types include: application/json");
      return std::nullopt;
    }
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      sendCode(res, 400, "the body of the request is not a JSON object");
      return std::nullopt;
    }
    return body;
  }

  static bool wantsTable(const httplib::Request& req) {
    return req.get_header_value("Accept").find("as=Table") != std::string::npos;
  }

  static IncludeObject includeObject(const httplib::Request& req) {
    const std::string v = param(req, "includeObject");
    if (v == "None") return IncludeObject::kNone;
    if (v == "Object") return IncludeObject::kObject;
    return IncludeObject::kMetadata;
  }

  void serveList(const httplib::Request& req, httplib::Response& res, const ResourceInfo& resource,
                 const std::string& ns) {
    ListOptions opts;
    opts.label_selector = param(req, "labelSelector");
    opts.field_selector = param(req, "fieldSelector");
    opts.continue_token = param(req, "continue");
    opts.resource_version = param(req, "resourceVersion");
    if (req.has_param("limit")) {
      try {
        opts.limit = std::stoll(param(req, "limit"));
      } catch (const std::exception&) {
        return sendCode(res, 400, "limit must be an integer");
      }
    }
    auto result = store_.list(resource.plural, ns, opts);
    if (!result.ok()) return sendError(res, result.status(), "", resource.plural);
    json meta = {{"resourceVersion", std::to_string(result->resource_version)}};
    if (!result->continue_token.empty()) meta["continue"] = result->continue_token;
    if (result->remaining_item_count) meta["remainingItemCount"] = *result->remaining_item_count;
    if (wantsTable(req)) {
      std::vector<const json*> objs;
      objs.reserve(result->items.size());
      for (const auto& item : result->items) objs.push_back(item.object.get());
      return sendJson(res, 200,
                      makeTable(resource, objs, clock_.wallNow(), includeObject(req), meta));
    }
    // The items are pre-serialized: a big list is a concatenation, not a re-encode.
    std::string body;
    size_t total = 128;
    for (const auto& item : result->items) total += item.text->size() + 1;
    body.reserve(total);
    body += R"({"kind":")" + resource.listKind() + R"(","apiVersion":")" + resource.apiVersion() +
            R"(","metadata":)" + meta.dump() + R"(,"items":[)";
    for (size_t k = 0; k < result->items.size(); ++k) {
      if (k) body += ',';
      body += *result->items[k].text;
    }
    body += "]}";
    res.status = 200;
    res.set_content(std::move(body), "application/json");
  }

  void serveDeleteCollection(const httplib::Request& req, httplib::Response& res,
                             const ResourceInfo& resource, const std::string& ns,
                             const DeleteOptions& opts) {
    ListOptions lopts;
    lopts.label_selector = param(req, "labelSelector");
    lopts.field_selector = param(req, "fieldSelector");
    auto result = store_.list(resource.plural, ns, lopts);
    if (!result.ok()) return sendError(res, result.status(), "", resource.plural);
    json items = json::array();
    for (const auto& item : result->items) {
      const json& meta = (*item.object)["metadata"];
      auto deleted =
          store_.remove(resource.plural, meta.value("namespace", ""), meta.value("name", ""), opts);
      if (deleted.ok()) items.push_back(deleted->object);
    }
    sendJson(res, 200,
             {{"kind", resource.listKind()},
              {"apiVersion", resource.apiVersion()},
              {"metadata", {{"resourceVersion", std::to_string(store_.resourceVersion())}}},
              {"items", items}});
  }

  struct WatchStream {
    std::shared_ptr<Watcher> watcher;
    const ResourceInfo* resource = nullptr;
    bool table = false;
    IncludeObject include = IncludeObject::kMetadata;
    bool bookmarks = false;
    bool initial_events_end = false;  // sendInitialEvents=true: mark the end with a bookmark
    bool first_table_event = true;
    bool started = false;
    base::MonotonicTime deadline;
    base::MonotonicTime next_bookmark;
    std::string error_line;  // set: the stream is this one ERROR event
  };

  std::string bookmarkLine(const ResourceInfo& resource, uint64_t rv, bool initial_end) {
    json meta = {{"resourceVersion", std::to_string(rv)}};
    if (initial_end) meta["annotations"] = {{"k8s.io/initial-events-end", "true"}};
    json ev = {
        {"type", "BOOKMARK"},
        {"object",
         {{"kind", resource.kind}, {"apiVersion", resource.apiVersion()}, {"metadata", meta}}}};
    return ev.dump() + "\n";
  }

  std::string eventLine(WatchStream& st, const Watcher::Delivery& d) {
    const char* type = watchEventTypeName(d.type);
    if (!st.table) {
      std::string line;
      line.reserve(d.object.text->size() + 40);
      line += R"({"type":")";
      line += type;
      line += R"(","object":)";
      line += *d.object.text;
      line += "}\n";
      return line;
    }
    json meta = {{"resourceVersion", std::to_string(d.object.resource_version)}};
    json table = makeTable(*st.resource, {d.object.object.get()}, clock_.wallNow(), st.include,
                           meta, st.first_table_event);
    st.first_table_event = false;
    return json{{"type", type}, {"object", std::move(table)}}.dump() + "\n";
  }

  void serveWatch(const httplib::Request& req, httplib::Response& res, const ResourceInfo& resource,
                  const std::string& ns, const std::string& name) {
    WatchOptions wopts;
    wopts.label_selector = param(req, "labelSelector");
    wopts.field_selector = param(req, "fieldSelector");
    wopts.resource_version = param(req, "resourceVersion");
    if (!name.empty()) {
      wopts.field_selector +=
          (wopts.field_selector.empty() ? "" : ",") + std::string("metadata.name=") + name;
    }
    auto st = std::make_shared<WatchStream>();
    st->resource = &resource;
    st->table = wantsTable(req);
    st->include = includeObject(req);
    st->bookmarks = truthy(param(req, "allowWatchBookmarks"));
    st->initial_events_end = truthy(param(req, "sendInitialEvents"));
    std::chrono::seconds timeout = options_.default_watch_timeout;
    if (req.has_param("timeoutSeconds")) {
      try {
        timeout = std::chrono::seconds(std::stoll(param(req, "timeoutSeconds")));
      } catch (const std::exception&) {
        return sendCode(res, 400, "timeoutSeconds must be an integer");
      }
    }
    const auto now = wait_clock_.now();
    st->deadline = now + timeout;
    st->next_bookmark = now + options_.bookmark_interval;

    auto watcher = store_.watch(resource.plural, ns, wopts);
    if (!watcher.ok()) {
      if (watcher.status().code() != base::StatusCode::kOutOfRange) {
        return sendError(res, watcher.status(), "", resource.plural);
      }
      // Like kube-apiserver: a 200 whose stream carries one ERROR event with the 410 Status.
      st->error_line =
          json{{"type", "ERROR"}, {"object", statusFromError(watcher.status())}}.dump() + "\n";
    } else {
      st->watcher = *watcher;
      if (stopping_) st->watcher->close("server stopping");
    }
    res.status = 200;
    // "application/json;stream=watch" (not bare application/json) also keeps httplib from
    // gzip-buffering the stream: every event must reach the client at once.
    res.set_chunked_content_provider(
        "application/json;stream=watch",
        [this, st](size_t /*offset*/, httplib::DataSink& sink) { return pump(*st, sink); },
        [this, st](bool /*success*/) {
          if (st->watcher) store_.unwatch(st->watcher);
        });
  }

  // One call of the chunked provider: writes what is available (waiting a little if nothing
  // is), a bookmark when due, or ends the stream.
  bool pump(WatchStream& st, httplib::DataSink& sink) {
    if (!st.error_line.empty()) {
      bool ok = sink.write(st.error_line.data(), st.error_line.size());
      sink.done();
      return ok;
    }
    std::string out;
    if (!st.started) {
      st.started = true;
      if (st.initial_events_end && st.bookmarks && !st.watcher->hadInitialEvents()) {
        out += bookmarkLine(*st.resource, st.watcher->startResourceVersion(), true);
      }
    }
    auto now = wait_clock_.now();
    const auto wait_until = std::min({st.deadline, st.next_bookmark, now + kWatchPoll});
    size_t events = 0;
    while (events < kMaxEventsPerChunk) {
      auto d = out.empty() ? st.watcher->next(wait_until) : st.watcher->tryNext();
      if (!d) break;
      ++events;
      if (d->object.object) out += eventLine(st, *d);
      if (d->last_initial && st.initial_events_end && st.bookmarks) {
        out += bookmarkLine(*st.resource, st.watcher->startResourceVersion(), true);
      }
    }
    if (!out.empty()) return sink.write(out.data(), out.size());
    now = wait_clock_.now();
    if (st.watcher->closed() || stopping_ || now >= st.deadline) {
      sink.done();
      return true;
    }
    if (st.bookmarks && now >= st.next_bookmark) {
      st.next_bookmark = now + options_.bookmark_interval;
      if (auto rv = store_.bookmarkResourceVersion(*st.watcher)) {
        std::string line = bookmarkLine(*st.resource, *rv, false);
        return sink.write(line.data(), line.size());
      }
    }
    return true;
  }

  ServerOptions options_;
  base::Clock& clock_;  // object timestamps and Table ages
  // Watch timeouts and bookmarks block real threads, so they always run on real time (an
  // injected fake clock would turn every wait into a busy loop).
  base::Clock& wait_clock_ = base::realClock();
  Store store_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  std::future<void> listener_done_;  // ready once listen_after_bind() returned
  int port_ = -1;
  bool tls_ = false;
  std::string ca_pem_;
  std::string first_token_;
  std::map<std::string, std::string> tokens_;  // token -> user; read-only after start()
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  std::condition_variable latency_cv_;
  bool stopped_ = false;
  int fail_code_ = 500;
  int fail_count_ = 0;
  std::string fail_prefix_;
  std::chrono::milliseconds latency_{0};
  std::deque<RecordedRequest> requests_;
};

TestApiServer::TestApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TestApiServer::~TestApiServer() { stop(); }

base::StatusOr<std::unique_ptr<TestApiServer>> TestApiServer::start(ServerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  RETURN_IF_ERROR(impl->start());
  return std::unique_ptr<TestApiServer>(new TestApiServer(std::move(impl)));
}

int TestApiServer::port() const { return impl_->port(); }
std::string TestApiServer::url() const { return impl_->url(); }
bool TestApiServer::tls() const { return impl_->tls(); }
void TestApiServer::stop() { impl_->stop(); }
Store& TestApiServer::store() { return impl_->store(); }
std::string TestApiServer::kubeconfig() const { return impl_->kubeconfig(); }

base::Status TestApiServer::writeKubeconfig(const std::filesystem::path& path) const {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return base::invalidArgumentError("cannot write kubeconfig " + path.string());
  out << kubeconfig();
  out.close();
  if (!out) return base::internalError("cannot write kubeconfig " + path.string());
  return base::okStatus();
}

void TestApiServer::closeWatches() { impl_->store().closeAllWatches("closed by the test"); }
void TestApiServer::failNextRequests(int http_code, int count, std::string path_prefix) {
  impl_->failNext(http_code, count, std::move(path_prefix));
}
void TestApiServer::setLatency(std::chrono::milliseconds latency) { impl_->setLatency(latency); }
void TestApiServer::compact() { impl_->store().compact(); }
std::vector<RecordedRequest> TestApiServer::requests() const { return impl_->requests(); }
void TestApiServer::clearRequests() { impl_->clearRequests(); }
size_t TestApiServer::openWatches() const { return impl_->store().watcherCount(); }

}  // namespace nodeagent::testapiserver
