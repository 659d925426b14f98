// The `api` pod source end to end: test-apiserver (in-process) -> RestClient -> Reflector ->
// ApiserverSource -> PodConfig, checking the PodUpdates the sync loop would see. Fault injection
// covers closed watches, compacted history (410), a restarted server and garbage in the stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "api/pod_update.h"
#include "base/clock.h"
#include "base/random.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "config/apiserver_source.h"
#include "config/pod_config.h"
#include "test/support/test_util.h"

using namespace std::chrono_literals;
using namespace nodeagent;
using nodeagent::testing::eventually;
using nodeagent::testing::TempDir;
using nodeagent::testing::writeFile;
using testapiserver::TestApiServer;

namespace {

nlohmann::json podJson(const std::string& name, const std::string& node) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", name}}}}},
          {"spec",
           {{"nodeName", node},
            {"containers",
             {{{"name", "main"}, {"image", "busybox"}, {"command", {"sleep", "3600"}}}}}}}};
}

// The agent side: an io_context thread, PodConfig, the api source feeding it, and a record of
// PodConfig's output plus the set of pods it implies.
class Agent {
 public:
  Agent(const std::filesystem::path& kubeconfig, std::string node = "n1") {
    config_ =
        std::make_unique<config::PodConfig>(asio::make_strand(ioc_), base::realClock(),
                                            [this](api::PodUpdate u) { record(std::move(u)); });
    config::ApiserverSourceOptions opts;
    opts.kubeconfig = kubeconfig;
    opts.node_name = std::move(node);
    opts.reflector.backoff.initial = 50ms;
    opts.reflector.backoff.max = 500ms;
    opts.reflector.min_healthy_watch = 0ms;
    auto source = config::makeApiserverSource(ioc_.get_executor(), base::realClock(),
                                              base::defaultRandom(), opts, config_->channel("api"));
    REQUIRE(source.ok());
    source_ = std::move(*source);
    thread_ = std::thread([this] { ioc_.run(); });
    source_->start();
  }
  ~Agent() {
    source_->stop();
    guard_.reset();
    ioc_.stop();
    thread_.join();  // PodConfig dies below, once no handler of it can run
  }

  std::vector<std::string> ops() {
    std::lock_guard lock(mu_);
    return ops_;
  }
  size_t opCount() {
    std::lock_guard lock(mu_);
    return ops_.size();
  }
  // Sorted names of the pods PodConfig's output says are present.
  std::vector<std::string> present() {
    std::lock_guard lock(mu_);
    std::vector<std::string> names;
    for (auto& [uid, name] : pods_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
  }
  bool waitFor(const std::string& op, size_t from = 0) {
    return eventually([&] {
      auto o = ops();
      return std::find(o.begin() + std::min(from, o.size()), o.end(), op) != o.end();
    });
  }
  bool seen() { return config_->sourceSeen("api"); }

 private:
  void record(api::PodUpdate u) {
    std::lock_guard lock(mu_);
    for (const auto& p : u.pods) {
      ops_.push_back(std::string(api::podOperationName(u.op)) + ":" + p->metadata.name);
      if (u.op == api::PodOperation::kRemove) {
        pods_.erase(p->metadata.uid);
      } else {
        pods_[p->metadata.uid] = p->metadata.name;
      }
    }
    if (u.pods.empty()) ops_.push_back(std::string(api::podOperationName(u.op)) + ":");
  }

  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_ = asio::make_work_guard(ioc_);
  std::unique_ptr<config::PodConfig> config_;
  std::unique_ptr<config::PodSource> source_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> ops_;
  std::map<std::string, std::string> pods_;
};

struct Env {
  TempDir dir;
  std::unique_ptr<TestApiServer> server;
  std::filesystem::path kubeconfig;
  explicit Env(testapiserver::ServerOptions opts = {}) {
    auto s = TestApiServer::start(opts);
    REQUIRE(s.ok());
    server = std::move(*s);
    kubeconfig = dir / "kubeconfig";
    REQUIRE(server->writeKubeconfig(kubeconfig).ok());
  }
  testapiserver::Store& store() { return server->store(); }
  void create(const std::string& name, const std::string& node = "n1") {
    REQUIRE(store().create("pods", "default", podJson(name, node)).ok());
  }
};

size_t countOf(const std::vector<std::string>& ops, const std::string& op) {
  return static_cast<size_t>(std::count(ops.begin(), ops.end(), op));
}

}  // namespace

