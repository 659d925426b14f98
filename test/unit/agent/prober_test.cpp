// The prober's state machine on the fake clock with a scripted probe handler: initial delay,
// periods, thresholds, startup gating, liveness holds, and no cost for probe-less containers.
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>

#include "agent/prober/prober.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using agent::ProbeOutcome;
using agent::ProbeResult;
using agent::ProbeType;
using Kind = ProbeOutcome::Kind;

namespace {

// Answers each probe by its exec command's first word ("live", "ready", "start"); records calls.
class ScriptedHandler final : public agent::ProbeHandler {
 public:
  asio::awaitable<ProbeOutcome> probe(agent::ProbeTarget target) override {
    const auto& name = target.handler.exec->command.at(0);
    calls.push_back(name);
    hosts.push_back(target.pod_ip);
    auto it = answers.find(name);
    co_return ProbeOutcome{it == answers.end() ? Kind::kSuccess : it->second, name + " said so"};
  }
  asio::awaitable<std::optional<agent::HookFailure>> runHook(agent::ProbeTarget) override {
    co_return std::nullopt;
  }
  size_t count(const std::string& name) const {
    return static_cast<size_t>(std::count(calls.begin(), calls.end(), name));
  }
  std::map<std::string, Kind> answers;
  std::vector<std::string> calls;
  std::vector<std::string> hosts;  // each probe's pod IP
};

nlohmann::json execProbe(const std::string& word, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json p = {{"exec", {{"command", {word}}}}};
  for (auto& [k, v] : extra.items()) p[k] = v;
  return p;
}

struct Harness {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  std::shared_ptr<ScriptedHandler> handler = std::make_shared<ScriptedHandler>();
  std::vector<std::string> changes;
  std::vector<std::string> failures;
  std::map<std::string, std::string> pod_ips;  // by pod UID; else 127.0.0.1
  std::shared_ptr<agent::Prober> prober = std::make_shared<agent::Prober>(
      ioc.get_executor(), clock, handler,
      [this](const std::string& uid) {
        auto it = pod_ips.find(uid);
        return it == pod_ips.end() ? std::string("127.0.0.1") : it->second;
      },
      [this](const std::string& uid) { changes.push_back(uid); },
      [this](const std::string&, const std::string& c, ProbeType t, const ProbeOutcome& o) {
        failures.push_back(c + "/" + std::string(agent::probeTypeName(t)) + ": " + o.output);
      });

  ~Harness() {
    prober->stop();
    drain();
  }
  // Runs everything ready, including timers armed with no delay.
  void drain() {
    for (int i = 0; i < 100; ++i) {
      if (ioc.poll() == 0) {
        clock.advance(base::Duration::zero());
        if (ioc.poll() == 0) break;
      }
    }
  }
  void advance(base::Duration d) {
    for (auto step = 500ms; d > base::Duration::zero(); d -= step) {
      clock.advance(std::min<base::Duration>(step, d));
      drain();
    }
  }
  // The container statuses as generateAPIPodStatus passes them: `app` running as `cid` since
  // now (or exited), plus `plain` (no probes) running.
  std::vector<api::ContainerStatus> statuses(const std::string& cid, bool running = true) {
    api::ContainerStatus app;
    app.name = "app";
    app.container_id = cid;
    if (running) {
      app.state.running = api::ContainerStateRunning{
          std::chrono::time_point_cast<std::chrono::nanoseconds>(clock.wallNow())};
    } else {
      app.state.terminated = api::ContainerStateTerminated{};
    }
    app.ready = running;
    app.started = running;
    api::ContainerStatus plain;
    plain.name = "plain";
    plain.container_id = "fake://plain";
    plain.state.running = api::ContainerStateRunning{};
    plain.ready = true;
    plain.started = true;
    return {app, plain};
  }
  // Feeds statuses through the prober (as a pod sync does) and returns `app`'s.
  api::ContainerStatus observe(const api::Pod& pod, const std::string& cid, bool running = true) {
    auto s = statuses(cid, running);
    prober->updatePodStatus(pod, s);
    drain();
    CHECK(s[1].ready);  // the container without probes is never touched
    CHECK(*s[1].started);
    return s[0];
  }
  api::ContainerStatus current(const api::Pod& pod) {
    // Same container, observed again: no restart of the worker.
    auto s = statuses(last_cid);
    prober->updatePodStatus(pod, s);
    drain();
    return s[0];
  }
  std::string last_cid;
};

api::PodPtr probedPod(nlohmann::json probes, const std::string& uid = "uid-1") {
  return testing::PodBuilder()
      .uid(uid)
      .container("app", {"sleep", "1000"})
      .container("plain", {"sleep", "1000"})
      .edit([&](nlohmann::json& j) {
        for (auto& [k, v] : probes.items()) j["spec"]["containers"][0][k] = v;
      })
      .build();
}

}  // namespace

