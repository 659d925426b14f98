// The eviction manager: kubelet's rankings (eviction/helpers_test.go), pressure conditions and
// their transition period, one eviction per pass, critical pods spared, node-level reclaim first,
// soft grace periods, and the eviction admit handler. Fake clock and fake signals: no sleeps.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/eviction/eviction_manager.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using eviction::Signal;

namespace {

constexpr int64_t kMi = int64_t{1} << 20;
constexpr int64_t kGi = int64_t{1} << 30;

// A pod with one container "name" with these requests/limits ("" leaves it out).
api::PodPtr makePod(const std::string& name, int32_t priority, const std::string& req_mem,
                    const std::string& lim_mem = "", const std::string& req_cpu = "",
                    const std::string& lim_cpu = "", const std::string& req_storage = "") {
  return testing::PodBuilder()
      .name(name)
      .uid(name)
      .priority(priority)
      .container(name, {"sleep", "1"})
      .edit([&](nlohmann::json& j) {
        auto& c = j["spec"]["containers"][0];
        if (!req_mem.empty()) c["resources"]["requests"]["memory"] = req_mem;
        if (!lim_mem.empty()) c["resources"]["limits"]["memory"] = lim_mem;
        if (!req_cpu.empty()) c["resources"]["requests"]["cpu"] = req_cpu;
        if (!lim_cpu.empty()) c["resources"]["limits"]["cpu"] = lim_cpu;
        if (!req_storage.empty()) c["resources"]["requests"]["ephemeral-storage"] = req_storage;
      })
      .build();
}

eviction::PodUsage memoryUsage(const std::string& container, int64_t bytes) {
  eviction::PodUsage u;
  u.memory_working_set_bytes = bytes;
  u.containers.push_back({container, bytes, std::nullopt});
  return u;
}

std::vector<std::string> names(const std::vector<api::PodPtr>& pods) {
  std::vector<std::string> out;
  for (const auto& p : pods) out.push_back(p->metadata.name);
  return out;
}

eviction::PodUsageLookup lookupIn(const std::map<std::string, eviction::PodUsage>& usage) {
  return [&usage](const api::Pod& pod) -> const eviction::PodUsage* {
    auto it = usage.find(pod.metadata.uid);
    return it == usage.end() ? nullptr : &it->second;
  };
}

class FakeSignals final : public eviction::SignalSource {
 public:
  eviction::Observations observe() override {
    ++calls;
    return observations;
  }
  eviction::Observations observations;
  int calls = 0;
};

eviction::Threshold hardMemory(int64_t bytes) {
  eviction::Threshold t;
  t.signal = Signal::kMemoryAvailable;
  t.value.quantity = bytes;
  return t;
}

struct Harness {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  std::shared_ptr<FakeSignals> signals = std::make_shared<FakeSignals>();
  std::vector<api::PodPtr> pods;
  eviction::PodUsageMap usage;
  struct Kill {
    api::PodPtr pod;
    api::PodStatus status;
    std::optional<int64_t> grace;
  };
  std::vector<Kill> killed;
  std::vector<std::string> pod_events;
  std::vector<std::string> node_events;
  std::vector<eviction::PressureConditions> changes;
  std::vector<Signal> reclaims;
  std::function<void()> on_reclaim;
  std::shared_ptr<eviction::EvictionManager> manager;

