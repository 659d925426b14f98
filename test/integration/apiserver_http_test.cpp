// The in-process TestApiServer over HTTP: wire shapes, error codes, watch semantics and the
// fault-injection hooks other tests rely on.
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/test_api_server.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

using nlohmann::json;
using namespace nodeagent::testapiserver;
using nodeagent::testing::eventually;
using nodeagent::testing::TempDir;
using nodeagent::testing::writeFile;
using namespace std::chrono_literals;

namespace {

json pod(const std::string& name, const std::string& node = "node1") {
  json p = {{"metadata", {{"name", name}}},
            {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  if (!node.empty()) p["spec"]["nodeName"] = node;
  return p;
}

std::unique_ptr<TestApiServer> startServer(ServerOptions opts = {}) {
  auto server = TestApiServer::start(std::move(opts));
  REQUIRE(server.ok());
  return std::move(*server);
}

// A watch stream read on its own thread; lines are collected for the test to inspect.
class WatchReader {
 public:
  WatchReader(int port, std::string path, httplib::Headers headers = {})
      : client_("127.0.0.1", port),
        thread_([this, path = std::move(path), headers = std::move(headers)] {
          client_.set_read_timeout(60, 0);
          auto res = client_.Get(path.c_str(), headers, [this](const char* data, size_t len) {
            std::lock_guard lock(mu_);
            buffer_.append(data, len);
            size_t nl;
            while ((nl = buffer_.find('\n')) != std::string::npos) {
              lines_.push_back(json::parse(buffer_.substr(0, nl)));
              buffer_.erase(0, nl + 1);
            }
            return !stop_;
          });
          std::lock_guard lock(mu_);
          status_ = res ? res->status : -1;
          content_type_ = res ? res->get_header_value("Content-Type") : "";
          ended_ = true;
        }) {}
  ~WatchReader() {
    stop_ = true;
    client_.stop();  // unblocks a read on an idle stream
    thread_.join();
  }
  std::vector<json> lines() const {
    std::lock_guard lock(mu_);
    return lines_;
  }
  size_t count() const {
    std::lock_guard lock(mu_);
    return lines_.size();
  }
  bool ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }
  int status() const {
    std::lock_guard lock(mu_);
    return status_;
  }
  std::string contentType() const {
    std::lock_guard lock(mu_);
    return content_type_;
  }

 private:
  mutable std::mutex mu_;
  std::string buffer_;
  std::vector<json> lines_;
  bool ended_ = false;
  int status_ = 0;
  std::string content_type_;
  std::atomic<bool> stop_{false};
  httplib::Client client_;
  std::thread thread_;
};

// A raw connection that asks for a pod watch from `rv` and never reads; -1 on failure.
int openUnreadWatch(int port, const std::string& rv) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string request =
      "GET /api/v1/pods?watch=true&resourceVersion=" + rv + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// 2000 pods of 16 KB each: 32 MB of watch events, far more than a socket's buffers hold.
constexpr int kStuckPods = 2000;
void createBigPods(TestApiServer& server, int count) {
  const std::string big(16384, 'x');
  for (int i = 0; i < count; ++i) {
    json p = pod("p" + std::to_string(i));
    p["metadata"]["annotations"] = {{"example.com/padding", big}};
    REQUIRE(server.store().create("pods", "default", p).ok());
  }
}

// A server over HTTP, or over HTTPS with a self-signed certificate written into `pki`.
std::unique_ptr<TestApiServer> startServer(bool tls, const TempDir& pki, ServerOptions opts = {}) {
  if (tls) {
    nodeagent::testing::writeSelfSignedCert(pki.path());
    opts.tls_cert_file = (pki / "cert.pem").string();
    opts.tls_private_key_file = (pki / "key.pem").string();
  }
  return startServer(std::move(opts));
}

// A client of `server` that trusts the certificate startServer(tls, pki) wrote.
std::unique_ptr<httplib::Client> clientFor(const TestApiServer& server, const TempDir& pki) {
  auto client = std::make_unique<httplib::Client>(server.url());
  if (server.tls()) client->set_ca_cert_path((pki / "cert.pem").c_str());
  return client;
}

// A watch whose client stops reading at the first chunk (its receiver blocks until resume()):
// once the socket buffers fill, the server's write blocks.
class StalledWatch {
 public:
  StalledWatch(httplib::Client& client, std::string path)
      : client_(client), resumed_(resume_.get_future().share()) {
    thread_ = std::thread([this, path = std::move(path)] {
      client_.Get(path.c_str(), [this](const char*, size_t) {
        if (!stalled_.exchange(true)) resumed_.wait();
        return true;
      });
      ended_ = true;
    });
  }
  ~StalledWatch() {
    resume();
    client_.stop();
    thread_.join();
  }
  bool stalled() const { return stalled_; }
  bool ended() const { return ended_; }
  void resume() {
    if (!resuming_.exchange(true)) resume_.set_value();
  }

 private:
  httplib::Client& client_;
  std::promise<void> resume_;
  std::shared_future<void> resumed_;
  std::atomic<bool> stalled_{false};
  std::atomic<bool> resuming_{false};
  std::atomic<bool> ended_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE("http: discovery is plain JSON and aggregated discovery falls back to it",
          "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  httplib::Headers aggregated = {
      {"Accept",
       "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/"
       "json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"}};
  auto api = client.Get("/api", aggregated);
  REQUIRE(api);
  CHECK(api->status == 200);
  CHECK(api->get_header_value("Content-Type") == "application/json");
  CHECK(json::parse(api->body)["kind"] == "APIVersions");
  auto apis = client.Get("/apis", aggregated);
  REQUIRE(apis);
  CHECK(json::parse(apis->body)["groups"][0]["name"] == "coordination.k8s.io");
  auto v1 = json::parse(client.Get("/api/v1")->body);
  CHECK(v1["kind"] == "APIResourceList");
  std::vector<std::string> names;
  for (const auto& r : v1["resources"]) names.push_back(r["name"]);
  for (const char* want :
       {"pods", "pods/status", "nodes", "nodes/status", "namespaces", "events"}) {
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  }
  auto leases = json::parse(client.Get("/apis/coordination.k8s.io/v1")->body);
  CHECK(leases["resources"][0]["name"] == "leases");
  CHECK(json::parse(client.Get("/apis/coordination.k8s.io")->body)["kind"] == "APIGroup");
  CHECK(json::parse(client.Get("/version")->body)["major"] == "1");
  CHECK(client.Get("/openapi/v2")->status == 200);  // openapi_test.cpp tests the documents
  CHECK(client.Get("/openapi/v3")->status == 200);
  for (const char* path : {"/apis", "/api/v1", "/apis/coordination.k8s.io",
                           "/apis/coordination.k8s.io/v1", "/version"}) {
    INFO(path);
    auto res = client.Get(path, aggregated);
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->get_header_value("Content-Type") == "application/json");
  }
  for (const char* path : {"/healthz", "/livez", "/readyz"}) {
    INFO(path);
    auto res = client.Get(path);
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->body == "ok");
  }
  // The four namespaces every cluster has.
  std::vector<std::string> namespaces;
  const json ns_list = json::parse(client.Get("/api/v1/namespaces")->body);
  for (const auto& ns : ns_list["items"]) {
    namespaces.push_back(ns["metadata"]["name"]);
    CHECK(ns["status"]["phase"] == "Active");
  }
  CHECK(namespaces ==
        std::vector<std::string>{"default", "kube-node-lease", "kube-public", "kube-system"});
}

