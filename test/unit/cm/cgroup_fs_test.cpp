#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>

#include "agent/cm/cgroup_fs.h"
#include "test/support/test_util.h"

using namespace nodeagent;
namespace fs = std::filesystem;

TEST_CASE("CgroupPaths: directories and controllers", "[unit][cm]") {
  cm::CgroupPaths v2;
  v2.unified_dir = "/sys/fs/cgroup/kubepods/podX";
  CHECK(v2.unified());
  CHECK_FALSE(v2.empty());
  CHECK(v2.dirs() == std::vector<std::string>{"/sys/fs/cgroup/kubepods/podX"});
  CHECK(v2.dirFor("memory") == "/sys/fs/cgroup/kubepods/podX");

  cm::CgroupPaths v1;
  v1.v1 = {{"cpu", "/cg/cpu,cpuacct/x"},
           {"cpuacct", "/cg/cpu,cpuacct/x"},
           {"memory", "/cg/memory/x"},
           {"freezer", "/cg/freezer/x"}};
  CHECK_FALSE(v1.unified());
  CHECK(v1.dirs() ==
        std::vector<std::string>{"/cg/cpu,cpuacct/x", "/cg/freezer/x", "/cg/memory/x"});
  CHECK(v1.dirFor("cpuacct") == "/cg/cpu,cpuacct/x");
  CHECK(v1.dirFor("pids").empty());
  CHECK(cm::CgroupPaths{}.empty());
}

TEST_CASE("oomKillCount reads memory.events (v2) and memory.oom_control (v1)", "[unit][cm]") {
  testing::TempDir tmp("cm-fs");
  fs::create_directories(tmp / "v2");
  fs::create_directories(tmp / "v1mem");
  cm::CgroupPaths v2;
  v2.unified_dir = (tmp / "v2").string();
  cm::CgroupPaths v1;
  v1.v1 = {{"memory", (tmp / "v1mem").string()}};
  CHECK_FALSE(cm::oomKillCount(v2).has_value());
  CHECK_FALSE(cm::oomKillCount(v1).has_value());

  testing::writeFile(tmp / "v2" / "memory.events", "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n");
  testing::writeFile(tmp / "v1mem" / "memory.oom_control",
                     "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n");
  CHECK(cm::oomKillCount(v2) == std::optional<uint64_t>(2));
  CHECK(cm::oomKillCount(v1) == std::optional<uint64_t>(7));

  // An older kernel without the line.
  testing::writeFile(tmp / "v1mem" / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n");
  CHECK_FALSE(cm::oomKillCount(v1).has_value());
  cm::CgroupPaths no_memory;
  no_memory.v1 = {{"cpu", (tmp / "v1mem").string()}};
  CHECK_FALSE(cm::oomKillCount(no_memory).has_value());
}

TEST_CASE("cgroupPids reads cgroup.procs recursively, killCgroup never signals outside a cgroupfs",
          "[unit][cm]") {
  testing::TempDir tmp("cm-fs");
  fs::create_directories(tmp / "freezer" / "pod" / "ctr");
  fs::create_directories(tmp / "memory" / "pod");
  const std::string self = std::to_string(::getpid());
  testing::writeFile(tmp / "freezer" / "pod" / "cgroup.procs", self + "\n");
  testing::writeFile(tmp / "freezer" / "pod" / "ctr" / "cgroup.procs", self + "\n12345678\n");
  testing::writeFile(tmp / "memory" / "pod" / "cgroup.procs", "1\n");
  cm::CgroupPaths paths;
  paths.v1 = {{"freezer", (tmp / "freezer" / "pod").string()},
              {"memory", (tmp / "memory" / "pod").string()}};
  // The freezer's hierarchy is the one read.
  CHECK(cm::cgroupPids(paths) == std::vector<int>{::getpid(), 12345678});
  CHECK_FALSE(cm::onCgroupFs(tmp.path().string()));

  // Would kill this very test process if the fake files were trusted.
  std::string error;
  CHECK(cm::killCgroup(paths, error) == 0);
  CHECK(error.empty());
  CHECK_FALSE(fs::exists(tmp / "freezer" / "pod" / "freezer.state"));

  cm::CgroupPaths gone;
  gone.unified_dir = (tmp / "missing").string();
  CHECK(cm::cgroupPids(gone).empty());
  CHECK(cm::killCgroup(gone, error) == 0);
}

TEST_CASE("joinCgroup writes 0 to every hierarchy's cgroup.procs and names a failing file",
          "[unit][cm]") {
  testing::TempDir tmp("cm-fs");
  fs::create_directories(tmp / "cpu" / "x");
  fs::create_directories(tmp / "memory" / "x");
  testing::writeFile(tmp / "cpu" / "x" / "cgroup.procs", "");
  testing::writeFile(tmp / "memory" / "x" / "cgroup.procs", "");
  cm::CgroupPaths paths;
  paths.v1 = {{"cpu", (tmp / "cpu" / "x").string()}, {"memory", (tmp / "memory" / "x").string()}};
  std::string error;
  REQUIRE(cm::joinCgroup(paths, error));
  CHECK(testing::readFile(tmp / "cpu" / "x" / "cgroup.procs") == "0");
  CHECK(testing::readFile(tmp / "memory" / "x" / "cgroup.procs") == "0");

  paths.v1["pids"] = (tmp / "pids" / "x").string();
  CHECK_FALSE(cm::joinCgroup(paths, error));
  CHECK(error.find((tmp / "pids" / "x" / "cgroup.procs").string()) != std::string::npos);
}

TEST_CASE("removeCgroup removes a fake hierarchy deepest first, and missing ones are fine",
          "[unit][cm]") {
  testing::TempDir tmp("cm-fs");
  fs::create_directories(tmp / "memory" / "pod" / "ctr1");
  fs::create_directories(tmp / "memory" / "pod" / "ctr2" / "sub");
  testing::writeFile(tmp / "memory" / "pod" / "memory.limit_in_bytes", "1");
  testing::writeFile(tmp / "memory" / "pod" / "ctr2" / "sub" / "cgroup.procs", "");
  fs::create_directories(tmp / "memory" / "sibling");
  cm::CgroupPaths paths;
  paths.v1 = {{"memory", (tmp / "memory" / "pod").string()},
              {"pids", (tmp / "pids" / "pod").string()}};
  std::string error;
  REQUIRE(cm::removeCgroup(paths, error));
  CHECK_FALSE(fs::exists(tmp / "memory" / "pod"));
  CHECK(fs::exists(tmp / "memory" / "sibling"));
  CHECK(cm::removeCgroup(paths, error));
  CHECK(cm::removeCgroupWaiting(paths, 3, error));
}

TEST_CASE("isMountRoot: a mount's root (a hierarchy's root, /proc, /) but not a directory in one",
          "[unit][cm]") {
  testing::TempDir tmp("cm-fs");
  fs::create_directories(tmp / "a" / "b");
  CHECK(cm::isMountRoot("/"));
  CHECK(cm::isMountRoot("/proc"));
  CHECK(cm::isMountRoot("/proc/"));
  CHECK_FALSE(cm::isMountRoot((tmp / "a" / "b").string()));
  CHECK_FALSE(cm::isMountRoot((tmp / "missing").string()));
  CHECK_FALSE(cm::isMountRoot(""));
  // ".." is resolved by the kernel: a path climbing back to a root is that root.
  CHECK(cm::isMountRoot("/proc/self/.."));
  // A cgroup hierarchy's root, where this machine has one mounted.
  for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/freezer"}) {
    if (cm::onCgroupFs(root)) {
      INFO(root);
      CHECK(cm::isMountRoot(root));
    }
  }
}

