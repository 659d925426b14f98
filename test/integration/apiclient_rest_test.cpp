// RestClient against small httplib servers: token and client-certificate auth, TLS with the CA
// from a kubeconfig (relative paths and *-data), typed errors, 429 Retry-After, watch streams.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "agent/certificate/pki.h"
#include "api/api_errors.h"
#include "api/kubeconfig.h"
#include "api/rest_client.h"
#include "base/clock.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "test/support/api_test_client.h"
#include "test/support/fake_clock.h"
#include "test/support/hostile_http_server.h"
#include "test/support/integration_env.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using nodeagent::testing::eventually;
using nodeagent::testing::readFile;
using nodeagent::testing::TempDir;
using nodeagent::testing::writeFile;

namespace {

// CA, server certificate (SAN IP:127.0.0.1, DNS:apiserver.test), client certificate
// (O=system:nodes, CN=system:node:n1) and an unrelated CA, made with the openssl CLI.
bool makeTestPki(const std::filesystem::path& dir) {
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string q = " >/dev/null 2>&1";
  std::string cmd =
      "cd '" + dir.string() + "'" + " && openssl req -x509" + ec +
      " -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca" + q + " && openssl req -x509" + ec +
      " -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca" + q + " && openssl req" +
      ec + " -keyout server.key -out server.csr -subj /CN=apiserver" + q +
      " && printf 'subjectAltName=IP:127.0.0.1,DNS:apiserver.test' > server.ext" +
      " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
      " -out server.crt -days 2 -extfile server.ext" +
      q + " && openssl req" + ec +
      " -keyout client.key -out client.csr"
      " -subj /O=system:nodes/CN=system:node:n1" +
      q +
      " && openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
      " -out client.crt -days 2" +
      q;
  return std::system(cmd.c_str()) == 0;
}

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -6;
  for (unsigned char c : in) {
    val = (val << 8) + c;
    bits += 8;
    while (bits >= 0) {
      out.push_back(t[(val >> bits) & 0x3F]);
      bits -= 6;
    }
  }
  if (bits > -6) out.push_back(t[((val << 8) >> (bits + 8)) & 0x3F]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

// An httplib server on 127.0.0.1:<ephemeral>, served from its own thread.
class ServerThread {
 public:
  explicit ServerThread(std::unique_ptr<httplib::Server> server) : server_(std::move(server)) {}
  ~ServerThread() { stop(); }
  httplib::Server& server() { return *server_; }
  int start() {
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    eventually([&] { return server_->is_running(); });
    return port_;
  }
  void stop() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

std::string statusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason},
      {"code", code}}
      .dump();
}

// Routes shared by the plain and TLS servers: a token-protected pod list and a few errors.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> user_agents;
  std::vector<std::string> queries;
  std::vector<std::string> bodies;
  std::vector<std::string> content_types;
  std::atomic<int> too_many{0};
};

void addRoutes(httplib::Server& s, Recorder& rec, const std::string& token) {
  auto authorized = [token](const httplib::Request& req, httplib::Response& res) {
    if (token.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + token) return true;
    res.status = 401;
    res.set_content(statusBody(401, "Unauthorized", "Unauthorized"), "application/json");
    return false;
  };
  s.Get("/api/v1/pods", [&rec, authorized](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard lock(rec.mu);
      rec.user_agents.push_back(req.get_header_value("User-Agent"));
      rec.queries.push_back(req.get_param_value("fieldSelector") + "|" +
                            req.get_param_value("resourceVersion"));
    }
    if (!authorized(req, res)) return;
    res.set_content(
        R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"a"}}]})",
        "application/json");
  });
  s.Get("/api/v1/namespaces/default/pods/missing", [](const httplib::Request&,
                                                      httplib::Response& res) {
    res.status = 404;
    res.set_content(statusBody(404, "NotFound", "pods \"missing\" not found"), "application/json");
  });
  s.Post("/api/v1/namespaces/default/pods",
         [&rec](const httplib::Request& req, httplib::Response& res) {
           std::lock_guard lock(rec.mu);
           rec.bodies.push_back(req.body);
           res.status = 409;
           res.set_content(statusBody(409, "AlreadyExists", "pods \"web\" already exists"),
                           "application/json");
         });
  s.Patch("/api/v1/namespaces/default/pods/web/status",
          [&rec](const httplib::Request& req, httplib::Response& res) {
            std::lock_guard lock(rec.mu);
            rec.bodies.push_back(req.body);
            rec.content_types.push_back(req.get_header_value("Content-Type"));
            res.set_content(R"({"kind":"Pod","metadata":{"name":"web"}})", "application/json");
          });
  s.Delete("/api/v1/namespaces/default/pods/web",
           [&rec](const httplib::Request& req, httplib::Response& res) {
             std::lock_guard lock(rec.mu);
             rec.bodies.push_back(req.body);
             res.set_content(R"({"kind":"Pod","metadata":{"name":"web"}})", "application/json");
           });
  s.Get("/api/v1/nodes/busy", [&rec](const httplib::Request&, httplib::Response& res) {
    if (rec.too_many++ < 2) {
      res.status = 429;
      res.set_header("Retry-After", "3");
      res.set_content(statusBody(429, "TooManyRequests", "slow down"), "application/json");
      return;
    }
    res.set_content(R"({"kind":"Node","metadata":{"name":"busy"}})", "application/json");
  });
}

