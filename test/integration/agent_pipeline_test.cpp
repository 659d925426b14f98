// The whole pod pipeline in-process, wired as cmd/nodeagent/daemon_command.cpp wires it: manifest
// files -> FileSource (real inotify) -> PodConfig -> Agent (real sync loop, pod workers, PLEG) ->
// FakeRuntime, on a real clock and an io_context run by two threads. Assertions are on the
// runtime actions the pipeline caused.
// GCC 12 with -fsanitize=address (NODEAGENT_SANITIZE) reports a false -Wmaybe-uninitialized
// on the std::optional<any_io_executor> in PodConfigOptions when it is destroyed.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/admission.h"
#include "agent/agent.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/status/status_manager.h"
#include "api/pod_update.h"
#include "base/asio.h"
#include "config/file_source.h"
#include "config/http_source.h"
#include "config/manifest_errors.h"
#include "config/pod_config.h"
#include "podmanager/mirror_client.h"
#include "podmanager/pod_manager.h"
#include "test/support/integration_env.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Kind = runtime::FakeRuntime::Action::Kind;

namespace {

constexpr const char* kNode = "node1";

std::string podYaml(const std::string& name, const std::string& container,
                    const std::string& arg = "1000", const std::string& extra_spec = "") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\nspec:\n" + extra_spec +
         "  containers:\n  - name: " + container +
         "\n    image: debian:12\n    command: [\"sleep\", \"" + arg + "\"]\n";
}

struct PipelineOptions {
  int64_t max_pods = 110;
  // A manifest URL; set to make an HTTP source (one that never answers keeps sources unready).
  std::string manifest_url;
  base::Duration housekeeping_period = 100ms;
};

class Pipeline {
 public:
  explicit Pipeline(PipelineOptions o = {}) {
    fs::create_directories(manifests());
    fs::create_directories(dir_ / "root");
    runtime_ = std::make_unique<runtime::FakeRuntime>(asio::make_strand(io_.context()), clock_);
    pod_manager_ = std::make_unique<podmanager::PodManager>(mirror_client_);
    status_manager_ = std::make_unique<agent::StatusManager>(clock_, *pod_manager_);
    config::PodConfigOptions pco;
    pco.blocking_executor = blocking_.get_executor();
    pod_config_ = std::make_unique<config::PodConfig>(
        io_.executor(), clock_,
        [this](api::PodUpdate u) {
          if (auto a = std::atomic_load(&agent_)) a->onPodUpdate(std::move(u));
        },
        pco);
    agent::AgentOptions ao;
    ao.node_name = kNode;
    ao.node_ip = "127.0.0.1";
    ao.root_dir = dir_ / "root";
    ao.allocatable = {.node_name = kNode,
                      .cpu_milli = 64000,
                      .memory_bytes = int64_t{64} << 30,
                      .pods = o.max_pods};
    ao.crashloop_backoff_initial = 1s;
    ao.sync_loop.housekeeping_period = o.housekeeping_period;
    ao.pleg.relist_period = 1s;
    auto* pc = pod_config_.get();
    std::atomic_store(
        &agent_, std::make_shared<agent::Agent>(
                     io_.executor(), clock_, random_, *runtime_, *pod_manager_, *status_manager_,
                     [pc](const std::string& s) { return pc->sourceSeen(s); },
                     [pc] { return pc->seenAllSources(pc->sources()); }, ao));

    config::FileSourceOptions fo;
    fo.path = manifests().string();
    fo.node_name = kNode;
    fo.settle_window = 50ms;
    fo.errors = &errors_;
    sources_.push_back(config::makeFileSource(io_.executor(), clock_, fo,
                                              pod_config_->channel(std::string(api::kFileSource))));
    if (!o.manifest_url.empty()) {
      config::HttpSourceOptions ho;
      ho.url = o.manifest_url;
      ho.node_name = kNode;
      ho.check_frequency = 200ms;
      ho.timeout = 1s;
      ho.errors = &errors_;
      auto http = config::HttpSource::create(io_.executor(), blocking_.get_executor(), clock_, ho,
                                             pod_config_->channel(std::string(api::kHttpSource)));
      REQUIRE(http.ok());
      http_ = http->get();
      sources_.push_back(std::move(*http));
    }
    io_.start(2);
  }

  ~Pipeline() {
    for (auto& s : sources_) s->stop();
    std::promise<void> idle;
    agent_->stop([&idle] { idle.set_value(); });
    idle.get_future().wait_for(10s);
    io_.stop();
    blocking_.stop();
    blocking_.join();
  }

  void start() {
    agent_->start();
    for (auto& s : sources_) s->start();
  }

  fs::path manifests() const { return dir_ / "manifests"; }
  void writeManifest(const std::string& file, const std::string& content) {
    auto tmp = manifests() / ("." + file + ".tmp");
    testing::writeFile(tmp, content);
    fs::rename(tmp, manifests() / file);
  }
  void removeManifest(const std::string& file) { fs::remove(manifests() / file); }

