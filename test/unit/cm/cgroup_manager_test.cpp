#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <filesystem>

#include "agent/cm/cgroup_manager.h"
#include "test/support/test_util.h"

using namespace nodeagent;
namespace fs = std::filesystem;

namespace {

// A fake v1 cgroupfs: one plain directory per controller under the temp dir.
cm::CgroupMounts fakeV1(const testing::TempDir& tmp) {
  cm::CgroupMounts m;
  m.version = cm::CgroupVersion::kV1;
  for (const char* c : {"cpu", "cpuacct", "freezer", "memory", "pids"}) {
    fs::create_directories(tmp / c);
    m.v1_roots[c] = (tmp / c).string();
  }
  return m;
}

cm::CgroupMounts fakeV2(const testing::TempDir& tmp, const std::string& controllers) {
  fs::create_directories(tmp / "unified");
  testing::writeFile(tmp / "unified" / "cgroup.controllers", controllers + "\n");
  cm::CgroupMounts m;
  m.version = cm::CgroupVersion::kV2;
  m.unified_root = (tmp / "unified").string();
  return m;
}

std::string read(const fs::path& p) { return testing::readFile(p); }

// This machine's kind of mountinfo: v1 controllers each on their own, a controller-less cgroup2.
const char kHybridMountinfo[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

}  // namespace

TEST_CASE("parseCgroupMounts: v1 per controller, combined, hybrid, pure v2, none", "[unit][cm]") {
  SECTION("v1 with a controller-less cgroup2 (hybrid) is v1") {
    auto m = cm::parseCgroupMounts(kHybridMountinfo);
    REQUIRE(m.ok());
    CHECK(m->version == cm::CgroupVersion::kV1);
    CHECK(m->unified_root.empty());
    CHECK(m->v1_roots == std::map<std::string, std::string>{{"cpu", "/sys/fs/cgroup/cpu"},
                                                            {"cpuacct", "/sys/fs/cgroup/cpuacct"},
                                                            {"freezer", "/sys/fs/cgroup/freezer"},
                                                            {"memory", "/sys/fs/cgroup/memory"},
                                                            {"pids", "/sys/fs/cgroup/pids"}});
  }
  SECTION("cpu,cpuacct mounted together, systemd-style options") {
    auto m = cm::parseCgroupMounts(
        "25 24 0:22 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup "
        "cgroup rw,xattr,name=systemd\n"
        "28 24 0:25 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:10 - "
        "cgroup cgroup rw,cpu,cpuacct\n"
        "29 24 0:26 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup "
        "cgroup rw,memory\n");
    REQUIRE(m.ok());
    CHECK(m->version == cm::CgroupVersion::kV1);
    CHECK(m->v1_roots.at("cpu") == "/sys/fs/cgroup/cpu,cpuacct");
    CHECK(m->v1_roots.at("cpuacct") == "/sys/fs/cgroup/cpu,cpuacct");
    CHECK_FALSE(m->v1_roots.contains("pids"));
    cm::CgroupManager mgr(*m);
    auto p = mgr.paths({"kubepods", "podA"});
    CHECK(p.dirs() == std::vector<std::string>{"/sys/fs/cgroup/cpu,cpuacct/kubepods/podA",
                                               "/sys/fs/cgroup/memory/kubepods/podA"});
  }
  SECTION("pure v2") {
    auto m = cm::parseCgroupMounts(
        "22 1 0:21 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n"
        "23 1 0:5 / /proc rw - proc proc rw\n");
    REQUIRE(m.ok());
    CHECK(m->version == cm::CgroupVersion::kV2);
    CHECK(m->unified_root == "/sys/fs/cgroup");
    CHECK(m->v1_roots.empty());
    cm::CgroupManager mgr(*m);
    CHECK(mgr.paths({"kubepods", "burstable"}).unified_dir == "/sys/fs/cgroup/kubepods/burstable");
    CHECK(mgr.paths({}).unified_dir == "/sys/fs/cgroup");
  }
  SECTION("an escaped mount point") {
    auto m = cm::parseCgroupMounts("30 1 0:30 / /mnt/my\\040cgroups rw - cgroup2 none rw\n");
    REQUIRE(m.ok());
    CHECK(m->unified_root == "/mnt/my cgroups");
  }
  SECTION("nothing mounted") {
    auto m = cm::parseCgroupMounts("23 1 0:5 / /proc rw - proc proc rw\n\ngarbage line\n");
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == base::StatusCode::kFailedPrecondition);
  }
  CHECK(cm::cgroupVersionName(cm::CgroupVersion::kV1) == "v1");
  CHECK(cm::cgroupVersionName(cm::CgroupVersion::kV2) == "v2");
}