  ~Harness() {
    if (manager) manager->stop();
    drain();
  }
  void drain() {
    for (int i = 0; i < 100; ++i) {
      if (ioc.poll() == 0) break;
    }
  }
  void advance(base::Duration d) {
    for (auto step = 1s; d > base::Duration::zero(); d -= step) {
      clock.advance(std::min<base::Duration>(step, d));
      drain();
    }
  }
  eviction::EvictionManagerOptions options(std::vector<eviction::Threshold> thresholds) {
    eviction::EvictionManagerOptions o;
    o.thresholds = std::move(thresholds);
    o.signals = signals;
    o.active_pods = [this] { return pods; };
    o.pod_usage = [this](const std::vector<api::PodPtr>&) { return usage; };
    o.kill_pod = [this](api::PodPtr pod, api::PodStatus status,
                        std::optional<int64_t> grace) -> asio::awaitable<bool> {
      killed.push_back({pod, status, grace});
      co_return true;
    };
    o.reclaim_node_level = [this](Signal s) -> asio::awaitable<base::Status> {
      reclaims.push_back(s);
      if (on_reclaim) on_reclaim();
      co_return base::okStatus();
    };
    o.record_pod_event = [this](const api::Pod& pod, const std::string& type,
                                const std::string& reason, const std::string& message,
                                const std::string&) {
      pod_events.push_back(pod.metadata.name + " " + type + " " + reason + " " + message);
    };
    o.record_node_event = [this](const std::string& type, const std::string& reason,
                                 const std::string& message) {
      node_events.push_back(type + " " + reason + " " + message);
    };
    o.on_conditions_changed = [this](const eviction::PressureConditions& c) {
      changes.push_back(c);
    };
    return o;
  }
  void start(eviction::EvictionManagerOptions o) {
    manager = std::make_shared<eviction::EvictionManager>(ioc.get_executor(), clock, std::move(o));
    manager->start();
    drain();
  }
  void setMemoryAvailable(int64_t available) {
    signals->observations[Signal::kMemoryAvailable] = {available, 8 * kGi};
  }
};

}  // namespace

TEST_CASE("eviction ranking: kubelet's TestOrderedByExceedsRequestMemory", "[unit][eviction]") {
  auto below = makePod("below-requests", -1, "200Mi");
  auto exceeds = makePod("exceeds-requests", 1, "100Mi");
  std::map<std::string, eviction::PodUsage> usage = {
      {"below-requests", memoryUsage("below-requests", 199 * kMi)},
      {"exceeds-requests", memoryUsage("exceeds-requests", 101 * kMi)}};
  std::vector<api::PodPtr> pods = {below, exceeds};
  eviction::rankMemoryPressure(pods, lookupIn(usage));
  CHECK(names(pods) == std::vector<std::string>{"exceeds-requests", "below-requests"});
}

TEST_CASE("eviction ranking: kubelet's TestOrderedbyPriority and pids", "[unit][eviction]") {
  auto low = makePod("low-priority", -134, "");
  auto medium = makePod("medium-priority", 1, "");
  auto high = makePod("high-priority", 12534, "");
  std::map<std::string, eviction::PodUsage> usage;
  for (const auto* n : {"low-priority", "medium-priority", "high-priority"}) usage[n] = {};
  std::vector<api::PodPtr> pods = {high, medium, low};
  eviction::rankPidPressure(pods, lookupIn(usage));
  CHECK(names(pods) == std::vector<std::string>{"low-priority", "medium-priority", "high-priority"});
  // Equal priority: more processes first (later kubelets' tie-break).
  auto a = makePod("a", 0, "");
  auto b = makePod("b", 0, "");
  usage["a"].processes = 3;
  usage["b"].processes = 30;
  pods = {a, b};
  eviction::rankPidPressure(pods, lookupIn(usage));
  CHECK(names(pods) == std::vector<std::string>{"b", "a"});
}

TEST_CASE("eviction ranking: kubelet's TestOrderedByMemory (usage above requests)",
          "[unit][eviction]") {
  auto pod1 = makePod("best-effort-high", 0, "");
  auto pod2 = makePod("best-effort-low", 0, "");
  auto pod3 = makePod("burstable-high", 0, "100Mi");
  auto pod4 = makePod("burstable-low", 0, "100Mi");
  auto pod5 = makePod("guaranteed-high", 0, "1Gi", "1Gi", "100m", "100m");
  auto pod6 = makePod("guaranteed-low", 0, "1Gi", "1Gi", "100m", "100m");
  std::map<std::string, eviction::PodUsage> usage = {
      {"best-effort-high", memoryUsage("best-effort-high", 500 * kMi)},
      {"best-effort-low", memoryUsage("best-effort-low", 300 * kMi)},
      {"burstable-high", memoryUsage("burstable-high", 800 * kMi)},
      {"burstable-low", memoryUsage("burstable-low", 300 * kMi)},
      {"guaranteed-high", memoryUsage("guaranteed-high", 800 * kMi)},
      {"guaranteed-low", memoryUsage("guaranteed-low", 200 * kMi)}};
  std::vector<api::PodPtr> pods = {pod1, pod2, pod3, pod4, pod5, pod6};
  eviction::rankMemoryPressure(pods, lookupIn(usage));
  CHECK(names(pods) == std::vector<std::string>{"burstable-high", "best-effort-high",
                                                "best-effort-low", "burstable-low",
                                                "guaranteed-high", "guaranteed-low"});
}

