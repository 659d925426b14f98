// TestApiServer::Impl: the kubelet API's counterpart. TokenReview and SubjectAccessReview
// (authz.h), service account tokens (service_account_token.h), and the kubelet subresources: the
// target is computed as kube-apiserver does (kubelet_location.h), then the client's connection is
// taken over from httplib and tunnelled to the kubelet (tunnel.h).
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmd/test-apiserver/test_api_server_impl.h"
#include "cmd/test-apiserver/tunnel.h"

namespace nodeagent::testapiserver {
namespace {

// The path after its first `n` segments, as sent (still percent-encoded), from its '/' on.
std::string rawRest(const std::string& raw_path, int n) {
  size_t pos = 0;
  for (int seen = 0; seen < n && pos < raw_path.size(); ++seen) {
    while (pos < raw_path.size() && raw_path[pos] == '/') ++pos;
    pos = std::min(raw_path.find('/', pos), raw_path.size());
  }
  return raw_path.substr(pos);
}

std::string rawQuery(const httplib::Request& req) {
  const size_t q = req.target.find('?');
  return q == std::string::npos ? "" : req.target.substr(q + 1);
}

QueryParams queryOf(const httplib::Request& req) { return {req.params.begin(), req.params.end()}; }

HeaderList headersOf(const httplib::Request& req) {
  return {req.headers.begin(), req.headers.end()};
}

// A write to a connection whose peer left raises SIGPIPE; OpenSSL's socket writes (the client's
// TLS session, the kubelet's) do not ask the kernel not to. Blocked in the request thread, the
// signal stays pending there and harmless; it stays blocked for the pool thread's later requests.
void blockSigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace

base::Status TestApiServer::Impl::loadKubeletAccess() {
  std::vector<AbacPolicy> policies;
  if (!options_.authorization_policy_file.empty()) {
    ASSIGN_OR_RETURN(policies, parseAbacPolicyFile(options_.authorization_policy_file));
  }
  std::string mode_text = options_.authorization_mode;
  if (mode_text.empty()) {
    mode_text = options_.authorization_policy_file.empty() ? "AlwaysAllow" : "ABAC";
  }
  ASSIGN_OR_RETURN(std::vector<AuthorizationMode> modes, parseAuthorizationModes(mode_text));
  authorizer_ = Authorizer(
      std::move(modes), std::move(policies),
      [this](const std::string& node, const std::string& ns) { return podsOnNode(node, ns); });
  if (!authorizer_.has(AuthorizationMode::kAbac) && !options_.authorization_policy_file.empty()) {
    return base::invalidArgumentError(
        "--authorization-policy-file needs --authorization-mode=ABAC (it is " + mode_text + ")");
  }
  for (const std::string& type : options_.kubelet_preferred_address_types) {
    RETURN_IF_ERROR(parsePreferredAddressTypes(type).status());
  }
  KubeletClientOptions kubelet{options_.kubelet_client_certificate, options_.kubelet_client_key,
                               options_.kubelet_certificate_authority,
                               options_.kubelet_dial_timeout};
  ASSIGN_OR_RETURN(kubelet_dialer_, KubeletDialer::create(std::move(kubelet)));
  return base::okStatus();
}

bool TestApiServer::Impl::serveKubeletApi(const httplib::Request& req, httplib::Response& res) {
  const bool token_review = req.path == "/apis/authentication.k8s.io/v1/tokenreviews";
  if (token_review || req.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews") {
    serveReview(req, res, token_review);
    return true;
  }
  if (serveSelfReview(req, res)) return true;
  const std::vector<std::string> segs = splitPath(req.path);
  if (segs.size() < 5 || segs[0] != "api" || segs[1] != "v1") return false;
  if (segs.size() == 7 && segs[2] == "namespaces" && segs[4] == "pods" &&
      (segs[6] == "log" || segs[6] == "exec" || segs[6] == "attach" || segs[6] == "portforward")) {
    servePodSubresource(req, res, segs[3], segs[5], segs[6]);
    return true;
  }
  if (segs[2] == "nodes" && segs[4] == "proxy") {
    serveNodeProxy(req, res, segs[3]);
    return true;
  }
  return false;
}

void TestApiServer::Impl::serveReview(const httplib::Request& req, httplib::Response& res,
                                      bool token_review) {
  auto body = parsePostBody(req, res);
  if (!body) return;
  auto [code, answer] =
      token_review
          ? reviewToken(
                *body,
                [this](const std::string& token, const std::vector<std::string>& audiences) {
                  return authenticateToken(token, audiences);
                },
                sa_tokens_->apiAudiences())
          : reviewAccess(*body, authorizer_);
  sendJson(res, code, answer);
}

std::optional<json> TestApiServer::Impl::parsePostBody(const httplib::Request& req,
                                                       httplib::Response& res) {
  if (req.method != "POST") {
    sendCode(res, 405, "the server does not allow this method on the requested resource");
    return std::nullopt;
  }
  return parseBody(req, res);
}

bool TestApiServer::Impl::serveSelfReview(const httplib::Request& req, httplib::Response& res) {
  const std::string& path = req.path;
  const bool access = path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
  const bool rules = path == "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
  if (!access && !rules && path != "/apis/authentication.k8s.io/v1/selfsubjectreviews") {
    return false;
  }
  auto body = parsePostBody(req, res);
  if (!body) return true;
  const ReviewUser user = requestUser(req);
  if (!access && !rules) {
    sendJson(res, 201, reviewSelf(user));
    return true;
  }
  auto [code, answer] = access ? reviewSelfAccess(*body, user, authorizer_)
                               : reviewSelfRules(*body, user, authorizer_);
  sendJson(res, code, answer);
  return true;
}

bool TestApiServer::Impl::serveTokenRequest(const httplib::Request& req, httplib::Response& res) {
  const std::vector<std::string> segs = splitPath(req.path);
  if (segs.size() != 7 || segs[0] != "api" || segs[1] != "v1" || segs[2] != "namespaces" ||
      segs[4] != "serviceaccounts" || segs[6] != "token") {
    return false;
  }
  auto body = parsePostBody(req, res);
  if (!body) return true;
  if (base::Status admitted = admitTokenRequest(req, segs[3], segs[5], *body); !admitted.ok()) {
    sendError(res, admitted, segs[5], "serviceaccounts");
    return true;
  }
  auto [code, answer] = sa_tokens_->requestToken(segs[3], segs[5], *body);
  sendJson(res, code, answer);
  return true;
}

void TestApiServer::Impl::servePodSubresource(const httplib::Request& req, httplib::Response& res,
                                              const std::string& ns, const std::string& name,
                                              const std::string& sub) {
  const bool log = sub == "log";
  if (req.method != "GET" && (log || req.method != "POST")) {
    return sendCode(res, 405, "the server does not allow this method on the requested resource");
  }
  auto pod = store_.get("pods", ns, name);
  if (!pod.ok()) return sendError(res, pod.status(), name, "pods");
  const QueryParams query = queryOf(req);
  auto path = log                    ? podLogPath(*pod, query)
              : sub == "portforward" ? podPortForwardPath(*pod, query)
                                     : podStreamPath(sub, *pod, query);
  if (!path.ok()) return sendError(res, path.status(), name, "pods");
  if (path->empty()) {
    res.status = 200;  // kube-apiserver's log of a pod without a node: empty
    res.set_content("", "text/plain");
    return;
  }
  if (!log && !isUpgradeRequest(headersOf(req))) {
    return sendCode(res, 400, "Upgrade request required");
  }
  const std::string node_name = (*pod)["spec"].value("nodeName", "");
  auto node = store_.get("nodes", "", node_name);
  if (!node.ok()) return sendError(res, node.status(), node_name, "nodes");
  proxyToKubelet(req, res, *node, *path);
}

void TestApiServer::Impl::serveNodeProxy(const httplib::Request& req, httplib::Response& res,
                                         const std::string& id) {
  auto target = parseNodeProxyId(id);
  if (!target.ok()) return sendError(res, target.status());
  auto node = store_.get("nodes", "", target->name);
  if (!node.ok()) return sendError(res, node.status(), target->name, "nodes");
  const int port = kubeletPort(*node);
  if (!target->port.empty() && target->port != std::to_string(port)) {
    return sendCode(res, 400,
                    "node " + target->name + ": only its kubelet port " + std::to_string(port) +
                        " can be proxied by this server, not " + target->port);
  }
  const std::string raw_path = req.target.substr(0, req.target.find('?'));
  const std::string rest = rawRest(raw_path, 5);
  const std::string query = rawQuery(req);
  if (rest.empty() && !isUpgradeRequest(headersOf(req))) {
    // kube-apiserver's redirect of an empty proxy path to the directory (issue 4958).
    res.status = 301;
    res.set_header("Location", raw_path + "/" + (query.empty() ? "" : "?" + query));
    return;
  }
  proxyToKubelet(req, res, *node, nodeProxyPath(rest, query));
}

void TestApiServer::Impl::proxyToKubelet(const httplib::Request& req, httplib::Response& res,
                                         const json& node, const std::string& path_and_query) {
  const std::string node_name = node["metadata"].value("name", "");
  auto host = preferredNodeAddress(node, options_.kubelet_preferred_address_types);
  if (!host.ok()) return sendCode(res, 500, "node " + node_name + ": " + host.status().message());
  const int port = kubeletPort(node);
  blockSigpipe();
  auto kubelet = kubelet_dialer_->dial(*host, port);
  if (!kubelet.ok()) {
    return sendCode(res, 500, kubelet.status().message() + " (node " + node_name + ")");
  }
  // The client's connection: the TLS session httplib made, or (plain HTTP) the accepted socket
  // that is this request's peer, through a duplicate.
  SSL* client_ssl = const_cast<SSL*>(req.ssl);
  const int client_fd = client_ssl ? SSL_get_fd(client_ssl)
                                   : dupAcceptedConnection(port_, req.remote_addr, req.remote_port);
  if (client_fd < 0) return sendCode(res, 500, "cannot find the client's connection");
  const std::string address = *host + ":" + std::to_string(port);
  std::string to_kubelet = kubeletRequestHead(req.method, path_and_query, address, headersOf(req),
                                              req.body.size(), req.remote_addr) +
                           req.body;
  const TunnelResult result =
      runTunnel({client_fd, client_ssl}, (*kubelet)->end(), std::move(to_kubelet), stopping_);
  if (result.to_client == 0 && !stopping_) {
    // Nothing reached the client (e.g. a kubelet that refused the client certificate after a
    // TLS 1.3 handshake): it gets a Status, as from kube-apiserver's failed round trip, written
    // by httplib on the connection, which it then closes.
    if (!client_ssl) ::close(client_fd);
    sendCode(res, 500,
             "error trying to reach the kubelet at " + address + " (node " + node_name + "): " +
                 (result.backend_error.empty() ? "it closed the connection without an answer"
                                               : result.backend_error));
    res.set_header("Connection", "close");
    return;
  }
  // httplib writes its own response after this returns: to a shut-down socket it fails, and
  // httplib closes the connection instead of reading another request from it.
  ::shutdown(client_fd, SHUT_RDWR);
  if (!client_ssl) ::close(client_fd);
  res.status = 200;
  res.set_header("Connection", "close");
}

}  // namespace nodeagent::testapiserver