TEST_CASE("prober: readiness is false until the probe succeeds after its initial delay",
          "[unit][prober]") {
  Harness h;
  auto pod = probedPod({{"readinessProbe", execProbe("ready", {{"initialDelaySeconds", 5}})}});
  h.prober->addPod(*pod);
  h.last_cid = "fake://c1";
  auto s = h.observe(*pod, "fake://c1");
  CHECK_FALSE(s.ready);
  CHECK(*s.started);  // no startup probe: started as soon as it runs
  h.advance(4500ms);
  CHECK(h.handler->calls.empty());
  h.advance(500ms);
  CHECK(h.handler->count("ready") == 1);
  CHECK(h.changes == std::vector<std::string>{"uid-1"});
  CHECK(h.current(*pod).ready);
  // Then every period (10s by default); an unchanged result wakes nobody.
  h.advance(10s);
  CHECK(h.handler->count("ready") == 2);
  CHECK(h.changes.size() == 1);
}

TEST_CASE("prober: readiness flaps only after successThreshold and failureThreshold runs",
          "[unit][prober]") {
  Harness h;
  auto pod = probedPod({{"readinessProbe", execProbe("ready", {{"periodSeconds", 1},
                                                               {"successThreshold", 2},
                                                               {"failureThreshold", 3}})}});
  h.prober->addPod(*pod);
  h.last_cid = "fake://c1";
  h.observe(*pod, "fake://c1");
  h.advance(1ms);  // first run at once (no initial delay)
  CHECK(h.handler->count("ready") == 1);
  CHECK_FALSE(h.current(*pod).ready);  // one success of two
  h.advance(1s);
  CHECK(h.current(*pod).ready);
  CHECK(h.changes.size() == 1);

  h.handler->answers["ready"] = Kind::kFailure;
  h.advance(2s);
  CHECK(h.current(*pod).ready);  // two failures of three
  h.handler->answers["ready"] = Kind::kSuccess;
  h.advance(1s);  // a success resets the failure run
  h.handler->answers["ready"] = Kind::kFailure;
  h.advance(2s);
  CHECK(h.current(*pod).ready);
  h.advance(1s);
  CHECK_FALSE(h.current(*pod).ready);
  CHECK(h.changes.size() == 2);
  CHECK(h.failures.size() == 5);
  CHECK(h.failures.back() == "app/Readiness: ready said so");

  // An error (kUnknown) changes nothing and counts for no threshold.
  h.handler->answers["ready"] = Kind::kUnknown;
  h.advance(5s);
  CHECK_FALSE(h.current(*pod).ready);
  CHECK(h.changes.size() == 2);
}

TEST_CASE("prober: liveness failures past the threshold fail the container and hold the worker",
          "[unit][prober]") {
  Harness h;
  auto pod = probedPod({{"livenessProbe", execProbe("live", {{"periodSeconds", 2}})}});
  h.prober->addPod(*pod);
  h.last_cid = "fake://c1";
  h.handler->answers["live"] = Kind::kFailure;
  h.observe(*pod, "fake://c1");
  runtime::ContainerId c1{"fake", "c1"};
  h.advance(4100ms);  // runs at 0, 2 and 4s: three failures
  CHECK(h.handler->count("live") == 3);
  CHECK(h.prober->failedProbe("uid-1", "app", c1) == "liveness");
  CHECK(h.changes.size() == 1);
  CHECK(h.current(*pod).ready);  // liveness does not touch readiness

  // On hold: the failed container is not probed again.
  h.advance(20s);
  CHECK(h.handler->count("live") == 3);

  SECTION("a new container starts over with a fresh result") {
    h.handler->answers["live"] = Kind::kSuccess;
    h.last_cid = "fake://c2";
    h.observe(*pod, "fake://c2");
    CHECK(h.prober->failedProbe("uid-1", "app", runtime::ContainerId{"fake", "c2"}).empty());
    CHECK(h.handler->count("live") == 4);  // no initial delay: probed at once
    h.advance(2s);
    CHECK(h.handler->count("live") == 5);
  }
  SECTION("an exited container idles the worker: no timer") {
    h.observe(*pod, "fake://c1", false);
    CHECK(h.clock.pendingTimers() == 0);
  }
}

TEST_CASE("prober: a startup probe gates liveness and readiness until it succeeds",
          "[unit][prober]") {
  Harness h;
  auto pod = probedPod(
      {{"startupProbe", execProbe("start", {{"periodSeconds", 1}, {"failureThreshold", 30}})},
       {"livenessProbe", execProbe("live", {{"periodSeconds", 3}})},
       {"readinessProbe", execProbe("ready", {{"periodSeconds", 3}})}});
  h.prober->addPod(*pod);
  h.last_cid = "fake://c1";
  h.handler->answers["start"] = Kind::kFailure;
  auto s = h.observe(*pod, "fake://c1");
  CHECK_FALSE(*s.started);
  CHECK_FALSE(s.ready);
  h.advance(10s);
  CHECK(h.handler->count("start") == 11);
  CHECK(h.handler->count("live") == 0);
  CHECK(h.handler->count("ready") == 0);
  CHECK_FALSE(*h.current(*pod).started);

  h.handler->answers["start"] = Kind::kSuccess;
  h.advance(1s);
  // Readiness and liveness are probed at once, then the startup probe is done.
  CHECK(h.handler->count("ready") == 1);
  CHECK(h.handler->count("live") == 1);
  auto after = h.current(*pod);
  CHECK(*after.started);
  CHECK(after.ready);
  h.advance(30s);
  CHECK(h.handler->count("start") == 12);
  CHECK(h.handler->count("ready") == 11);
}