TEST_CASE("eviction ranking: memory pressure is exceeds requests, then priority, then usage",
          "[unit][eviction]") {
  // kubelet's TestOrderedByPriorityMemory shape: within "exceeds requests", lower priority first.
  auto high_exceeds = makePod("high-priority-exceeds", 2, "100Mi");
  auto low_exceeds = makePod("low-priority-exceeds", 1, "100Mi");
  auto low_below = makePod("low-priority-below", 1, "1Gi");
  auto low_big = makePod("low-priority-exceeds-big", 1, "100Mi");
  auto no_stats = makePod("no-stats", 100, "1Gi");
  std::map<std::string, eviction::PodUsage> usage = {
      {"high-priority-exceeds", memoryUsage("high-priority-exceeds", 900 * kMi)},
      {"low-priority-exceeds", memoryUsage("low-priority-exceeds", 150 * kMi)},
      {"low-priority-below", memoryUsage("low-priority-below", 900 * kMi)},
      {"low-priority-exceeds-big", memoryUsage("low-priority-exceeds-big", 600 * kMi)}};
  std::vector<api::PodPtr> pods = {high_exceeds, low_below, low_exceeds, low_big, no_stats};
  eviction::rankMemoryPressure(pods, lookupIn(usage));
  // A pod without stats goes first (kubelet: "prioritize evicting the pod for which no stats
  // were found").
  CHECK(names(pods) == std::vector<std::string>{"no-stats", "low-priority-exceeds-big",
                                                "low-priority-exceeds", "high-priority-exceeds",
                                                "low-priority-below"});
}

TEST_CASE("eviction ranking: disk pressure by bytes and by inodes", "[unit][eviction]") {
  auto within = makePod("within", 0, "", "", "", "", "1Gi");
  auto exceeds_small = makePod("exceeds-small", 0, "", "", "", "", "10Mi");
  auto exceeds_big = makePod("exceeds-big", 0, "");
  auto exceeds_low_prio = makePod("exceeds-low-priority", -5, "");
  std::map<std::string, eviction::PodUsage> usage;
  usage["within"].disk_bytes = 500 * kMi;
  usage["within"].inodes_used = 10;
  usage["exceeds-small"].disk_bytes = 20 * kMi;
  usage["exceeds-small"].inodes_used = 1000;
  usage["exceeds-big"].disk_bytes = 300 * kMi;
  usage["exceeds-big"].inodes_used = 5;
  usage["exceeds-low-priority"].disk_bytes = 1 * kMi;
  usage["exceeds-low-priority"].inodes_used = 1;
  std::vector<api::PodPtr> pods = {within, exceeds_small, exceeds_big, exceeds_low_prio};
  eviction::rankDiskPressure(pods, lookupIn(usage), Signal::kNodeFsAvailable);
  CHECK(names(pods) == std::vector<std::string>{"exceeds-low-priority", "exceeds-big",
                                                "exceeds-small", "within"});
  pods = {within, exceeds_small, exceeds_big, exceeds_low_prio};
  eviction::rankDiskPressure(pods, lookupIn(usage), Signal::kNodeFsInodesFree);
  // Every pod exceeds its (zero) inode request; then priority; then inodes minus the
  // ephemeral-storage request in bytes (kubelet's arithmetic): exceeds-small's 10Mi request
  // puts it after exceeds-big despite its 1000 inodes.
  CHECK(names(pods) == std::vector<std::string>{"exceeds-low-priority", "exceeds-big",
                                                "exceeds-small", "within"});
}

TEST_CASE("eviction: the message names the resource and the containers above their requests",
          "[unit][eviction]") {
  auto pod = testing::PodBuilder()
                 .name("p")
                 .uid("p")
                 .container("x", {"sleep"})
                 .container("y", {"sleep"})
                 .edit([](nlohmann::json& j) {
                   j["spec"]["containers"][1]["resources"]["requests"]["memory"] = "1Gi";
                 })
                 .build();
  eviction::PodUsage u;
  u.containers = {{"x", 123 * 1024, std::nullopt}, {"y", 100 * kMi, std::nullopt}};
  CHECK(eviction::evictionMessage("memory", *pod, &u) ==
        "The node was low on resource: memory. Container x was using 123Ki, which exceeds its "
        "request of 0. ");
  CHECK(eviction::evictionMessage("pids", *pod, &u) == "The node was low on resource: pids. ");
  CHECK(eviction::evictionMessage("memory", *pod, nullptr) ==
        "The node was low on resource: memory. ");
}