TEST_CASE("http: errors are Status objects with kube-apiserver's codes and reasons",
          "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  auto expect = [](const httplib::Result& res, int code, const std::string& reason) {
    REQUIRE(res);
    CHECK(res->status == code);
    json s = json::parse(res->body);
    CHECK(s["kind"] == "Status");
    CHECK(s["status"] == "Failure");
    CHECK(s["code"] == code);
    CHECK(s["reason"] == reason);
    return s;
  };
  json nf = expect(client.Get("/api/v1/namespaces/default/pods/web"), 404, "NotFound");
  CHECK(nf["message"] == "pods \"web\" not found");
  CHECK(nf["details"] == json({{"name", "web"}, {"kind", "pods"}}));
  const std::string pods = "/api/v1/namespaces/default/pods";
  REQUIRE(client.Post(pods.c_str(), pod("web").dump(), "application/json")->status == 201);
  expect(client.Post(pods.c_str(), pod("web").dump(), "application/json"), 409, "AlreadyExists");
  expect(client.Post(pods.c_str(), "{not json", "application/json"), 400, "BadRequest");
  json invalid = expect(
      client.Post(pods.c_str(), json({{"metadata", {{"name", "x"}}}}).dump(), "application/json"),
      422, "Invalid");
  CHECK(invalid["message"] == "Pod \"x\" is invalid: spec.containers: Required value");
  CHECK(invalid["details"] == json({{"name", "x"},
                                    {"kind", "Pod"},
                                    {"causes",
                                     {{{"reason", "FieldValueRequired"},
                                       {"message", "Required value"},
                                       {"field", "spec.containers"}}}}}));
  expect(client.Post(pods.c_str(), "a: b", "application/yaml"), 415, "UnsupportedMediaType");
  expect(client.Patch((pods + "/web").c_str(), "{}", "application/apply-patch+yaml"), 422,
         "Invalid");  // an apply patch without its fieldManager
  expect(client.Patch((pods + "/web").c_str(), "{}", "application/x-unknown-patch"), 415,
         "UnsupportedMediaType");
  json stale = pod("web");
  stale["metadata"]["resourceVersion"] = "1";
  expect(client.Put((pods + "/web").c_str(), stale.dump(), "application/json"), 409, "Conflict");
  expect(client.Post((pods + "/web").c_str(), "{}", "application/json"), 405, "MethodNotAllowed");
  expect(client.Get("/api/v1/pods?fieldSelector=spec.bogus%3Dx"), 400, "BadRequest");
  expect(client.Delete("/api/v1/namespaces/default"), 403, "Forbidden");
  expect(client.Get("/api/v1/widgets"), 404, "NotFound");

  server->failNextRequests(429, 1);
  auto throttled = client.Get(pods.c_str());
  expect(throttled, 429, "TooManyRequests");
  CHECK(throttled->get_header_value("Retry-After") == "1");
  REQUIRE(client.Post("/_test/fail", R"({"code":500,"count":2})", "application/json")->status ==
          200);
  expect(client.Get(pods.c_str()), 500, "InternalError");
  expect(client.Get(pods.c_str()), 500, "InternalError");
  CHECK(client.Get(pods.c_str())->status == 200);
  REQUIRE(client
              .Post("/_test/fail", R"({"code":503,"count":1,"pathPrefix":"/api/v1/nodes"})",
                    "application/json")
              ->status == 200);
  CHECK(client.Get(pods.c_str())->status == 200);
  expect(client.Get("/api/v1/nodes"), 503, "ServiceUnavailable");
}