std::string kubeconfigYaml(const std::string& server, const std::string& cluster_extra,
                           const std::string& user) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
         "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
         "clusters:\n- name: k\n  cluster:\n    server: " +
         server + "\n" + cluster_extra + "users:\n- name: u\n  user:\n" + user;
}

api::RestClientOptions fastOptions() {
  api::RestClientOptions o;
  o.request_timeout = std::chrono::seconds(5);
  o.connect_timeout = std::chrono::seconds(2);
  return o;
}

}  // namespace

TEST_CASE("rest client: bearer token, user agent and query encoding over plain http",
          "[integration][apiclient]") {
  Recorder rec;
  ServerThread srv(std::make_unique<httplib::Server>());
  addRoutes(srv.server(), rec, "s3cret");
  int port = srv.start();
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  cfg.bearer_token = "s3cret";
  auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
  REQUIRE(client.ok());
  api::ListOptions lo;
  lo.field_selector = "spec.nodeName=n1";
  lo.resource_version = "0";
  auto list = (*client)->list(api::podsPath(), lo);
  REQUIRE(list.ok());
  CHECK((*list)["metadata"]["resourceVersion"] == "42");
  {
    std::lock_guard lock(rec.mu);
    CHECK(rec.user_agents.back() == std::string("nodeagent/") + NODEAGENT_VERSION);
    CHECK(rec.queries.back() == "spec.nodeName=n1|0");
  }

  cfg.bearer_token = "wrong";
  auto bad = api::RestClient::create(cfg, fastOptions(), base::realClock());
  REQUIRE(bad.ok());
  auto denied = (*bad)->list(api::podsPath(), lo);
  REQUIRE_FALSE(denied.ok());
  INFO(denied.status().toString());
  CHECK(api::isUnauthorized(denied.status()));
}

TEST_CASE("rest client: Status bodies become typed errors, patch and delete send the right bodies",
          "[integration][apiclient]") {
  Recorder rec;
  ServerThread srv(std::make_unique<httplib::Server>());
  addRoutes(srv.server(), rec, "");
  int port = srv.start();
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
  REQUIRE(client.ok());
  auto& c = **client;

  auto missing = c.getJson(api::podPath("default", "missing"));
  REQUIRE_FALSE(missing.ok());
  CHECK(api::isNotFound(missing.status()));
  CHECK(missing.status().message().find("pods \"missing\" not found") != std::string::npos);

  auto created = c.createJson(api::podsPath("default"), {{"metadata", {{"name", "web"}}}});
  REQUIRE_FALSE(created.ok());
  CHECK(api::isAlreadyExists(created.status()));

  auto patched = c.patchJson(api::podStatusPath("default", "web"),
                             {{"metadata", {{"uid", "u1"}}}, {"status", {{"phase", "Running"}}}},
                             api::PatchType::kStrategicMerge);
  REQUIRE(patched.ok());
  nlohmann::json del = {{"gracePeriodSeconds", 0}, {"preconditions", {{"uid", "u1"}}}};
  auto deleted = c.deleteJson(api::podPath("default", "web"), &del);
  REQUIRE(deleted.ok());
  std::lock_guard lock(rec.mu);
  CHECK(rec.content_types.back() == "application/strategic-merge-patch+json");
  auto sent = nlohmann::json::parse(rec.bodies.back());
  CHECK(sent["kind"] == "DeleteOptions");
  CHECK(sent["apiVersion"] == "v1");
  CHECK(sent["gracePeriodSeconds"] == 0);
  CHECK(sent["preconditions"]["uid"] == "u1");
}

TEST_CASE("rest client: 429 is retried after Retry-After", "[integration][apiclient]") {
  Recorder rec;
  ServerThread srv(std::make_unique<httplib::Server>());
  addRoutes(srv.server(), rec, "");
  int port = srv.start();
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  auto opts = fastOptions();
  std::vector<base::Duration> waits;
  opts.wait = [&](base::Duration d, std::stop_token) {
    waits.push_back(d);
    return true;
  };
  auto client = api::RestClient::create(cfg, opts, base::realClock());
  REQUIRE(client.ok());
  auto node = (*client)->getJson(api::nodePath("busy"));
  REQUIRE(node.ok());
  CHECK(rec.too_many == 3);
  CHECK(waits == std::vector<base::Duration>{std::chrono::seconds(3), std::chrono::seconds(3)});

  SECTION("and gives up after max_retries with a TooManyRequests error") {
    rec.too_many = -10;
    opts.max_retries = 1;
    auto limited = api::RestClient::create(cfg, opts, base::realClock());
    auto r = (*limited)->getJson(api::nodePath("busy"));
    REQUIRE_FALSE(r.ok());
    CHECK(api::isTooManyRequests(r.status()));
    CHECK(api::retryAfterOf(r.status()) == std::chrono::seconds(3));
  }
}

