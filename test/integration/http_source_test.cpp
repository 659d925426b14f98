// HttpSource against a real cpp-httplib server on 127.0.0.1, port 0: bodies, headers, caching
// with ETag / Last-Modified, failures and timeouts. Polls every 100ms so each case is quick.
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <catch2/catch.hpp>

#include "config/http_source.h"
#include "config/manifest_errors.h"
#include "test/support/fake_clock.h"
#include "test/support/hostile_http_server.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

std::string podYaml(const std::string& name, const std::string& image = "busybox:1.36") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  containers:\n  - name: main\n    image: " + image +
         "\n    command: [\"sleep\", \"3600\"]\n";
}

std::string podListJson() {
  return R"({"apiVersion":"v1","kind":"PodList","items":[
    {"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},
     "spec":{"containers":[{"name":"main","image":"busybox"}]}},
    {"apiVersion":"v1","kind":"Pod","metadata":{"name":"b","namespace":"kube-system"},
     "spec":{"containers":[{"name":"main","image":"busybox"}]}}]})";
}

// A scripted manifest server: the test sets the status, body and caching headers it answers.
class ManifestServer {
 public:
  ManifestServer() {
    server_.Get("/pods", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock lock(mu_);
      ++requests_;
      last_headers_ = req.headers;
      if (hang_) {
        cv_.wait_for(lock, 5s, [&] { return !hang_; });
      }
      if (!etag_.empty()) {
        res.set_header("ETag", etag_);
        if (req.get_header_value("If-None-Match") == etag_) {
          res.status = 304;
          return;
        }
      }
      if (!last_modified_.empty()) {
        res.set_header("Last-Modified", last_modified_);
        if (req.get_header_value("If-Modified-Since") == last_modified_) {
          res.status = 304;
          return;
        }
      }
      res.status = status_;
      res.set_content(body_, "application/yaml");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    testing::eventually([this] { return server_.is_running(); });
  }
  ~ManifestServer() {
    release();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/pods"; }
  void set(int status, std::string body) {
    std::lock_guard lock(mu_);
    status_ = status;
    body_ = std::move(body);
  }
  void setEtag(std::string etag) {
    std::lock_guard lock(mu_);
    etag_ = std::move(etag);
  }
  void setLastModified(std::string v) {
    std::lock_guard lock(mu_);
    last_modified_ = std::move(v);
  }
  void hang() {
    std::lock_guard lock(mu_);
    hang_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      hang_ = false;
    }
    cv_.notify_all();
  }
  int requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  httplib::Headers lastHeaders() {
    std::lock_guard lock(mu_);
    return last_headers_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int status_ = 200;
  std::string body_;
  std::string etag_;
  std::string last_modified_;
  bool hang_ = false;
  int requests_ = 0;
  httplib::Headers last_headers_;
};

class Harness {
 public:
  explicit Harness(std::string url, std::function<void(config::HttpSourceOptions&)> tweak = {},
                   base::Clock& clock = base::realClock()) {
    config::HttpSourceOptions o;
    o.url = std::move(url);
    o.node_name = "node1";
    o.check_frequency = 100ms;
    o.timeout = 2s;
    o.errors = &errors;
    if (tweak) tweak(o);
    auto created = config::HttpSource::create(
        ioc.get_executor(), pool.get_executor(), clock, o, [this](api::PodUpdate u) {
          std::lock_guard lock(mu);
          (u.complete ? updates : incomplete).push_back(std::move(u));
        });
    REQUIRE(created.ok());
    source = std::move(*created);
    runner = std::thread([this] { ioc.run(); });
    source->start();
  }
  ~Harness() {
    source->stop();
    guard.reset();
    runner.join();
    pool.join();
    source.reset();  // before the io_context its timers belong to
  }
  // Complete updates: the URL's pods.
  size_t count() {
    std::lock_guard lock(mu);
    return updates.size();
  }
  // Incomplete (empty) SETs: the URL answered nothing usable before its first usable answer.
  std::vector<api::PodUpdate> incompletes() {
    std::lock_guard lock(mu);
    return incomplete;
  }
  api::PodUpdate last() {
    std::lock_guard lock(mu);
    return updates.back();
  }
  // Waits for `n` more polls to complete than at the call.
  bool morePolls(uint64_t n) {
    auto start = source->stats().polls;
    return testing::eventually([&] { return source->stats().polls >= start + n + 1; }, 5s);
  }

  config::ManifestErrors errors;
  std::unique_ptr<config::HttpSource> source;

 private:
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  asio::thread_pool pool{2};
  std::thread runner;
  std::mutex mu;
  std::vector<api::PodUpdate> updates;
  std::vector<api::PodUpdate> incomplete;
};

}  // namespace

TEST_CASE("http source: a single pod becomes a SET, an unchanged body sends nothing more",
          "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo"));
  Harness h(server.url());
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  auto u = h.last();
  CHECK(u.op == api::PodOperation::kSet);
  CHECK(u.source == "http");
  REQUIRE(u.pods.size() == 1);
  CHECK(u.pods[0]->metadata.name == "foo-node1");
  CHECK(u.pods[0]->metadata.namespace_ == "default");
  REQUIRE(h.morePolls(3));
  CHECK(h.count() == 1);
  CHECK(h.source->stats().decodes == 1);

  server.set(200, podYaml("foo", "busybox:2"));
  REQUIRE(testing::eventually([&] { return h.count() == 2; }));
  CHECK(h.last().pods.at(0)->metadata.uid != u.pods[0]->metadata.uid);
}