TEST_CASE("detectCgroupMounts reads the file and names it on error", "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  testing::writeFile(tmp / "mountinfo", kHybridMountinfo);
  auto m = cm::detectCgroupMounts((tmp / "mountinfo").string());
  REQUIRE(m.ok());
  CHECK(m->version == cm::CgroupVersion::kV1);

  // A v1 hierarchy without memory next to a cgroup2 mount that has it: v2.
  fs::create_directories(tmp / "cg2");
  testing::writeFile(tmp / "cg2" / "cgroup.controllers", "cpu io memory pids\n");
  testing::writeFile(tmp / "mountinfo2",
                     "37 31 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
                     "41 31 0:38 / " +
                         (tmp / "cg2").string() + " rw - cgroup2 cgroup2 rw\n");
  auto m2 = cm::detectCgroupMounts((tmp / "mountinfo2").string());
  REQUIRE(m2.ok());
  CHECK(m2->version == cm::CgroupVersion::kV2);
  CHECK(m2->unified_root == (tmp / "cg2").string());

  auto missing = cm::detectCgroupMounts((tmp / "nope").string());
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find((tmp / "nope").string()) != std::string::npos);
}

TEST_CASE("cgroup names and cgroupfs paths", "[unit][cm]") {
  CHECK(cm::cgroupNameToPath({}) == "/");
  CHECK(cm::cgroupNameToPath({"kubepods", "burstable", "podu1"}) == "/kubepods/burstable/podu1");
  CHECK(cm::parseCgroupPath("/kubepods/burstable/podu1") ==
        cm::CgroupName{"kubepods", "burstable", "podu1"});
  CHECK(cm::parseCgroupPath("/").empty());
  CHECK(cm::parseCgroupPath("a//b/") == cm::CgroupName{"a", "b"});
}