TEST_CASE("eviction: MemoryPressure stays true for the transition period after it was last seen",
          "[unit][eviction]") {
  Harness h;
  auto o = h.options({hardMemory(100 * kMi)});
  o.pressure_transition_period = 5min;
  h.setMemoryAvailable(kGi);
  h.start(std::move(o));
  CHECK(h.signals->calls == 1);
  CHECK_FALSE(h.manager->conditions().memory);
  CHECK(h.changes.empty());

  h.setMemoryAvailable(50 * kMi);
  h.advance(10s);
  CHECK(h.signals->calls == 2);
  CHECK(h.manager->conditions().memory);
  CHECK_FALSE(h.manager->conditions().disk);
  REQUIRE(h.changes.size() == 1);
  CHECK(h.changes[0].memory);
  CHECK(h.manager->lastObservations().at(Signal::kMemoryAvailable).available == 50 * kMi);

  // Relieved at once, but the condition holds for 5 minutes after it was last observed.
  h.setMemoryAvailable(kGi);
  h.advance(10s);
  CHECK(h.manager->conditions().memory);
  h.advance(4min + 40s);  // 4m50s since last observed
  CHECK(h.manager->conditions().memory);
  h.advance(10s);  // 5m
  CHECK_FALSE(h.manager->conditions().memory);
  REQUIRE(h.changes.size() == 2);
  CHECK_FALSE(h.changes[1].memory);
}

TEST_CASE("eviction: one pod per pass in the memory ranking, with kubelet's status and event",
          "[unit][eviction]") {
  Harness h;
  auto besteffort = makePod("besteffort", 0, "");
  auto burstable = makePod("burstable", 0, "500Mi");
  auto guaranteed = makePod("guaranteed", 0, "1Gi", "1Gi", "100m", "100m");
  h.pods = {guaranteed, burstable, besteffort};
  h.usage["besteffort"] = memoryUsage("besteffort", 200 * kMi);
  h.usage["burstable"] = memoryUsage("burstable", 400 * kMi);
  h.usage["guaranteed"] = memoryUsage("guaranteed", 900 * kMi);
  h.setMemoryAvailable(50 * kMi);
  h.start(h.options({hardMemory(100 * kMi)}));

  REQUIRE(h.killed.size() == 1);
  CHECK(h.killed[0].pod->metadata.name == "besteffort");
  CHECK(h.killed[0].status.phase == "Failed");
  CHECK(h.killed[0].status.reason == "Evicted");
  CHECK(h.killed[0].status.message ==
        "The node was low on resource: memory. Container besteffort was using 200Mi, which "
        "exceeds its request of 0. ");
  CHECK(h.killed[0].grace == 0);
  REQUIRE(h.pod_events.size() == 1);
  CHECK(h.pod_events[0] ==
        "besteffort Warning Evicted The node was low on resource: memory. Container besteffort "
        "was using 200Mi, which exceeds its request of 0. ");
  CHECK(h.node_events == std::vector<std::string>{"Warning EvictionThresholdMet Attempting to "
                                                  "reclaim memory"});
  CHECK(h.reclaims.empty());  // kubelet has no node-level reclaim for memory
  CHECK(h.manager->evictions() == 1);

  // Still under pressure at the next pass: the next pod in the ranking.
  h.pods = {guaranteed, burstable};
  h.advance(10s);
  REQUIRE(h.killed.size() == 2);
  CHECK(h.killed[1].pod->metadata.name == "burstable");
  h.pods = {guaranteed};
  h.advance(10s);
  REQUIRE(h.killed.size() == 3);
  CHECK(h.killed[2].pod->metadata.name == "guaranteed");

  // Relieved: no more evictions.
  h.setMemoryAvailable(kGi);
  h.advance(30s);
  CHECK(h.killed.size() == 3);
}

