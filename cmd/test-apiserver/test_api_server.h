// test-apiserver: a Kubernetes-API-compatible mock apiserver that the real kubectl (v1.32) and the
// python3-kubernetes client drive unchanged. It serves discovery (legacy plain JSON), namespaces,
// pods (+status), nodes (+status), events, configmaps, secrets, serviceaccounts and
// coordination.k8s.io/v1 leases with get, list (label/field selectors, limit/continue), create,
// update, the three patch types, delete (graceful pod deletion, preconditions), watch (chunked,
// bookmarks, timeouts, 410 Expired) and meta.k8s.io/v1 Table output. The store lives in memory
// (store.h).
//
// Service account tokens as kube-apiserver issues them: serviceaccounts/<name>/token answers a
// TokenRequest with a signed JWT (service_account_token.h), which authenticates requests and
// TokenReviews as the service account.
//
// The kubelet API's other half, as kube-apiserver: TokenReview (authentication.k8s.io/v1) from
// the token file's users and service account tokens, SubjectAccessReview (authorization.k8s.io/v1)
// from system:masters, an ABAC policy file and the Node authorizer (authz.h), and the pods/log,
// pods/exec, pods/attach, pods/portforward and nodes/proxy subresources proxied to the pod's
// node's kubelet over TLS (kubelet_location.h for where, tunnel.h for how: the client's
// connection is taken over from httplib and tunnelled to the kubelet, so upgrades (SPDY,
// WebSocket) and followed logs pass through). Writes by nodes pass NodeRestriction admission
// (node_restriction.h).
//
// Tests run it in-process:
//
//   auto server = testapiserver::TestApiServer::start({}).value();   // port 0: any free port
//   server->store().create("pods", "default", pod_json);              // no HTTP needed
//   client.get(server->url() + "/api/v1/pods");
//   server->closeWatches();                                           // fault injection
//   server->stop();                                                   // or let it die
//
// or spawn build/test-apiserver (main.cpp) and read its first stdout line,
// "listening on http(s)://ADDR:PORT".
//
// Test-only fault injection, also over HTTP on the same port (no authentication needed):
//   POST /_test/close-watches            ends every open watch (streams end cleanly)
//   POST /_test/fail {"code":500,"count":3[,"pathPrefix":"/api/v1/pods"]}
//                                        the next N matching requests fail with a Status of that
//                                        code (429 adds Retry-After: 1)
//   POST /_test/latency {"ms":200}       delays every later response (0 turns it off)
//   POST /_test/compact                  drops the watch history: older resourceVersions get 410
//   GET  /_test/status                   {"watches":N,"resourceVersion":"RV"} (tests wait on it)
//
// Threading: every public method may be called from any thread. Requests run on a pool of
// `threads` threads; each open watch and each kubelet tunnel holds one of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "cmd/test-apiserver/service_account_token.h"
#include "cmd/test-apiserver/store.h"