std::string podListYaml() {
  return "apiVersion: v1\nkind: PodList\nitems:\n"
         "- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n"
         "  spec: {containers: [{name: main, image: busybox}]}\n"
         "- apiVersion: v1\n  kind: Pod\n  metadata: {name: b, namespace: kube-system}\n"
         "  spec: {containers: [{name: main, image: busybox}]}\n";
}

TEST_CASE("http source: a PodList in JSON or YAML gives all its pods", "[integration][config]") {
  ManifestServer server;
  bool yaml = GENERATE(false, true);
  server.set(200, yaml ? podListYaml() : podListJson());
  Harness h(server.url());
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  auto u = h.last();
  REQUIRE(u.pods.size() == 2);
  CHECK(u.pods[0]->metadata.name == "a-node1");
  CHECK(u.pods[0]->metadata.namespace_ == "default");
  CHECK(u.pods[1]->metadata.name == "b-node1");
  CHECK(u.pods[1]->metadata.namespace_ == "kube-system");
}

TEST_CASE("http source: a PodList repeating a pod name is reported, naming the ignored pod",
          "[integration][config]") {
  ManifestServer server;
  std::string body = podListJson();
  // A third item with the first one's name (another image: another UID, same full name).
  body.insert(body.rfind("]}"), R"(,
    {"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},
     "spec":{"containers":[{"name":"main","image":"debian"}]}})");
  server.set(200, body);
  Harness h(server.url());
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  CHECK(h.last().pods.size() == 3);  // the merge keeps the first of the two
  REQUIRE(testing::eventually([&] { return h.errors.get("http", server.url()).has_value(); }));
  auto e = *h.errors.get("http", server.url());
  CHECK_THAT(e.invalid, Catch::Contains("items[2]") && Catch::Contains("duplicate pod name"));
  CHECK(e.pod.name == "a-node1");
  CHECK(e.pod.uid == h.last().pods[2]->metadata.uid);
  server.set(200, podListJson());
  REQUIRE(testing::eventually([&] { return h.count() == 2; }));
  CHECK(h.errors.size() == 0);
}

TEST_CASE("http source: configured headers are sent, repeated keys included",
          "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo"));
  auto headers = config::parseManifestUrlHeaders({"Metadata-Flavor:Google", "X-Multi:a,b"});
  REQUIRE(headers.ok());
  Harness h(server.url(), [&](config::HttpSourceOptions& o) { o.headers = *headers; });
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  auto got = server.lastHeaders();
  auto flavor = got.find("Metadata-Flavor");
  REQUIRE(flavor != got.end());
  CHECK(flavor->second == "Google");
  CHECK(got.count("X-Multi") == 2);
}