TEST_CASE("rest client: the rate limiter spaces calls beyond the burst",
          "[integration][apiclient]") {
  Recorder rec;
  ServerThread srv(std::make_unique<httplib::Server>());
  addRoutes(srv.server(), rec, "");
  int port = srv.start();
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  nodeagent::testing::FakeClock clock;
  auto opts = fastOptions();
  opts.qps = 5;
  opts.burst = 2;
  std::vector<base::Duration> waits;
  opts.wait = [&](base::Duration d, std::stop_token) {
    waits.push_back(d);
    clock.advance(d);
    return true;
  };
  auto client = api::RestClient::create(cfg, opts, clock);
  REQUIRE(client.ok());
  for (int i = 0; i < 5; ++i) REQUIRE((*client)->list(api::podsPath(), {}).ok());
  // The first two calls use the burst, then one call per 1/qps = 200ms.
  using std::chrono::milliseconds;
  CHECK(waits ==
        std::vector<base::Duration>{milliseconds(200), milliseconds(200), milliseconds(200)});
  CHECK(rec.queries.size() == 5);

  SECTION("kubelet's defaults: QPS 50, burst 100") {
    api::RestClientOptions defaults;
    CHECK(defaults.qps == 50);
    CHECK(defaults.burst == 100);
    auto d = api::RestClient::create(cfg, defaults, clock);
    REQUIRE(d.ok());
    auto& limiter = (*d)->rateLimiter();
    CHECK(limiter.qps() == 50);
    CHECK(limiter.burst() == 100);
    for (int i = 0; i < 100; ++i) REQUIRE(limiter.reserve() == base::Duration::zero());
    CHECK(limiter.reserve() == milliseconds(20));
  }
}

TEST_CASE("rest client: a server that does not answer fails the call after the request timeout",
          "[integration][apiclient]") {
  std::atomic<bool> release{false};
  ServerThread srv(std::make_unique<httplib::Server>());
  srv.server().Get("/api/v1/nodes/slow", [&](const httplib::Request&, httplib::Response& res) {
    eventually([&] { return release.load(); }, std::chrono::seconds(10));
    res.set_content("{}", "application/json");
  });
  int port = srv.start();
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  auto opts = fastOptions();
  opts.request_timeout = std::chrono::milliseconds(300);
  auto client = api::RestClient::create(cfg, opts, base::realClock());
  REQUIRE(client.ok());
  auto r = (*client)->getJson(api::nodePath("slow"));
  release = true;
  REQUIRE_FALSE(r.ok());
  INFO(r.status().toString());
  CHECK((r.status().code() == base::StatusCode::kUnavailable ||
         r.status().code() == base::StatusCode::kDeadlineExceeded));
  CHECK_FALSE(api::apiErrorOf(r.status()));
}

TEST_CASE("rest client: TLS with the kubeconfig CA, token and client certificates",
          "[integration][apiclient]") {
  TempDir dir;
  REQUIRE(makeTestPki(dir.path()));
  Recorder rec;
  // Client-certificate sections need a server that asks for one (and then requires it).
  const bool want_client_cert = GENERATE(true, false);
  auto ssl = want_client_cert ? std::make_unique<httplib::SSLServer>((dir / "server.crt").c_str(),
                                                                     (dir / "server.key").c_str(),
                                                                     (dir / "ca.crt").c_str())
                              : std::make_unique<httplib::SSLServer>((dir / "server.crt").c_str(),
                                                                     (dir / "server.key").c_str());
  REQUIRE(ssl->is_valid());
  std::atomic<bool> saw_client_cert{false};
  ServerThread srv(std::move(ssl));
  addRoutes(srv.server(), rec, "");
  srv.server().Get("/whoami", [&](const httplib::Request& req, httplib::Response& res) {
    X509* cert = req.ssl ? SSL_get_peer_certificate(req.ssl) : nullptr;
    std::string subject;
    if (cert) {
      char buf[256];
      X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
      subject = buf;
      X509_free(cert);
      saw_client_cert = true;
    }
    res.set_content(nlohmann::json{{"subject", subject}}.dump(), "application/json");
  });
  int port = srv.start();
  const std::string server = "https://127.0.0.1:" + std::to_string(port);
  std::filesystem::create_directories(dir / "kube/pki");
  std::filesystem::copy_file(dir / "ca.crt", dir / "kube/pki/ca.crt");
  std::filesystem::copy_file(dir / "client.crt", dir / "kube/pki/client.crt");
  std::filesystem::copy_file(dir / "client.key", dir / "kube/pki/client.key");
  // Writes kube/config with these cluster and user lines, and loads it.
  auto kubeconfig = [&](const std::string& cluster, const std::string& user) {
    writeFile(dir / "kube/config", kubeconfigYaml(server, cluster, user));
    auto cfg = api::loadKubeconfig(dir / "kube/config");
    REQUIRE(cfg.ok());
    return *cfg;
  };

  if (want_client_cert) {
    SECTION("relative paths, client certificate") {
      auto cfg =
          kubeconfig("    certificate-authority: pki/ca.crt\n",
                     "    client-certificate: pki/client.crt\n    client-key: pki/client.key\n");
      auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
      REQUIRE(client.ok());
      auto who = (*client)->getJson("/whoami");
      REQUIRE(who.ok());
      CHECK((*who)["subject"].get<std::string>().find("CN=system:node:n1") != std::string::npos);
      CHECK(saw_client_cert);
    }
    SECTION("a swapped client certificate is offered on the next connection") {
      auto cfg =
          kubeconfig("    certificate-authority: pki/ca.crt\n",
                     "    client-certificate: pki/client.crt\n    client-key: pki/client.key\n");
      auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
      REQUIRE(client.ok());
      auto who = (*client)->getJson("/whoami");  // keeps an idle connection with the old one
      REQUIRE(who.ok());
      CHECK((*who)["subject"].get<std::string>().find("CN=system:node:n1") != std::string::npos);
      certificate::CertificateRequest request;
      request.common_name = "system:node:n1-rotated";
      request.client_auth = true;
      auto rotated = certificate::issueCertificate(
          {readFile(dir / "ca.crt"), readFile(dir / "ca.key")}, request);
      REQUIRE(rotated.ok());
      REQUIRE((*client)->setClientCertificate(rotated->cert_pem, rotated->key_pem).ok());
      who = (*client)->getJson("/whoami");
      REQUIRE(who.ok());
      CHECK((*who)["subject"].get<std::string>().find("CN=system:node:n1-rotated") !=
            std::string::npos);
      CHECK_FALSE((*client)->setClientCertificate(rotated->cert_pem, "not a key").ok());
    }
    SECTION("*-data fields") {
      auto cfg =
          kubeconfig("    certificate-authority-data: " + base64(readFile(dir / "ca.crt")) + "\n",
                     "    client-certificate-data: " + base64(readFile(dir / "client.crt")) +
                         "\n    client-key-data: " + base64(readFile(dir / "client.key")) + "\n");
      auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
      REQUIRE(client.ok());
      auto list = (*client)->list(api::podsPath(), {});
      REQUIRE(list.ok());
    }
    return;
  }
  SECTION("tls-server-name selects the name checked on the certificate") {
    auto cfg = kubeconfig(
        "    certificate-authority: pki/ca.crt\n"
        "    tls-server-name: apiserver.test\n",
        "    token: t\n");
    auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
    CHECK((*client)->list(api::podsPath(), {}).ok());
    cfg.tls_server_name = "wrong.test";
    auto wrong = api::RestClient::create(cfg, fastOptions(), base::realClock());
    CHECK_FALSE((*wrong)->list(api::podsPath(), {}).ok());
  }
  SECTION("without a CA in the kubeconfig the server is still verified (system roots)") {
    auto cfg = kubeconfig("", "    token: t\n");
    auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
    REQUIRE(client.ok());
    auto list = (*client)->list(api::podsPath(), {});
    REQUIRE_FALSE(list.ok());
    INFO(list.status().toString());
    CHECK(list.status().message().find("TLS handshake failed") != std::string::npos);
    CHECK(rec.queries.empty());
  }
  SECTION("a server certificate from another CA is rejected; insecure-skip-tls-verify accepts it") {
    auto cfg = kubeconfig("    certificate-authority: ../other-ca.crt\n", "    token: t\n");
    auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
    REQUIRE(client.ok());
    auto list = (*client)->list(api::podsPath(), {});
    REQUIRE_FALSE(list.ok());
    INFO(list.status().toString());
    CHECK(rec.queries.empty());  // the request never reached the server

    auto insecure = kubeconfig("    insecure-skip-tls-verify: true\n", "    token: t\n");
    auto iclient = api::RestClient::create(insecure, fastOptions(), base::realClock());
    CHECK((*iclient)->list(api::podsPath(), {}).ok());
  }
}

