#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "agent/cm/container_manager.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

using namespace nodeagent;
namespace fs = std::filesystem;

namespace {

cm::CgroupMounts fakeV1(const testing::TempDir& tmp) {
  cm::CgroupMounts m;
  m.version = cm::CgroupVersion::kV1;
  for (const char* c : {"cpu", "cpuacct", "freezer", "memory", "pids"}) {
    fs::create_directories(tmp / c);
    m.v1_roots[c] = (tmp / c).string();
  }
  return m;
}

// One container with these requests and limits ("" leaves it out).
api::PodPtr pod(const std::string& uid, const std::string& req_cpu, const std::string& req_mem,
                const std::string& lim_cpu, const std::string& lim_mem) {
  return testing::PodBuilder()
      .name("p-" + uid)
      .uid(uid)
      .container("c", {"true"})
      .edit([&](nlohmann::json& j) {
        auto& r = j["spec"]["containers"][0]["resources"];
        r = nlohmann::json::object();
        if (!req_cpu.empty()) r["requests"]["cpu"] = req_cpu;
        if (!req_mem.empty()) r["requests"]["memory"] = req_mem;
        if (!lim_cpu.empty()) r["limits"]["cpu"] = lim_cpu;
        if (!lim_mem.empty()) r["limits"]["memory"] = lim_mem;
      })
      .build();
}

std::string read(const fs::path& p) { return testing::readFile(p); }

}  // namespace