TEST_CASE("api source: an empty initial list marks the source seen", "[integration][apiclient]") {
  Env env;
  Agent agent(env.kubeconfig);
  REQUIRE(eventually([&] { return agent.seen(); }));
  CHECK(agent.ops() == std::vector<std::string>{"ADD:"});
}

TEST_CASE("api source: initial pods, then creates, edits and deletes of this node only",
          "[integration][apiclient]") {
  Env env;
  env.create("a");
  env.create("b");
  env.create("elsewhere", "n2");
  Agent agent(env.kubeconfig);
  REQUIRE(eventually([&] { return agent.present() == std::vector<std::string>{"a", "b"}; }));

  env.create("c");
  env.create("other", "n2");
  REQUIRE(agent.waitFor("ADD:c"));

  // A label change is a spec-level change: UPDATE.
  REQUIRE(env.store()
              .patch("pods", "default", "a", testapiserver::PatchType::kMergePatch,
                     {{"metadata", {{"labels", {{"app", "a2"}}}}}})
              .ok());
  REQUIRE(agent.waitFor("UPDATE:a"));

  // Status only: RECONCILE.
  REQUIRE(env.store()
              .patch("pods", "default", "b", testapiserver::PatchType::kMergePatch,
                     {{"status", {{"phase", "Running"}}}}, "status")
              .ok());
  REQUIRE(agent.waitFor("RECONCILE:b"));

  // Graceful deletion: DELETE; the final grace-0 delete: REMOVE.
  REQUIRE(env.store().remove("pods", "default", "c").ok());
  REQUIRE(agent.waitFor("DELETE:c"));
  testapiserver::DeleteOptions now;
  now.grace_period_seconds = 0;
  REQUIRE(env.store().remove("pods", "default", "c", now).ok());
  REQUIRE(agent.waitFor("REMOVE:c"));
  REQUIRE(env.store().remove("pods", "default", "other", now).ok());

  auto ops = agent.ops();
  for (const auto& op : ops) {
    CHECK(op.find("other") == std::string::npos);
    CHECK(op.find("elsewhere") == std::string::npos);
  }
  CHECK(countOf(ops, "ADD:c") == 1);
  CHECK(agent.present() == std::vector<std::string>{"a", "b"});
}

TEST_CASE(
    "api source: LIST and WATCH select the node's pods, from resourceVersion 0, with bookmarks",
    "[integration][apiclient]") {
  Env env;
  env.create("a");
  Agent agent(env.kubeconfig);
  REQUIRE(agent.waitFor("ADD:a"));
  REQUIRE(eventually([&] { return env.server->openWatches() == 1; }));
  // Decoded query parameters of the pod collection requests, in order.
  std::vector<std::map<std::string, std::string>> calls;
  for (const auto& r : env.server->requests()) {
    if (r.method != "GET" || r.path != "/api/v1/pods") continue;
    std::map<std::string, std::string> params;
    std::string_view q = r.query;
    while (!q.empty()) {
      auto amp = q.find('&');
      auto kv = q.substr(0, amp);
      auto eq = kv.find('=');
      params[std::string(kv.substr(0, eq))] =
          eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
      q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    }
    calls.push_back(params);
  }
  REQUIRE(calls.size() == 2);
  const auto& list = calls[0];
  CHECK(list.count("watch") == 0);
  CHECK(list.at("fieldSelector") == "spec.nodeName=n1");
  CHECK(list.at("resourceVersion") == "0");
  const auto& watch = calls[1];
  CHECK(watch.at("watch") == "true");
  CHECK(watch.at("fieldSelector") == "spec.nodeName=n1");
  CHECK(watch.at("allowWatchBookmarks") == "true");
  CHECK(watch.at("resourceVersion") ==
        std::to_string(env.store().resourceVersion()));  // the list's
  const int timeout = std::stoi(watch.at("timeoutSeconds"));
  CHECK(timeout >= 300);
  CHECK(timeout <= 600);
}

TEST_CASE("api source: bookmarks move the resourceVersion a re-opened watch starts from",
          "[integration][apiclient]") {
  testapiserver::ServerOptions opts;
  opts.bookmark_interval = 1ms;  // an idle watch gets a BOOKMARK at every turn
  Env env(opts);
  env.create("a");
  Agent agent(env.kubeconfig);
  REQUIRE(agent.waitFor("ADD:a"));
  // Another node's pod moves the store's resourceVersion; this node's watch only sees it through
  // bookmarks.
  env.create("elsewhere", "n2");
  const std::string target = std::to_string(env.store().resourceVersion());
  auto last_watch_rv = [&] {
    std::string rv;
    for (const auto& r : env.server->requests()) {
      if (r.path != "/api/v1/pods" || r.query.find("watch=true") == std::string::npos) continue;
      auto at = r.query.find("resourceVersion=");
      rv = r.query.substr(at + 16, r.query.find('&', at) - at - 16);
    }
    return rv;
  };
  REQUIRE(eventually([&] {
    if (last_watch_rv() == target) return true;
    env.server->closeWatches();
    return false;
  }));
  CHECK(agent.ops() == std::vector<std::string>{"ADD:a"});
  size_t lists = 0;
  for (const auto& r : env.server->requests()) {
    if (r.path == "/api/v1/pods" && r.query.find("watch=true") == std::string::npos) ++lists;
  }
  CHECK(lists == 1);
}

