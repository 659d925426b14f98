// TestApiServer::Impl, private to cmd/test-apiserver/. test_api_server.cpp holds the server's
// lifecycle, authentication, request limits, fault injection and the /_test/ endpoints;
// test_api_server_routes.cpp the REST routing (discovery, get, list, create, update, patch,
// delete); test_api_server_watch.cpp the watch streams; test_api_server_kubelet.cpp the reviews,
// service account tokens and the kubelet proxy; test_api_server_nodes.cpp the Node authorizer's
// graph and NodeRestriction admission.
#pragma once

#include <httplib.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/certificate/pki.h"
#include "cmd/test-apiserver/admission.h"
#include "cmd/test-apiserver/api_status.h"
#include "cmd/test-apiserver/authz.h"
#include "cmd/test-apiserver/kubelet_location.h"
#include "cmd/test-apiserver/openapi.h"
#include "cmd/test-apiserver/service_account_token.h"
#include "cmd/test-apiserver/table.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {

class KubeletDialer;

using nlohmann::json;

namespace test_api_server_internal {

inline std::vector<std::string> splitPath(const std::string& path) {
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

inline std::string param(const httplib::Request& req, const char* key) {
  return req.has_param(key) ? req.get_param_value(key) : "";
}

// Go's strconv.ParseBool, which kube-apiserver uses for query flags (python sends "True").
inline bool truthy(const std::string& v) {
  return v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True";
}

inline std::string mediaType(const std::string& content_type) {
  auto semi = content_type.find(';');
  std::string mt = content_type.substr(0, semi);
  while (!mt.empty() && mt.back() == ' ') mt.pop_back();
  return mt;
}

}  // namespace test_api_server_internal

using namespace test_api_server_internal;

class TestApiServer::Impl {
 public:
  explicit Impl(ServerOptions options)
      : options_(std::move(options)),
        clock_(options_.clock ? *options_.clock : base::realClock()),
        store_(clock_, options_.store) {}

  ~Impl() { stop(); }

  base::Status start();

  void stop();

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

  std::string kubeconfig() const;

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
  // The --token-auth-file's tokens (the first one goes into the written kubeconfig) and the
  // service account token signing key.
  base::Status loadTokens();

  // The --authorization-policy-file's policies and the kubelet client's TLS context.
  base::Status loadKubeletAccess();

  // An HTTPS server when a certificate and key are given (the certificate is also the CA the
  // written kubeconfig trusts), plain HTTP otherwise.
  base::Status createServer();

  // Threads, timeouts, limits and the one handler every method goes to.
  void configureServer();

  // Binds the configured address and port (any free port for 0) with a large listen backlog.
  base::Status bindListener();

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

  void record(const httplib::Request& req);

  // Without a token file, client CA or bootstrap tokens every request is served; with one, a
  // request needs a client certificate from the CA, a bearer token of the file, a bootstrap
  // token or a service account token for the API audiences.
  bool authenticated(const httplib::Request& req) const {
    if (review_users_.empty() && !client_ca_ && !options_.enable_bootstrap_token_auth) return true;
    if (req.path == "/healthz" || req.path == "/livez" || req.path == "/readyz") return true;
    return credentialUser(req).has_value();
  }

  // The user of the request's client certificate, else of its bearer token, with
  // system:authenticated among its groups; nullopt when it has neither that is valid.
  std::optional<ReviewUser> credentialUser(const httplib::Request& req) const;

  // The user of a client certificate that verified against --client-ca-file: CN the name, O the
  // groups (kube-apiserver's x509 authenticator); nullopt without one.
  std::optional<ReviewUser> certificateUser(const httplib::Request& req) const;
  // Asks TLS clients for a certificate (optional) verified against these CA files.
  base::Status requestClientCertificates(httplib::SSLServer& server,
                                         const std::vector<std::string>& ca_files);

  // Who sent the request: the user of its bearer token (groups plus system:authenticated), or
  // system:anonymous (in system:unauthenticated) without a valid one.
  ReviewUser requestUser(const httplib::Request& req) const;
  // The CSR signer's CA (ServerOptions::cluster_signing_cert_file) into cluster_ca_.
  base::Status loadClusterSigningCa();
  // kube-controller-manager's approver (`approve`: on a new request) and signer on the
  // CertificateSigningRequest `name` (csr.h), writing its status when they change it.
  void runCertificateControllers(const std::string& name, bool approve);
  // The authorizer's decision on the request; false after answering 403 when it is denied.
  bool authorizeRequest(const httplib::Request& req, httplib::Response& res);