TEST_CASE("CgroupManager v1: create, update, readConfig, children, stats, destroy on a fake fs",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  cm::CgroupManager mgr(fakeV1(tmp));
  CHECK(mgr.version() == cm::CgroupVersion::kV1);
  const cm::CgroupName name{"kubepods", "burstable", "podu1"};
  CHECK_FALSE(mgr.exists(name));

  cm::ResourceConfig config;
  config.memory_limit = 200 * 1024 * 1024;
  config.cpu_shares = 102;
  config.cpu_quota = 20000;
  config.cpu_period = 100000;
  config.pids_limit = 512;
  REQUIRE(mgr.create(name, config).ok());
  CHECK(mgr.exists(name));
  for (const char* c : {"cpu", "cpuacct", "freezer", "memory", "pids"}) {
    CHECK(fs::is_directory(tmp / c / "kubepods" / "burstable" / "podu1"));
  }
  const fs::path pod = "kubepods/burstable/podu1";
  CHECK(read(tmp / "memory" / pod / "memory.limit_in_bytes") == "209715200");
  CHECK(read(tmp / "cpu" / pod / "cpu.shares") == "102");
  CHECK(read(tmp / "cpu" / pod / "cpu.cfs_quota_us") == "20000");
  CHECK(read(tmp / "cpu" / pod / "cpu.cfs_period_us") == "100000");
  CHECK(read(tmp / "pids" / pod / "pids.max") == "512");
  // cpuset is never managed.
  CHECK_FALSE(fs::exists(tmp / "cpuset"));
  auto back = mgr.readConfig(name);
  REQUIRE(back.ok());
  CHECK(*back == config);

  // Only the set fields are written; "no limit" is -1 / max.
  cm::ResourceConfig unlimit;
  unlimit.memory_limit = -1;
  unlimit.cpu_quota = -1;
  unlimit.pids_limit = -1;
  REQUIRE(mgr.update(name, unlimit).ok());
  CHECK(read(tmp / "memory" / pod / "memory.limit_in_bytes") == "-1");
  CHECK(read(tmp / "cpu" / pod / "cpu.cfs_quota_us") == "-1");
  CHECK(read(tmp / "pids" / pod / "pids.max") == "max");
  CHECK(read(tmp / "cpu" / pod / "cpu.shares") == "102");
  // The kernel's way of saying unlimited reads as -1.
  testing::writeFile(tmp / "memory" / pod / "memory.limit_in_bytes", "9223372036854771712\n");
  back = mgr.readConfig(name);
  REQUIRE(back.ok());
  CHECK(back->memory_limit == std::optional<int64_t>(-1));
  CHECK(back->pids_limit == std::optional<int64_t>(-1));

  REQUIRE(mgr.create({"kubepods", "burstable", "podu2"}, {}).ok());
  CHECK(mgr.children({"kubepods", "burstable"}) == std::vector<std::string>{"podu1", "podu2"});
  CHECK(mgr.children({"kubepods", "nothing"}).empty());

  testing::writeFile(tmp / "memory" / pod / "memory.usage_in_bytes", "1000000\n");
  testing::writeFile(tmp / "memory" / pod / "memory.stat",
                     "cache 10\nrss 5\ntotal_rss 400000\ntotal_inactive_file 250000\n");
  testing::writeFile(tmp / "memory" / pod / "memory.oom_control",
                     "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  testing::writeFile(tmp / "cpuacct" / pod / "cpuacct.usage", "123456789\n");
  testing::writeFile(tmp / "pids" / pod / "pids.current", "4\n");
  auto st = mgr.stats(name);
  REQUIRE(st.ok());
  CHECK(st->memory_usage_bytes == std::optional<uint64_t>(1000000));
  CHECK(st->memory_working_set_bytes == std::optional<uint64_t>(750000));
  CHECK(st->memory_rss_bytes == std::optional<uint64_t>(400000));
  CHECK(st->cpu_usage_nanos == std::optional<uint64_t>(123456789));
  CHECK(st->pids_current == std::optional<uint64_t>(4));
  CHECK(st->oom_kills == std::optional<uint64_t>(3));
  CHECK(mgr.pids(name).empty());

  REQUIRE(mgr.destroy(name).ok());
  CHECK_FALSE(mgr.exists(name));
  for (const char* c : {"cpu", "cpuacct", "freezer", "memory", "pids"}) {
    CHECK_FALSE(fs::exists(tmp / c / pod));
    CHECK(fs::is_directory(tmp / c / "kubepods" / "burstable" / "podu2"));
  }
  CHECK(mgr.destroy(name).ok());  // gone already
  auto missing = mgr.stats(name);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == base::StatusCode::kNotFound);
  CHECK(missing.status().message().find("/kubepods/burstable/podu1") != std::string::npos);
  CHECK(mgr.readConfig(name).status().code() == base::StatusCode::kNotFound);
}

namespace {

// A file's modification time set far in the past, so that any later write shows.
void ageFile(const fs::path& p) {
  fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::hours(24 * 365));
}

bool unwrittenSinceAged(const fs::path& p) {
  return fs::last_write_time(p) < fs::file_time_type::clock::now() - std::chrono::hours(24 * 300);
}

}  // namespace

TEST_CASE("CgroupManager: CFS bandwidth files already at the value are not written again",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  SECTION("v1 cpu.cfs_period_us and cpu.cfs_quota_us") {
    cm::CgroupManager mgr(fakeV1(tmp));
    const cm::CgroupName name{"kubepods", "podb"};
    const fs::path cpu = tmp / "cpu" / "kubepods" / "podb";
    fs::create_directories(cpu);
    // What the kernel shows in a new cgroup: the 100 ms period, no quota.
    testing::writeFile(cpu / "cpu.cfs_period_us", "100000\n");
    testing::writeFile(cpu / "cpu.cfs_quota_us", "-1\n");
    ageFile(cpu / "cpu.cfs_period_us");
    ageFile(cpu / "cpu.cfs_quota_us");
    cm::ResourceConfig config;
    config.cpu_period = 100000;
    config.cpu_quota = -1;
    REQUIRE(mgr.create(name, config).ok());
    CHECK(unwrittenSinceAged(cpu / "cpu.cfs_period_us"));
    CHECK(unwrittenSinceAged(cpu / "cpu.cfs_quota_us"));
    // A different value is written.
    config.cpu_quota = 20000;
    REQUIRE(mgr.update(name, config).ok());
    CHECK(read(cpu / "cpu.cfs_quota_us") == "20000");
    CHECK_FALSE(unwrittenSinceAged(cpu / "cpu.cfs_quota_us"));
    CHECK(unwrittenSinceAged(cpu / "cpu.cfs_period_us"));
    config.cpu_period = 50000;
    REQUIRE(mgr.update(name, config).ok());
    CHECK(read(cpu / "cpu.cfs_period_us") == "50000");
  }
  SECTION("v2 cpu.max") {
    cm::CgroupManager mgr(fakeV2(tmp, "cpu memory pids"));
    const cm::CgroupName name{"kubepods", "podb"};
    const fs::path dir = tmp / "unified" / "kubepods" / "podb";
    fs::create_directories(dir);
    testing::writeFile(dir / "cpu.max", "max 100000\n");
    ageFile(dir / "cpu.max");
    cm::ResourceConfig config;
    config.cpu_period = 100000;
    config.cpu_quota = -1;
    REQUIRE(mgr.create(name, config).ok());
    CHECK(unwrittenSinceAged(dir / "cpu.max"));
    // Without a period the value sets the quota alone: always written.
    config.cpu_period.reset();
    REQUIRE(mgr.update(name, config).ok());
    CHECK(read(dir / "cpu.max") == "max");
    CHECK_FALSE(unwrittenSinceAged(dir / "cpu.max"));
  }
}

