// The test apiserver's side of the kubelet API: TokenReview and SubjectAccessReview over HTTP,
// and pods/log, pods/exec and nodes/proxy proxied to a fake kubelet (a TLS server written here
// that requires the apiserver's client certificate), over a plain-HTTP and an HTTPS apiserver.
#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/test_api_server.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/integration_env.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using nodeagent::testing::eventually;
using nodeagent::testing::TempDir;
using nodeagent::testing::TestPki;
using nodeagent::testing::writeFile;
using namespace std::chrono_literals;

namespace {

using SteadyClock = std::chrono::steady_clock;

// Blocking socket reads time out this often so loops can check their stop flag and deadline.
void setReceiveTimeout(int fd) {
  timeval tv{0, 50 * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

// OpenSSL writes to a socket whose peer left raise SIGPIPE: the test's threads that write
// through TLS block it (it then stays pending, harmless).
void blockSigpipe() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// SSL_read or SSL_write on a socket with a receive timeout: retries a timed-out wait while
// `keep_going` holds. >0 bytes, 0 when the stream ended or failed.
template <typename Op>
int sslRetry(SSL* ssl, const std::function<bool()>& keep_going, Op op) {
  while (true) {
    ERR_clear_error();
    const int r = op();
    if (r > 0) return r;
    const int e = SSL_get_error(ssl, r);
    if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || !keep_going()) return 0;
  }
}

bool sslWriteAll(SSL* ssl, const std::string& data, const std::function<bool()>& keep_going) {
  size_t off = 0;
  while (off < data.size()) {
    const int n = sslRetry(ssl, keep_going, [&] {
      return SSL_write(ssl, data.data() + off, static_cast<int>(data.size() - off));
    });
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string chunk(const std::string& data) {
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", data.size());
  return std::string(size) + "\r\n" + data + "\r\n";
}

// A kubelet stand-in: a blocking OpenSSL server on 127.0.0.1 (one thread a connection) that
// requires a client certificate from the test CA. /containerLogs/ answers two lines (and with
// follow=true keeps the stream open until the client leaves); an upgrade request gets
// 101 Switching Protocols and then its bytes echoed; anything else its request line.
class FakeKubelet {
 public:
  struct Seen {
    std::string head;
    std::string client_cn;
  };

  FakeKubelet(const TestPki::Files& serving, const std::filesystem::path& client_ca) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    REQUIRE(SSL_CTX_use_certificate_chain_file(ctx_, serving.cert_file.c_str()) == 1);
    REQUIRE(SSL_CTX_use_PrivateKey_file(ctx_, serving.key_file.c_str(), SSL_FILETYPE_PEM) == 1);
    REQUIRE(SSL_CTX_load_verify_locations(ctx_, client_ca.c_str(), nullptr) == 1);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0);
    REQUIRE(::listen(listen_fd_, 256) == 0);
    REQUIRE(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { acceptLoop(); });
  }
  ~FakeKubelet() {
    stop_ = true;
    acceptor_.join();
    std::vector<std::thread> workers;
    {
      std::lock_guard lock(mu_);
      workers.swap(workers_);
    }
    for (auto& t : workers) t.join();
    ::close(listen_fd_);
    SSL_CTX_free(ctx_);
  }

  int port() const { return port_; }
  std::vector<Seen> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  // Connections whose streams (log follows, upgrades) ended because the client side left.
  int streamsEnded() const { return streams_ended_; }
  int streamsOpen() const { return streams_open_; }
  int handshakeFailures() const { return handshake_failures_; }

 private:
  void acceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      setReceiveTimeout(fd);
      std::lock_guard lock(mu_);
      workers_.emplace_back([this, fd] { serve(fd); });
    }
  }

