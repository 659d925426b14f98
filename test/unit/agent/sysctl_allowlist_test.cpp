// kubelet's sysctl admission (agent/sysctl_allowlist.h), with the cases of kubelet's
// allowlist_test.go and the process runtime's node namespaces.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/sysctl_allowlist.h"
#include "test/support/pod_builder.h"

using namespace nodeagent;
using agent::SysctlAllowlist;

namespace {

api::PodPtr podWith(std::vector<std::pair<std::string, std::string>> sysctls,
                    bool host_network = false, bool host_ipc = false) {
  return testing::PodBuilder()
      .name("p")
      .uid("u")
      .container("c", {"sleep"})
      .edit([&](nlohmann::json& j) {
        for (const auto& [name, value] : sysctls) {
          j["spec"]["securityContext"]["sysctls"].push_back({{"name", name}, {"value", value}});
        }
        if (host_network) j["spec"]["hostNetwork"] = true;
        if (host_ipc) j["spec"]["hostIPC"] = true;
      })
      .build();
}

SysctlAllowlist allowlist(std::vector<std::string> unsafe) {
  auto patterns = agent::safeSysctls("6.1.0-18-amd64");
  patterns.insert(patterns.end(), unsafe.begin(), unsafe.end());
  auto list = SysctlAllowlist::create(patterns);
  REQUIRE(list.ok());
  return *std::move(list);
}

}  // namespace

TEST_CASE("sysctl allowlist: namespaced patterns are accepted and others refused as kubelet",
          "[unit][agent]") {
  for (const char* good :
       {"kernel.msg*", "kernel.msgmax", "kernel.sem", "kernel.shm_rmid_forced", "fs.mqueue.*",
        "net.*", "net.ipv4.tcp_fin_timeout", "net/ipv4/ip_forward", "kernel.shm*", "kernel.shm_*",
        "net/*", "net/ipv4/*", "fs/mqueue/*"}) {
    INFO(good);
    CHECK(SysctlAllowlist::create({good}).ok());
  }
  for (const char* not_namespaced :
       {"kernel.sched_child_runs_first", "vm.swappiness", "kernel.*", "fs.*", "foo", "*", "a-*"}) {
    INFO(not_namespaced);
    auto list = SysctlAllowlist::create({not_namespaced});
    CHECK(list.status().code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(list.status().message(), Catch::Contains("not known to be namespaced"));
  }
  const std::vector<std::string> malformed_patterns = {
      "",       "net..x", "Net.ipv4.x", "net.ipv4.x*y",
      "net.-a", ".net",   "net.a_",     std::string(254, 'a')};
  for (const auto& malformed : malformed_patterns) {
    INFO(malformed);
    auto list = SysctlAllowlist::create({malformed});
    CHECK(list.status().code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(list.status().message(), Catch::Contains("must have at most 253 characters"));
  }
}

TEST_CASE("sysctl allowlist: kubelet's safe sysctls depend on the kernel", "[unit][agent]") {
  const auto modern = agent::safeSysctls("6.1.0-18-amd64");
  CHECK(modern.size() == 12);
  CHECK(std::count(modern.begin(), modern.end(), "net.ipv4.tcp_rmem") == 1);
  const auto old = agent::safeSysctls("4.4.0");
  CHECK(std::count(old.begin(), old.end(), "net.ipv4.ip_local_reserved_ports") == 1);
  CHECK(std::count(old.begin(), old.end(), "net.ipv4.tcp_keepalive_time") == 0);
  CHECK(agent::safeSysctls("unknown").size() == 5);
  CHECK_FALSE(agent::runningKernelRelease().empty());
}

TEST_CASE(
    "sysctl allowlist: a pod's sysctls are admitted only when allowlisted and not shared "
    "with the node",
    "[unit][agent]") {
  const auto list = allowlist({"kernel.msg*", "net.core.somaxconn"});
  CHECK(list.admit(*podWith({}), false).admit);
  CHECK(list.admit(*podWith({{"kernel.shm_rmid_forced", "1"},
                             {"net.ipv4.ip_local_port_range", "1024 65000"},
                             {"kernel.msgmax", "65536"},
                             {"net/core/somaxconn", "1024"}}),
                   false)
            .admit);

  auto refused =
      list.admit(*podWith({{"net.ipv4.tcp_syncookies", "1"}, {"vm.swappiness", "1"}}), false);
  CHECK_FALSE(refused.admit);
  CHECK(refused.reason == "SysctlForbidden");
  CHECK(refused.message == "forbidden sysctl: \"vm.swappiness\" not allowlisted");

  auto host_net = list.admit(*podWith({{"net.core.somaxconn", "1024"}}, true), false);
  CHECK_FALSE(host_net.admit);
  CHECK(host_net.message ==
        "forbidden sysctl: \"net.core.somaxconn\" not allowed with host net enabled");
  auto host_ipc = list.admit(*podWith({{"kernel.msgmax", "1"}}, false, true), false);
  CHECK(host_ipc.message ==
        "forbidden sysctl: \"kernel.msgmax\" not allowed with host ipc enabled");
  CHECK(list.admit(*podWith({{"kernel.msgmax", "1"}}, true), false).admit);
  // A nameless entry (a sysctl of the wrong type in the JSON) is refused, not a crash.
  CHECK(list.admit(*podWith({{"", "1"}}), false).message ==
        "forbidden sysctl: \"\" not allowlisted");

  // The process runtime: every pod is in the node's namespaces.
  auto process = list.admit(*podWith({{"kernel.shm_rmid_forced", "1"}}), true);
  CHECK_FALSE(process.admit);
  CHECK(process.message ==
        "forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled (the "
        "process runtime runs every pod in the node's namespaces)");
}