TEST_CASE("rest client: watch streams events, ends with the in-stream error, stops on request",
          "[integration][apiclient]") {
  // Blocking (watch) and on an executor with no thread of its own (startWatch).
  const bool on_executor = GENERATE(false, true);
  INFO((on_executor ? "startWatch" : "watch"));
  asio::io_context ioc;
  auto work = asio::make_work_guard(ioc);
  std::thread io_thread([&] { ioc.run(); });
  struct Join {
    decltype(work)& w;
    std::thread& t;
    ~Join() {
      w.reset();
      t.join();
    }
  } join{work, io_thread};
  ServerThread srv(std::make_unique<httplib::Server>());
  std::atomic<bool> hold_open{false};
  std::atomic<bool> server_done{false};
  std::string mode;
  std::mutex mode_mu;
  std::string seen_query;
  srv.server().Get("/api/v1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    std::string m;
    {
      std::lock_guard lock(mode_mu);
      m = mode;
      seen_query = req.get_param_value("watch") + "|" + req.get_param_value("resourceVersion") +
                   "|" + req.get_param_value("allowWatchBookmarks") + "|" +
                   req.get_param_value("timeoutSeconds");
    }
    if (m == "gone-http") {
      res.status = 410;
      res.set_content(statusBody(410, "Expired", "too old resource version: 1 (5)"),
                      "application/json");
      return;
    }
    res.set_chunked_content_provider("application/json", [&, m](size_t, httplib::DataSink& sink) {
      std::string events =
          R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"11"}}})"
          "\n"
          R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}})"
          "\n";
      // Split mid-event to exercise chunk boundaries over the wire.
      sink.write(events.data(), 30);
      sink.write(events.data() + 30, events.size() - 30);
      if (m == "gone-stream") {
        std::string err =
            R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}})"
            "\n";
        sink.write(err.data(), err.size());
      } else if (m == "garbage") {
        std::string g = "}}}not json\n";
        sink.write(g.data(), g.size());
      } else if (m == "hold") {
        hold_open = true;
        while (sink.is_writable() && !server_done) std::this_thread::yield();
      }
      sink.done();
      return true;
    });
  });
  int port = srv.start();
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
  REQUIRE(client.ok());
  api::ListOptions lo;
  lo.resource_version = "10";
  lo.allow_watch_bookmarks = true;
  lo.timeout_seconds = 5;
  std::vector<std::string> got;
  auto collect = [&](api::RawWatchEvent&& ev) {
    got.push_back(std::string(api::watchEventTypeName(ev.type)) + "@" +
                  (*ev.object)["metadata"]["resourceVersion"].get<std::string>());
    return true;
  };
  auto run = [&](const std::string& m) {
    {
      std::lock_guard lock(mode_mu);
      mode = m;
    }
    got.clear();
    if (!on_executor) return (*client)->watch(api::podsPath(), lo, collect, {});
    std::promise<base::Status> done;
    auto watch = (*client)->startWatch(ioc.get_executor(), api::podsPath(), lo, collect,
                                       [&done](base::Status st) { done.set_value(st); });
    return done.get_future().get();
  };

  auto normal = run("normal");
  CHECK(normal.ok());
  CHECK(got == std::vector<std::string>{"ADDED@11", "BOOKMARK@12"});
  CHECK(seen_query == "true|10|true|5");

  auto gone_stream = run("gone-stream");
  CHECK(api::isGone(gone_stream));
  CHECK(got.size() == 2);

  auto gone_http = run("gone-http");
  INFO(gone_http.toString());
  CHECK(api::isGone(gone_http));
  CHECK(got.empty());

  auto garbage = run("garbage");
  CHECK(garbage.code() == base::StatusCode::kDataLoss);
  CHECK(got.size() == 2);

  {
    std::lock_guard lock(mode_mu);
    mode = "hold";
  }
  base::Status held;
  if (!on_executor) {
    std::stop_source stop;
    std::thread watcher([&] {
      held = (*client)->watch(
          api::podsPath(), lo, [](api::RawWatchEvent&&) { return true; }, stop.get_token());
    });
    REQUIRE(eventually([&] { return hold_open.load(); }));
    stop.request_stop();
    watcher.join();
  } else {
    std::promise<base::Status> done;
    auto watch = (*client)->startWatch(
        ioc.get_executor(), api::podsPath(), lo, [](api::RawWatchEvent&&) { return true; },
        [&done](base::Status st) { done.set_value(st); });
    REQUIRE(eventually([&] { return hold_open.load(); }));
    watch->cancel();
    held = done.get_future().get();
  }
  server_done = true;
  CHECK(held.code() == base::StatusCode::kCancelled);
}