TEST_CASE("eviction: critical pods (static, mirror, system-critical priority) are never evicted",
          "[unit][eviction]") {
  Harness h;
  auto static_pod = testing::PodBuilder()
                        .name("static")
                        .uid("static")
                        .annotation("kubernetes.io/config.source", "file")
                        .container("c", {"sleep"})
                        .build();
  auto critical = makePod("critical", 2000000000, "");
  auto normal = makePod("normal", 1000, "1Gi");
  h.pods = {static_pod, critical};
  h.usage["static"] = memoryUsage("c", 2 * kGi);
  h.usage["critical"] = memoryUsage("critical", 2 * kGi);
  h.usage["normal"] = memoryUsage("normal", 10 * kMi);
  h.setMemoryAvailable(50 * kMi);
  h.start(h.options({hardMemory(100 * kMi)}));
  CHECK(h.killed.empty());
  CHECK(h.manager->conditions().memory);

  h.pods = {static_pod, critical, normal};
  h.advance(10s);
  REQUIRE(h.killed.size() == 1);
  CHECK(h.killed[0].pod->metadata.name == "normal");
  CHECK(h.killed[0].status.message == "The node was low on resource: memory. ");
}

TEST_CASE(
    "eviction: a soft threshold evicts after its grace period with --eviction-max-pod-grace-period "
    "as it is (kubelet 1.18), whatever the pod's own",
    "[unit][eviction]") {
  Harness h;
  eviction::Threshold soft = hardMemory(100 * kMi);
  soft.grace_period = 30s;
  auto o = h.options({soft});
  o.max_pod_grace_period_seconds = 20;
  auto pod = testing::PodBuilder()
                 .name("p")
                 .uid("p")
                 .terminationGracePeriodSeconds(60)
                 .container("c", {"sleep"})
                 .build();
  auto short_grace = testing::PodBuilder()
                         .name("q")
                         .uid("q")
                         .priority(5)
                         .terminationGracePeriodSeconds(3)
                         .container("c", {"sleep"})
                         .build();
  h.pods = {pod, short_grace};
  h.usage["p"] = memoryUsage("c", 300 * kMi);
  h.usage["q"] = memoryUsage("c", 300 * kMi);
  h.setMemoryAvailable(50 * kMi);
  h.start(std::move(o));
  CHECK(h.manager->conditions().memory);  // the condition does not wait for the grace period
  h.advance(20s);
  CHECK(h.killed.empty());
  h.advance(10s);  // 30s since first observed
  REQUIRE(h.killed.size() == 1);
  CHECK(h.killed[0].pod->metadata.name == "p");
  CHECK(h.killed[0].grace == 20);  // --eviction-max-pod-grace-period, not the pod's 60
  h.pods = {short_grace};
  h.advance(10s);
  REQUIRE(h.killed.size() == 2);
  CHECK(h.killed[1].grace == 20);  // not the pod's 3 either

  // The default (0): a soft eviction gives no grace period, as a hard one.
  Harness h0;
  h0.pods = {pod};
  h0.usage["p"] = memoryUsage("c", 300 * kMi);
  h0.setMemoryAvailable(50 * kMi);
  h0.start(h0.options({soft}));
  h0.advance(30s);
  REQUIRE(h0.killed.size() == 1);
  CHECK(h0.killed[0].grace == 0);

  // The pressure goes away before the grace period: nothing is evicted.
  Harness h2;
  eviction::Threshold soft2 = hardMemory(100 * kMi);
  soft2.grace_period = 30s;
  h2.pods = {pod};
  h2.setMemoryAvailable(50 * kMi);
  h2.start(h2.options({soft2}));
  h2.advance(20s);
  h2.setMemoryAvailable(kGi);
  h2.advance(30s);
  h2.setMemoryAvailable(50 * kMi);
  h2.advance(20s);  // met again: the grace period starts again
  CHECK(h2.killed.empty());
}