TEST_CASE("CgroupManager: create makes missing parents and accepts an existing cgroup",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  cm::CgroupManager mgr(fakeV1(tmp));
  const cm::CgroupName deep{"a", "b", "c", "d"};
  REQUIRE(mgr.create(deep, {}).ok());
  for (const char* c : {"cpu", "cpuacct", "freezer", "memory", "pids"}) {
    CHECK(fs::is_directory(tmp / c / "a" / "b" / "c" / "d"));
  }
  CHECK(mgr.create(deep, {}).ok());
  // A file where the cgroup's directory should be is an error naming it.
  testing::writeFile(tmp / "memory" / "a" / "b" / "file", "");
  auto s = mgr.create({"a", "b", "file"}, {});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("mkdir " + (tmp / "memory" / "a" / "b" / "file").string()) !=
        std::string::npos);
}

TEST_CASE("CgroupManager::destroy refuses the root and names that climb up, touching nothing",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  cm::CgroupManager mgr(fakeV1(tmp));
  REQUIRE(mgr.create({"kubepods", "poda"}, {}).ok());
  auto s = mgr.destroy({});
  CHECK(s.code() == base::StatusCode::kInvalidArgument);
  CHECK(s.message().find("root") != std::string::npos);
  CHECK(mgr.destroy(cm::parseCgroupPath("/")).code() == base::StatusCode::kInvalidArgument);
  CHECK(mgr.destroy(cm::parseCgroupPath("")).code() == base::StatusCode::kInvalidArgument);
  CHECK(mgr.destroy({"kubepods", ".."}).code() == base::StatusCode::kInvalidArgument);
  CHECK(mgr.destroy({"."}).code() == base::StatusCode::kInvalidArgument);
  CHECK(mgr.destroy({"kubepods", ""}).code() == base::StatusCode::kInvalidArgument);
  CHECK(mgr.destroy({"kubepods/poda"}).code() == base::StatusCode::kInvalidArgument);
  CHECK(mgr.exists({"kubepods", "poda"}));
  for (const char* c : {"cpu", "cpuacct", "freezer", "memory", "pids"}) {
    CHECK(fs::is_directory(tmp / c));
  }
  CHECK(mgr.destroy({"kubepods", "poda"}).ok());
  CHECK_FALSE(mgr.exists({"kubepods", "poda"}));
}

TEST_CASE("CgroupManager v1: a controller that is not mounted is left out", "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  auto mounts = fakeV1(tmp);
  mounts.v1_roots.erase("pids");
  cm::CgroupManager mgr(mounts);
  cm::ResourceConfig config;
  config.pids_limit = 100;
  config.cpu_shares = 2;
  REQUIRE(mgr.create({"x"}, config).ok());
  CHECK(read(tmp / "cpu" / "x" / "cpu.shares") == "2");
  CHECK_FALSE(fs::exists(tmp / "pids" / "x"));
}