TEST_CASE("http connection: a close() or cancel() before the exchange ends it, blocking or not",
          "[integration][apiclient]") {
  ServerThread srv(std::make_unique<httplib::Server>());
  srv.server().Get("/x", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  const api::HttpEndpoint endpoint{false, "127.0.0.1", srv.start()};
  api::HttpRequest request;
  request.target = "/x";

  api::HttpConnection fine(endpoint, nullptr, {});
  auto answered = fine.roundTrip(request);
  REQUIRE(answered.ok());
  CHECK(answered->body == "ok");

  api::HttpConnection closed(endpoint, nullptr, {});
  closed.close("the client certificate was rotated");
  auto refused = closed.roundTrip(request);
  CHECK(refused.status().code() == base::StatusCode::kUnavailable);
  CHECK(refused.status().message().find("rotated") != std::string::npos);

  asio::io_context ioc;
  for (const bool cancel : {false, true}) {
    api::HttpConnection conn(ioc.get_executor(), endpoint, nullptr, {});
    if (cancel) {
      conn.cancel();
    } else {
      conn.close("closed early");
    }
    std::optional<base::Status> ended;
    api::HttpBodyStream body;
    conn.streamAsync(request, body, [&ended](base::Status st) { ended = std::move(st); });
    ioc.restart();
    ioc.run_for(std::chrono::seconds(10));
    REQUIRE(ended.has_value());
    CHECK(ended->code() ==
          (cancel ? base::StatusCode::kCancelled : base::StatusCode::kUnavailable));
  }
}

TEST_CASE("rest client: many watches share one io_context thread and end with the client",
          "[integration][apiclient]") {
  ServerThread srv(std::make_unique<httplib::Server>());
  std::atomic<bool> server_done{false};
  srv.server().Get("/api/v1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.get_param_value("fieldSelector");
    res.set_chunked_content_provider(
        "application/json", [&, name](size_t, httplib::DataSink& sink) {
          std::string ev = R"({"type":"ADDED","object":{"metadata":{"name":")" + name +
                           R"(","resourceVersion":"7"}}})"
                           "\n";
          sink.write(ev.data(), ev.size());
          while (sink.is_writable() && !server_done) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          sink.done();
          return true;
        });
  });
  srv.server().new_task_queue = [] { return new httplib::ThreadPool(24); };
  int port = srv.start();
  // The held streams end before the server stops, however the test ends.
  struct EndStreams {
    std::atomic<bool>& done;
    ~EndStreams() { done = true; }
  } end_streams{server_done};
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  auto options = fastOptions();
  options.qps = 1000;
  options.burst = 1000;
  auto client = api::RestClient::create(cfg, options, base::realClock());
  REQUIRE(client.ok());

  // One thread runs every watch.
  asio::io_context ioc(1);
  auto work = asio::make_work_guard(ioc);
  std::thread io_thread([&] { ioc.run(); });
  constexpr int kWatches = 20;
  std::mutex mu;
  std::set<std::string> seen;
  std::vector<base::Status> ended;
  std::vector<std::shared_ptr<api::AsyncWatch>> watches;
  for (int i = 0; i < kWatches; ++i) {
    api::ListOptions lo;
    lo.field_selector = "w" + std::to_string(i);
    lo.timeout_seconds = 60;
    watches.push_back((*client)->startWatch(
        ioc.get_executor(), api::podsPath(), lo,
        [&](api::RawWatchEvent&& ev) {
          std::lock_guard lock(mu);
          seen.insert((*ev.object)["metadata"]["name"].get<std::string>());
          return true;
        },
        [&](base::Status st) {
          std::lock_guard lock(mu);
          ended.push_back(st);
        }));
  }
  CHECK(eventually([&] {
    std::lock_guard lock(mu);
    return seen.size() == kWatches;
  }));
  {
    std::lock_guard lock(mu);
    CHECK(ended.empty());
  }
  // shutdown() ends every watch, Cancelled.
  (*client)->shutdown();
  CHECK(eventually([&] {
    std::lock_guard lock(mu);
    return ended.size() == kWatches;
  }));
  {
    std::lock_guard lock(mu);
    for (const auto& st : ended) CHECK(st.code() == base::StatusCode::kCancelled);
  }
  server_done = true;
  work.reset();
  io_thread.join();
}