TEST_CASE("http: the three patch types, status subresource and delete preconditions",
          "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  const std::string path = "/api/v1/namespaces/default/pods/web";
  auto created =
      client.Post("/api/v1/namespaces/default/pods", pod("web").dump(), "application/json");
  const std::string uid = json::parse(created->body)["metadata"]["uid"];

  auto smp = client.Patch((path + "/status").c_str(),
                          json({{"metadata", {{"uid", uid}}},
                                {"status",
                                 {{"phase", "Running"},
                                  {"$setElementOrder/conditions", {{{"type", "Ready"}}}},
                                  {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}})
                              .dump(),
                          "application/strategic-merge-patch+json");
  REQUIRE(smp->status == 200);
  CHECK(json::parse(smp->body)["status"]["conditions"][0]["status"] == "True");
  auto merge = client.Patch(path.c_str(), R"({"metadata":{"labels":{"a":"1"}}})",
                            "application/merge-patch+json");
  REQUIRE(merge->status == 200);
  auto jp = client.Patch(path.c_str(), R"([{"op":"add","path":"/metadata/labels/b","value":"2"}])",
                         "application/json-patch+json");
  REQUIRE(jp->status == 200);
  CHECK(json::parse(jp->body)["metadata"]["labels"] == json({{"a", "1"}, {"b", "2"}}));
  auto wrong_uid =
      client.Patch((path + "/status").c_str(), R"({"metadata":{"uid":"x"},"status":{}})",
                   "application/strategic-merge-patch+json");
  CHECK(wrong_uid->status == 409);

  auto graceful = client.Delete(path.c_str(), R"({"kind":"DeleteOptions","gracePeriodSeconds":7})",
                                "application/json");
  REQUIRE(graceful->status == 200);
  json marked = json::parse(graceful->body);
  CHECK(marked["metadata"].contains("deletionTimestamp"));
  CHECK(marked["metadata"]["deletionGracePeriodSeconds"] == 7);
  auto bad_pre = client.Delete(
      path.c_str(), R"({"gracePeriodSeconds":0,"preconditions":{"uid":"x"}})", "application/json");
  CHECK(bad_pre->status == 409);
  CHECK(json::parse(bad_pre->body)["reason"] == "Conflict");
  CHECK(json::parse(bad_pre->body)["message"].get<std::string>().starts_with(
      "Precondition failed: UID in precondition: x"));
  json stale_rv = {{"gracePeriodSeconds", 0}, {"preconditions", {{"resourceVersion", "1"}}}};
  auto bad_rv = client.Delete(path.c_str(), stale_rv.dump(), "application/json");
  CHECK(bad_rv->status == 409);
  CHECK(json::parse(bad_rv->body)["message"].get<std::string>().starts_with(
      "Precondition failed: ResourceVersion in precondition: 1"));
  CHECK(client.Get(path.c_str())->status == 200);
  auto final_delete = client.Delete((path + "?gracePeriodSeconds=0").c_str());
  REQUIRE(final_delete->status == 200);
  CHECK(json::parse(final_delete->body)["kind"] == "Pod");
  CHECK(client.Get(path.c_str())->status == 404);

  REQUIRE(
      client
          .Post("/api/v1/nodes", json({{"metadata", {{"name", "n1"}}}}).dump(), "application/json")
          ->status == 201);
  auto node_delete = client.Delete("/api/v1/nodes/n1");
  REQUIRE(node_delete->status == 200);
  CHECK(json::parse(node_delete->body)["status"] == "Success");
}

TEST_CASE(
    "http: node status subresource takes the kubelet's patch, the main resource ignores status",
    "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  json node = {{"metadata", {{"name", "n1"}}},
               {"status",
                {{"conditions",
                  {{{"type", "MemoryPressure"}, {"status", "False"}},
                   {{"type", "Ready"}, {"status", "False"}, {"reason", "KubeletNotReady"}}}}}}};
  REQUIRE(client.Post("/api/v1/nodes", node.dump(), "application/json")->status == 201);
  auto patched = client.Patch("/api/v1/nodes/n1/status", R"({"status":{
      "$setElementOrder/conditions":[{"type":"MemoryPressure"},{"type":"Ready"}],
      "conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}],
      "nodeInfo":{"kubeletVersion":"v1.30.0"}},"metadata":{"labels":{"ignored":"yes"}}})",
                              "application/strategic-merge-patch+json");
  REQUIRE(patched);
  REQUIRE(patched->status == 200);
  json n = json::parse(patched->body);
  CHECK(n["status"]["conditions"] ==
        json::array({{{"type", "MemoryPressure"}, {"status", "False"}},
                     {{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"}}}));
  CHECK(n["status"]["nodeInfo"]["kubeletVersion"] == "v1.30.0");
  CHECK_FALSE(n["metadata"].contains("labels"));
  // A PUT of the main resource changes labels but not status.
  n["metadata"]["labels"] = {{"kubernetes.io/hostname", "n1"}};
  n["status"]["conditions"] = json::array();
  auto put = client.Put("/api/v1/nodes/n1", n.dump(), "application/json");
  REQUIRE(put);
  REQUIRE(put->status == 200);
  json stored = json::parse(put->body);
  CHECK(stored["metadata"]["labels"]["kubernetes.io/hostname"] == "n1");
  CHECK(stored["status"]["conditions"].size() == 2);
}

TEST_CASE("http: list paging with limit and continue", "[integration][apiserver]") {
  auto server = startServer();
  for (int i = 0; i < 7; ++i)
    REQUIRE(server->store().create("pods", "default", pod("p" + std::to_string(i))).ok());
  httplib::Client client("127.0.0.1", server->port());
  std::string cont;
  size_t total = 0;
  int pages = 0;
  do {
    std::string path = "/api/v1/pods?limit=3";
    if (!cont.empty()) path += "&continue=" + httplib::detail::encode_query_param(cont);
    auto res = client.Get(path.c_str());
    REQUIRE(res->status == 200);
    json list = json::parse(res->body);
    total += list["items"].size();
    cont = list["metadata"].value("continue", "");
    ++pages;
  } while (!cont.empty() && pages < 10);
  CHECK(total == 7);
  CHECK(pages == 3);
  // resourceVersion=0 is served whole, like kube-apiserver's watch cache.
  CHECK(json::parse(client.Get("/api/v1/pods?limit=3&resourceVersion=0")->body)["items"].size() ==
        7);

  // A continue token from before a compaction has expired: 410, the client lists again.
  json first = json::parse(client.Get("/api/v1/pods?limit=3")->body);
  const std::string token = first["metadata"]["continue"];
  REQUIRE(server->store().create("pods", "default", pod("p7")).ok());
  server->compact();
  auto expired = client.Get(
      ("/api/v1/pods?limit=3&continue=" + httplib::detail::encode_query_param(token)).c_str());
  REQUIRE(expired);
  CHECK(expired->status == 410);
  CHECK(json::parse(expired->body)["reason"] == "Expired");
}

TEST_CASE("http: events are created, selected by their fields, watched and deleted",
          "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  WatchReader reader(server->port(), "/api/v1/watch/namespaces/default/events");
  REQUIRE(eventually([&] { return server->openWatches() == 1; }));
  auto event = [](const std::string& name, const std::string& pod_name, const std::string& reason) {
    return json{{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}}},
                {"involvedObject", {{"kind", "Pod"}, {"namespace", "default"}, {"name", pod_name}}},
                {"reason", reason},
                {"message", "m"},
                {"type", "Warning"},
                {"count", 1}};
  };
  const std::string events = "/api/v1/namespaces/default/events";
  auto created = client.Post(events.c_str(), event("web.1", "web", "FailedValidation").dump(),
                             "application/json");
  REQUIRE(created);
  REQUIRE(created->status == 201);
  CHECK(json::parse(created->body)["involvedObject"]["name"] == "web");
  REQUIRE(client.Post(events.c_str(), event("db.1", "db", "Started").dump(), "application/json")
              ->status == 201);
  json all = json::parse(client.Get("/api/v1/events")->body);
  CHECK(all["kind"] == "EventList");
  CHECK(all["items"].size() == 2);
  json selected = json::parse(
      client
          .Get("/api/v1/events?fieldSelector=involvedObject.name%3Dweb,reason%3DFailedValidation")
          ->body);
  REQUIRE(selected["items"].size() == 1);
  CHECK(selected["items"][0]["metadata"]["name"] == "web.1");
  auto deleted = client.Delete((events + "/web.1").c_str());
  REQUIRE(deleted);
  CHECK(deleted->status == 200);
  CHECK(json::parse(deleted->body)["status"] == "Success");
  REQUIRE(eventually([&] { return reader.count() == 3; }));
  std::vector<std::string> seen;
  for (const auto& l : reader.lines()) {
    seen.push_back(l["type"].get<std::string>() + " " +
                   l["object"]["metadata"]["name"].get<std::string>());
  }
  CHECK(seen == std::vector<std::string>{"ADDED web.1", "ADDED db.1", "DELETED web.1"});
}

TEST_CASE("http: watch streams events, bookmarks and ends at timeoutSeconds",
          "[integration][apiserver]") {
  ServerOptions opts;
  opts.bookmark_interval = 100ms;
  auto server = startServer(opts);
  REQUIRE(server->store().create("pods", "default", pod("a")).ok());
  WatchReader reader(server->port(),
                     "/api/v1/pods?watch=1&allowWatchBookmarks=true&timeoutSeconds=30"
                     "&fieldSelector=spec.nodeName%3Dnode1");
  REQUIRE(eventually([&] { return reader.count() >= 1; }));
  CHECK(reader.contentType().empty());  // headers are known once the stream ends
  REQUIRE(server->store().create("pods", "default", pod("b", "node2")).ok());
  REQUIRE(server->store().create("pods", "default", pod("c")).ok());
  REQUIRE(server->store().remove("pods", "default", "a", {}).ok());
  REQUIRE(eventually([&] {
    for (const auto& l : reader.lines()) {
      if (l["type"] == "BOOKMARK") return true;
    }
    return false;
  }));
  std::vector<std::string> seen;
  for (const auto& l : reader.lines()) {
    if (l["type"] == "BOOKMARK") {
      CHECK(l["object"]["kind"] == "Pod");
      CHECK(l["object"]["metadata"].size() == 1);
      continue;
    }
    seen.push_back(l["type"].get<std::string>() + " " +
                   l["object"]["metadata"]["name"].get<std::string>());
  }
  CHECK(seen == std::vector<std::string>{"ADDED a", "ADDED c", "MODIFIED a"});

  WatchReader short_watch(server->port(),
                          "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1");
  REQUIRE(eventually([&] { return short_watch.ended(); }, 5s));
  CHECK(short_watch.status() == 200);
  CHECK(short_watch.contentType() == "application/json;stream=watch");
  CHECK(short_watch.count() == 3);  // synthetic ADDED for a (terminating), b and c
}

TEST_CASE("http: watch from a compacted resourceVersion gets an in-stream 410 Expired",
          "[integration][apiserver]") {
  auto server = startServer();
  const uint64_t rv = server->store().resourceVersion();
  REQUIRE(server->store().create("pods", "default", pod("a")).ok());
  httplib::Client client("127.0.0.1", server->port());
  REQUIRE(client.Post("/_test/compact", "", "application/json")->status == 200);
  auto res = client.Get(("/api/v1/pods?watch=true&resourceVersion=" + std::to_string(rv)).c_str());
  REQUIRE(res);
  CHECK(res->status == 200);
  json ev = json::parse(res->body.substr(0, res->body.find('\n')));
  CHECK(ev["type"] == "ERROR");
  CHECK(ev["object"]["kind"] == "Status");
  CHECK(ev["object"]["code"] == 410);
  CHECK(ev["object"]["reason"] == "Expired");
  CHECK(ev["object"]["message"].get<std::string>().starts_with("too old resource version: "));
}

TEST_CASE("http: watch from a resourceVersion newer than the store fails after a short wait",
          "[integration][apiserver]") {
  ServerOptions opts;
  opts.store.too_large_resource_version_wait = 200ms;
  auto server = startServer(opts);
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Get("/api/v1/pods?watch=true&resourceVersion=100000");
  REQUIRE(res);
  CHECK(res->status == 504);
  json s = json::parse(res->body);
  CHECK(s["reason"] == "Timeout");
  CHECK(s["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge");
  CHECK(res->get_header_value("Retry-After") == "1");
}

TEST_CASE("http: close-watches ends open watches, latency delays responses",
          "[integration][apiserver]") {
  auto server = startServer();
  std::vector<std::unique_ptr<WatchReader>> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(std::make_unique<WatchReader>(server->port(), "/api/v1/watch/nodes"));
  }
  REQUIRE(eventually([&] { return server->openWatches() == 3; }));
  httplib::Client client("127.0.0.1", server->port());
  auto closed = client.Post("/_test/close-watches", "", "application/json");
  REQUIRE(closed->status == 200);
  CHECK(json::parse(closed->body)["closed"] == 3);
  for (auto& r : readers) CHECK(eventually([&] { return r->ended(); }));

  REQUIRE(client.Post("/_test/latency", R"({"ms":300})", "application/json")->status == 200);
  auto start = std::chrono::steady_clock::now();
  CHECK(client.Get("/api/v1/nodes")->status == 200);
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
  server->setLatency(0ms);
}

TEST_CASE("http: Table responses for list, get and watch", "[integration][apiserver]") {
  auto server = startServer();
  REQUIRE(server->store().create("pods", "default", pod("a")).ok());
  httplib::Client client("127.0.0.1", server->port());
  httplib::Headers table = {
      {"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}};
  json list = json::parse(client.Get("/api/v1/namespaces/default/pods?limit=500", table)->body);
  CHECK(list["kind"] == "Table");
  CHECK(list["columnDefinitions"][0]["name"] == "Name");
  CHECK(list["rows"][0]["cells"][2] == "Pending");
  json one = json::parse(client.Get("/api/v1/namespaces/default/pods/a", table)->body);
  CHECK(one["rows"].size() == 1);

  WatchReader reader(server->port(), "/api/v1/namespaces/default/pods?watch=true", table);
  REQUIRE(eventually([&] { return reader.count() == 1; }));
  REQUIRE(server->store().create("pods", "default", pod("b")).ok());
  REQUIRE(eventually([&] { return reader.count() == 2; }));
  auto lines = reader.lines();
  CHECK(lines[0]["object"]["kind"] == "Table");
  CHECK_FALSE(lines[0]["object"]["columnDefinitions"].empty());
  CHECK(lines[1]["object"]["columnDefinitions"].empty());
  CHECK(lines[1]["object"]["rows"][0]["cells"][0] == "b");
}

TEST_CASE("http: the request log records what clients sent", "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  client.Post("/api/v1/namespaces/default/pods", pod("a").dump(), "application/json");
  client.Get("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1");
  auto reqs = server->requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].method == "POST");
  CHECK(reqs[0].content_type == "application/json");
  CHECK(json::parse(reqs[0].body)["metadata"]["name"] == "a");
  CHECK(reqs[1].query == "fieldSelector=spec.nodeName=n1");
  server->clearRequests();
  CHECK(server->requests().empty());
}

TEST_CASE("http: many watchers all see every write", "[integration][apiserver]") {
  auto server = startServer();
  constexpr int kWatchers = 40;
  constexpr int kWrites = 50;
  std::vector<std::unique_ptr<WatchReader>> readers;
  const std::string rv = std::to_string(server->store().resourceVersion());
  for (int i = 0; i < kWatchers; ++i) {
    readers.push_back(std::make_unique<WatchReader>(
        server->port(), "/api/v1/pods?watch=true&resourceVersion=" + rv));
  }
  REQUIRE(eventually([&] { return server->openWatches() == kWatchers; }));
  for (int i = 0; i < kWrites; ++i) {
    REQUIRE(server->store().create("pods", "default", pod("p" + std::to_string(i))).ok());
  }
  for (auto& r : readers) {
    REQUIRE(eventually([&] { return r->count() == kWrites; }));
  }
  // Normal requests still get a thread while every watcher holds one.
  httplib::Client client("127.0.0.1", server->port());
  CHECK(client.Get("/api/v1/pods")->status == 200);
  server->stop();
  for (auto& r : readers) CHECK(eventually([&] { return r->ended(); }));
}

TEST_CASE("http: a watcher that stops reading is dropped without stalling writers or others",
          "[integration][apiserver]") {
  ServerOptions opts;
  // Long enough that a writer or another watcher waiting on the stuck stream would never finish
  // within the test's deadlines: everything below completes while the stuck watch is still open.
  opts.write_timeout = 600s;
  auto server = startServer(opts);
  const std::string rv = std::to_string(server->store().resourceVersion());
  const int fd = openUnreadWatch(server->port(), rv);
  REQUIRE(fd >= 0);
  REQUIRE(eventually([&] { return server->openWatches() == 1; }));
  WatchReader healthy(server->port(), "/api/v1/pods?watch=true&resourceVersion=" + rv);
  REQUIRE(eventually([&] { return server->openWatches() == 2; }));

  createBigPods(*server, kStuckPods);
  // Writes over HTTP are answered too, and the healthy watcher sees every event...
  httplib::Client client("127.0.0.1", server->port());
  auto res = client.Post("/api/v1/namespaces/default/pods", pod("last").dump(), "application/json");
  REQUIRE(res);
  CHECK(res->status == 201);
  CHECK(eventually([&] { return healthy.count() == kStuckPods + 1; }, 30s));
  // ...while the stuck watch is still open, its thread blocked on the full socket.
  CHECK(server->openWatches() == 2);
  // Its client going away ends it.
  close(fd);
  CHECK(eventually([&] { return server->openWatches() == 1; }, 20s));
}

TEST_CASE("http: a watch whose client stops reading is dropped at the write timeout",
          "[integration][apiserver]") {
  ServerOptions opts;
  opts.write_timeout = 1s;
  auto server = startServer(opts);
  const int fd = openUnreadWatch(server->port(), std::to_string(server->store().resourceVersion()));
  REQUIRE(fd >= 0);
  REQUIRE(eventually([&] { return server->openWatches() == 1; }));
  createBigPods(*server, kStuckPods);
  CHECK(eventually([&] { return server->openWatches() == 0; }, 20s));
  close(fd);
}

TEST_CASE("http: stop does not wait out the keep-alive of an idle client connection",
          "[integration][apiserver]") {
  const bool tls = GENERATE(false, true);
  CAPTURE(tls);
  TempDir pki("apiserver-stop");
  auto server = startServer(tls, pki);
  auto client = clientFor(*server, pki);
  client->set_keep_alive(true);
  auto res = client->Get("/api/v1/nodes");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  // The connection stays open and idle: the server would wait 30 s (its keep-alive timeout)
  // for the next request on it.
  const auto start = std::chrono::steady_clock::now();
  server->stop();
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  // The next request finds the connection closed and nobody listening.
  CHECK_FALSE(client->Get("/api/v1/nodes"));
}

TEST_CASE("http: stop ends a watch whose client stopped reading without waiting for the write",
          "[integration][apiserver]") {
  const bool tls = GENERATE(false, true);
  CAPTURE(tls);
  TempDir pki("apiserver-stop");
  ServerOptions opts;
  opts.write_timeout = 30s;  // how long the blocked write would hold stop() otherwise
  auto server = startServer(tls, pki, opts);
  auto client = clientFor(*server, pki);
  StalledWatch watch(*client, "/api/v1/pods?watch=true&resourceVersion=" +
                                  std::to_string(server->store().resourceVersion()));
  REQUIRE(eventually([&] { return server->openWatches() == 1; }));
  createBigPods(*server, kStuckPods);
  REQUIRE(eventually([&] { return watch.stalled(); }));
  // The watch's request thread is in a write that cannot progress.
  const auto start = std::chrono::steady_clock::now();
  server->stop();
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(server->openWatches() == 0);
  watch.resume();
  CHECK(eventually([&] { return watch.ended(); }, 20s));
}

TEST_CASE("http: token auth file with groups and comments, 401 Status without a valid token",
          "[integration][apiserver]") {
  TempDir dir("apiserver-tokens");
  writeFile(dir / "tokens.csv",
            "# kube-apiserver's static token file\n"
            "s3cret,admin,uid1,\"system:masters,dev\"\n"
            "\n"
            "other,bob,uid2\r\n");
  auto parsed = parseTokenAuthFile(dir / "tokens.csv");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  CHECK((*parsed)[0].token == "s3cret");
  CHECK((*parsed)[0].user == "admin");
  CHECK((*parsed)[0].uid == "uid1");
  CHECK((*parsed)[0].groups == std::vector<std::string>{"system:masters", "dev"});
  CHECK((*parsed)[1].user == "bob");
  CHECK((*parsed)[1].groups.empty());

  writeFile(dir / "bad.csv", "ok,u,1\nonly-two,fields\n");
  auto bad = parseTokenAuthFile(dir / "bad.csv");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find((dir / "bad.csv").string() + " line 2") != std::string::npos);
  writeFile(dir / "quote.csv", "t,u,1,\"open\n");
  CHECK_FALSE(parseTokenAuthFile(dir / "quote.csv").ok());
  writeFile(dir / "empty.csv", "# nothing\n");
  ServerOptions empty;
  empty.token_auth_file = (dir / "empty.csv").string();
  CHECK_FALSE(TestApiServer::start(empty).ok());

  ServerOptions opts;
  opts.token_auth_file = (dir / "tokens.csv").string();
  auto server = startServer(opts);
  CHECK(server->kubeconfig().find("    token: s3cret\n") != std::string::npos);
  httplib::Client client("127.0.0.1", server->port());
  for (const httplib::Headers& headers :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer nope"}},
        httplib::Headers{{"Authorization", "Basic czNjcmV0"}},
        httplib::Headers{{"Authorization", "s3cret"}}}) {
    auto res = client.Get("/api/v1/namespaces/default/pods", headers);
    REQUIRE(res);
    CHECK(res->status == 401);
    json status = json::parse(res->body);
    CHECK(status["kind"] == "Status");
    CHECK(status["reason"] == "Unauthorized");
    CHECK(status["code"] == 401);
  }
  for (const char* token : {"s3cret", "other"}) {
    auto res = client.Get("/api/v1/namespaces/default/pods",
                          {{"Authorization", std::string("Bearer ") + token}});
    REQUIRE(res);
    CHECK(res->status == 200);
  }
  // Health checks and the test-only endpoints need no token.
  CHECK(client.Get("/livez")->status == 200);
  CHECK(client.Get("/_test/status")->status == 200);
}