  void serve(int fd) {
    blockSigpipe();
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, fd);
    auto keep_going = [this] { return !stop_.load(); };
    if (sslRetry(ssl, keep_going, [&] { return SSL_accept(ssl); }) != 1) {
      // Read until the client leaves: closing with its request unread would reset the
      // connection, and the reset can overtake the alert that says why.
      char buf[4096];
      while (!stop_) {
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN)) break;
      }
      ++handshake_failures_;
    } else {
      respond(ssl);
    }
    SSL_free(ssl);
    ::close(fd);
  }

  std::string readHead(SSL* ssl) {
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos) {
      const int n = sslRetry(
          ssl, [this] { return !stop_.load(); }, [&] { return SSL_read(ssl, buf, sizeof(buf)); });
      if (n <= 0) return "";
      head.append(buf, static_cast<size_t>(n));
    }
    return head;
  }

  void record(SSL* ssl, const std::string& head) {
    Seen seen{head, ""};
    if (X509* cert = SSL_get1_peer_certificate(ssl)) {
      char cn[256] = {};
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
      seen.client_cn = cn;
      X509_free(cert);
    }
    std::lock_guard lock(mu_);
    seen_.push_back(std::move(seen));
  }

  void respond(SSL* ssl) {
    auto keep_going = [this] { return !stop_.load(); };
    const std::string head = readHead(ssl);
    if (head.empty()) return;
    record(ssl, head);
    const std::string line = head.substr(0, head.find("\r\n"));
    if (line.find(" /containerLogs/") != std::string::npos) {
      sslWriteAll(
          ssl,
          "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" +
              chunk("line 1\n") + chunk("line 2\n"),
          keep_going);
      if (line.find("follow=true") == std::string::npos) {
        sslWriteAll(ssl, "0\r\n\r\n", keep_going);
        return;
      }
      return holdStream(ssl, false);
    }
    if (head.find("\r\nUpgrade: ") != std::string::npos) {
      sslWriteAll(
          ssl,
          "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n",
          keep_going);
      return holdStream(ssl, true);
    }
    sslWriteAll(ssl,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                    std::to_string(line.size()) + "\r\nConnection: close\r\n\r\n" + line,
                keep_going);
  }

  // Reads (echoing when asked) until the client side ends the stream.
  void holdStream(SSL* ssl, bool echo) {
    ++streams_open_;
    auto keep_going = [this] { return !stop_.load(); };
    char buf[16384];
    while (true) {
      const int n = sslRetry(ssl, keep_going, [&] { return SSL_read(ssl, buf, sizeof(buf)); });
      if (n <= 0) break;
      if (echo && !sslWriteAll(ssl, std::string(buf, static_cast<size_t>(n)), keep_going)) break;
    }
    --streams_open_;
    if (!stop_) ++streams_ended_;
  }

  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> streams_ended_{0}, streams_open_{0}, handshake_failures_{0};
  mutable std::mutex mu_;
  std::vector<Seen> seen_;
  std::vector<std::thread> workers_;
  std::thread acceptor_;
};