TEST_CASE("CgroupManager: errors name the cgroup and the file", "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  auto mounts = fakeV1(tmp);
  cm::CgroupManager mgr(mounts);
  // A file where the cgroup's directory should be.
  fs::create_directories(tmp / "memory" / "kubepods");
  testing::writeFile(tmp / "memory" / "kubepods" / "podbad", "");
  auto s = mgr.create({"kubepods", "podbad"}, {});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("cgroup /kubepods/podbad") != std::string::npos);
  CHECK(s.message().find((tmp / "memory" / "kubepods" / "podbad").string()) != std::string::npos);

  // A control file that cannot be written (a directory in its place).
  REQUIRE(mgr.create({"kubepods", "podok"}, {}).ok());
  fs::create_directories(tmp / "cpu" / "kubepods" / "podok" / "cpu.shares");
  cm::ResourceConfig config;
  config.cpu_shares = 1024;
  s = mgr.update({"kubepods", "podok"}, config);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("cgroup /kubepods/podok") != std::string::npos);
  CHECK(s.message().find((tmp / "cpu" / "kubepods" / "podok" / "cpu.shares").string()) !=
        std::string::npos);
}

TEST_CASE("CgroupManager v2: subtree_control, memory.max, cpu.weight, cpu.max, pids.max",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  cm::CgroupManager mgr(fakeV2(tmp, "cpuset cpu io memory hugetlb pids rdma"));
  CHECK(mgr.version() == cm::CgroupVersion::kV2);
  const cm::CgroupName name{"kubepods", "podg"};
  cm::ResourceConfig config;
  config.memory_limit = 100 * 1024 * 1024;
  config.cpu_shares = 1024;
  config.cpu_quota = 50000;
  config.cpu_period = 100000;
  config.pids_limit = 1024;
  REQUIRE(mgr.create(name, config).ok());
  const fs::path root = tmp / "unified";
  // The root and every parent enable the controllers for their children; the new cgroup itself
  // does not (its children, container cgroups, make it do so when they are created).
  CHECK(read(root / "cgroup.subtree_control") == "+cpu +memory +pids");
  CHECK(read(root / "kubepods" / "cgroup.subtree_control") == "+cpu +memory +pids");
  CHECK_FALSE(fs::exists(root / "kubepods" / "podg" / "cgroup.subtree_control"));
  CHECK(read(root / "kubepods" / "podg" / "memory.max") == "104857600");
  CHECK(read(root / "kubepods" / "podg" / "cpu.weight") == "39");
  CHECK(read(root / "kubepods" / "podg" / "cpu.max") == "50000 100000");
  CHECK(read(root / "kubepods" / "podg" / "pids.max") == "1024");
  auto back = mgr.readConfig(name);
  REQUIRE(back.ok());
  CHECK(back->memory_limit == config.memory_limit);
  CHECK(back->cpu_quota == config.cpu_quota);
  CHECK(back->cpu_period == config.cpu_period);
  CHECK(back->pids_limit == config.pids_limit);
  // Shares come back as a value with the same weight.
  REQUIRE(back->cpu_shares.has_value());
  CHECK(cm::cpuSharesToWeight(*back->cpu_shares) == 39);

  cm::ResourceConfig unlimit;
  unlimit.memory_limit = -1;
  unlimit.cpu_quota = -1;
  unlimit.cpu_period = 100000;
  unlimit.pids_limit = -1;
  REQUIRE(mgr.update(name, unlimit).ok());
  CHECK(read(root / "kubepods" / "podg" / "memory.max") == "max");
  CHECK(read(root / "kubepods" / "podg" / "cpu.max") == "max 100000");
  CHECK(read(root / "kubepods" / "podg" / "pids.max") == "max");
  back = mgr.readConfig(name);
  REQUIRE(back.ok());
  CHECK(back->memory_limit == std::optional<int64_t>(-1));
  CHECK(back->cpu_quota == std::optional<int64_t>(-1));

  testing::writeFile(root / "kubepods" / "podg" / "memory.current", "2000\n");
  testing::writeFile(root / "kubepods" / "podg" / "memory.stat",
                     "anon 1500\nfile 500\ninactive_file 300\n");
  testing::writeFile(root / "kubepods" / "podg" / "cpu.stat", "usage_usec 42\nuser_usec 40\n");
  testing::writeFile(root / "kubepods" / "podg" / "memory.events", "oom 1\noom_kill 1\n");
  testing::writeFile(root / "kubepods" / "podg" / "pids.current", "2\n");
  auto st = mgr.stats(name);
  REQUIRE(st.ok());
  CHECK(st->memory_usage_bytes == std::optional<uint64_t>(2000));
  CHECK(st->memory_working_set_bytes == std::optional<uint64_t>(1700));
  CHECK(st->memory_rss_bytes == std::optional<uint64_t>(1500));
  CHECK(st->cpu_usage_nanos == std::optional<uint64_t>(42000));
  CHECK(st->pids_current == std::optional<uint64_t>(2));
  CHECK(st->oom_kills == std::optional<uint64_t>(1));

  REQUIRE(mgr.destroy(name).ok());
  CHECK_FALSE(fs::exists(root / "kubepods" / "podg"));
  CHECK(fs::exists(root / "kubepods"));
}