TEST_CASE("ContainerManager: kubepods with node allocatable, QoS cgroups, pod cgroups",
          "[unit][cm]") {
  testing::TempDir tmp("cm-cm");
  cm::ContainerManagerOptions options;
  options.pod_pids_limit = 256;
  options.node_allocatable.memory_limit = int64_t{3} << 30;
  options.node_allocatable.cpu_shares = 2048;
  auto started = cm::ContainerManager::start(cm::CgroupManager(fakeV1(tmp)), options);
  REQUIRE(started.ok());
  auto& mgr = **started;

  CHECK(mgr.kubepods() == cm::CgroupName{"kubepods"});
  CHECK(mgr.qosCgroup(cm::QosClass::kGuaranteed) == cm::CgroupName{"kubepods"});
  CHECK(mgr.qosCgroup(cm::QosClass::kBurstable) == cm::CgroupName{"kubepods", "burstable"});
  CHECK(mgr.qosCgroup(cm::QosClass::kBestEffort) == cm::CgroupName{"kubepods", "besteffort"});
  CHECK(read(tmp / "memory" / "kubepods" / "memory.limit_in_bytes") == "3221225472");
  CHECK(read(tmp / "cpu" / "kubepods" / "cpu.shares") == "2048");
  CHECK(fs::is_directory(tmp / "memory" / "kubepods" / "burstable"));
  CHECK(read(tmp / "cpu" / "kubepods" / "besteffort" / "cpu.shares") == "2");
  CHECK_FALSE(fs::exists(tmp / "cpu" / "kubepods" / "burstable" / "cpu.shares"));

  auto guaranteed = pod("g1", "500m", "128Mi", "500m", "128Mi");
  auto burstable = pod("b1", "250m", "64Mi", "", "");
  auto besteffort = pod("e1", "", "", "", "");
  CHECK(mgr.podCgroupName(*guaranteed) == cm::CgroupName{"kubepods", "podg1"});
  CHECK(mgr.podCgroupParent(*burstable) == "/kubepods/burstable/podb1");
  CHECK(mgr.podCgroupParent(*besteffort) == "/kubepods/besteffort/pode1");
  CHECK_FALSE(mgr.podCgroupExists(*guaranteed));

  for (const auto& p : {guaranteed, burstable, besteffort}) REQUIRE(mgr.ensurePodCgroup(*p).ok());
  CHECK(mgr.podCgroupExists(*guaranteed));
  const fs::path g = "kubepods/podg1";
  CHECK(read(tmp / "memory" / g / "memory.limit_in_bytes") == "134217728");
  CHECK(read(tmp / "cpu" / g / "cpu.shares") == "512");
  CHECK(read(tmp / "cpu" / g / "cpu.cfs_quota_us") == "50000");
  CHECK(read(tmp / "cpu" / g / "cpu.cfs_period_us") == "100000");
  CHECK(read(tmp / "pids" / g / "pids.max") == "256");
  const fs::path b = "kubepods/burstable/podb1";
  CHECK(read(tmp / "cpu" / b / "cpu.shares") == "256");
  CHECK_FALSE(fs::exists(tmp / "cpu" / b / "cpu.cfs_quota_us"));
  CHECK_FALSE(fs::exists(tmp / "memory" / b / "memory.limit_in_bytes"));
  CHECK(read(tmp / "cpu" / "kubepods/besteffort/pode1" / "cpu.shares") == "2");

  // An existing pod cgroup is brought up to date.
  testing::writeFile(tmp / "cpu" / b / "cpu.shares", "999");
  REQUIRE(mgr.ensurePodCgroup(*burstable).ok());
  CHECK(read(tmp / "cpu" / b / "cpu.shares") == "256");

  auto burstable2 = pod("b2", "1", "", "2", "");
  REQUIRE(mgr.updateQosCgroups({guaranteed, burstable, besteffort, burstable2}).ok());
  CHECK(read(tmp / "cpu" / "kubepods" / "burstable" / "cpu.shares") == "1280");  // 1250m
  CHECK(read(tmp / "cpu" / "kubepods" / "besteffort" / "cpu.shares") == "2");
  REQUIRE(mgr.updateQosCgroups({}).ok());
  CHECK(read(tmp / "cpu" / "kubepods" / "burstable" / "cpu.shares") == "2");

  // A container cgroup below a pod is not a pod.
  REQUIRE(mgr.cgroups().create({"kubepods", "podg1", "ctr1"}, {}).ok());
  auto pods = mgr.podCgroups();
  CHECK(pods == std::map<std::string, cm::CgroupName>{{"g1", {"kubepods", "podg1"}},
                                                      {"b1", {"kubepods", "burstable", "podb1"}},
                                                      {"e1", {"kubepods", "besteffort", "pode1"}}});

  REQUIRE(mgr.destroyPodCgroup({"kubepods", "podg1"}).ok());
  CHECK_FALSE(fs::exists(tmp / "memory" / g));
  CHECK(mgr.podCgroups().size() == 2);
  // Never the QoS cgroups or anything else.
  CHECK(mgr.destroyPodCgroup({"kubepods", "burstable"}).code() ==
        base::StatusCode::kInvalidArgument);
  CHECK(mgr.destroyPodCgroup({"kubepods"}).code() == base::StatusCode::kInvalidArgument);
  CHECK(mgr.destroyPodCgroup({"elsewhere", "podx"}).code() == base::StatusCode::kInvalidArgument);
  CHECK(fs::is_directory(tmp / "memory" / "kubepods" / "burstable" / "podb1"));

  auto bad = pod("../x", "", "", "", "");
  CHECK(mgr.ensurePodCgroup(*bad).code() == base::StatusCode::kInvalidArgument);
}

TEST_CASE("ContainerManager: a cgroup root and a restart keep existing cgroups", "[unit][cm]") {
  testing::TempDir tmp("cm-cm");
  cm::ContainerManagerOptions options;
  options.cgroup_root = "/nodeagent";
  {
    auto started = cm::ContainerManager::start(cm::CgroupManager(fakeV1(tmp)), options);
    REQUIRE(started.ok());
    CHECK((*started)->kubepods() == cm::CgroupName{"nodeagent", "kubepods"});
    REQUIRE((*started)->ensurePodCgroup(*pod("u1", "", "", "", "")).ok());
  }
  CHECK(fs::is_directory(tmp / "pids" / "nodeagent" / "kubepods" / "besteffort" / "podu1"));
  testing::writeFile(tmp / "cpu" / "nodeagent" / "kubepods" / "besteffort" / "cpu.shares", "7");
  auto again = cm::ContainerManager::start(cm::CgroupManager(fakeV1(tmp)), options);
  REQUIRE(again.ok());
  CHECK(read(tmp / "cpu" / "nodeagent" / "kubepods" / "besteffort" / "cpu.shares") == "2");
  CHECK((*again)->podCgroups() == std::map<std::string, cm::CgroupName>{
                                      {"u1", {"nodeagent", "kubepods", "besteffort", "podu1"}}});
}