TEST_CASE("eviction: disk pressure reclaims node-level resources first", "[unit][eviction]") {
  Harness h;
  eviction::Threshold disk;
  disk.signal = Signal::kNodeFsAvailable;
  disk.value.percentage = 0.1f;
  auto pod = makePod("writer", 0, "");
  h.pods = {pod};
  h.usage["writer"].disk_bytes = 5 * kGi;
  h.usage["writer"].containers = {{"writer", std::nullopt, 5 * kGi}};
  h.signals->observations[Signal::kNodeFsAvailable] = {5 * kGi, 100 * kGi};
  // The reclaim frees enough.
  h.on_reclaim = [&] { h.signals->observations[Signal::kNodeFsAvailable] = {20 * kGi, 100 * kGi}; };
  h.start(h.options({disk}));
  CHECK(h.manager->conditions().disk);
  CHECK(h.reclaims == std::vector<Signal>{Signal::kNodeFsAvailable});
  CHECK(h.killed.empty());

  // The reclaim does not free enough: the pod is evicted.
  h.on_reclaim = nullptr;
  h.signals->observations[Signal::kNodeFsAvailable] = {5 * kGi, 100 * kGi};
  h.advance(10s);
  CHECK(h.reclaims.size() == 2);
  REQUIRE(h.killed.size() == 1);
  CHECK(h.killed[0].status.message ==
        "The node was low on resource: ephemeral-storage. Container writer was using 5Gi, which "
        "exceeds its request of 0. ");
}

TEST_CASE(
    "eviction: node-level reclaim is a coroutine the pass awaits without holding a thread, and a "
    "failed reclaim still lets the pass evict",
    "[unit][eviction]") {
  Harness h;  // one thread: a reclaim that blocked it waiting for the collection would hang here
  eviction::Threshold disk;
  disk.signal = Signal::kNodeFsAvailable;
  disk.value.percentage = 0.1f;
  auto pod = makePod("writer", 0, "");
  h.pods = {pod};
  h.usage["writer"].disk_bytes = 5 * kGi;
  h.signals->observations[Signal::kNodeFsAvailable] = {5 * kGi, 100 * kGi};
  auto o = h.options({disk});
  // Like the agent's: the collection runs on another executor; the pass resumes when it is done.
  asio::strand<asio::io_context::executor_type> elsewhere(h.ioc.get_executor());
  bool frees = true;
  base::Status result = base::okStatus();
  o.reclaim_node_level = [&h, &frees, &result,
                          elsewhere](Signal s) -> asio::awaitable<base::Status> {
    h.reclaims.push_back(s);
    auto collect = [&h, &frees]() -> asio::awaitable<void> {
      if (frees) h.signals->observations[Signal::kNodeFsAvailable] = {20 * kGi, 100 * kGi};
      co_return;
    };
    auto collecting = asio::co_spawn(elsewhere, collect, asio::use_awaitable);
    co_await std::move(collecting);
    co_return result;
  };
  h.start(std::move(o));
  CHECK(h.reclaims == std::vector<Signal>{Signal::kNodeFsAvailable});
  CHECK(h.killed.empty());  // the pass saw what the reclaim freed

  frees = false;
  result = base::unavailableError("runtime down");
  h.signals->observations[Signal::kNodeFsAvailable] = {5 * kGi, 100 * kGi};
  h.advance(10s);
  CHECK(h.reclaims.size() == 2);
  REQUIRE(h.killed.size() == 1);
  CHECK(h.killed[0].pod->metadata.name == "writer");
}

TEST_CASE("eviction: PID pressure and minimum reclaim", "[unit][eviction]") {
  Harness h;
  eviction::Threshold pid;
  pid.signal = Signal::kPidAvailable;
  pid.value.quantity = 1000;
  pid.min_reclaim = eviction::ThresholdValue{500, 0};
  auto low = makePod("low", 1, "");
  auto high = makePod("high", 10, "");
  h.pods = {high, low};
  h.usage["low"].processes = 10;
  h.usage["high"].processes = 3000;
  h.signals->observations[Signal::kPidAvailable] = {900, 32768};
  h.start(h.options({pid}));
  CHECK(h.manager->conditions().pid);
  REQUIRE(h.killed.size() == 1);
  CHECK(h.killed[0].pod->metadata.name == "low");
  CHECK(h.killed[0].status.message == "The node was low on resource: pids. ");
  // Above the threshold but not above threshold + minimum reclaim: still reclaiming.
  h.pods = {high};
  h.signals->observations[Signal::kPidAvailable] = {1200, 32768};
  h.advance(10s);
  CHECK(h.killed.size() == 2);
  // Above threshold + minimum reclaim: done.
  h.signals->observations[Signal::kPidAvailable] = {1600, 32768};
  h.advance(10s);
  CHECK(h.killed.size() == 2);
}

