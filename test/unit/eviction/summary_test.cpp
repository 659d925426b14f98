// /stats/summary: kubelet's JSON shape from a fake /proc, fake cgroup counters (a container
// manager over a cgroupfs in a temp dir) and real directories for logs and emptyDir volumes;
// usageNanoCores from two samples; the eviction manager's per-pod usage.
#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "agent/stats/summary.h"
#include "test/support/fake_clock.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  testing::TempDir proc{"summary-proc"};
  testing::TempDir root{"summary-root"};
  testing::TempDir logs{"summary-logs"};
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  const cm::CgroupName kubepods{"kubepods"};
  std::map<std::string, cm::CgroupStats> stats;  // by cgroup path
  api::PodPtr pod;
  api::PodStatus status;
  int collections = 0;  // calls of the pods callback: one per collection

  Fixture() {
    testing::writeFile(proc / "stat",
                       "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 100 0 100 1000 0 0 0 0 0 0\n"
                       "btime 1700000000\n");
    testing::writeFile(proc / "meminfo",
                       "MemTotal: 8000000 kB\nMemFree: 2000000 kB\nMemAvailable: 5000000 kB\n"
                       "AnonPages: 1000000 kB\nInactive(file): 1000000 kB\n");
    testing::writeFile(proc / "loadavg", "0.10 0.20 0.30 2/345 6789\n");
    fs::create_directories(proc / "sys" / "kernel");
    testing::writeFile(proc / "sys" / "kernel" / "pid_max", "32768\n");

    pod = testing::PodBuilder()
              .name("web")
              .ns("default")
              .uid("u1")
              .container("c1", {"sleep"})
              .edit([](nlohmann::json& j) {
                j["spec"]["volumes"] = {{{"name", "cache"}, {"emptyDir", nlohmann::json::object()}}};
              })
              .build();
    status.phase = "Running";
    status.start_time = api::Timestamp(std::chrono::seconds(1700000100));
    api::ContainerStatus cs;
    cs.name = "c1";
    cs.container_id = "process://abc";
    cs.state.running = api::ContainerStateRunning{api::Timestamp(std::chrono::seconds(1700000101))};
    status.container_statuses.push_back(cs);

    const fs::path empty_dir =
        root / "pods" / "u1" / "volumes" / "kubernetes.io~empty-dir" / "cache";
    fs::create_directories(empty_dir);
    testing::writeFile(empty_dir / "data", std::string(10000, 'x'));
    const fs::path log_dir = logs / "default_web_u1" / "c1";
    fs::create_directories(log_dir);
    testing::writeFile(log_dir / "0.log", std::string(5000, 'y'));

    const std::string pod_path = "/kubepods/besteffort/podu1";
    stats["/kubepods"] = counters(2'000'000'000, 300 << 20);
    stats[pod_path] = counters(1'000'000'000, 200 << 20);
    stats[pod_path] .pids_current = 7;
    stats[pod_path + "/abc"] = counters(900'000'000, 150 << 20);
  }

  static cm::CgroupStats counters(uint64_t cpu, uint64_t working_set) {
    cm::CgroupStats s;
    s.cpu_usage_nanos = cpu;
    s.memory_usage_bytes = working_set + (10 << 20);
    s.memory_working_set_bytes = working_set;
    s.memory_rss_bytes = working_set / 2;
    return s;
  }

  std::shared_ptr<stats::SummaryProvider> provider() {
    stats::SummaryOptions o;
    o.node_name = "n1";
    o.proc_root = proc.path().string();
    o.root_dir = root.path().string();
    o.pod_log_dir = logs.path().string();
    o.kubepods = kubepods;
    o.pod_cgroup = [](const api::Pod& p) -> std::optional<cm::CgroupName> {
      return cm::CgroupName{"kubepods", "besteffort", "pod" + p.metadata.uid};
    };
    o.pods = [this] {
      ++collections;
      return std::vector<stats::SummaryPod>{{pod, status}};
    };
    o.cgroup_stats = [this](const cm::CgroupName& name) -> std::optional<cm::CgroupStats> {
      auto it = stats.find(cm::cgroupNameToPath(name));
      if (it == stats.end()) return std::nullopt;
      return it->second;
    };
    return std::make_shared<stats::SummaryProvider>(ioc.get_executor(), clock, std::move(o));
  }
};

}  // namespace