TEST_CASE("ContainerManager: without cgroups per QoS pods use the cgroup root", "[unit][cm]") {
  testing::TempDir tmp("cm-cm");
  cm::ContainerManagerOptions options;
  options.cgroup_root = "/custom";
  options.cgroups_per_qos = false;
  options.node_allocatable.memory_limit = 1 << 30;
  auto started = cm::ContainerManager::start(cm::CgroupManager(fakeV1(tmp)), options);
  REQUIRE(started.ok());
  auto& mgr = **started;
  CHECK(fs::is_directory(tmp / "memory" / "custom"));
  CHECK_FALSE(fs::exists(tmp / "memory" / "custom" / "memory.limit_in_bytes"));
  CHECK_FALSE(fs::exists(tmp / "memory" / "custom" / "kubepods"));
  auto p = pod("u1", "1", "1Gi", "1", "1Gi");
  CHECK(mgr.kubepods() == cm::CgroupName{"custom"});
  CHECK(mgr.podCgroupName(*p) == cm::CgroupName{"custom"});
  CHECK(mgr.podCgroupParent(*p) == "/custom");
  REQUIRE(mgr.ensurePodCgroup(*p).ok());
  CHECK(mgr.podCgroups().empty());
  REQUIRE(mgr.updateQosCgroups({p}).ok());
  CHECK(mgr.destroyPodCgroup({"custom"}).code() == base::StatusCode::kInvalidArgument);
  CHECK(fs::is_directory(tmp / "memory" / "custom"));
}

TEST_CASE("ContainerManager::start names the cgroup and file it cannot write", "[unit][cm]") {
  testing::TempDir tmp("cm-cm");
  auto mounts = fakeV1(tmp);
  fs::create_directories(tmp / "memory" / "kubepods" / "memory.limit_in_bytes");
  cm::ContainerManagerOptions options;
  options.node_allocatable.memory_limit = 1 << 30;
  auto started = cm::ContainerManager::start(cm::CgroupManager(mounts), options);
  REQUIRE_FALSE(started.ok());
  CHECK(started.status().message().find("cgroup /kubepods") != std::string::npos);
  CHECK(started.status().message().find("memory.limit_in_bytes") != std::string::npos);
  // Writable cgroups whose configuration failed: not "cannot write cgroups at all".
  CHECK(started.status().code() != base::StatusCode::kPermissionDenied);
}

TEST_CASE("ContainerManager::start says PermissionDenied when the cgroupfs cannot be written",
          "[unit][cm]") {
  testing::TempDir tmp("cm-cm");
  auto mounts = fakeV1(tmp);
  // Directories this process may not write into: as an unprivileged user (root: a child that
  // becomes nobody, for whom the hierarchies are read-only).
  fs::permissions(tmp.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  for (const auto& [controller, root] : mounts.v1_roots) {
    fs::permissions(root, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
  }
  auto code = [&]() -> int {
    auto started = cm::ContainerManager::start(cm::CgroupManager(mounts), {});
    if (started.ok()) return 100;
    return static_cast<int>(started.status().code());
  };
  int result = 0;
  if (::geteuid() != 0) {
    result = code();
  } else {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) {
        ::_exit(101);
      }
      ::_exit(code());
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    result = WEXITSTATUS(status);
  }
  CHECK(result == static_cast<int>(base::StatusCode::kPermissionDenied));
}