namespace nodeagent::testapiserver {

struct ServerOptions {
  std::string bind_address = "127.0.0.1";
  int port = 0;  // 0 = any free port (see TestApiServer::port())
  // kube-apiserver's static token file: `token,user,uid[,"group1,group2"]` per line. When set,
  // every request but /healthz, /livez, /readyz and /_test/ needs `Authorization: Bearer <token>`
  // with one of its tokens or a service account token for the API audiences.
  std::string token_auth_file;
  // kube-apiserver's --client-ca-file (TLS only): a client certificate that verifies against
  // these CAs authenticates its CN as the user and its O entries as the groups; one that does
  // not is refused with 401. Tokens keep working beside it.
  std::string client_ca_file;
  // kube-apiserver's --enable-bootstrap-token-auth: bearer tokens of the bootstrap-token-<id>
  // Secrets in kube-system authenticate as system:bootstrap:<id> (bootstrap_tokens.h).
  bool enable_bootstrap_token_auth = false;
  // The CertificateSigningRequest signer's CA (kube-controller-manager's
  // --cluster-signing-cert-file/--cluster-signing-key-file, both or neither): when unset, the
  // --cert-dir CA, else one made at start. `csr_auto_approve` approves node client requests as
  // kube-controller-manager's csrapproving controller (csr.h); false leaves them pending.
  std::string cluster_signing_cert_file;
  std::string cluster_signing_key_file;
  bool csr_auto_approve = true;
  // kube-apiserver's ABAC policy file (authz.h): what users outside system:masters may do.
  std::string authorization_policy_file;
  // What the server enforces on its own requests and answers in SubjectAccessReviews and the
  // self reviews (`kubectl auth can-i`), a comma-separated list as kube-apiserver's (authz.h):
  // "AlwaysAllow" (every authenticated request), "ABAC" (the policy file), "Node" (kubelets,
  // node_authorizer.h), e.g. "Node,ABAC". system:masters may always do everything; everyone may
  // read discovery, version, OpenAPI and health and ask about themselves, as kube-apiserver's
  // default RBAC roles allow. Empty: ABAC when a policy file is given, else AlwaysAllow.
  std::string authorization_mode;
  // kube-apiserver's NodeRestriction admission plugin (node_restriction.h), which kubeadm's
  // clusters enable: what a node (system:node:<name>) writes is checked whatever the authorizer
  // allowed. --enable-admission-plugins / --disable-admission-plugins=NodeRestriction.
  bool node_restriction = true;
  // Service account tokens (serviceaccounts/token, service_account_token.h): their issuer, API
  // audiences and expiry extension, and the PEM private key (RSA: RS256, ECDSA: ES256...) they
  // are signed with; empty: an ECDSA P-256 key generated at start.
  ServiceAccountTokenOptions service_accounts;
  std::string service_account_signing_key_file;
  // Both set: serve HTTPS. The kubeconfig then carries the certificate as its CA data.
  std::string tls_cert_file;
  std::string tls_private_key_file;
  // Without the two files: when set, serve HTTPS with a certificate issued at start by a CA kept
  // in this directory (serving_certs.h), the kubeconfig carrying that CA; when empty, plain HTTP
  // (the program always sets it unless told --insecure-serve-http).
  std::string cert_dir;
  // The kubelets behind pods/log, pods/exec, pods/attach, pods/portforward and nodes/proxy: the
  // client certificate and key presented to them (both or neither), the CA their serving
  // certificates must chain to (empty: not verified, as kube-apiserver), the node address types
  // in order of preference, and the time to connect and then to finish the TLS handshake.
  std::string kubelet_client_certificate;
  std::string kubelet_client_key;
  std::string kubelet_certificate_authority;
  std::vector<std::string> kubelet_preferred_address_types = {
      "InternalIP", "Hostname", "InternalDNS", "ExternalDNS", "ExternalIP"};
  std::chrono::milliseconds kubelet_dial_timeout{std::chrono::seconds(10)};
  StoreOptions store;
  // Request threads; every open watch holds one, so keep it well above the watcher count.
  int threads = 256;
  // How often an idle watch with allowWatchBookmarks=true gets a BOOKMARK.
  std::chrono::milliseconds bookmark_interval{std::chrono::seconds(60)};
  // Watch duration when the client sends no timeoutSeconds.
  std::chrono::seconds default_watch_timeout{1800};
  // A response (or watch event) write that makes no progress this long drops the connection: a
  // client that stops reading loses its watch.
  std::chrono::seconds write_timeout{5};
  // Stamps creationTimestamp/deletionTimestamp and Table ages; nullptr: the real clock. Watch
  // timeouts and bookmarks always use real time. Must outlive the server.
  base::Clock* clock = nullptr;
};

// One request as received (fault-injection calls excluded), for tests that check what a client
// sent (e.g. the status manager's PATCH bodies).
struct RecordedRequest {
  std::string method;
  std::string path;
  std::string query;  // decoded `k=v&k=v`, in the client's order
  std::string content_type;
  std::string body;
};

class TestApiServer {
 public:
  // Binds, starts serving and returns. Fails (naming the file or address) when the token file,
  // the TLS files or the bind fail.
  static base::StatusOr<std::unique_ptr<TestApiServer>> start(ServerOptions options = {});
  ~TestApiServer();
  TestApiServer(const TestApiServer&) = delete;
  TestApiServer& operator=(const TestApiServer&) = delete;

  int port() const;
  // "http://127.0.0.1:PORT" or "https://...".
  std::string url() const;
  bool tls() const;
  // Ends all watches, stops accepting, shuts the open connections down (an idle keep-alive
  // client does not hold it up; a response still being written is cut off) and joins every
  // request thread. Idempotent.
  void stop();

  // Direct access to the objects, bypassing HTTP (same semantics and watch events).
  Store& store();

  // A kubeconfig (server, CA data when TLS, the first token when auth is on) that kubectl,
  // python3-kubernetes and nodeagent use as is.
  std::string kubeconfig() const;
  base::Status writeKubeconfig(const std::filesystem::path& path) const;

  // Fault injection (same as the /_test/ endpoints).
  void closeWatches();
  // The next `count` requests whose path starts with `path_prefix` fail with `http_code`.
  void failNextRequests(int http_code, int count, std::string path_prefix = "");
  void setLatency(std::chrono::milliseconds latency);
  void compact();

  std::vector<RecordedRequest> requests() const;
  void clearRequests();
  size_t openWatches() const;

  class Impl;

 private:
  explicit TestApiServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One line of a token auth file. What these users (and service accounts, by their tokens) may do
// is the authorization mode's decision; the groups count there and in TokenReview answers, which
// kubelets pass on to their SubjectAccessReviews.
struct TokenUser {
  std::string token;
  std::string user;
  std::string uid;
  std::vector<std::string> groups;
};

// Parses a token auth file (`token,user,uid[,"group1,group2"]` per line, `#` comments and blank
// lines skipped); InvalidArgument naming the file and line.
base::StatusOr<std::vector<TokenUser>> parseTokenAuthFile(const std::filesystem::path& path);

}  // namespace nodeagent::testapiserver