TEST_CASE("CgroupManager v2: only offered controllers are enabled, enabled ones are kept",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  cm::CgroupManager mgr(fakeV2(tmp, "cpu memory"));
  const fs::path root = tmp / "unified";
  REQUIRE(mgr.create({"a", "b"}, {}).ok());
  CHECK(read(root / "cgroup.subtree_control") == "+cpu +memory");
  CHECK(read(root / "a" / "cgroup.subtree_control") == "+cpu +memory");

  // Already enabled (the kernel lists them without '+'): nothing is written.
  testing::writeFile(root / "a" / "cgroup.subtree_control", "cpu memory\n");
  REQUIRE(mgr.create({"a", "c"}, {}).ok());
  CHECK(read(root / "a" / "cgroup.subtree_control") == "cpu memory\n");

  testing::TempDir tmp2("cm-mgr");
  fs::create_directories(tmp2 / "unified");
  cm::CgroupMounts m;
  m.unified_root = (tmp2 / "unified").string();
  auto s = cm::CgroupManager(m).create({"x"}, {});
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("cgroup.controllers") != std::string::npos);
}

TEST_CASE("CgroupManager v1: a memory limit forbids swap where swap is accounted (memsw = limit)",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  cm::CgroupManager mgr(fakeV1(tmp));
  const fs::path mem = tmp / "memory";
  cm::ResourceConfig limit;
  limit.memory_limit = 64 << 20;

  SECTION("swap accounting off (no memsw file): only the limit is written") {
    REQUIRE(mgr.create({"nosw"}, limit).ok());
    CHECK(read(mem / "nosw" / "memory.limit_in_bytes") == "67108864");
    CHECK_FALSE(fs::exists(mem / "nosw" / "memory.memsw.limit_in_bytes"));
  }
  SECTION("swap accounting on: memsw follows the limit, up, down and unlimited") {
    fs::create_directories(mem / "sw");
    testing::writeFile(mem / "sw" / "memory.limit_in_bytes", "9223372036854771712\n");
    testing::writeFile(mem / "sw" / "memory.memsw.limit_in_bytes", "9223372036854771712\n");
    REQUIRE(mgr.update({"sw"}, limit).ok());
    CHECK(read(mem / "sw" / "memory.limit_in_bytes") == "67108864");
    CHECK(read(mem / "sw" / "memory.memsw.limit_in_bytes") == "67108864");
    limit.memory_limit = 128 << 20;
    REQUIRE(mgr.update({"sw"}, limit).ok());
    CHECK(read(mem / "sw" / "memory.limit_in_bytes") == "134217728");
    CHECK(read(mem / "sw" / "memory.memsw.limit_in_bytes") == "134217728");
    limit.memory_limit = -1;
    REQUIRE(mgr.update({"sw"}, limit).ok());
    CHECK(read(mem / "sw" / "memory.limit_in_bytes") == "-1");
    CHECK(read(mem / "sw" / "memory.memsw.limit_in_bytes") == "-1");
    // Other fields leave both alone.
    cm::ResourceConfig cpu;
    cpu.cpu_shares = 2;
    fs::create_directories(tmp / "cpu" / "sw");
    REQUIRE(mgr.update({"sw"}, cpu).ok());
    CHECK(read(mem / "sw" / "memory.memsw.limit_in_bytes") == "-1");
  }
  SECTION("the order keeps memsw >= the limit: raising writes memsw first, lowering last") {
    // memsw that cannot be written (a directory in its place) shows which went first.
    fs::create_directories(mem / "ord" / "memory.memsw.limit_in_bytes");
    testing::writeFile(mem / "ord" / "memory.limit_in_bytes", "33554432\n");
    // Lowering (below the current memsw, which reads as nothing: the limit goes first).
    limit.memory_limit = 16 << 20;
    auto s = mgr.update({"ord"}, limit);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("memory.memsw.limit_in_bytes") != std::string::npos);
    CHECK(read(mem / "ord" / "memory.limit_in_bytes") == "16777216");
  }
  SECTION("raising above the current memsw writes memsw first") {
    fs::create_directories(mem / "up");
    testing::writeFile(mem / "up" / "memory.limit_in_bytes", "33554432\n");
    testing::writeFile(mem / "up" / "memory.memsw.limit_in_bytes", "33554432\n");
    // The limit file cannot be written: memsw was raised before it.
    fs::remove(mem / "up" / "memory.limit_in_bytes");
    fs::create_directories(mem / "up" / "memory.limit_in_bytes");
    limit.memory_limit = 128 << 20;
    auto s = mgr.update({"up"}, limit);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("memory.limit_in_bytes") != std::string::npos);
    CHECK(read(mem / "up" / "memory.memsw.limit_in_bytes") == "134217728");
  }
}