TEST_CASE("http source: ETag and Last-Modified make conditional requests, 304 sends nothing",
          "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo"));
  bool use_etag = GENERATE(true, false);
  if (use_etag) {
    server.setEtag("\"v1\"");
  } else {
    server.setLastModified("Wed, 21 Oct 2026 07:28:00 GMT");
  }
  Harness h(server.url());
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  REQUIRE(testing::eventually([&] { return h.source->stats().not_modified >= 2; }, 5s));
  auto headers = server.lastHeaders();
  if (use_etag) {
    CHECK(headers.find("If-None-Match")->second == "\"v1\"");
  } else {
    CHECK(headers.find("If-Modified-Since")->second == "Wed, 21 Oct 2026 07:28:00 GMT");
  }
  CHECK(h.count() == 1);

  // A new version behind a new validator is fetched.
  server.set(200, podYaml("foo", "busybox:2"));
  if (use_etag) {
    server.setEtag("\"v2\"");
  } else {
    server.setLastModified("Thu, 22 Oct 2026 07:28:00 GMT");
  }
  REQUIRE(testing::eventually([&] { return h.count() == 2; }));
}

TEST_CASE("http source: non-200 answers keep the pods and are reported until the URL recovers",
          "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo"));
  Harness h(server.url());
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  server.set(500, "oops");
  REQUIRE(testing::eventually([&] { return h.errors.get("http", server.url()).has_value(); }));
  CHECK_THAT(h.errors.get("http", server.url())->message, Catch::Contains("500"));
  CHECK(h.errors.get("http", server.url())->invalid.empty());  // a fetch failure, not bad content
  REQUIRE(h.morePolls(3));
  CHECK(h.count() == 1);
  server.set(200, podYaml("foo"));  // the same body as before: still nothing to send
  REQUIRE(testing::eventually([&] { return !h.errors.get("http", server.url()).has_value(); }));
  REQUIRE(h.morePolls(2));
  CHECK(h.count() == 1);
}

TEST_CASE("http source: an unreachable URL sends one incomplete empty SET, then nothing",
          "[integration][config]") {
  int port;
  {
    ManifestServer gone;  // take a free port, then close it
    port = std::stoi(gone.url().substr(std::string("http://127.0.0.1:").size()));
  }
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/pods";
  Harness h(url);
  REQUIRE(h.morePolls(3));
  CHECK(h.count() == 0);
  auto incomplete = h.incompletes();
  REQUIRE(incomplete.size() == 1);  // the source answered, but is not seen: nothing is cleaned up
  CHECK(incomplete[0].op == api::PodOperation::kSet);
  CHECK(incomplete[0].pods.empty());
  CHECK_THAT(incomplete[0].incomplete_reason, Catch::Contains(url));
  CHECK(h.source->stats().failures >= 3);
  CHECK(h.errors.size() == 1);
}

TEST_CASE("http source: a request over the timeout is abandoned and the pods stay",
          "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo"));
  Harness h(server.url(), [](config::HttpSourceOptions& o) { o.timeout = 300ms; });
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  server.hang();
  REQUIRE(testing::eventually([&] {
    auto e = h.errors.get("http", server.url());
    return e && e->message.find("timed out") != std::string::npos;
  }));
  CHECK(h.count() == 1);
  server.release();
  REQUIRE(testing::eventually([&] { return !h.errors.get("http", server.url()).has_value(); }));
  CHECK(h.count() == 1);
}

TEST_CASE("http source: an empty body sends an empty SET", "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo"));
  Harness h(server.url());
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  server.set(200, "");
  REQUIRE(testing::eventually([&] { return h.count() == 2; }));
  CHECK(h.last().pods.empty());
  REQUIRE(h.morePolls(2));
  CHECK(h.count() == 2);
}