TEST_CASE("api source: a watch closed by the server resumes without duplicate or lost updates",
          "[integration][apiclient]") {
  Env env;
  env.create("a");
  Agent agent(env.kubeconfig);
  REQUIRE(agent.waitFor("ADD:a"));
  for (int round = 0; round < 5; ++round) {
    REQUIRE(eventually([&] { return env.server->openWatches() == 1; }));
    env.server->closeWatches();
    env.create("p" + std::to_string(round));
  }
  REQUIRE(eventually([&] { return agent.present().size() == 6; }));
  auto ops = agent.ops();
  CHECK(countOf(ops, "ADD:a") == 1);
  for (int round = 0; round < 5; ++round) CHECK(countOf(ops, "ADD:p" + std::to_string(round)) == 1);
  CHECK(ops.size() == 6);
  // Resumed watches, not relists.
  size_t lists = 0;
  for (const auto& r : env.server->requests()) {
    if (r.method == "GET" && r.path == "/api/v1/pods" &&
        r.query.find("watch=true") == std::string::npos)
      ++lists;
  }
  CHECK(lists == 1);
}

TEST_CASE("api source: compacted history gives 410 and a relist with no spurious updates",
          "[integration][apiclient]") {
  Env env;
  env.create("a");
  env.create("b");
  Agent agent(env.kubeconfig);
  REQUIRE(eventually([&] { return agent.present().size() == 2; }));
  REQUIRE(eventually([&] { return env.server->openWatches() == 1; }));
  const size_t before = agent.opCount();
  // Another node's pod moves the global resourceVersion past ours; compaction then expires it.
  env.create("elsewhere", "n2");
  env.server->compact();
  env.server->clearRequests();
  env.server->closeWatches();
  REQUIRE(eventually([&] {
    size_t lists = 0;
    for (const auto& r : env.server->requests()) {
      if (r.path == "/api/v1/pods" && r.query.find("watch=true") == std::string::npos) ++lists;
    }
    return lists >= 1 && env.server->openWatches() == 1;
  }));
  env.create("c");
  REQUIRE(agent.waitFor("ADD:c"));
  auto ops = agent.ops();
  CHECK(std::vector<std::string>(ops.begin() + before, ops.end()) ==
        std::vector<std::string>{"ADD:c"});
}

TEST_CASE("api source: a killed and restarted server is reconnected to and converged on",
          "[integration][apiclient]") {
  Env env;
  env.create("a");
  env.create("b");
  Agent agent(env.kubeconfig);
  REQUIRE(eventually([&] { return agent.present() == std::vector<std::string>{"a", "b"}; }));
  const int port = env.server->port();
  env.server->stop();
  env.server.reset();
  testapiserver::ServerOptions opts;
  opts.port = port;
  // Restarted on storage that moved on: the watch's resourceVersion is compacted away (410), as
  // with kube-apiserver after etcd advanced. (A fresh store would reuse resourceVersions the
  // agent already saw, which no real apiserver does.)
  opts.store.initial_resource_version = 1000;
  std::unique_ptr<TestApiServer> restarted;
  REQUIRE(eventually([&] {
    auto s = TestApiServer::start(opts);
    if (!s.ok()) return false;
    restarted = std::move(*s);
    return true;
  }));
  // A fresh store: b is gone, c is new, a is a new object with the same name (new UID).
  REQUIRE(restarted->store().create("pods", "default", podJson("a", "n1")).ok());
  REQUIRE(restarted->store().create("pods", "default", podJson("c", "n1")).ok());
  REQUIRE(eventually(
      [&] {
        return agent.present() == std::vector<std::string>{"a", "c"};
      },
      std::chrono::seconds(20)));
  CHECK(agent.waitFor("REMOVE:b"));
  restarted->stop();
}