  std::vector<runtime::FakeRuntime::Action> actions(const std::string& container) const {
    std::vector<runtime::FakeRuntime::Action> out;
    for (auto& a : runtime_->actions()) {
      if (a.container_name == container) out.push_back(a);
    }
    return out;
  }
  size_t count(const std::string& container, Kind kind) const {
    auto all = actions(container);
    return static_cast<size_t>(
        std::count_if(all.begin(), all.end(), [kind](const auto& a) { return a.kind == kind; }));
  }
  api::PodPtr pod(const std::string& name) const {
    return pod_manager_->getPodByFullName(name + "-" + kNode + "_default");
  }
  std::optional<api::PodStatus> status(const std::string& uid) const {
    return status_manager_->getPodStatus(uid);
  }

  // Starts a container for a pod no source knows (left by an earlier run) before start().
  void addOrphan(const std::string& uid, const std::string& container) {
    auto pod = std::make_shared<api::Pod>();
    pod->metadata.name = "orphan";
    pod->metadata.namespace_ = "default";
    pod->metadata.uid = uid;
    api::Container c;
    c.name = container;
    c.image = "debian:12";
    c.command = {"sleep", "1000"};
    pod->spec->containers.push_back(c);
    std::promise<bool> done;
    asio::co_spawn(
        io_.context(),
        [&]() -> asio::awaitable<void> {
          // The awaitable is made outside the co_await expression: GCC 12 destroys temporaries
          // of a co_await expression twice.
          runtime::StartContainerOptions options;
          auto start = runtime_->startContainer(pod, pod->spec->containers[0], 0, options);
          auto id = co_await std::move(start);
          done.set_value(id.ok());
        },
        asio::detached);
    REQUIRE(done.get_future().get());
  }

  runtime::FakeRuntime& runtime() { return *runtime_; }
  agent::Agent& agent() { return *agent_; }
  config::HttpSource* http() { return http_; }

 private:
  testing::TempDir dir_{"nodeagent-pipeline"};
  testing::IoThreads io_;
  asio::thread_pool blocking_{1};
  base::Clock& clock_ = base::realClock();
  base::Random& random_ = base::defaultRandom();
  podmanager::NoopMirrorClient mirror_client_;
  config::ManifestErrors errors_;
  std::unique_ptr<runtime::FakeRuntime> runtime_;
  std::unique_ptr<podmanager::PodManager> pod_manager_;
  std::unique_ptr<agent::StatusManager> status_manager_;
  std::unique_ptr<config::PodConfig> pod_config_;
  std::shared_ptr<agent::Agent> agent_;
  std::vector<std::unique_ptr<config::PodSource>> sources_;
  config::HttpSource* http_ = nullptr;
};

}  // namespace

TEST_CASE("pipeline starts a new manifest's container once and ignores an identical rewrite",
          "[integration][pipeline]") {
  Pipeline p;
  p.start();
  p.writeManifest("a.yaml", podYaml("a", "a-main"));
  REQUIRE(testing::eventually([&] { return p.count("a-main", Kind::kStart) == 1; }));
  const auto uid = p.actions("a-main")[0].pod_uid;
  CHECK(p.pod("a")->metadata.uid == uid);

  p.writeManifest("a.yaml", podYaml("a", "a-main"));
  // A later manifest as a barrier: once it has started, the rewrite went through the pipeline.
  p.writeManifest("b.yaml", podYaml("b", "b-main"));
  REQUIRE(testing::eventually([&] { return p.count("b-main", Kind::kStart) == 1; }));
  CHECK(p.actions("a-main").size() == 1);
  CHECK(p.pod("a")->metadata.uid == uid);
}

TEST_CASE("pipeline kills the old pod before starting an edited manifest",
          "[integration][pipeline]") {
  Pipeline p;
  p.start();
  p.writeManifest("e.yaml", podYaml("e", "e-main", "1000"));
  REQUIRE(testing::eventually([&] { return p.count("e-main", Kind::kStart) == 1; }));
  const auto old_uid = p.actions("e-main")[0].pod_uid;

  p.writeManifest("e.yaml", podYaml("e", "e-main", "2000"));
  REQUIRE(testing::eventually([&] { return p.count("e-main", Kind::kStart) == 2; }));
  auto acts = p.actions("e-main");
  auto kill = std::find_if(acts.begin(), acts.end(), [&](const auto& a) {
    return a.kind == Kind::kKill && a.pod_uid == old_uid;
  });
  auto second_start = std::find_if(acts.begin() + 1, acts.end(),
                                   [](const auto& a) { return a.kind == Kind::kStart; });
  REQUIRE(kill != acts.end());
  REQUIRE(second_start != acts.end());
  CHECK(kill < second_start);
  CHECK(second_start->pod_uid != old_uid);
  CHECK(p.pod("e")->metadata.uid == second_start->pod_uid);
}