TEST_CASE("prober: a startup probe that keeps failing fails the container", "[unit][prober]") {
  Harness h;
  auto pod = probedPod(
      {{"startupProbe", execProbe("start", {{"periodSeconds", 1}, {"failureThreshold", 3}})}});
  h.prober->addPod(*pod);
  h.last_cid = "fake://c1";
  h.handler->answers["start"] = Kind::kFailure;
  h.observe(*pod, "fake://c1");
  h.advance(1500ms);
  CHECK(h.prober->failedProbe("uid-1", "app", {"fake", "c1"}).empty());
  h.advance(1s);
  CHECK(h.prober->failedProbe("uid-1", "app", {"fake", "c1"}) == "startup");
}

TEST_CASE("prober: liveness and startup are not probed while the pod is being deleted",
          "[unit][prober]") {
  Harness h;
  auto pod = probedPod({{"livenessProbe", execProbe("live", {{"periodSeconds", 1}})},
                        {"readinessProbe", execProbe("ready", {{"periodSeconds", 1}})}});
  h.prober->addPod(*pod);
  h.last_cid = "fake://c1";
  h.observe(*pod, "fake://c1");
  h.advance(1ms);
  auto deleting =
      testing::PodBuilder(/*copy*/)
          .uid("uid-1")
          .container("app", {"sleep", "1000"})
          .edit([](nlohmann::json& j) {
            j["spec"]["containers"][0]["livenessProbe"] = execProbe("live", {{"periodSeconds", 1}});
            j["spec"]["containers"][0]["readinessProbe"] =
                execProbe("ready", {{"periodSeconds", 1}});
          })
          .deletionTimestamp(
              std::chrono::time_point_cast<std::chrono::nanoseconds>(h.clock.wallNow()))
          .build();
  h.prober->addPod(*deleting);
  const auto live = h.handler->count("live");
  const auto ready = h.handler->count("ready");
  h.advance(5s);
  CHECK(h.handler->count("live") == live);
  CHECK(h.handler->count("ready") == ready + 5);
}

TEST_CASE("prober: containers without probes cost no worker and no timer", "[unit][prober]") {
  Harness h;
  for (int i = 0; i < 1000; ++i) {
    auto pod =
        testing::PodBuilder().uid("plain-" + std::to_string(i)).container("c", {"true"}).build();
    h.prober->addPod(*pod);
    std::vector<api::ContainerStatus> s(1);
    s[0].name = "c";
    s[0].container_id = "fake://x" + std::to_string(i);
    s[0].state.running = api::ContainerStateRunning{};
    s[0].ready = true;
    h.prober->updatePodStatus(*pod, s);
    CHECK(s[0].ready);
  }
  h.drain();
  CHECK(h.prober->workerCount() == 0);
  CHECK(h.clock.pendingTimers() == 0);
}

TEST_CASE("prober: removing a pod stops its workers", "[unit][prober]") {
  Harness h;
  auto pod = probedPod({{"readinessProbe", execProbe("ready", {{"periodSeconds", 1}})}});
  h.prober->addPod(*pod);
  CHECK(h.prober->workerCount() == 1);
  CHECK(h.clock.pendingTimers() == 0);  // idle until a container runs
  h.last_cid = "fake://c1";
  h.observe(*pod, "fake://c1");
  h.advance(2s);
  CHECK(h.clock.pendingTimers() == 1);
  SECTION("removePod") { h.prober->removePod("uid-1"); }
  SECTION("cleanupPods") { h.prober->cleanupPods({"other"}); }
  h.drain();
  CHECK(h.prober->workerCount() == 0);
  CHECK(h.clock.pendingTimers() == 0);
  const auto calls = h.handler->calls.size();
  h.advance(5s);
  CHECK(h.handler->calls.size() == calls);
}

TEST_CASE("prober: a probe goes to its pod's IP, as the pod's status has it now",
          "[unit][prober]") {
  Harness h;
  auto pod = probedPod({{"readinessProbe", execProbe("ready")}});
  h.prober->addPod(*pod);
  h.last_cid = "fake://c1";
  h.observe(*pod, "fake://c1");
  h.advance(1s);
  REQUIRE(h.handler->hosts.size() == 1);
  CHECK(h.handler->hosts[0] == "127.0.0.1");
  h.pod_ips["uid-1"] = "10.200.3.7";  // a sandbox IP, once the status has it
  h.advance(10s);
  REQUIRE(h.handler->hosts.size() == 2);
  CHECK(h.handler->hosts[1] == "10.200.3.7");
}