TEST_CASE("eviction: after an eviction the next pass waits for the pod's cleanup",
          "[unit][eviction]") {
  Harness h;
  bool cleaned = false;
  auto o = h.options({hardMemory(100 * kMi)});
  o.pod_cleaned_up = [&](const api::Pod&) { return cleaned; };
  h.pods = {makePod("a", 0, ""), makePod("b", 0, "")};
  h.setMemoryAvailable(50 * kMi);
  h.start(std::move(o));
  REQUIRE(h.killed.size() == 1);
  const int observed = h.signals->calls;
  h.advance(3s);
  CHECK(h.signals->calls == observed);  // waiting for the cleanup
  cleaned = true;
  h.advance(1s);  // the next poll sees it cleaned and runs a pass at once
  CHECK(h.signals->calls == observed + 1);
  CHECK(h.killed.size() == 2);
}

TEST_CASE("eviction admission: BestEffort refused under memory pressure, all under disk or PID",
          "[unit][eviction]") {
  Harness h;
  eviction::Threshold disk;
  disk.signal = Signal::kNodeFsAvailable;
  disk.value.quantity = kGi;
  eviction::Threshold pid;
  pid.signal = Signal::kPidAvailable;
  pid.value.quantity = 100;
  auto besteffort = makePod("besteffort", 0, "");
  auto burstable = makePod("burstable", 0, "100Mi");
  auto critical = makePod("critical", 2000000000, "");
  auto tolerating = testing::PodBuilder()
                        .name("tolerating")
                        .uid("tolerating")
                        .container("c", {"sleep"})
                        .edit([](nlohmann::json& j) {
                          j["spec"]["tolerations"] = {{{"key", "node.kubernetes.io/memory-pressure"},
                                                       {"operator", "Exists"},
                                                       {"effect", "NoSchedule"}}};
                        })
                        .build();
  h.setMemoryAvailable(kGi);
  h.signals->observations[Signal::kNodeFsAvailable] = {10 * kGi, 100 * kGi};
  h.signals->observations[Signal::kPidAvailable] = {30000, 32768};
  auto o = h.options({hardMemory(100 * kMi), disk, pid});
  o.kill_pod = nullptr;
  h.start(std::move(o));
  CHECK(h.manager->admitPod(*besteffort).admit);

  h.setMemoryAvailable(50 * kMi);
  h.advance(10s);
  auto r = h.manager->admitPod(*besteffort);
  CHECK_FALSE(r.admit);
  CHECK(r.reason == "Evicted");
  CHECK(r.message == "The node had condition: [MemoryPressure]. ");
  CHECK(h.manager->admitPod(*burstable).admit);
  CHECK(h.manager->admitPod(*critical).admit);
  CHECK(h.manager->admitPod(*tolerating).admit);

  h.signals->observations[Signal::kNodeFsAvailable] = {100 * kMi, 100 * kGi};
  h.advance(10s);
  r = h.manager->admitPod(*burstable);
  CHECK_FALSE(r.admit);
  CHECK(r.message == "The node had condition: [MemoryPressure DiskPressure]. ");
  CHECK(h.manager->admitPod(*critical).admit);

  Harness p;
  p.signals->observations[Signal::kPidAvailable] = {50, 32768};
  auto po = p.options({pid});
  po.kill_pod = nullptr;
  p.start(std::move(po));
  r = p.manager->admitPod(*burstable);
  CHECK_FALSE(r.admit);
  CHECK(r.reason == "Evicted");
  CHECK(r.message == "The node had condition: [PIDPressure]. ");
  CHECK(p.manager->admitPod(*critical).admit);
}

TEST_CASE("eviction: thresholdsMet compares with capacity percentages and minimum reclaim",
          "[unit][eviction]") {
  eviction::Threshold t;
  t.signal = Signal::kNodeFsAvailable;
  t.value.percentage = 0.1f;
  t.min_reclaim = eviction::ThresholdValue{std::nullopt, 0.05f};
  eviction::Observations obs = {{Signal::kNodeFsAvailable, {12 * kGi, 100 * kGi}}};
  CHECK(eviction::thresholdsMet({t}, obs, false).empty());
  CHECK(eviction::thresholdsMet({t}, obs, true).size() == 1);
  obs[Signal::kNodeFsAvailable].available = 9 * kGi;
  CHECK(eviction::thresholdsMet({t}, obs, false).size() == 1);
  CHECK(eviction::thresholdsMet({t}, {}, false).empty());  // no observation: not met
}