  // The pods bound to `node` in `ns` (every namespace when ""): the Node authorizer's graph.
  std::vector<std::shared_ptr<const json>> podsOnNode(const std::string& node,
                                                      const std::string& ns) const;
  // NodeRestriction's check of a write by the request's user (test_api_server_nodes.cpp); empty
  // when the user is no node or the plugin is off.
  AdmissionCheck nodeAdmission(const httplib::Request& req);
  // NodeRestriction on a node's TokenRequest for service account `ns`/`name`; OK for other users.
  base::Status admitTokenRequest(const httplib::Request& req, const std::string& ns,
                                 const std::string& name, const json& token_request);

  // The token file's users first, then the service account tokens (TokenAuthenticator).
  TokenVerdict authenticateToken(const std::string& token,
                                 const std::vector<std::string>& audiences) const;

  // The Content-Length header's value (0 when absent or not a number).
  static uint64_t declaredLength(const httplib::Request& req) {
    const std::string value = req.get_header_value("Content-Length");
    uint64_t n = 0;
    std::from_chars(value.data(), value.data() + value.size(), n);
    return n;
  }

  // Why a request is refused from its line and headers: {code, message}, code 0 when it is not.
  std::pair<int, std::string> refusal(const httplib::Request& req) const;

  // The pre-routing check: true when the request was answered (401, 413, 411) from its headers.
  bool refuseBeforeBody(const httplib::Request& req, httplib::Response& res);

  // Answers and then drops the connection: the body the client may still be sending is unread,
  // and httplib would otherwise parse it as the next request. A content provider that reports
  // failure after writing everything makes httplib close the socket once the answer is out.
  static void sendAndClose(httplib::Response& res, int code, std::string body);

  void handle(const httplib::Request& req, httplib::Response& res);

  void handleTest(const httplib::Request& req, httplib::Response& res);

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

  void route(const httplib::Request& req, httplib::Response& res);

  // TokenReview, SubjectAccessReview, the self reviews and the kubelet subresources. True when
  // the request was answered.
  bool serveKubeletApi(const httplib::Request& req, httplib::Response& res);

  // serviceaccounts/<name>/token (service_account_token.h). True when the request was answered.
  bool serveTokenRequest(const httplib::Request& req, httplib::Response& res);

  void serveReview(const httplib::Request& req, httplib::Response& res, bool token_review);
  // The body of a create-only endpoint (the reviews, TokenRequest): nullopt after answering 405
  // to another method or 400 to a body that does not parse.
  std::optional<json> parsePostBody(const httplib::Request& req, httplib::Response& res);
  // SelfSubjectAccessReview, SelfSubjectRulesReview and SelfSubjectReview (kubectl auth can-i
  // and whoami) of the request's own user. True when the request was answered.
  bool serveSelfReview(const httplib::Request& req, httplib::Response& res);

  // pods/log, pods/exec, pods/attach, pods/portforward of pod `ns`/`name`.
  void servePodSubresource(const httplib::Request& req, httplib::Response& res,
                           const std::string& ns, const std::string& name, const std::string& sub);

  // nodes/<id>/proxy[/path...].
  void serveNodeProxy(const httplib::Request& req, httplib::Response& res, const std::string& id);

  // Connects to `node`'s kubelet, sends it the request with `path_and_query` and tunnels the
  // client's connection to it until either side ends. Answers a Status itself when the kubelet
  // cannot be reached; otherwise the client's connection is shut down when it returns.
  void proxyToKubelet(const httplib::Request& req, httplib::Response& res,
                      const nlohmann::json& node, const std::string& path_and_query);

  // Health checks, /version, /api and /apis. True when the request was answered.
  bool serveDiscovery(const httplib::Request& req, httplib::Response& res);

  // /openapi/v2 and /openapi/v3[/<group version>] (test_api_server_openapi.cpp). True when the
  // request was answered.
  bool serveOpenApi(const httplib::Request& req, httplib::Response& res);
  // /openapi/v2 as JSON or, when the Accept header prefers it, as gnostic protobuf.
  void serveOpenApiV2(const httplib::Request& req, httplib::Response& res);

  // The field validation of a create, update or patch body against its kind's schema, as the
  // fieldValidation parameter asks: Strict answers 400 with every unknown and duplicate field,
  // Warn adds a Warning header for each, Ignore looks at nothing; an unknown fieldValidation
  // value is answered 422. False when the request was answered. Protobuf and JSON patch bodies
  // are not looked into.
  bool checkFields(const httplib::Request& req, httplib::Response& res, const ResourcePath& t);

