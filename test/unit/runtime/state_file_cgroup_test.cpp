// The shim config's cgroup and OOM score fields: round trips, configs written before they existed,
// malformed lines.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "agent/runtime/state_file.h"

using namespace nodeagent;
using namespace nodeagent::runtime;

namespace {

ShimConfig minimalConfig() {
  ShimConfig c;
  c.container_id = "c0ffee";
  c.pod_uid = "uid-1";
  c.container_name = "main";
  c.argv = {"/bin/true"};
  return c;
}

}  // namespace

TEST_CASE("state file: a v1 container cgroup and OOM score and open-file limit round-trip",
          "[unit][runtime]") {
  ShimConfig c = minimalConfig();
  c.cgroup_name = "/kubepods/burstable/poduid-1/c0ffee";
  c.cgroup.v1 = {
      {"cpu", "/sys/fs/cgroup/cpu,cpuacct/kubepods/burstable/poduid-1/c0ffee"},
      {"cpuacct", "/sys/fs/cgroup/cpu,cpuacct/kubepods/burstable/poduid-1/c0ffee"},
      {"memory", "/sys/fs/cgroup/memory/kubepods/burstable/poduid-1/c0ffee"},
      {"pids", "/sys/fs/cgroup/pids/kubepods/burstable/poduid-1/c0ffee"},
      {"freezer", "/sys/fs/cgroup/freezer/kubepods/burstable/poduid-1/c0ffee"},
  };
  c.oom_score_adj = -998;
  c.open_files = 1024;
  const std::string text = encodeShimConfig(c);
  CHECK(text.find("cgroup_v1=memory:/sys/fs/cgroup/memory/kubepods/burstable/poduid-1/c0ffee\n") !=
        std::string::npos);

  ShimConfig d;
  std::string error;
  REQUIRE(decodeShimConfig(text, d, error));
  CHECK(d.cgroup_name == c.cgroup_name);
  CHECK(d.cgroup == c.cgroup);
  CHECK_FALSE(d.cgroup.unified());
  CHECK(d.oom_score_adj == std::optional<int>(-998));
  CHECK(d.open_files == std::optional<uint64_t>(1024));
  CHECK(d.argv == c.argv);
}

TEST_CASE("state file: a v2 container cgroup round-trips, and a directory may hold a colon",
          "[unit][runtime]") {
  ShimConfig c = minimalConfig();
  c.cgroup_name = "/kubepods/pod:x/c0ffee";
  c.cgroup.unified_dir = "/sys/fs/cgroup/kubepods/pod:x/c0ffee";
  c.oom_score_adj = 1000;
  ShimConfig d;
  std::string error;
  REQUIRE(decodeShimConfig(encodeShimConfig(c), d, error));
  CHECK(d.cgroup == c.cgroup);
  CHECK(d.cgroup.unified());
  CHECK(d.cgroup_name == c.cgroup_name);
  CHECK(d.oom_score_adj == std::optional<int>(1000));

  // A v1 directory with a colon in it splits at the first one (controller names have none).
  ShimConfig v1 = minimalConfig();
  v1.cgroup.v1 = {{"memory", "/sys/fs/cgroup/memory/a:b/c0ffee"}};
  REQUIRE(decodeShimConfig(encodeShimConfig(v1), d, error));
  CHECK(d.cgroup == v1.cgroup);
}

TEST_CASE("state file: no cgroup and no OOM score write no lines and decode as absent",
          "[unit][runtime]") {
  ShimConfig c = minimalConfig();
  const std::string text = encodeShimConfig(c);
  CHECK(text.find("cgroup") == std::string::npos);
  CHECK(text.find("oom_score_adj") == std::string::npos);
  ShimConfig d;
  std::string error;
  REQUIRE(decodeShimConfig(text, d, error));
  CHECK(d.cgroup.empty());
  CHECK(d.cgroup_name.empty());
  CHECK_FALSE(d.oom_score_adj);
}

TEST_CASE("state file: a config written before cgroups existed still decodes", "[unit][runtime]") {
  // What an agent of the previous release wrote (every field it knew, and nothing else).
  const std::string old_config =
      "version=1\n"
      "container_id=0123456789abcdef0123456789abcdef\n"
      "pod_uid=uid-7\n"
      "pod_name=web\n"
      "pod_namespace=default\n"
      "container_name=main\n"
      "attempt=2\n"
      "hash=00112233445566778899aabbccddeeff\n"
      "image=busybox:1.36\n"
      "created_at=1700000000123456789\n"
      "arg=/bin/sh\n"
      "arg=-c\n"
      "arg=sleep 1000\n"
      "env=PATH=/bin\n"
      "working_dir=/var/lib/nodeagent/pods/uid-7\n"
      "no_new_privs=0\n"
      "log_path=/var/log/pods/default_web_uid-7/main/2.log\n"
      "log_max_size=10485760\n"
      "log_max_files=5\n"
      "grace_period_seconds=30\n";
  ShimConfig d;
  std::string error;
  REQUIRE(decodeShimConfig(old_config, d, error));
  CHECK(d.container_id == "0123456789abcdef0123456789abcdef");
  CHECK(d.argv == std::vector<std::string>{"/bin/sh", "-c", "sleep 1000"});
  CHECK(d.attempt == 2);
  CHECK(d.cgroup.empty());
  CHECK(d.cgroup_name.empty());
  CHECK_FALSE(d.oom_score_adj);

  // And keys a newer agent may add are ignored.
  REQUIRE(decodeShimConfig(old_config + "cgroup_something_new=x\n", d, error));
  CHECK(d.cgroup.empty());
}