TEST_CASE("summary: kubelet's stats/v1alpha1 shape for the node and its pods", "[unit][eviction]") {
  Fixture f;
  f.clock.setWallTime(base::SystemTime(std::chrono::seconds(1700001000)));
  auto provider = f.provider();
  auto s = provider->collect();

  const auto& node = s["node"];
  CHECK(node["nodeName"] == "n1");
  CHECK(node["startTime"] == "2023-11-14T22:13:20Z");  // btime
  CHECK(node["cpu"]["usageCoreNanoSeconds"].get<uint64_t>() > 0);
  CHECK_FALSE(node["cpu"].contains("usageNanoCores"));  // one sample so far
  CHECK(node["cpu"]["time"] == "2023-11-14T22:30:00Z");
  // working set = (MemTotal - MemFree) - Inactive(file) = 5000000 kB.
  CHECK(node["memory"]["workingSetBytes"] == int64_t{5000000} * 1024);
  CHECK(node["memory"]["availableBytes"] == int64_t{3000000} * 1024);
  CHECK(node["memory"]["usageBytes"] == int64_t{6000000} * 1024);
  CHECK(node["memory"]["rssBytes"] == int64_t{1000000} * 1024);
  for (const char* k : {"availableBytes", "capacityBytes", "usedBytes", "inodesFree", "inodes",
                        "inodesUsed"}) {
    INFO(k);
    CHECK(node["fs"].contains(k));
  }
  CHECK(node["rlimit"]["maxpid"] == 32768);
  CHECK(node["rlimit"]["curproc"] == 345);
  REQUIRE(node["systemContainers"].size() == 1);
  CHECK(node["systemContainers"][0]["name"] == "pods");
  CHECK(node["systemContainers"][0]["memory"]["workingSetBytes"] == 300 << 20);

  REQUIRE(s["pods"].size() == 1);
  const auto& p = s["pods"][0];
  CHECK(p["podRef"] == nlohmann::json{{"name", "web"}, {"namespace", "default"}, {"uid", "u1"}});
  CHECK(p["startTime"] == "2023-11-14T22:15:00Z");
  CHECK(p["cpu"]["usageCoreNanoSeconds"] == 1'000'000'000);
  CHECK(p["memory"]["workingSetBytes"] == 200 << 20);
  CHECK(p["memory"]["rssBytes"] == 100 << 20);
  CHECK(p["process_stats"]["process_count"] == 7);
  REQUIRE(p["containers"].size() == 1);
  const auto& c = p["containers"][0];
  CHECK(c["name"] == "c1");
  CHECK(c["startTime"] == "2023-11-14T22:15:01Z");
  CHECK(c["cpu"]["usageCoreNanoSeconds"] == 900'000'000);
  CHECK(c["memory"]["workingSetBytes"] == 150 << 20);
  CHECK(c["logs"]["usedBytes"].get<int64_t>() >= 5000);
  CHECK(c["logs"]["inodesUsed"] == 2);  // the container's log dir and its file
  CHECK(c["logs"].contains("capacityBytes"));
  REQUIRE(p["volume"].size() == 1);
  CHECK(p["volume"][0]["name"] == "cache");
  CHECK(p["volume"][0]["usedBytes"].get<int64_t>() >= 10000);
  CHECK(p["ephemeral-storage"]["usedBytes"].get<int64_t>() >=
        c["logs"]["usedBytes"].get<int64_t>() + p["volume"][0]["usedBytes"].get<int64_t>());
  CHECK(p["ephemeral-storage"]["inodesUsed"] == 4);
  CHECK(provider->json() == s.dump());

  // A second sample 10 s later: usageNanoCores is the rate in between.
  f.clock.advance(10s);
  f.stats["/kubepods/besteffort/podu1"].cpu_usage_nanos =
      1'000'000'000 + 5'000'000'000ULL;  // half a core over 10 s
  s = provider->collect();
  CHECK(s["pods"][0]["cpu"]["usageNanoCores"] == 500'000'000);
  CHECK(s["pods"][0]["containers"][0]["cpu"]["usageNanoCores"] == 0);
}

TEST_CASE("summary: the provider refreshes on its period and answers the eviction manager",
          "[unit][eviction]") {
  Fixture f;
  auto provider = f.provider();
  CHECK(provider->json().empty());
  provider->start();
  for (int i = 0; i < 20 && f.ioc.poll() > 0; ++i) {
  }
  CHECK(f.collections == 0);  // nothing until someone asks
  CHECK(provider->json().empty());
  for (int i = 0; i < 20 && f.ioc.poll() > 0; ++i) {
  }
  auto first = nlohmann::json::parse(provider->json());
  CHECK(first["pods"].size() == 1);
  f.pod = testing::PodBuilder().name("other").uid("u2").container("c", {"sleep"}).build();
  f.status = {};
  f.clock.advance(10s);
  for (int i = 0; i < 20 && f.ioc.poll() > 0; ++i) {
  }
  CHECK(nlohmann::json::parse(provider->json())["pods"][0]["podRef"]["uid"] == "u2");
  provider->stop();
  f.ioc.poll();

  // podUsage: the pod cgroup's working set and pids, logs + emptyDir bytes and inodes.
  f.pod = testing::PodBuilder()
              .name("web")
              .ns("default")
              .uid("u1")
              .container("c1", {"sleep"})
              .edit([](nlohmann::json& j) {
                j["spec"]["volumes"] = {{{"name", "cache"}, {"emptyDir", nlohmann::json::object()}}};
              })
              .build();
  Fixture g;
  auto p2 = g.provider();
  auto usage = p2->podUsage({g.pod});
  REQUIRE(usage.count("u1") == 1);
  const auto& u = usage["u1"];
  CHECK(u.memory_working_set_bytes == 200 << 20);
  CHECK(u.processes == 7);
  CHECK(u.disk_bytes.value_or(0) >= 15000);
  CHECK(u.inodes_used == 4);
  REQUIRE(u.containers.size() == 1);
  CHECK(u.containers[0].name == "c1");
  CHECK(u.containers[0].memory_working_set_bytes == 150 << 20);
  CHECK(u.containers[0].disk_bytes.value_or(0) >= 5000);
}

TEST_CASE("summary: dirUsage counts allocated blocks and inodes like du", "[unit][eviction]") {
  testing::TempDir d;
  fs::create_directories(d / "a" / "b");
  testing::writeFile(d / "a" / "b" / "f", std::string(100, 'z'));
  auto u = stats::dirUsage(d.path().string());
  CHECK(u.inodes == 4);
  CHECK(u.bytes > 0);
  CHECK(stats::dirUsage((d / "missing").string()).inodes == 0);
}

TEST_CASE("summary: refreshing stops while nobody reads it and a request starts it again",
          "[unit][eviction]") {
  Fixture f;
  auto provider = f.provider();
  provider->start();
  auto drain = [&] {
    for (int i = 0; i < 20 && f.ioc.poll() > 0; ++i) {
    }
  };
  drain();
  CHECK(provider->json().empty());
  drain();
  REQUIRE(f.collections == 1);
  CHECK_FALSE(provider->json().empty());
  // Read at 0 s: refreshed every 10 s for 5 minutes, then no more.
  for (int i = 0; i < 40; ++i) {
    f.clock.advance(10s);
    drain();
  }
  const int after_idle = f.collections;
  CHECK(after_idle >= 30);
  CHECK(after_idle <= 32);
  f.clock.advance(10min);
  drain();
  CHECK(f.collections == after_idle);
  // A stale summary is not served; the request starts refreshing again.
  f.pod = testing::PodBuilder().name("other").uid("u2").container("c", {"sleep"}).build();
  CHECK(provider->json().empty());
  drain();
  CHECK(f.collections == after_idle + 1);
  CHECK(nlohmann::json::parse(provider->json())["pods"][0]["podRef"]["uid"] == "u2");
  f.clock.advance(10s);
  drain();
  CHECK(f.collections == after_idle + 2);
  provider->stop();
  f.ioc.poll();
}

TEST_CASE("summary: CPU samples are kept only for the cgroups of the latest collection",
          "[unit][eviction]") {
  Fixture f;
  auto provider = f.provider();
  provider->collect();
  // node, kubepods, the pod and its container.
  CHECK(provider->cpuSamples() == 4);

  // Containers come and go (a restart is a new ID): only the current ones' samples stay.
  const std::string pod_path = "/kubepods/besteffort/podu1";
  for (int i = 0; i < 20; ++i) {
    const std::string id = "c" + std::to_string(i);
    f.status.container_statuses[0].container_id = "process://" + id;
    f.stats[pod_path + "/" + id] = Fixture::counters(1'000'000, 1 << 20);
    f.clock.advance(10s);
    provider->collect();
    CHECK(provider->cpuSamples() == 4);
  }

  // The pod goes: its and its container's samples go with it.
  f.pod = nullptr;
  f.clock.advance(10s);
  provider->collect();
  CHECK(provider->cpuSamples() == 2);

  // It comes back: the first collection has no earlier sample to compute a rate from.
  f.pod =
      testing::PodBuilder().name("web").ns("default").uid("u1").container("c1", {"sleep"}).build();
  f.clock.advance(10s);
  auto s = provider->collect();
  REQUIRE(s["pods"].size() == 1);
  CHECK_FALSE(s["pods"][0]["cpu"].contains("usageNanoCores"));
  CHECK(s["node"]["cpu"].contains("usageNanoCores"));  // the node's sample was kept
  f.clock.advance(10s);
  s = provider->collect();
  CHECK(s["pods"][0]["cpu"].contains("usageNanoCores"));
}