TEST_CASE("CgroupManager v2: a memory limit sets memory.swap.max 0 where it exists, none max",
          "[unit][cm]") {
  testing::TempDir tmp("cm-mgr");
  cm::CgroupManager mgr(fakeV2(tmp, "cpu memory pids"));
  const fs::path root = tmp / "unified";
  cm::ResourceConfig limit;
  limit.memory_limit = 64 << 20;
  REQUIRE(mgr.create({"nosw"}, limit).ok());
  CHECK(read(root / "nosw" / "memory.max") == "67108864");
  CHECK_FALSE(fs::exists(root / "nosw" / "memory.swap.max"));

  fs::create_directories(root / "sw");
  testing::writeFile(root / "sw" / "memory.swap.max", "max\n");
  REQUIRE(mgr.update({"sw"}, limit).ok());
  CHECK(read(root / "sw" / "memory.max") == "67108864");
  CHECK(read(root / "sw" / "memory.swap.max") == "0");
  limit.memory_limit = -1;
  REQUIRE(mgr.update({"sw"}, limit).ok());
  CHECK(read(root / "sw" / "memory.max") == "max");
  CHECK(read(root / "sw" / "memory.swap.max") == "max");
}

TEST_CASE("cgroupErrnoStatus: EACCES, EPERM and EROFS say PermissionDenied (not writable)",
          "[unit][cm]") {
  CHECK(cm::cgroupErrnoStatus(EACCES, "x").code() == base::StatusCode::kPermissionDenied);
  CHECK(cm::cgroupErrnoStatus(EPERM, "x").code() == base::StatusCode::kPermissionDenied);
  CHECK(cm::cgroupErrnoStatus(EROFS, "x").code() == base::StatusCode::kPermissionDenied);
  CHECK(cm::cgroupErrnoStatus(EBUSY, "x").code() == base::StatusCode::kUnavailable);
  CHECK(cm::cgroupErrnoStatus(EINVAL, "x").code() == base::StatusCode::kInvalidArgument);
  CHECK(cm::cgroupErrnoStatus(ENOENT, "x").code() == base::StatusCode::kNotFound);
  CHECK(cm::cgroupErrnoStatus(EISDIR, "x").code() == base::StatusCode::kInternal);
  CHECK(cm::cgroupErrnoStatus(EACCES, "the message").message() == "the message");
}

TEST_CASE("cgroupRootLockPath: one lock file per cgroup root however it is spelled",
          "[unit][cm]") {
  CHECK(cm::cgroupRootLockPath("/") == "/run/nodeagent/cgroup-root-%2F.lock");
  CHECK(cm::cgroupRootLockPath("/a/b") == "/run/nodeagent/cgroup-root-%2Fa%2Fb.lock");
  CHECK(cm::cgroupRootLockPath("/a/b/") == cm::cgroupRootLockPath("/a/b"));
  CHECK(cm::cgroupRootLockPath("//a//b") == cm::cgroupRootLockPath("/a/b"));
  // '%' is escaped too, so no two roots share a file.
  CHECK(cm::cgroupRootLockPath("/a%2Fb") == "/run/nodeagent/cgroup-root-%2Fa%252Fb.lock");
}