// A client connection to the apiserver, plain or TLS (not verified), with blocking I/O and
// short receive timeouts; one thread uses it at a time.
class RawClient {
 public:
  // No Catch assertions: clients are also opened from other threads. See connected().
  RawClient(int port, bool tls) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    setReceiveTimeout(fd_);
    if (!tls) {
      connected_ = true;
      return;
    }
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    const auto deadline = SteadyClock::now() + 10s;
    connected_ = sslRetry(
                     ssl_, [&] { return SteadyClock::now() < deadline; },
                     [&] { return SSL_connect(ssl_); }) == 1;
  }
  ~RawClient() { close(); }

  bool connected() const { return connected_; }

  bool send(const std::string& data) {
    blockSigpipe();
    if (ssl_) return sslWriteAll(ssl_, data, [] { return true; });
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // Reads until `needle` has arrived after `from`, the stream ends or the deadline passes.
  bool readUntil(const std::string& needle, size_t from = 0,
                 std::chrono::milliseconds deadline = 10s) {
    const auto until = SteadyClock::now() + deadline;
    while (received_.find(needle, from) == std::string::npos) {
      if (SteadyClock::now() >= until || !readSome(until)) return false;
    }
    return true;
  }
  // Reads until the server closes the connection; true when it did within the deadline.
  bool readToEnd(std::chrono::milliseconds deadline = 10s) {
    const auto until = SteadyClock::now() + deadline;
    while (SteadyClock::now() < until) {
      if (!readSome(until)) return SteadyClock::now() < until;
    }
    return false;
  }
  // Reads until `n` bytes in all have arrived, the stream ends or the deadline passes.
  bool readAtLeast(size_t n, std::chrono::milliseconds deadline = 10s) {
    const auto until = SteadyClock::now() + deadline;
    while (received_.size() < n) {
      if (SteadyClock::now() >= until || !readSome(until)) return false;
    }
    return true;
  }
  // Reads until one HTTP response (with a Content-Length) has arrived whole.
  bool readResponse(std::chrono::milliseconds deadline = 10s) {
    const auto until = SteadyClock::now() + deadline;
    if (!readUntil("\r\n\r\n", 0, deadline)) return false;
    const size_t body = received_.find("\r\n\r\n") + 4;
    const size_t length_at = received_.find("Content-Length: ");
    if (length_at == std::string::npos || length_at > body) return false;
    const size_t length = std::stoul(received_.substr(length_at + 16));
    while (received_.size() < body + length) {
      if (SteadyClock::now() >= until || !readSome(until)) return false;
    }
    return true;
  }
  const std::string& received() const { return received_; }
  void close() {
    if (ssl_) SSL_free(ssl_);
    if (ctx_) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
    ssl_ = nullptr;
    ctx_ = nullptr;
    fd_ = -1;
  }

 private:
  // One read; false when the stream ended (or the deadline passed).
  bool readSome(SteadyClock::time_point until) {
    char buf[16384];
    int n = 0;
    if (ssl_) {
      n = sslRetry(
          ssl_, [&] { return SteadyClock::now() < until; },
          [&] { return SSL_read(ssl_, buf, sizeof(buf)); });
    } else {
      do {
        n = static_cast<int>(::recv(fd_, buf, sizeof(buf), 0));
      } while (n < 0 && errno == EAGAIN && SteadyClock::now() < until);
    }
    if (n <= 0) return false;
    received_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string received_;
};

size_t openFds() {
  size_t n = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (::readdir(dir)) ++n;
    ::closedir(dir);
  }
  return n;
}

// An apiserver (HTTPS when `tls`) whose kubelet client certificate comes from `pki`, with node
// n1 at the fake kubelet and pod default/web (container app) on it.
struct ProxySetup {
  TempDir dir{"apiserver-kubelet-proxy"};
  TestPki pki{dir.path()};
  std::unique_ptr<FakeKubelet> kubelet;
  std::unique_ptr<TestApiServer> server;