TEST_CASE("killCgroup and removeCgroup refuse a mount's root and touch nothing", "[unit][cm]") {
  // /proc stands in for a hierarchy's root (killing or removing that one for real would hit
  // the host): a mount point, whose files cannot be removed anyway.
  testing::TempDir tmp("cm-fs");
  fs::create_directories(tmp / "memory" / "pod");
  cm::CgroupPaths v2;
  v2.unified_dir = "/proc";
  std::string error;
  CHECK(cm::killCgroup(v2, error) == -1);
  CHECK(error.find("refusing") != std::string::npos);
  CHECK(error.find("/proc") != std::string::npos);
  error.clear();
  CHECK_FALSE(cm::removeCgroup(v2, error));
  CHECK(error.find("refusing") != std::string::npos);
  error.clear();
  CHECK_FALSE(cm::removeCgroupWaiting(v2, 5, error));
  CHECK(error.find("refusing") != std::string::npos);

  // One root among a cgroup's v1 directories refuses the whole cgroup: the other directories
  // stay too.
  cm::CgroupPaths v1;
  v1.v1 = {{"memory", (tmp / "memory" / "pod").string()}, {"freezer", "/proc/self/.."}};
  error.clear();
  CHECK(cm::killCgroup(v1, error) == -1);
  CHECK(error.find("/proc/self/..") != std::string::npos);
  error.clear();
  CHECK_FALSE(cm::removeCgroup(v1, error));
  CHECK(fs::is_directory(tmp / "memory" / "pod"));
  v1.v1.erase("freezer");
  CHECK(cm::removeCgroup(v1, error));
  CHECK_FALSE(fs::exists(tmp / "memory" / "pod"));
}