TEST_CASE("rest client: async wrapper completes on the caller's executor",
          "[integration][apiclient]") {
  Recorder rec;
  ServerThread srv(std::make_unique<httplib::Server>());
  addRoutes(srv.server(), rec, "");
  int port = srv.start();
  api::RestConfig cfg;
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
  REQUIRE(client.ok());
  testing::ApiPool pool(**client);
  api::AsyncRestClient async = pool.async();
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  std::thread::id ioc_thread = std::this_thread::get_id();
  std::optional<base::StatusOr<std::string>> via_callback;
  bool callback_on_ioc = false;
  std::atomic<int> calls_on_ioc{0};
  std::atomic<int> calls{0};
  async.run(
      [&](api::RestClient& c) {
        ++calls;
        if (std::this_thread::get_id() == ioc_thread) ++calls_on_ioc;
        return c.request("GET", api::podsPath(), {});
      },
      ioc.get_executor(), [](base::StatusOr<std::string>) {});
  async.request("GET", api::podsPath(), {}, "", "", ioc.get_executor(),
                [&](base::StatusOr<std::string> r) {
                  callback_on_ioc = std::this_thread::get_id() == ioc_thread;
                  via_callback = std::move(r);
                });
  // A coroutine's lambda closure dies after co_spawn returns: pass state as parameters.
  struct Out {
    std::optional<bool> not_found;
    bool on_ioc = false;
  } out;
  auto coro = [](api::AsyncRestClient& a, std::thread::id want, Out& o) -> asio::awaitable<void> {
    auto r = co_await a.request("GET", api::podPath("default", "missing"), {});
    o.on_ioc = std::this_thread::get_id() == want;
    o.not_found = !r.ok() && api::isNotFound(r.status());
  };
  asio::co_spawn(ioc, coro(async, ioc_thread, out), asio::detached);
  REQUIRE(eventually([&] {
    ioc.poll();
    return via_callback.has_value() && out.not_found.has_value();
  }));
  CHECK(via_callback->ok());
  CHECK(*out.not_found);
  CHECK(callback_on_ioc);
  CHECK(out.on_ioc);
  REQUIRE(eventually([&] { return calls == 1; }));
  CHECK(calls_on_ioc == 0);  // the blocking call ran on the pool, not on the io_context thread
}