  explicit ProxySetup(bool tls, bool verify_kubelet = true) {
    kubelet = std::make_unique<FakeKubelet>(pki.issueServing("n1"), pki.caFile());
    ServerOptions opts;
    const auto client = pki.issueClient("kube-apiserver-kubelet-client", {"system:masters"});
    opts.kubelet_client_certificate = client.cert_file;
    opts.kubelet_client_key = client.key_file;
    if (verify_kubelet) opts.kubelet_certificate_authority = pki.caFile();
    if (tls) {
      const auto serving = pki.issueServing("apiserver");
      opts.tls_cert_file = serving.cert_file;
      opts.tls_private_key_file = serving.key_file;
    }
    auto started = TestApiServer::start(opts);
    REQUIRE(started.ok());
    server = std::move(*started);
    addNode("n1", kubelet->port());
    addPod("web", "n1", {"app"});
  }
  void addNode(const std::string& name, int port) {
    REQUIRE(server->store()
                .create("nodes", "",
                        {{"metadata", {{"name", name}}},
                         {"status",
                          {{"addresses", {{{"type", "InternalIP"}, {"address", "127.0.0.1"}}}},
                           {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", port}}}}}}}})
                .ok());
  }
  void addPod(const std::string& name, const std::string& node,
              const std::vector<std::string>& containers) {
    json pod = {{"metadata", {{"name", name}}}, {"spec", {{"containers", json::array()}}}};
    if (!node.empty()) pod["spec"]["nodeName"] = node;
    for (const auto& c : containers) {
      pod["spec"]["containers"].push_back({{"name", c}, {"image", "busybox"}});
    }
    REQUIRE(server->store().create("pods", "default", pod).ok());
  }
  std::unique_ptr<RawClient> client() {
    return std::make_unique<RawClient>(server->port(), server->tls());
  }
  // For the test's own thread.
  std::unique_ptr<RawClient> checkedClient() {
    auto c = client();
    REQUIRE(c->connected());
    return c;
  }
};

std::string request(const std::string& method, const std::string& target,
                    const std::string& extra_headers = "") {
  return method + " " + target + " HTTP/1.1\r\nHost: apiserver\r\n" + extra_headers +
         (method == "POST" ? "Content-Length: 0\r\n" : "") + "\r\n";
}

const char kUpgrade[] =
    "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n";

// Opens an exec tunnel and checks it echoes.
std::unique_ptr<RawClient> openExec(ProxySetup& setup, const std::string& tag) {
  auto c = setup.checkedClient();
  REQUIRE(c->send(
      request("POST", "/api/v1/namespaces/default/pods/web/exec?command=sh&stdin=true&stdout=true",
              kUpgrade)));
  REQUIRE(c->readUntil("\r\n\r\n"));
  REQUIRE(c->received().starts_with("HTTP/1.1 101 Switching Protocols\r\n"));
  const size_t from = c->received().size();
  REQUIRE(c->send(tag));
  REQUIRE(c->readUntil(tag, from));
  return c;
}

std::unique_ptr<RawClient> openLogFollow(ProxySetup& setup) {
  auto c = setup.checkedClient();
  REQUIRE(c->send(request("GET", "/api/v1/namespaces/default/pods/web/log?follow=true")));
  REQUIRE(c->readUntil("line 2\n"));
  return c;
}

json statusOf(const RawClient& c) {
  const std::string& r = c.received();
  const size_t body = r.find("\r\n\r\n");
  return json::parse(body == std::string::npos ? "" : r.substr(body + 4), nullptr, false);
}

}  // namespace

namespace {

// An apiserver with a token file (admin in system:masters; alice in ops and dev) and a policy
// file (alice may read nodes; the dev group may GET /healthz), and an admin client of it.
struct ReviewSetup {
  TempDir dir{"apiserver-reviews"};
  std::unique_ptr<TestApiServer> server;
  std::unique_ptr<httplib::Client> client;

  ReviewSetup() {
    writeFile(dir / "tokens.csv",
              "admin-token,admin,uid-0,\"system:masters\"\n"
              "alice-token,alice,uid-1,\"ops,dev\"\n");
    const std::string policy =
        R"({"apiVersion":"abac.authorization.kubernetes.io/v1beta1","kind":"Policy","spec":)";
    writeFile(dir / "policy.jsonl",
              "# alice may read nodes and their kubelet API\n" + policy +
                  R"({"user":"alice","namespace":"*","resource":"nodes","apiGroup":"*",)"
                  R"("readonly":true}})"
                  "\n" +
                  policy + R"({"group":"dev","nonResourcePath":"/healthz"}})" + "\n");
    ServerOptions opts;
    opts.token_auth_file = dir / "tokens.csv";
    opts.authorization_policy_file = dir / "policy.jsonl";
    auto started = TestApiServer::start(opts);
    REQUIRE(started.ok());
    server = std::move(*started);
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    client->set_bearer_token_auth("admin-token");
  }
  std::pair<int, json> post(const std::string& path, const json& body) {
    auto res = client->Post(path.c_str(), body.dump(), "application/json");
    REQUIRE(res);
    INFO(res->body);
    return {res->status, json::parse(res->body)};
  }
  json access(const json& spec) {
    return post("/apis/authorization.k8s.io/v1/subjectaccessreviews", {{"spec", spec}})
        .second["status"];
  }
};

}  // namespace

TEST_CASE("kubelet API: TokenReview answers from the token file, and discovery lists the reviews",
          "[integration][apiserver]") {
  ReviewSetup setup;
  const std::string tr = "/apis/authentication.k8s.io/v1/tokenreviews";
  auto [known_code, known] = setup.post(tr, {{"apiVersion", "authentication.k8s.io/v1"},
                                             {"kind", "TokenReview"},
                                             {"spec", {{"token", "alice-token"}}}});
  CHECK(known_code == 201);
  CHECK(known["status"]["authenticated"] == true);
  CHECK(known["status"]["user"] == json{{"username", "alice"},
                                        {"uid", "uid-1"},
                                        {"groups", {"ops", "dev", "system:authenticated"}}});
  auto [unknown_code, unknown] = setup.post(tr, {{"spec", {{"token", "bogus"}}}});
  CHECK(unknown_code == 201);
  CHECK(unknown["status"]["authenticated"] == false);
  auto get = setup.client->Get(tr.c_str());
  REQUIRE(get);
  CHECK(get->status == 405);

  auto groups = setup.client->Get("/apis");
  REQUIRE(groups);
  CHECK_THAT(groups->body,
             Catch::Contains("authentication.k8s.io") && Catch::Contains("authorization.k8s.io"));
  auto authz = setup.client->Get("/apis/authorization.k8s.io/v1");
  REQUIRE(authz);
  CHECK_THAT(authz->body, Catch::Contains("subjectaccessreviews"));
  auto core = setup.client->Get("/api/v1");
  REQUIRE(core);
  CHECK_THAT(core->body, Catch::Contains("pods/exec") && Catch::Contains("nodes/proxy"));
}

TEST_CASE("kubelet API: SubjectAccessReview allows masters and what the policy file allows",
          "[integration][apiserver]") {
  ReviewSetup setup;
  json node_proxy = {
      {"verb", "get"}, {"resource", "nodes"}, {"subresource", "proxy"}, {"name", "n1"}};
  CHECK(setup.access({{"user", "alice"}, {"resourceAttributes", node_proxy}})["allowed"] == true);
  node_proxy["verb"] = "create";
  CHECK(setup.access({{"user", "alice"}, {"resourceAttributes", node_proxy}}) ==
        json{{"allowed", false}, {"reason", "No policy matched."}});
  CHECK(setup.access({{"user", "root"},
                      {"groups", {"system:masters"}},
                      {"resourceAttributes", node_proxy}})["allowed"] == true);
  const json healthz = {{"path", "/healthz"}, {"verb", "get"}};
  CHECK(setup.access({{"user", "bob"},
                      {"groups", {"dev"}},
                      {"nonResourceAttributes", healthz}})["allowed"] == true);
  const json metrics = {{"path", "/metrics"}, {"verb", "get"}};
  CHECK(setup.access({{"user", "bob"},
                      {"groups", {"dev"}},
                      {"nonResourceAttributes", metrics}})["allowed"] == false);
  CHECK(
      setup.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", {{"spec", {{"user", "x"}}}})
          .first == 422);
}

TEST_CASE("kubelet API: a bad policy file stops the start naming the file and line",
          "[integration][apiserver]") {
  TempDir dir("apiserver-reviews");
  writeFile(dir / "policy.jsonl", "\n{\"apiVersion\":\"v1\"}\n");
  ServerOptions opts;
  opts.authorization_policy_file = dir / "policy.jsonl";
  auto server = TestApiServer::start(opts);
  REQUIRE_FALSE(server.ok());
  CHECK_THAT(server.status().message(),
             Catch::Contains((dir / "policy.jsonl").string() + " line 2"));
  opts.authorization_policy_file.clear();
  opts.kubelet_client_certificate = dir / "missing.crt";
  opts.kubelet_client_key = dir / "missing.key";
  server = TestApiServer::start(opts);
  REQUIRE_FALSE(server.ok());
  CHECK_THAT(server.status().message(), Catch::Contains("missing.crt"));
}

TEST_CASE("kubelet API: logs, exec and nodes/proxy reach the kubelet through the apiserver",
          "[integration][apiserver]") {
  const bool tls = GENERATE(false, true);
  INFO("tls " << tls);
  ProxySetup setup(tls);
  auto logs = setup.checkedClient();
  REQUIRE(logs->send(request("GET", "/api/v1/namespaces/default/pods/web/log?tailLines=5",
                             "Authorization: Bearer secret-token\r\n")));
  REQUIRE(logs->readToEnd());
  CHECK(logs->received().starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK_THAT(logs->received(),
             Catch::EndsWith(chunk("line 1\n") + chunk("line 2\n") + "0\r\n\r\n"));
  REQUIRE(setup.kubelet->seen().size() == 1);
  const auto first = setup.kubelet->seen()[0];
  CHECK(first.head.starts_with("GET /containerLogs/default/web/app?tailLines=5 HTTP/1.1\r\n"));
  CHECK(first.head.find("secret-token") == std::string::npos);
  CHECK(first.head.find("\r\nConnection: close\r\n") != std::string::npos);
  CHECK(first.client_cn == "kube-apiserver-kubelet-client");

  {
    auto follow = openLogFollow(setup);
    REQUIRE(eventually([&] { return setup.kubelet->streamsOpen() == 1; }));
  }  // the client leaves: the kubelet's stream ends
  CHECK(eventually([&] { return setup.kubelet->streamsEnded() == 1; }));

  auto exec = openExec(setup, "ping-1");
  const std::string exec_head = setup.kubelet->seen().back().head;
  CHECK(exec_head.starts_with("POST /exec/default/web/app?command=sh&input=1&output=1 HTTP/1.1"));
  CHECK(exec_head.find("\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n") !=
        std::string::npos);
  std::string block(64 * 1024, 'x');
  for (int i = 0; i < 16; ++i) {  // 1 MiB each way, through buffers of 64 KiB
    block[0] = static_cast<char>('a' + i);
    const size_t from = exec->received().size();
    REQUIRE(exec->send(block));
    REQUIRE(exec->readUntil(block, from));
  }
  exec.reset();
  CHECK(eventually([&] { return setup.kubelet->streamsEnded() == 2; }));

  auto proxy = setup.checkedClient();
  REQUIRE(proxy->send(request("GET", "/api/v1/nodes/n1/proxy/stats/../pods?x=1%202")));
  REQUIRE(proxy->readToEnd());
  CHECK_THAT(proxy->received(), Catch::EndsWith("GET /pods?x=1%202 HTTP/1.1"));
  auto redirect = setup.checkedClient();
  REQUIRE(redirect->send(request("GET", "/api/v1/nodes/n1/proxy")));
  REQUIRE(redirect->readUntil("\r\n\r\n"));
  CHECK(redirect->received().starts_with("HTTP/1.1 301"));
  CHECK(redirect->received().find("Location: /api/v1/nodes/n1/proxy/\r\n") != std::string::npos);
}

namespace {

// Pods whose kubelet requests fail: two containers, no node, a node that does not exist, and a
// node whose kubelet port refuses connections.
void addFailingPods(ProxySetup& setup) {
  setup.addPod("two", "n1", {"a", "b"});
  setup.addPod("unbound", "", {"a"});
  setup.addPod("lost", "gone", {"a"});
  // A node whose kubelet port refuses connections.
  const int closed_port = nodeagent::testing::refusedLoopbackPort();
  setup.addNode("down", closed_port);
  setup.addPod("ondown", "down", {"a"});
}

}  // namespace

TEST_CASE("kubelet API: proxy errors are Status objects as kube-apiserver's",
          "[integration][apiserver]") {
  ProxySetup setup(false);
  addFailingPods(setup);
  struct Row {
    std::string target;
    int code;
    std::string message;
  };
  auto row = GENERATE(
      Row{"/api/v1/namespaces/default/pods/two/log", 400,
          "a container name must be specified for pod two, choose one of: [a b]"},
      Row{"/api/v1/namespaces/default/pods/nope/log", 404, "pods \"nope\" not found"},
      Row{"/api/v1/namespaces/default/pods/unbound/exec?command=ls&stdout=true", 400,
          "pod unbound does not have a host assigned"},
      Row{"/api/v1/namespaces/default/pods/lost/log", 404, "nodes \"gone\" not found"},
      Row{"/api/v1/namespaces/default/pods/web/exec?command=ls&stdout=1&container=zz", 400,
          "container zz is not valid for pod web"},
      Row{"/api/v1/namespaces/default/pods/ondown/log", 500, "connect: connection refused"},
      Row{"/api/v1/nodes/missing/proxy/pods", 404, "nodes \"missing\" not found"});
  INFO(row.target);
  auto c = setup.checkedClient();
  REQUIRE(c->send(request("GET", row.target, kUpgrade)));
  REQUIRE(c->readResponse());
  const json status = statusOf(*c);
  REQUIRE(status.is_object());
  CHECK(status["code"] == row.code);
  CHECK_THAT(status["message"].get<std::string>(), Catch::Contains(row.message));
}

namespace {

// The Status a log request gets from an apiserver started anew with `opts` (n1 and web added
// again).
json logStatusWith(ProxySetup& setup, const ServerOptions& opts) {
  setup.server->stop();
  auto server = TestApiServer::start(opts);
  REQUIRE(server.ok());
  setup.server = std::move(*server);
  setup.addNode("n1", setup.kubelet->port());
  setup.addPod("web", "n1", {"app"});
  auto c = setup.checkedClient();
  REQUIRE(c->send(request("GET", "/api/v1/namespaces/default/pods/web/log")));
  REQUIRE(c->readResponse());
  return statusOf(*c);
}

}  // namespace

TEST_CASE("kubelet API: a kubelet certificate from another CA fails the TLS handshake",
          "[integration][apiserver]") {
  ProxySetup setup(false);
  TempDir other_dir("apiserver-other-ca");
  TestPki other(other_dir.path(), "other-ca");
  ServerOptions opts;
  const auto client = setup.pki.issueClient("kube-apiserver-kubelet-client");
  opts.kubelet_client_certificate = client.cert_file;
  opts.kubelet_client_key = client.key_file;
  opts.kubelet_certificate_authority = other.caFile();
  const json status = logStatusWith(setup, opts);
  CHECK(status["code"] == 500);
  CHECK_THAT(status["message"].get<std::string>(),
             Catch::Contains("certificate verify failed") && Catch::Contains("node n1"));
  CHECK(setup.kubelet->seen().empty());
}

TEST_CASE("kubelet API: a kubelet that refuses the apiserver without a client certificate",
          "[integration][apiserver]") {
  ProxySetup setup(false);
  ServerOptions opts;  // no --kubelet-client-certificate
  opts.kubelet_certificate_authority = setup.pki.caFile();
  const json status = logStatusWith(setup, opts);
  CHECK(status["code"] == 500);
  CHECK_THAT(status["message"].get<std::string>(),
             Catch::Contains("error trying to reach the kubelet at 127.0.0.1:") &&
                 Catch::Contains("(node n1)") && Catch::Contains("certificate required"));
  CHECK(eventually([&] { return setup.kubelet->handshakeFailures() == 1; }));
}

TEST_CASE(
    "kubelet API: 50 log follows and 20 exec tunnels at once, ended by the clients and by "
    "stop",
    "[integration][apiserver]") {
  const bool tls = GENERATE(false, true);
  INFO("tls " << tls);
  const size_t fds_before = openFds();
  {
    ProxySetup setup(tls, false);
    std::vector<std::unique_ptr<RawClient>> follows(50), execs(20);
    std::vector<std::thread> openers;
    std::atomic<int> opened{0};
    for (size_t i = 0; i < follows.size(); ++i) {
      openers.emplace_back([&, i] {
        auto c = setup.client();
        if (c->connected() &&
            c->send(request("GET", "/api/v1/namespaces/default/pods/web/log?follow=1")) &&
            c->readUntil("line 2\n")) {
          ++opened;
        }
        follows[i] = std::move(c);
      });
    }
    for (auto& t : openers) t.join();
    for (size_t i = 0; i < execs.size(); ++i)
      execs[i] = openExec(setup, "tag-" + std::to_string(i));
    REQUIRE(opened == 50);
    REQUIRE(eventually([&] { return setup.kubelet->streamsOpen() == 70; }));
    follows.clear();  // the clients leave: their kubelet streams end
    CHECK(eventually([&] { return setup.kubelet->streamsEnded() == 50; }));
    const size_t from = execs[7]->received().size();
    REQUIRE(execs[7]->send("still-open"));
    CHECK(execs[7]->readUntil("still-open", from));
    setup.server->stop();  // ends the remaining tunnels
    CHECK(eventually([&] { return setup.kubelet->streamsEnded() == 70; }));
    for (auto& e : execs) CHECK(e->readToEnd());
  }
  CHECK(eventually([&] { return openFds() <= fds_before; }));
}

TEST_CASE("kubelet API: kubectl logs, logs -f and get --raw nodes/proxy through the program",
          "[integration][apiserver]") {
  TempDir dir("apiserver-kubectl-logs");
  TestPki pki(dir.path());
  FakeKubelet kubelet(pki.issueServing("n1"), pki.caFile());
  const auto client = pki.issueClient("kube-apiserver-kubelet-client");
  nodeagent::testing::SpawnedApiServer server(
      dir, {"--kubelet-client-certificate=" + client.cert_file.string(),
            "--kubelet-client-key=" + client.key_file.string(),
            "--kubelet-certificate-authority=" + pki.caFile().string(),
            "--kubelet-preferred-address-types=InternalIP,Hostname"});
  REQUIRE(server.ok());
  httplib::Client http("127.0.0.1", server.port());
  const json node = {{"metadata", {{"name", "n1"}}},
                     {"status",
                      {{"addresses", {{{"type", "InternalIP"}, {"address", "127.0.0.1"}}}},
                       {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", kubelet.port()}}}}}}}};
  const json pod = {
      {"metadata", {{"name", "web"}}},
      {"spec", {{"nodeName", "n1"}, {"containers", {{{"name", "app"}, {"image", "busybox"}}}}}}};
  auto made_node = http.Post("/api/v1/nodes", node.dump(), "application/json");
  auto made_pod = http.Post("/api/v1/namespaces/default/pods", pod.dump(), "application/json");
  REQUIRE((made_node && made_node->status == 201 && made_pod && made_pod->status == 201));

  auto kubectl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"kubectl", "--kubeconfig=" + server.kubeconfig().string(),
                                     "--cache-dir=" + (dir / "kube-cache").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  };
  auto logs = nodeagent::testing::runCommand(kubectl({"logs", "web"}), dir);
  INFO(logs.err);
  CHECK(logs.exit_code == 0);
  CHECK(logs.out == "line 1\nline 2\n");
  auto wrong = nodeagent::testing::runCommand(kubectl({"logs", "web", "-c", "zz"}), dir);
  CHECK(wrong.exit_code != 0);
  CHECK_THAT(wrong.err, Catch::Contains("container zz is not valid for pod web"));
  auto raw = nodeagent::testing::runCommand(
      kubectl({"get", "--raw", "/api/v1/nodes/n1/proxy/pods?a=b"}), dir);
  CHECK(raw.out == "GET /pods?a=b HTTP/1.1");

  nodeagent::testing::ChildProcess follow(kubectl({"logs", "-f", "web"}), dir / "follow.out",
                                          dir / "follow.err");
  REQUIRE(eventually([&] { return follow.out() == "line 1\nline 2\n"; }));
  follow.signal(SIGINT);  // kubectl's Ctrl-C: the kubelet's stream ends
  CHECK(follow.wait(10s));
  CHECK(eventually([&] { return kubelet.streamsEnded() == 1; }));
}

TEST_CASE(
    "kubelet API: an exec tunnel moves 8 MiB each way in order while the client writes "
    "and reads at once",
    "[integration][apiserver]") {
  ProxySetup setup(false);
  auto exec = openExec(setup, "start");
  const size_t from = exec->received().size();
  // 8 MiB, far more than the tunnel's buffers (64 KiB a direction) and the sockets hold: both
  // directions fill and drain many times over, and every byte arrives in order.
  std::string data(8 * 1024 * 1024, '\0');
  uint32_t x = 12345;
  for (char& c : data) c = static_cast<char>((x = x * 1103515245 + 12345) >> 24);
  std::atomic<bool> sent{false};
  std::thread writer([&] { sent = exec->send(data); });
  const bool echoed = exec->readAtLeast(from + data.size(), 60s);
  writer.join();
  CHECK(sent);
  REQUIRE(echoed);
  CHECK(exec->received().substr(from) == data);
}