TEST_CASE("http source: an invalid body sends nothing, is reported, and is decoded only once",
          "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo"));
  Harness h(server.url());
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  auto decodes = h.source->stats().decodes;
  server.set(200, "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: []}\n");
  REQUIRE(testing::eventually([&] { return h.errors.get("http", server.url()).has_value(); }));
  REQUIRE(h.morePolls(3));
  CHECK(h.count() == 1);
  CHECK(h.source->stats().decodes == decodes + 1);
  CHECK_THAT(h.errors.get("http", server.url())->invalid, Catch::Contains("metadata.name"));
  CHECK(h.errors.get("http", server.url())->pod.name.empty());
  // A bad pod whose name can be read is named (for its FailedValidation event).
  server.set(200, "apiVersion: v1\nkind: Pod\nmetadata: {name: baz}\nspec: {containers: []}\n");
  REQUIRE(testing::eventually([&] {
    auto e = h.errors.get("http", server.url());
    return e && e->pod.name == "baz-node1";
  }));
  CHECK_THAT(h.errors.get("http", server.url())->invalid, Catch::Contains("spec.containers"));
  server.set(200, podYaml("bar"));
  REQUIRE(testing::eventually([&] { return h.count() == 2; }));
  CHECK(h.last().pods.at(0)->metadata.name == "bar-node1");
  CHECK(h.errors.size() == 0);
}

TEST_CASE("http source: a body over the size limit is rejected", "[integration][config]") {
  ManifestServer server;
  server.set(200, podYaml("foo") + std::string(4096, '#'));
  Harness h(server.url(), [](config::HttpSourceOptions& o) { o.max_body_bytes = 1024; });
  REQUIRE(testing::eventually([&] { return h.errors.get("http", server.url()).has_value(); }));
  CHECK_THAT(h.errors.get("http", server.url())->message, Catch::Contains("larger than"));
  CHECK(h.count() == 0);
}

TEST_CASE(
    "http source: the default size limit is 10 MiB: a body of exactly 10 MiB is read, one "
    "byte more is rejected",
    "[integration][config]") {
  constexpr size_t kLimit = 10 * 1024 * 1024;
  CHECK(config::HttpSourceOptions{}.max_body_bytes == kLimit);
  CHECK(config::HttpSourceOptions{}.timeout == 10s);
  CHECK(config::HttpSourceOptions{}.check_frequency == 20s);
  // A JSON pod padded with trailing whitespace to the exact size.
  const std::string pod = R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"big"},)"
                          R"("spec":{"containers":[{"name":"main","image":"busybox"}]}})";
  ManifestServer server;
  server.set(200, pod + std::string(kLimit + 1 - pod.size(), '\n'));
  Harness h(server.url(), [](config::HttpSourceOptions& o) { o.check_frequency = 200ms; });
  REQUIRE(testing::eventually([&] { return h.errors.get("http", server.url()).has_value(); }, 10s));
  CHECK_THAT(h.errors.get("http", server.url())->message,
             Catch::Contains("larger than " + std::to_string(kLimit)));
  CHECK(h.count() == 0);

  server.set(200, pod + std::string(kLimit - pod.size(), '\n'));
  REQUIRE(testing::eventually([&] { return h.count() == 1; }, 10s));
  REQUIRE(h.last().pods.size() == 1);
  CHECK(h.last().pods[0]->metadata.name == "big-node1");
  CHECK(h.errors.size() == 0);
}

TEST_CASE(
    "http source: failure warnings are damped: the first of a streak, then one per "
    "interval",
    "[integration][config]") {
  ManifestServer server;
  server.set(500, "oops");
  testing::FakeClock clock;
  constexpr auto kPeriod = 20s;
  Harness h(
      server.url(),
      [&](config::HttpSourceOptions& o) {
        o.check_frequency = kPeriod;
        o.failure_log_interval = 5min;
      },
      clock);
  auto failures = [&] { return h.source->stats().failures; };
  auto warnings = [&] { return h.source->stats().failure_warnings; };
  // A poll is over once its result armed the next one (the only timer left, kPeriod away).
  auto polled = [&](uint64_t n) {
    return testing::eventually([&] {
      return failures() == n && clock.pendingTimers() == 1 && clock.nextDeadlineIn() == kPeriod;
    });
  };
  REQUIRE(polled(1));
  CHECK(warnings() == 1);
  // 14 more failures within the five minutes: not warned about.
  for (uint64_t i = 2; i <= 15; ++i) {
    clock.advance(kPeriod);
    REQUIRE(polled(i));
  }
  CHECK(warnings() == 1);
  clock.advance(kPeriod);  // five minutes after the first warning
  REQUIRE(polled(16));
  CHECK(warnings() == 2);
  clock.advance(kPeriod);
  REQUIRE(polled(17));
  CHECK(warnings() == 2);
  CHECK(h.count() == 0);

  // A success ends the streak; the next failure is warned about at once.
  server.set(200, podYaml("foo"));
  clock.advance(kPeriod);
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  REQUIRE(testing::eventually([&] { return clock.nextDeadlineIn() == kPeriod; }));
  server.set(503, "busy");
  clock.advance(kPeriod);
  REQUIRE(polled(18));
  CHECK(warnings() == 3);
  CHECK(h.count() == 1);  // the pods stay
}