TEST_CASE("pipeline kills a deleted manifest's pod and starts it again when written back",
          "[integration][pipeline]") {
  Pipeline p;
  p.start();
  const auto manifest = podYaml("d", "d-main");
  p.writeManifest("d.yaml", manifest);
  REQUIRE(testing::eventually([&] { return p.count("d-main", Kind::kStart) == 1; }));
  const auto uid = p.actions("d-main")[0].pod_uid;

  p.removeManifest("d.yaml");
  REQUIRE(testing::eventually([&] { return p.count("d-main", Kind::kKill) == 1; }));
  REQUIRE(testing::eventually([&] { return p.pod("d") == nullptr; }));
  CHECK(p.runtime().runningContainerCount() == 0);

  p.writeManifest("d.yaml", manifest);
  REQUIRE(testing::eventually([&] { return p.count("d-main", Kind::kStart) == 2; }));
  auto acts = p.actions("d-main");
  CHECK(acts.back().kind == Kind::kStart);
  CHECK(acts.back().pod_uid == uid);  // same content, same UID: a restart, not a leftover
  REQUIRE(testing::eventually([&] { return p.runtime().runningContainerCount() == 1; }));
}

TEST_CASE("pipeline kills a pod past activeDeadlineSeconds and marks it Failed",
          "[integration][pipeline]") {
  Pipeline p;
  p.start();
  p.writeManifest("dl.yaml", podYaml("dl", "dl-main", "1000", "  activeDeadlineSeconds: 2\n"));
  REQUIRE(testing::eventually([&] { return p.count("dl-main", Kind::kStart) == 1; }));
  const auto started = std::chrono::steady_clock::now();
  const auto uid = p.actions("dl-main")[0].pod_uid;
  REQUIRE(testing::eventually([&] { return p.count("dl-main", Kind::kKill) == 1; }, 15s));
  CHECK(std::chrono::steady_clock::now() - started >= 1500ms);
  REQUIRE(testing::eventually([&] {
    auto st = p.status(uid);
    return st && st->phase == "Failed";
  }));
  CHECK(p.status(uid)->reason == "DeadlineExceeded");
  CHECK(p.count("dl-main", Kind::kStart) == 1);
}

TEST_CASE("pipeline rejects pods beyond max-pods and never starts them",
          "[integration][pipeline]") {
  PipelineOptions o;
  o.max_pods = 2;
  Pipeline p(o);
  p.writeManifest("p1.yaml", podYaml("p1", "p1-main"));
  p.writeManifest("p2.yaml", podYaml("p2", "p2-main"));
  p.writeManifest("p3.yaml", podYaml("p3", "p3-main"));
  p.start();
  REQUIRE(testing::eventually([&] { return p.runtime().runningContainerCount() == 2; }));
  std::vector<std::string> rejected;
  REQUIRE(testing::eventually([&] {
    rejected.clear();
    for (const char* name : {"p1", "p2", "p3"}) {
      auto pod = p.pod(name);
      if (!pod) continue;
      auto st = p.status(pod->metadata.uid);
      if (st && st->phase == "Failed" && st->reason == "OutOfpods") {
        rejected.push_back(name);
      }
    }
    return rejected.size() == 1;
  }));
  CHECK(p.count(rejected[0] + "-main", Kind::kStart) == 0);
  CHECK(p.runtime().runningContainerCount() == 2);
}

TEST_CASE("pipeline starts file pods while an HTTP source is unready but kills no orphan",
          "[integration][pipeline]") {
  PipelineOptions o;
  o.manifest_url = "http://127.0.0.1:" + std::to_string(testing::unusedLoopbackPort()) + "/pods";
  Pipeline p(o);
  p.addOrphan("orphan-uid", "orphan-main");
  p.writeManifest("f.yaml", podYaml("f", "f-main"));
  p.start();
  REQUIRE(testing::eventually([&] { return p.count("f-main", Kind::kStart) == 1; }));
  // Ten failed polls (200 ms apart) span many 100 ms housekeeping periods.
  // (A poll counts when its GET starts, a failure once its answer is handled: wait for those.)
  REQUIRE(testing::eventually([&] { return p.http()->stats().failures >= 10; }, 15s));
  CHECK(p.count("orphan-main", Kind::kKill) == 0);
  CHECK(p.agent().metrics().housekeeping_runs == 0);
}

TEST_CASE("pipeline kills an orphaned runtime pod once every source is ready",
          "[integration][pipeline]") {
  Pipeline p;
  p.addOrphan("orphan-uid", "orphan-main");
  p.writeManifest("f.yaml", podYaml("f", "f-main"));
  p.start();
  REQUIRE(testing::eventually([&] { return p.count("f-main", Kind::kStart) == 1; }));
  REQUIRE(testing::eventually([&] { return p.count("orphan-main", Kind::kKill) == 1; }));
  CHECK(p.count("f-main", Kind::kKill) == 0);
}