TEST_CASE("state file: malformed cgroup and OOM score lines name the field", "[unit][runtime]") {
  const std::string base = encodeShimConfig(minimalConfig());
  ShimConfig d;
  std::string error;
  CHECK_FALSE(decodeShimConfig(base + "cgroup_v1=/sys/fs/cgroup/memory/x\n", d, error));
  CHECK(error.find("cgroup_v1") != std::string::npos);
  CHECK_FALSE(decodeShimConfig(base + "cgroup_v1=memory:\n", d, error));
  CHECK(error.find("cgroup_v1") != std::string::npos);
  CHECK_FALSE(decodeShimConfig(base + "oom_score_adj=low\n", d, error));
  CHECK(error.find("oom_score_adj") != std::string::npos);
}

TEST_CASE(
    "state file: a cgroup that is not the container's own (a hierarchy root, /, a parent, a "
    "sibling, a path climbing up) makes the config unusable, naming the field",
    "[unit][runtime]") {
  // container_id is c0ffee.
  const std::string base = encodeShimConfig(minimalConfig());
  ShimConfig d;
  std::string error;
  struct Case {
    std::string line;
    std::string field;
  };
  const std::vector<Case> bad = {
      {"cgroup=/", "cgroup:"},
      {"cgroup=/kubepods/burstable/poduid-1", "cgroup:"},
      {"cgroup=/kubepods/burstable/poduid-1/other", "cgroup:"},
      {"cgroup=/kubepods/xc0ffee", "cgroup:"},
      {"cgroup=c0ffee", "cgroup:"},
      {"cgroup=/kubepods/../c0ffee", "cgroup:"},
      {"cgroup_unified=/sys/fs/cgroup", "cgroup_unified:"},
      {"cgroup_unified=/sys/fs/cgroup/", "cgroup_unified:"},
      {"cgroup_unified=/", "cgroup_unified:"},
      {"cgroup_unified=sys/fs/cgroup/c0ffee", "cgroup_unified:"},
      {"cgroup_unified=/sys/fs/cgroup/c0ffee/..", "cgroup_unified:"},
      {"cgroup_unified=/sys/fs/cgroup/kubepods/../c0ffee", "cgroup_unified:"},
      {"cgroup_v1=memory:/sys/fs/cgroup/memory", "cgroup_v1:"},
      {"cgroup_v1=freezer:/sys/fs/cgroup/freezer/kubepods/pod1", "cgroup_v1:"},
  };
  for (const auto& c : bad) {
    INFO(c.line);
    CHECK_FALSE(decodeShimConfig(base + c.line + "\n", d, error));
    CHECK(error.rfind(c.field, 0) == 0);
    CHECK(error.find("/c0ffee") != std::string::npos);
  }
  // One bad directory among good ones is enough.
  CHECK_FALSE(decodeShimConfig(base +
                                   "cgroup=/kubepods/pod1/c0ffee\n"
                                   "cgroup_v1=memory:/sys/fs/cgroup/memory/kubepods/pod1/c0ffee\n"
                                   "cgroup_v1=freezer:/sys/fs/cgroup/freezer\n",
                               d, error));
  CHECK(error.find("freezer:/sys/fs/cgroup/freezer ") != std::string::npos);

  // The container's own, directly under a hierarchy's root (cgroup parent "/") too.
  REQUIRE(decodeShimConfig(base + "cgroup=/c0ffee\n"
                                  "cgroup_unified=/sys/fs/cgroup/c0ffee\n",
                           d, error));
  CHECK(d.cgroup.unified_dir == "/sys/fs/cgroup/c0ffee");

  // An id that would climb up is no cgroup name.
  ShimConfig dots = minimalConfig();
  dots.container_id = "..";
  dots.cgroup_name = "/kubepods/..";
  CHECK_FALSE(decodeShimConfig(encodeShimConfig(dots), d, error));
  CHECK(error.rfind("container_id:", 0) == 0);
  // ... but without a cgroup the id is not checked (as before).
  dots.cgroup_name.clear();
  CHECK(decodeShimConfig(encodeShimConfig(dots), d, error));
}

TEST_CASE("state file: an OOMKilled exit round-trips", "[unit][runtime]") {
  ShimState s;
  s.status = ShimStatus::kExited;
  s.exit_code = 137;
  s.signal = 9;
  s.reason = std::string(kOomKilledReason);
  ShimState d;
  std::string error;
  REQUIRE(decodeShimState(encodeShimState(s), d, error));
  CHECK(d.reason == "OOMKilled");
  CHECK(d.exit_code == 137);
  CHECK(d.signal == 9);
}