TEST_CASE("api source: failed LISTs are retried, a 429 on the watch resumes it without a relist",
          "[integration][apiclient]") {
  Env env;
  env.create("a");
  auto lists = [&] {
    size_t n = 0;
    for (const auto& r : env.server->requests()) {
      if (r.method == "GET" && r.path == "/api/v1/pods" &&
          r.query.find("watch=true") == std::string::npos)
        ++n;
    }
    return n;
  };
  env.server->failNextRequests(500, 2, "/api/v1/pods");
  Agent agent(env.kubeconfig);
  REQUIRE(agent.waitFor("ADD:a"));
  CHECK(lists() == 3);
  REQUIRE(eventually([&] { return env.server->openWatches() == 1; }));
  // The re-opened watch is refused with 429 (Retry-After: 1): it is re-opened from the same
  // resourceVersion once that second has passed, and b (created meanwhile) arrives once.
  env.server->failNextRequests(429, 1, "/api/v1/pods");
  env.server->closeWatches();
  env.create("b");
  REQUIRE(agent.waitFor("ADD:b"));
  CHECK(lists() == 3);
  auto ops = agent.ops();
  CHECK(countOf(ops, "ADD:a") == 1);
  CHECK(countOf(ops, "ADD:b") == 1);
  size_t refused = 0;
  for (const auto& r : env.server->requests()) {
    if (r.query.find("watch=true") != std::string::npos) ++refused;
  }
  CHECK(refused >= 3);  // the first watch, the refused one, the resumed one
}

TEST_CASE("api source: token auth and TLS with the CA from the kubeconfig",
          "[integration][apiclient]") {
  TempDir pki;
  const std::string q = " >/dev/null 2>&1";
  std::string cmd = "cd '" + pki.path().string() + "'" +
                    " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
                    " -keyout tls.key -out tls.crt -days 2 -subj /CN=localhost"
                    " -addext subjectAltName=IP:127.0.0.1" +
                    q;
  REQUIRE(std::system(cmd.c_str()) == 0);
  writeFile(pki / "tokens.csv", "node-token,system:node:n1,uid1,\"system:nodes\"\n");
  testapiserver::ServerOptions opts;
  opts.token_auth_file = (pki / "tokens.csv").string();
  opts.tls_cert_file = (pki / "tls.crt").string();
  opts.tls_private_key_file = (pki / "tls.key").string();
  Env env(opts);
  REQUIRE(env.server->tls());
  env.create("secure");
  Agent agent(env.kubeconfig);
  REQUIRE(agent.waitFor("ADD:secure"));
}

TEST_CASE("api source: garbage in the watch stream ends that watch and relists",
          "[integration][apiclient]") {
  // test-apiserver never sends garbage: a small fake does.
  httplib::Server srv;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int lists = 0, watches = 0;
  srv.Get("/api/v1/pods", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    if (req.get_param_value("watch") != "true") {
      ++lists;
      nlohmann::json list = {{"kind", "PodList"},
                             {"apiVersion", "v1"},
                             {"metadata", {{"resourceVersion", std::to_string(10 * lists)}}},
                             {"items", nlohmann::json::array()}};
      auto p = podJson("a", "n1");
      p["metadata"]["uid"] = "uid-a";
      p["metadata"]["resourceVersion"] = "5";
      list["items"].push_back(p);
      res.set_content(list.dump(), "application/json");
      return;
    }
    ++watches;
    if (watches == 1) {
      res.set_content(std::string("{\"type\":\"ADDED\",\"object\":") + "\x01\x02 garbage }}}\n",
                      "application/json");
      return;
    }
    // Later watches: stay open without events until the client goes away.
    res.set_chunked_content_provider("application/json", [&](size_t, httplib::DataSink& sink) {
      std::unique_lock lock(mu);
      cv.wait_for(lock, 20ms, [&] { return done; });
      return !done && sink.is_writable();
    });
  });
  int port = srv.bind_to_any_port("127.0.0.1");
  std::thread t([&] { srv.listen_after_bind(); });
  TempDir dir;
  writeFile(dir / "kubeconfig",
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            "contexts: [{name: c, context: {cluster: k}}]\n"
            "clusters: [{name: k, cluster: {server: \"http://127.0.0.1:" +
                std::to_string(port) + "\"}}]\n");
  {
    Agent agent(dir / "kubeconfig");
    REQUIRE(eventually([&] {
      std::lock_guard lock(mu);
      return lists >= 2 && watches >= 2;
    }));
    // The relist found the same pod: PodConfig emitted nothing new.
    CHECK(agent.ops() == std::vector<std::string>{"ADD:a"});
  }
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  srv.stop();
  t.join();
}