TEST_CASE("rest client: every verb on pods, pods/status, nodes, nodes/status, leases and events",
          "[integration][apiclient]") {
  auto started = testapiserver::TestApiServer::start();
  REQUIRE(started.ok());
  auto& server = **started;
  auto client = nodeagent::testing::clientFor(server);
  auto& c = *client;
  using json = nlohmann::json;
  auto ok = [](const base::StatusOr<json>& r) {
    INFO(r.status().toString());
    REQUIRE(r.ok());
    return *r;
  };

  // pods: create, get, list (field selector), update, merge patch, watch, delete with options.
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", "web"}, {"namespace", "default"}}},
      {"spec", {{"nodeName", "n1"}, {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  json created = ok(c.createJson(api::podsPath("default"), pod));
  const std::string uid = created["metadata"]["uid"];
  json got = ok(c.getJson(api::podPath("default", "web")));
  CHECK(got["metadata"]["uid"] == uid);
  api::ListOptions mine;
  mine.field_selector = "spec.nodeName=n1";
  mine.resource_version = "0";
  json list = ok(c.list(api::podsPath(), mine));
  REQUIRE(list["items"].size() == 1);
  api::ListOptions theirs;
  theirs.field_selector = "spec.nodeName=n2";
  CHECK(ok(c.list(api::podsPath(), theirs))["items"].empty());
  got["metadata"]["labels"] = {{"tier", "web"}};
  json updated = ok(c.updateJson(api::podPath("default", "web"), got));
  CHECK(updated["metadata"]["labels"]["tier"] == "web");
  json merged =
      ok(c.patchJson(api::podPath("default", "web"), {{"metadata", {{"labels", {{"extra", "1"}}}}}},
                     api::PatchType::kMerge));
  CHECK(merged["metadata"]["labels"] == json{{"tier", "web"}, {"extra", "1"}});

  // pods/status: strategic merge patch (conditions merged by type) with the UID precondition,
  // then PUT of the whole object.
  ok(c.patchJson(
      api::podStatusPath("default", "web"),
      {{"metadata", {{"uid", uid}}},
       {"status",
        {{"phase", "Pending"}, {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}}}}}},
      api::PatchType::kStrategicMerge));
  json status =
      ok(c.patchJson(api::podStatusPath("default", "web"),
                     {{"status", {{"conditions", {{{"type", "Ready"}, {"status", "False"}}}}}}},
                     api::PatchType::kStrategicMerge));
  CHECK(status["status"]["conditions"].size() == 2);
  status["status"]["phase"] = "Running";
  CHECK(ok(c.updateJson(api::podStatusPath("default", "web"), status))["status"]["phase"] ==
        "Running");

  // watch from the list's version sees the later changes.
  std::vector<std::string> seen;
  std::stop_source stop_watch;
  api::ListOptions from = mine;
  from.resource_version = list["metadata"]["resourceVersion"];
  from.allow_watch_bookmarks = true;
  from.timeout_seconds = 30;
  std::mutex seen_mu;
  base::Status watch_end;
  std::thread watcher([&] {
    watch_end = c.watch(
        api::podsPath(), from,
        [&](api::RawWatchEvent&& ev) {
          std::lock_guard lock(seen_mu);
          if (ev.type != api::WatchEventType::kBookmark) {
            seen.push_back(std::string(api::watchEventTypeName(ev.type)));
          }
          return true;
        },
        stop_watch.get_token());
  });

  // delete: a UID precondition that does not match is a Conflict; grace 0 removes at once.
  json wrong = {{"gracePeriodSeconds", 0}, {"preconditions", {{"uid", "not-" + uid}}}};
  auto refused = c.deleteJson(api::podPath("default", "web"), &wrong);
  REQUIRE_FALSE(refused.ok());
  CHECK(api::isConflict(refused.status()));
  json now = {{"gracePeriodSeconds", 0}, {"preconditions", {{"uid", uid}}}};
  ok(c.deleteJson(api::podPath("default", "web"), &now));
  CHECK(api::isNotFound(c.getJson(api::podPath("default", "web")).status()));
  REQUIRE(eventually([&] {
    std::lock_guard lock(seen_mu);
    return !seen.empty() && seen.back() == "DELETED";
  }));
  stop_watch.request_stop();
  watcher.join();
  CHECK(watch_end.code() == base::StatusCode::kCancelled);
  // update, merge patch, two status changes (PATCH, PATCH, PUT), delete.
  CHECK(seen == std::vector<std::string>{"MODIFIED", "MODIFIED", "MODIFIED", "MODIFIED", "MODIFIED",
                                         "DELETED"});

  // nodes and nodes/status.
  json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "n1"}}}};
  ok(c.createJson(api::nodesPath(), node));
  CHECK(api::isAlreadyExists(c.createJson(api::nodesPath(), node).status()));
  ok(c.patchJson(api::nodePath("n1"), {{"metadata", {{"labels", {{"kubernetes.io/os", "linux"}}}}}},
                 api::PatchType::kStrategicMerge));
  json node_status = ok(c.patchJson(
      api::nodeStatusPath("n1"),
      {{"status",
        {{"conditions", {{{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}}}}}}},
      api::PatchType::kStrategicMerge));
  CHECK(node_status["status"]["conditions"][0]["type"] == "Ready");
  CHECK(node_status["metadata"]["labels"]["kubernetes.io/os"] == "linux");
  json n = ok(c.getJson(api::nodePath("n1")));
  n["status"]["capacity"] = {{"pods", "110"}};
  ok(c.updateJson(api::nodeStatusPath("n1"), n));
  CHECK(ok(c.list(api::nodesPath(), {}))["items"][0]["status"]["capacity"]["pods"] == "110");
  ok(c.deleteJson(api::nodePath("n1")));
  CHECK(api::isNotFound(c.getJson(api::nodePath("n1")).status()));

  // leases: create, get, optimistic update (a stale resourceVersion conflicts), merge patch,
  // delete.
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "n1"}, {"namespace", "kube-node-lease"}}},
                {"spec", {{"holderIdentity", "n1"}, {"leaseDurationSeconds", 40}}}};
  json l1 = ok(c.createJson(api::leasesPath("kube-node-lease"), lease));
  json l2 = ok(c.getJson(api::leasePath("kube-node-lease", "n1")));
  l2["spec"]["renewTime"] = "2026-01-01T00:00:10.000000Z";
  ok(c.updateJson(api::leasePath("kube-node-lease", "n1"), l2));
  l1["spec"]["renewTime"] = "2026-01-01T00:00:20.000000Z";  // l1's resourceVersion is stale now
  CHECK(api::isConflict(c.updateJson(api::leasePath("kube-node-lease", "n1"), l1).status()));
  ok(c.patchJson(api::leasePath("kube-node-lease", "n1"),
                 {{"spec", {{"leaseDurationSeconds", 20}}}}, api::PatchType::kMerge));
  json leases = ok(c.list(api::leasesPath("kube-node-lease"), {}));
  REQUIRE(leases["items"].size() == 1);
  CHECK(leases["items"][0]["spec"]["leaseDurationSeconds"] == 20);
  CHECK(leases["items"][0]["spec"]["renewTime"] == "2026-01-01T00:00:10.000000Z");
  ok(c.deleteJson(api::leasePath("kube-node-lease", "n1")));

  // events: create, list, merge patch (count), delete.
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", "web.1"}, {"namespace", "default"}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "web"}, {"namespace", "default"}}},
                {"reason", "Started"},
                {"type", "Normal"},
                {"count", 1}};
  ok(c.createJson(api::eventsPath("default"), event));
  ok(c.patchJson(api::eventsPath("default") + "/web.1", {{"count", 2}}, api::PatchType::kMerge));
  json events = ok(c.list(api::eventsPath("default"), {}));
  REQUIRE(events["items"].size() == 1);
  CHECK(events["items"][0]["count"] == 2);
  ok(c.deleteJson(api::eventsPath("default") + "/web.1"));
  CHECK(ok(c.list(api::eventsPath(""), {}))["items"].empty());

  // What went over the wire: verbs, paths and patch content types.
  std::vector<std::string> wire;
  for (const auto& r : server.requests()) {
    if (r.method == "PATCH") wire.push_back(r.path + " " + r.content_type);
  }
  CHECK(wire ==
        std::vector<std::string>{
            "/api/v1/namespaces/default/pods/web application/merge-patch+json",
            "/api/v1/namespaces/default/pods/web/status application/strategic-merge-patch+json",
            "/api/v1/namespaces/default/pods/web/status application/strategic-merge-patch+json",
            "/api/v1/nodes/n1 application/strategic-merge-patch+json",
            "/api/v1/nodes/n1/status application/strategic-merge-patch+json",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1 "
            "application/merge-patch+json",
            "/api/v1/namespaces/default/events/web.1 application/merge-patch+json"});
  client.reset();  // closes its kept-alive connections, which the server would wait for
  server.stop();
}