TEST_CASE("http source: redirects are followed", "[integration][config]") {
  httplib::Server front;
  front.Get("/old", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 302;
    res.set_header("Location", "/new");
  });
  front.Get("/new", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(podYaml("moved"), "application/yaml");
  });
  int port = front.bind_to_any_port("127.0.0.1");
  std::thread t([&] { front.listen_after_bind(); });
  testing::eventually([&] { return front.is_running(); });
  {
    Harness h("http://127.0.0.1:" + std::to_string(port) + "/old");
    REQUIRE(testing::eventually([&] { return h.count() == 1; }));
    CHECK(h.last().pods.at(0)->metadata.name == "moved-node1");
  }
  front.stop();
  t.join();
}

TEST_CASE("http source: https needs a trusted certificate, --ca-file style trust works",
          "[integration][config]") {
  testing::TempDir dir("http-tls");
  testing::writeSelfSignedCert(dir.path());
  httplib::SSLServer server((dir / "cert.pem").c_str(), (dir / "key.pem").c_str());
  REQUIRE(server.is_valid());
  server.Get("/pods", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(podYaml("secure"), "application/yaml");
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  testing::eventually([&] { return server.is_running(); });
  std::string url = "https://127.0.0.1:" + std::to_string(port) + "/pods";
  {
    Harness untrusted(url);  // the system bundle does not know this certificate
    REQUIRE(untrusted.morePolls(2));
    CHECK(untrusted.count() == 0);
    CHECK(untrusted.errors.get("http", url).has_value());
  }
  {
    Harness trusted(url,
                    [&](config::HttpSourceOptions& o) { o.ca_file = (dir / "cert.pem").string(); });
    REQUIRE(testing::eventually([&] { return trusted.count() == 1; }));
    CHECK(trusted.last().pods.at(0)->metadata.name == "secure-node1");
    CHECK(trusted.errors.size() == 0);
  }
  server.stop();
  t.join();
}

TEST_CASE("http source: hostile answers are bounded errors naming the URL and the pods stay",
          "[integration][config][httplimits]") {
  struct Case {
    testing::HostileHttpServer::Behaviour behaviour;
    std::string mentions;
  };
  using Hostile = testing::HostileHttpServer;
  auto c = GENERATE(values<Case>({
      {Hostile::endlessHeaders(), "response headers larger than 65536 bytes"},
      {Hostile::manyHeaders(200), "more than 100 header fields"},
      {Hostile::longHeaderLine(100 * 1024), "response headers larger than"},
      {Hostile::bigBody(64u << 20, false), "larger than 10485760"},
      {Hostile::drip(20), "timed out"},
  }));
  Hostile server(Hostile::ok(podYaml("foo"), "application/yaml"));
  const std::string url = server.url("/pods");
  Harness h(url, [](config::HttpSourceOptions& o) { o.timeout = 500ms; });
  REQUIRE(testing::eventually([&] { return h.count() == 1; }));
  server.setBehaviour(c.behaviour);
  REQUIRE(testing::resetPeakRss());
  const uint64_t before = testing::peakRss();
  REQUIRE(testing::eventually(
      [&] {
        auto e = h.errors.get("http", url);
        return e && e->message.find(c.mentions) != std::string::npos;
      },
      10s));
  CHECK(testing::peakRss() - before < (8u << 20));
  INFO(h.errors.get("http", url)->message);
  CHECK((h.errors.get("http", url)->message.find("GET " + server.url("") + "/pods") !=
             std::string::npos ||
         c.mentions == "timed out"));
  REQUIRE(h.morePolls(2));
  CHECK(h.count() == 1);  // the pods of the last good answer stay
  CHECK(h.last().pods.at(0)->metadata.name == "foo-node1");
}
