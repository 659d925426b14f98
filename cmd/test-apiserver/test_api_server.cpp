#include "cmd/test-apiserver/test_api_server.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cmd/test-apiserver/bootstrap_tokens.h"
#include "cmd/test-apiserver/csr.h"
#include "cmd/test-apiserver/request_info.h"
#include "cmd/test-apiserver/serving_certs.h"
#include "cmd/test-apiserver/test_api_server_impl.h"
#include "cmd/test-apiserver/tunnel.h"

namespace nodeagent::testapiserver {
namespace {

constexpr size_t kMaxRecordedRequests = 10000;
// kube-apiserver's limit on a request body (its maxRequestBodyBytes, 3 MiB): larger bodies are
// refused with 413 before any of them is read.
constexpr size_t kMaxRequestBodyBytes = 3 * 1024 * 1024;
// httplib listens with a backlog of 5: a burst of clients connecting at once (a hundred
// watchers) overflows it and waits out SYN retransmissions (1 s, 3 s, 7 s...) whenever the
// accepting thread is slow to run. The kernel caps this at net.core.somaxconn.
constexpr int kListenBacklog = 4096;
// While stopping, connections are shut down again this often until every request thread ended
// (covers one accepted in the moment the listening socket closed).
constexpr std::chrono::milliseconds kStopRescan{100};

// An HTTPS server for a certificate (its chain after it) and key in PEM; nullptr when they do
// not parse.
std::unique_ptr<httplib::SSLServer> sslServerFromPem(const std::string& cert_pem,
                                                     const std::string& key_pem) {
  BIO* cert_bio = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  BIO* key_bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  std::unique_ptr<httplib::SSLServer> server;
  if (cert != nullptr && key != nullptr) server = std::make_unique<httplib::SSLServer>(cert, key);
  X509_free(cert);
  EVP_PKEY_free(key);
  BIO_free(cert_bio);
  BIO_free(key_bio);
  ERR_clear_error();
  return server;
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

base::Status TestApiServer::Impl::start() {
  RETURN_IF_ERROR(loadTokens());
  RETURN_IF_ERROR(loadKubeletAccess());
  RETURN_IF_ERROR(createServer());
  RETURN_IF_ERROR(loadClusterSigningCa());
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

void TestApiServer::Impl::stop() {
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
    // are shut down until httplib's request threads (joined by the listener) have ended:
    // httplib (0.11) does not wake a thread waiting out the keep-alive timeout on stop(), but a
    // shutdown makes its read see end of stream and fails a blocked write at once (httplib still
    // owns and closes the descriptors). A kubelet tunnel sees its client end and ends too.
    do {
      shutdownAcceptedConnections(port_);
    } while (listener_done_.wait_for(kStopRescan) != std::future_status::ready);
    listener_.join();
  }
  store_.closeAllWatches("server stopped");
}

std::string TestApiServer::Impl::kubeconfig() const {
  std::ostringstream out;
  out << "apiVersion: v1\nkind: Config\nclusters:\n- name: test-apiserver\n  cluster:\n"
      << "    server: " << url() << "\n";
  if (tls_) out << "    certificate-authority-data: " << base64Encode(ca_pem_) << "\n";
  out << "users:\n- name: test-user\n  user:";
  if (!first_token_.empty()) {
    out << "\n    token: " << first_token_ << "\n";
  } else if (!admin_credentials_.cert_pem.empty()) {
    out << "\n    client-certificate-data: " << base64Encode(admin_credentials_.cert_pem)
        << "\n    client-key-data: " << base64Encode(admin_credentials_.key_pem) << "\n";
  } else {
    out << " {}\n";
  }
  out << "contexts:\n- name: test-apiserver\n  context:\n    cluster: test-apiserver\n"
      << "    user: test-user\n    namespace: default\n"
      << "current-context: test-apiserver\npreferences: {}\n";
  return out.str();
}

base::Status TestApiServer::Impl::loadTokens() {
  std::unique_ptr<JwtKey> key;
  if (options_.service_account_signing_key_file.empty()) {
    ASSIGN_OR_RETURN(key, JwtKey::generate());
  } else {
    ASSIGN_OR_RETURN(key, JwtKey::fromPemFile(options_.service_account_signing_key_file));
  }
  sa_tokens_ =
      std::make_unique<ServiceAccountTokens>(store_, std::move(key), options_.service_accounts);
  if (options_.token_auth_file.empty()) return base::okStatus();
  ASSIGN_OR_RETURN(auto tokens, parseTokenAuthFile(options_.token_auth_file));
  if (tokens.empty()) {
    return base::invalidArgumentError("token auth file " + options_.token_auth_file +
                                      " has no tokens");
  }
  first_token_ = tokens.front().token;
  for (auto& t : tokens) review_users_[t.token] = {t.user, t.uid, t.groups, {}};
  return base::okStatus();
}

TokenVerdict TestApiServer::Impl::authenticateToken(
    const std::string& token, const std::vector<std::string>& audiences) const {
  // Token file users are valid for any audience: they get those asked for.
  const auto user = review_users_.find(token);
  if (user != review_users_.end()) return {true, user->second, audiences, ""};
  if (options_.enable_bootstrap_token_auth) {
    if (auto bootstrap = authenticateBootstrapToken(store_, token, clock_.wallNow())) {
      return {true, std::move(*bootstrap), audiences, ""};
    }
  }
  return sa_tokens_->authenticate(token, audiences).value_or(TokenVerdict{});
}

base::Status TestApiServer::Impl::createServer() {
  if (options_.tls_cert_file.empty() != options_.tls_private_key_file.empty()) {
    return base::invalidArgumentError(
        "--tls-cert-file and --tls-private-key-file must be given together");
  }
  const std::string& cert_file = options_.tls_cert_file;
  const std::string& key_file = options_.tls_private_key_file;
  if (cert_file.empty() && options_.cert_dir.empty()) {
    if (!options_.client_ca_file.empty()) {
      return base::invalidArgumentError("--client-ca-file needs TLS (it is plain HTTP)");
    }
    server_ = std::make_unique<httplib::Server>();
    return base::okStatus();
  }
  std::unique_ptr<httplib::SSLServer> ssl;
  if (cert_file.empty()) {
    ASSIGN_OR_RETURN(ServingCertificate generated,
                     ensureServingCertificate(options_.cert_dir, options_.bind_address));
    ssl = sslServerFromPem(generated.cert_pem, generated.key_pem);
    cluster_ca_ = {generated.ca_pem, std::move(generated.ca_key_pem)};
    // kubeadm's admin.conf: without a token file the kubeconfig carries this client
    // certificate, so kubectl has credentials to send (it asks for a user name otherwise).
    certificate::CertificateRequest admin;
    admin.common_name = "kubernetes-admin";
    admin.organizations = {"system:masters"};
    admin.client_auth = true;
    ASSIGN_OR_RETURN(admin_credentials_, certificate::issueCertificate(cluster_ca_, admin));
    ca_pem_ = std::move(generated.ca_pem);
  } else {
    std::ifstream cert(cert_file);
    if (!cert) return base::invalidArgumentError("cannot read TLS certificate " + cert_file);
    std::stringstream ss;
    ss << cert.rdbuf();
    ca_pem_ = ss.str();
    ssl = std::make_unique<httplib::SSLServer>(cert_file.c_str(), key_file.c_str());
  }
  if (!ssl || !ssl->is_valid()) {
    return base::invalidArgumentError(
        cert_file.empty() ? "cannot load the serving certificate made under " + options_.cert_dir
                          : "cannot load TLS certificate " + cert_file + " with key " + key_file);
  }
  std::vector<std::string> client_cas;
  if (!options_.client_ca_file.empty()) client_cas.push_back(options_.client_ca_file);
  if (cert_file.empty()) {
    // The kubeconfig's admin certificate (made from the --cert-dir CA) is always accepted.
    client_cas.push_back((std::filesystem::path(options_.cert_dir) / "ca.crt").string());
  }
  client_ca_ = !options_.client_ca_file.empty();
  if (!client_cas.empty()) RETURN_IF_ERROR(requestClientCertificates(*ssl, client_cas));
  server_ = std::move(ssl);
  tls_ = true;
  return base::okStatus();
}

void TestApiServer::Impl::configureServer() {
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
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Patch(".*", handler);
  server_->Delete(".*", handler);
  server_->Options(".*", handler);
}

base::Status TestApiServer::Impl::bindListener() {
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

void TestApiServer::Impl::record(const httplib::Request& req) {
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

std::pair<int, std::string> TestApiServer::Impl::refusal(const httplib::Request& req) const {
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

bool TestApiServer::Impl::refuseBeforeBody(const httplib::Request& req, httplib::Response& res) {
  auto [code, message] = refusal(req);
  if (code == 0) return false;
  record(req);
  sendAndClose(res, code, statusObject(code, message).dump());
  return true;
}

void TestApiServer::Impl::sendAndClose(httplib::Response& res, int code, std::string body) {
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

void TestApiServer::Impl::handle(const httplib::Request& req, httplib::Response& res) {
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
  if (!authorizeRequest(req, res)) return;
  route(req, res);
}

base::Status TestApiServer::Impl::requestClientCertificates(
    httplib::SSLServer& server, const std::vector<std::string>& ca_files) {
  SSL_CTX* ctx = server.ssl_context();
  STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
  for (const std::string& file : ca_files) {
    if (names == nullptr || SSL_add_file_cert_subjects_to_stack(names, file.c_str()) != 1 ||
        SSL_CTX_load_verify_locations(ctx, file.c_str(), nullptr) != 1) {
      if (names != nullptr) sk_X509_NAME_pop_free(names, X509_NAME_free);
      ERR_clear_error();
      return base::invalidArgumentError("cannot read client CA file " + file);
    }
  }
  SSL_CTX_set_client_CA_list(ctx, names);
  // Optional, and never failing the handshake: a certificate that does not verify is a 401 from
  // the authenticator, as kube-apiserver answers it.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) { return 1; });
  verify_client_certs_ = true;
  return base::okStatus();
}

std::optional<ReviewUser> TestApiServer::Impl::certificateUser(const httplib::Request& req) const {
  if (!verify_client_certs_ || req.ssl == nullptr) return std::nullopt;
  X509* cert = SSL_get1_peer_certificate(req.ssl);
  if (cert == nullptr) return std::nullopt;
  std::optional<ReviewUser> user;
  if (SSL_get_verify_result(req.ssl) == X509_V_OK) {
    user.emplace();
    const X509_NAME* subject = X509_get_subject_name(cert);
    for (int i = 0; i < X509_NAME_entry_count(subject); ++i) {
      const X509_NAME_ENTRY* entry = X509_NAME_get_entry(subject, i);
      const int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(entry));
      const ASN1_STRING* data = X509_NAME_ENTRY_get_data(entry);
      std::string value(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                        static_cast<size_t>(ASN1_STRING_length(data)));
      if (nid == NID_commonName) user->username = std::move(value);
      if (nid == NID_organizationName) user->groups.push_back(std::move(value));
    }
    if (user->username.empty()) user.reset();
  }
  X509_free(cert);
  return user;
}

base::Status TestApiServer::Impl::loadClusterSigningCa() {
  const std::string& cert = options_.cluster_signing_cert_file;
  const std::string& key = options_.cluster_signing_key_file;
  if (cert.empty() != key.empty()) {
    return base::invalidArgumentError(
        "--cluster-signing-cert-file and --cluster-signing-key-file must be given together");
  }
  if (!cert.empty()) {
    ASSIGN_OR_RETURN(cluster_ca_, certificate::loadKeyPair(cert, key));
  } else if (cluster_ca_.cert_pem.empty()) {
    ASSIGN_OR_RETURN(cluster_ca_, certificate::generateCa("test-apiserver-signer"));
  }
  return base::okStatus();
}

void TestApiServer::Impl::runCertificateControllers(const std::string& name, bool approve) {
  auto csr = store_.get("certificatesigningrequests", "", name);
  if (!csr.ok()) return;
  json next = *csr;
  const std::string now = formatTime(clock_.wallNow());
  const CsrPermission permitted = [this](const ReviewUser& user, const char* subresource) {
    AccessRequest request;
    request.user = user.username;
    request.groups = user.groups;
    request.resource_request = true;
    request.verb = "create";
    request.api_group = "certificates.k8s.io";
    request.resource = "certificatesigningrequests";
    request.subresource = subresource;
    return authorizer_.authorize(request).allowed;
  };
  bool changed = approve && options_.csr_auto_approve &&
                 autoApproveCertificateSigningRequest(next, permitted, now);
  changed = signCertificateSigningRequest(next, cluster_ca_, now) || changed;
  if (!changed) return;
  // As kube-controller-manager writes it; a failure leaves the request as it was.
  (void)store_.update("certificatesigningrequests", "", name, std::move(next), "status",
                      {"kube-controller-manager", "certificates.k8s.io/v1", "status", "", true});
}

std::optional<ReviewUser> TestApiServer::Impl::credentialUser(const httplib::Request& req) const {
  std::optional<ReviewUser> user = certificateUser(req);
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (!user && auth.starts_with(prefix)) {
    TokenVerdict verdict =
        authenticateToken(auth.substr(prefix.size()), sa_tokens_->apiAudiences());
    if (verdict.authenticated) user = std::move(verdict.user);
  }
  if (user && std::find(user->groups.begin(), user->groups.end(), "system:authenticated") ==
                  user->groups.end()) {
    user->groups.push_back("system:authenticated");
  }
  return user;
}

ReviewUser TestApiServer::Impl::requestUser(const httplib::Request& req) const {
  return credentialUser(req).value_or(
      ReviewUser{"system:anonymous", "", {"system:unauthenticated"}, {}});
}

bool TestApiServer::Impl::authorizeRequest(const httplib::Request& req, httplib::Response& res) {
  if (authorizer_.allowsAll()) return true;
  AccessRequest request = requestAttributes(req.method, req.path, truthy(param(req, "watch")),
                                            param(req, "fieldSelector"));
  if (alwaysAllowed(request)) return true;
  ReviewUser user = requestUser(req);
  request.user = std::move(user.username);
  request.groups = std::move(user.groups);
  const AccessDecision decision = authorizer_.authorize(request);
  if (decision.allowed) return true;
  sendJson(res, 403, forbiddenStatus(request, decision.reason));
  return false;
}

void TestApiServer::Impl::handleTest(const httplib::Request& req, httplib::Response& res) {
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