TEST_CASE(
    "rest client: hostile answers are bounded errors naming the call, for requests and "
    "watches",
    "[integration][apiclient][httplimits]") {
  using Hostile = testing::HostileHttpServer;
  struct Case {
    Hostile::Behaviour behaviour;
    std::string mentions;
  };
  auto c = GENERATE(values<Case>({
      {Hostile::endlessHeaders(), "response headers larger than 65536 bytes"},
      {Hostile::manyHeaders(200), "more than 100 header fields"},
      {Hostile::longHeaderLine(100 * 1024), "response headers larger than"},
      {Hostile::drip(20), "timed out"},
  }));
  Hostile server(c.behaviour);
  api::RestConfig cfg;
  cfg.server = server.url("");
  auto options = fastOptions();
  options.request_timeout = std::chrono::milliseconds(500);
  auto client = api::RestClient::create(cfg, options, base::realClock());
  REQUIRE(client.ok());
  REQUIRE(testing::resetPeakRss());
  const uint64_t before = testing::peakRss();
  auto got = (*client)->send("GET", api::podsPath(), {});
  REQUIRE_FALSE(got.ok());
  CHECK_THAT(got.status().message(),
             Catch::Contains("GET /api/v1/pods") && Catch::Contains(c.mentions));
  auto watched = (*client)->watch(api::podsPath(), api::ListOptions{},
                                  [](api::RawWatchEvent&&) { return true; }, {});
  REQUIRE_FALSE(watched.ok());
  CHECK_THAT(watched.message(),
             Catch::Contains("WATCH /api/v1/pods") && Catch::Contains(c.mentions));
  CHECK(testing::peakRss() - before < (8u << 20));
}

TEST_CASE("rest client: an answer over max_body_bytes is refused, chunked or not",
          "[integration][apiclient][httplimits]") {
  using Hostile = testing::HostileHttpServer;
  const bool chunked = GENERATE(false, true);
  Hostile server(Hostile::bigBody(64u << 20, chunked));
  api::RestConfig cfg;
  cfg.server = server.url("");
  auto options = fastOptions();
  options.max_body_bytes = 1 << 20;
  auto client = api::RestClient::create(cfg, options, base::realClock());
  REQUIRE(client.ok());
  auto got = (*client)->send("GET", api::podsPath(), {});
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == base::StatusCode::kResourceExhausted);
  CHECK_THAT(got.status().message(), Catch::Contains("larger than 1048576 bytes"));
}

TEST_CASE(
    "rest client: bytes that are not UTF-8 (container output in an event or a termination "
    "message) are sent as U+FFFD, never an exception",
    "[integration][apiclient]") {
  auto started = testapiserver::TestApiServer::start();
  REQUIRE(started.ok());
  auto client = nodeagent::testing::clientFor(**started);
  using json = nlohmann::json;
  json event = {{"metadata", {{"name", "web.1"}, {"namespace", "default"}}},
                {"involvedObject", {{"kind", "Pod"}, {"name", "web"}, {"namespace", "default"}}},
                {"reason", "Unhealthy"},
                {"message", "probe said \xff\xfe"},
                {"type", "Warning"}};
  auto created = client->createJson(api::eventsPath("default"), event);
  INFO(created.status().toString());
  REQUIRE(created.ok());
  CHECK((*created)["message"] == "probe said \xEF\xBF\xBD\xEF\xBF\xBD");
  auto patched = client->patchJson(api::eventsPath("default") + "/web.1",
                                   {{"message", "again \xc3"}}, api::PatchType::kMerge);
  REQUIRE(patched.ok());
  CHECK((*patched)["message"] == "again \xEF\xBF\xBD");
}

TEST_CASE("rest client: an unreachable apiserver is an error that says what failed and where",
          "[integration][apiclient]") {
  api::RestConfig cfg;
  const int port = testing::unusedLoopbackPort();
  cfg.server = "http://127.0.0.1:" + std::to_string(port);
  auto client = api::RestClient::create(cfg, fastOptions(), base::realClock());
  REQUIRE(client.ok());
  auto refused = (*client)->send("GET", api::nodePath("n1"), {});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == base::StatusCode::kUnavailable);
  CHECK_THAT(refused.status().message(),
             Catch::Contains("GET /api/v1/nodes/n1") &&
                 Catch::Contains("connecting to 127.0.0.1:" + std::to_string(port)) &&
                 Catch::Contains("refused"));
}