TEST_CASE("http: leases round trip with optimistic concurrency", "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  const std::string base = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "node1"}}},
                {"spec",
                 {{"holderIdentity", "node1"},
                  {"leaseDurationSeconds", 40},
                  {"renewTime", "2024-05-01T12:00:10.123456Z"}}}};
  auto created = client.Post(base.c_str(), lease.dump(), "application/json");
  REQUIRE(created->status == 201);
  json stored = json::parse(created->body);
  CHECK(stored["spec"]["renewTime"] == "2024-05-01T12:00:10.123456Z");
  CHECK(stored["metadata"]["namespace"] == "kube-node-lease");
  stored["spec"]["renewTime"] = "2024-05-01T12:00:20.000001Z";
  auto renewed = client.Put((base + "/node1").c_str(), stored.dump(), "application/json");
  REQUIRE(renewed->status == 200);
  CHECK(json::parse(renewed->body)["spec"]["renewTime"] == "2024-05-01T12:00:20.000001Z");
  // The same (now stale) object again: 409 Conflict, the client re-GETs.
  CHECK(client.Put((base + "/node1").c_str(), stored.dump(), "application/json")->status == 409);
  auto list = json::parse(client.Get("/apis/coordination.k8s.io/v1/leases")->body);
  CHECK(list["kind"] == "LeaseList");
  CHECK(list["apiVersion"] == "coordination.k8s.io/v1");
  CHECK(list["items"].size() == 1);
  CHECK(client.Get("/apis/coordination.k8s.io/v1/namespaces/default/pods")->status == 404);
}