  // The fields of an applied configuration (server-side apply) against its kind's schema, as
  // kube-apiserver checks them whatever fieldValidation says: one it does not know is answered
  // 500 `failed to create typed patch object (...): .spec.foo: field not declared in schema`.
  // False when the request was answered.
  bool checkApplyFields(httplib::Response& res, const ResourcePath& t, const json& applied);

  // 400 for a body nested deeper than kMaxBodyNesting (util.h). True when it answered.
  bool refuseDeepBody(const httplib::Request& req, httplib::Response& res);
  // Server-side apply (PATCH application/apply-patch+yaml; fieldManager required, force).
  void serveApply(const httplib::Request& req, httplib::Response& res, const ResourcePath& t);
  // Who a create, update or patch is recorded for in managedFields (managed_fields.h).
  static FieldWrite fieldWrite(const httplib::Request& req, const ResourcePath& t);
  // kube-apiserver's 422 for bad patch options, e.g. `PatchOptions.meta.k8s.io "" is invalid:
  // fieldManager: Required value: is required for apply patch`.
  static json patchOptionsInvalid(const std::string& cause);

  // The resource a path names. Answers the request itself (a group's or a version's discovery
  // document, 404, 405) and returns nullopt when the path names no resource to act on.
  std::optional<ResourcePath> resolveResourcePath(const httplib::Request& req,
                                                  httplib::Response& res);

  // The part of a resource path after the group version: [watch/][namespaces/<ns>/]<resource>
  // [/<name>[/<subresource>]], from segs[i] on.
  std::optional<ResourcePath> resolveResourceSegments(const httplib::Request& req,
                                                      httplib::Response& res,
                                                      const std::vector<std::string>& segs,
                                                      size_t i, const std::string& group);

  std::optional<ResourcePath> notFoundPath(httplib::Response& res);

  // GET: a watch, a list, or one object (as a Table when asked).
  void serveGet(const httplib::Request& req, httplib::Response& res, const ResourcePath& t);

  void serveCreate(const httplib::Request& req, httplib::Response& res, const ResourcePath& t);

  void serveUpdate(const httplib::Request& req, httplib::Response& res, const ResourcePath& t);

  void servePatch(const httplib::Request& req, httplib::Response& res, const ResourcePath& t);

  // DELETE of one object or (without a name) of a collection. A deleted pod, or an object that
  // only got a deletion timestamp, is answered with the object; anything else with a Status.
  void serveDelete(const httplib::Request& req, httplib::Response& res, const ResourcePath& t);

  // DeleteOptions from the body and the gracePeriodSeconds parameter (which wins). Answers 400
  // and returns nullopt when either is malformed.
  std::optional<DeleteOptions> parseDeleteOptions(const httplib::Request& req,
                                                  httplib::Response& res);

  void notFound(httplib::Response& res);

  std::optional<json> parseBody(const httplib::Request& req, httplib::Response& res);

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
                 const std::string& ns);

  void serveDeleteCollection(const httplib::Request& req, httplib::Response& res,
                             const ResourceInfo& resource, const std::string& ns,
                             const DeleteOptions& opts);

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

  std::string bookmarkLine(const ResourceInfo& resource, uint64_t rv, bool initial_end);

  std::string eventLine(WatchStream& st, const Watcher::Delivery& d);

  void serveWatch(const httplib::Request& req, httplib::Response& res, const ResourceInfo& resource,
                  const std::string& ns, const std::string& name);

  // One call of the chunked provider: writes what is available (waiting a little if nothing
  // is), a bookmark when due, or ends the stream.
  bool pump(WatchStream& st, httplib::DataSink& sink);

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
  bool client_ca_ = false;            // --client-ca-file given (authentication required); read-only
  bool verify_client_certs_ = false;  // client certificates are read; read-only
  certificate::KeyPair admin_credentials_;           // the kubeconfig's without a token file
  certificate::KeyPair cluster_ca_;                  // the CSR signer's CA; read-only after start()
  std::map<std::string, ReviewUser> review_users_;   // token -> user; read-only after start()
  std::unique_ptr<ServiceAccountTokens> sa_tokens_;  // set by start()
  Authorizer authorizer_;                            // read-only after start()
  std::shared_ptr<KubeletDialer> kubelet_dialer_;    // set by start()
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

}  // namespace nodeagent::testapiserver