namespace {

// Sends a request's headers and the first `sent` bytes of a body of `declared` bytes on a raw
// connection, then reads the answer (up to 10 s) without sending the rest: what the server says
// before the client finishes, or "" when it says nothing.
std::string answerBeforeBody(int port, const std::string& headers, size_t declared, size_t sent,
                             const std::string& path = "/api/v1/namespaces/default/pods") {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string request =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers +
      "Content-Type: application/json\r\nContent-Length: " + std::to_string(declared) + "\r\n\r\n" +
      std::string(sent, ' ');
  // The server may answer and close before all of this is written: a failed send is fine.
  for (size_t off = 0; off < request.size();) {
    ssize_t n = send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  std::string answer;
  char buf[4096];
  while (true) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

json statusBody(const std::string& answer) {
  auto body = answer.find("\r\n\r\n");
  REQUIRE(body != std::string::npos);
  return json::parse(answer.substr(body + 4));
}

}  // namespace

TEST_CASE("http: an unauthenticated request is refused from its headers, before its body",
          "[integration][apiserver]") {
  TempDir dir("apiserver-auth-body");
  writeFile(dir / "tokens.csv", "s3cret,admin,uid1\n");
  ServerOptions opts;
  opts.token_auth_file = (dir / "tokens.csv").string();
  auto server = startServer(opts);
  // 200 MB announced, 64 KiB sent: the 401 comes without the rest.
  const std::string answer = answerBeforeBody(server->port(), "", 200u << 20, 64u << 10);
  REQUIRE(answer.starts_with("HTTP/1.1 401"));
  CHECK(answer.find("Connection: close") != std::string::npos);
  json status = statusBody(answer);
  CHECK(status["kind"] == "Status");
  CHECK(status["reason"] == "Unauthorized");
  CHECK(server->store().list("pods", "")->items.empty());
}

TEST_CASE("http: request bodies over 3 MiB get 413 without being read",
          "[integration][apiserver]") {
  TempDir dir("apiserver-big-body");
  writeFile(dir / "tokens.csv", "s3cret,admin,uid1\n");
  ServerOptions opts;
  opts.token_auth_file = (dir / "tokens.csv").string();
  auto server = startServer(opts);
  const std::string auth = "Authorization: Bearer s3cret\r\n";
  const std::string answer = answerBeforeBody(server->port(), auth, 4u << 20, 64u << 10);
  REQUIRE(answer.starts_with("HTTP/1.1 413"));
  json status = statusBody(answer);
  CHECK(status["kind"] == "Status");
  CHECK(status["code"] == 413);
  CHECK(status["reason"] == "RequestEntityTooLarge");
  // The unauthenticated /_test/ endpoints are bounded alike.
  const std::string test_answer =
      answerBeforeBody(server->port(), "", 4u << 20, 64u << 10, "/_test/status");
  CHECK(test_answer.starts_with("HTTP/1.1 413"));

  // A whole 4 MiB body sent by an ordinary client gets the same answer; 3 MiB of pod is fine.
  httplib::Client client("127.0.0.1", server->port());
  client.set_bearer_token_auth("s3cret");
  json big = pod("big");
  big["metadata"]["annotations"] = {{"example.com/padding", std::string(4u << 20, 'x')}};
  auto res = client.Post("/api/v1/namespaces/default/pods", big.dump(), "application/json");
  if (res) CHECK(res->status == 413);  // or the connection was closed mid-send: also refused
  json fits = pod("fits");
  fits["metadata"]["annotations"] = {{"example.com/padding", std::string(200000, 'x')}};
  auto ok = client.Post("/api/v1/namespaces/default/pods", fits.dump(), "application/json");
  REQUIRE(ok);
  CHECK(ok->status == 201);
  CHECK(server->store().list("pods", "")->items.size() == 1);
}

TEST_CASE("http: pods with names kube-apiserver refuses are 422 Invalid naming the field",
          "[integration][apiserver]") {
  auto server = startServer();
  httplib::Client client("127.0.0.1", server->port());
  const std::string pods = "/api/v1/namespaces/default/pods";
  auto invalid = [&](const json& p, const std::string& field, const std::string& reason) {
    auto res = client.Post(pods.c_str(), p.dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == 422);
    json s = json::parse(res->body);
    CHECK(s["reason"] == "Invalid");
    REQUIRE(s["details"]["causes"].size() == 1);
    CHECK(s["details"]["causes"][0]["field"] == field);
    CHECK(s["details"]["causes"][0]["reason"] == reason);
    return s;
  };
  json escape = pod("escape");
  escape["spec"]["containers"][0]["name"] = "../../../../tmp/x";
  json s = invalid(escape, "spec.containers[0].name", "FieldValueInvalid");
  CHECK(s["message"].get<std::string>().starts_with(
      "Pod \"escape\" is invalid: spec.containers[0].name: Invalid value: \"../../../../tmp/x\": "
      "a lowercase RFC 1123 label must consist of"));
  json volume = pod("volume");
  volume["spec"]["volumes"] = {{{"name", "/tmp/y/z"}, {"emptyDir", json::object()}}};
  invalid(volume, "spec.volumes[0].name", "FieldValueInvalid");
  json twice = pod("twice");
  twice["spec"]["volumes"] = {{{"name", "v"}, {"emptyDir", json::object()}},
                              {{"name", "v"}, {"emptyDir", json::object()}}};
  invalid(twice, "spec.volumes[1].name", "FieldValueDuplicate");
  json init = pod("init");
  init["spec"]["initContainers"] = {{{"name", "c"}, {"image", "busybox"}}};
  invalid(init, "spec.initContainers[0].name", "FieldValueDuplicate");
  json unnamed = pod("unnamed");
  unnamed["spec"]["containers"][0].erase("name");
  invalid(unnamed, "spec.containers[0].name", "FieldValueRequired");
  json upper = pod("upper");
  upper["spec"]["initContainers"] = {{{"name", "Setup"}, {"image", "busybox"}}};
  invalid(upper, "spec.initContainers[0].name", "FieldValueInvalid");
  CHECK(server->store().list("pods", "")->items.empty());

  // An update is checked as a create is.
  REQUIRE(client.Post(pods.c_str(), pod("web").dump(), "application/json")->status == 201);
  json current = json::parse(client.Get((pods + "/web").c_str())->body);
  current["spec"]["containers"][0]["name"] = "/tmp/x";
  auto put = client.Put((pods + "/web").c_str(), current.dump(), "application/json");
  REQUIRE(put);
  CHECK(put->status == 422);
}
