// The pod spec fields read from the pod's JSON (agent/runtime/spec_extras.h) and kubelet's
// choice of a container's seccomp profile.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "agent/runtime/spec_extras.h"
#include "test/support/test_util.h"
#include "test/unit/runtime/two_containers.h"

using namespace nodeagent;
using runtime::SecurityProfile;
using Type = runtime::SecurityProfile::Type;

namespace {

const std::filesystem::path kRoot = "/var/lib/nodeagent/seccomp";

}  // namespace

TEST_CASE(
    "spec extras: the container's seccompProfile wins over the pod's, which wins over "
    "--seccomp-default",
    "[unit][runtime]") {
  auto pod = testing::twoContainers()
                 .edit([](nlohmann::json& j) {
                   j["spec"]["securityContext"]["seccompProfile"] = {{"type", "RuntimeDefault"}};
                   j["spec"]["containers"][1]["securityContext"]["seccompProfile"] = {
                       {"type", "Unconfined"}};
                 })
                 .build();
  CHECK(*runtime::seccompProfileFor(*pod, "app", false, kRoot) ==
        SecurityProfile{Type::kRuntimeDefault, ""});
  CHECK(*runtime::seccompProfileFor(*pod, "side", true, kRoot) ==
        SecurityProfile{Type::kUnconfined, ""});
  CHECK(*runtime::seccompProfileFor(*pod, "", false, kRoot) ==
        SecurityProfile{Type::kRuntimeDefault, ""});

  auto plain = testing::twoContainers().build();
  CHECK(runtime::seccompProfileFor(*plain, "app", false, kRoot)->type == Type::kUnconfined);
  CHECK(runtime::seccompProfileFor(*plain, "app", true, kRoot)->type == Type::kRuntimeDefault);

  auto local = testing::twoContainers()
                   .edit([](nlohmann::json& j) {
                     j["spec"]["containers"][0]["securityContext"]["seccompProfile"] = {
                         {"type", "Localhost"}, {"localhostProfile", "my/profile.json"}};
                   })
                   .build();
  CHECK(*runtime::seccompProfileFor(*local, "app", false, kRoot) ==
        SecurityProfile{Type::kLocalhost, "/var/lib/nodeagent/seccomp/my/profile.json"});
  CHECK(runtime::seccompProfileFor(*local, "side", false, kRoot)->type == Type::kUnconfined);
}

TEST_CASE(
    "spec extras: a container's seLinuxOptions replace the pod's whole, the sandbox gets the "
    "pod's, and a pod without them has none",
    "[unit][runtime]") {
  using runtime::SELinuxOption;
  auto pod = testing::twoContainers()
                 .edit([](nlohmann::json& j) {
                   j["spec"]["securityContext"]["seLinuxOptions"] = {
                       {"user", "system_u"}, {"type", "spc_t"}, {"level", "s0:c1,c2"}};
                   j["spec"]["containers"][1]["securityContext"]["seLinuxOptions"] = {
                       {"role", "system_r"}};
                 })
                 .build();
  const auto pods = SELinuxOption{"system_u", "", "spc_t", "s0:c1,c2"};
  CHECK(runtime::seLinuxOptionsFor(*pod, "") == pods);
  CHECK(runtime::seLinuxOptionsFor(*pod, "app") == pods);
  // kubelet's DetermineEffectiveSecurityContext takes the container's struct as it is.
  CHECK(runtime::seLinuxOptionsFor(*pod, "side") == SELinuxOption{"", "system_r", "", ""});
  CHECK_FALSE(runtime::seLinuxOptionsFor(*testing::twoContainers().build(), "app").has_value());
  auto only_container = testing::twoContainers()
                            .edit([](nlohmann::json& j) {
                              j["spec"]["containers"][0]["securityContext"]["seLinuxOptions"] = {
                                  {"type", "container_t"}, {"level", 7}};
                            })
                            .build();
  CHECK(runtime::seLinuxOptionsFor(*only_container, "app") ==
        SELinuxOption{"", "", "container_t", ""});
  CHECK_FALSE(runtime::seLinuxOptionsFor(*only_container, "side").has_value());
  CHECK_FALSE(runtime::seLinuxOptionsFor(*only_container, "").has_value());
}

TEST_CASE("spec extras: SELinux is enabled when selinuxfs is mounted under the sys root",
          "[unit][runtime]") {
  testing::TempDir sys;
  CHECK_FALSE(runtime::seLinuxEnabled(sys.path()));
  std::filesystem::create_directories(sys.path() / "fs/selinux");
  CHECK_FALSE(runtime::seLinuxEnabled(sys.path()));
  std::ofstream(sys.path() / "fs/selinux/enforce") << "1";
  CHECK(runtime::seLinuxEnabled(sys.path()));
}

TEST_CASE("spec extras: a Localhost profile must name a file below the profile root",
          "[unit][runtime]") {
  auto with = [](nlohmann::json profile) {
    return testing::twoContainers()
        .edit([&](nlohmann::json& j) {
          j["spec"]["containers"][0]["securityContext"]["seccompProfile"] = profile;
        })
        .build();
  };
  auto missing = runtime::seccompProfileFor(*with({{"type", "Localhost"}}), "app", false, kRoot);
  CHECK(missing.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(missing.status().message() ==
        "localhostProfile must be set if seccompProfile type is Localhost.");
  for (const char* escape : {"../../etc/profile.json", "/etc/profile.json", "a/../../b.json"}) {
    INFO(escape);
    auto out = runtime::seccompProfileFor(
        *with({{"type", "Localhost"}, {"localhostProfile", escape}}), "app", false, kRoot);
    CHECK(out.status().code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(out.status().message(), Catch::Contains("must be a relative path without '..'"));
  }
}

TEST_CASE("spec extras: sysctls, hostname and shareProcessNamespace are read from the pod's JSON",
          "[unit][runtime]") {
  auto pod = testing::twoContainers()
                 .edit([](nlohmann::json& j) {
                   j["spec"]["hostname"] = "db-0";
                   j["spec"]["subdomain"] = "db";
                   j["spec"]["shareProcessNamespace"] = true;
                   j["spec"]["securityContext"]["sysctls"] = {
                       {{"name", "net.core.somaxconn"}, {"value", "1024"}}};
                 })
                 .build();
  const auto extras = runtime::specExtras(*pod);
  CHECK(extras.hostname == "db-0");
  CHECK(extras.subdomain == "db");
  CHECK(extras.share_process_namespace);
  CHECK(extras.sysctls == std::vector<runtime::Sysctl>{{"net.core.somaxconn", "1024"}});
  CHECK(runtime::podSysctls(*pod) == extras.sysctls);
  CHECK(runtime::podSysctls(*testing::twoContainers().build()).empty());
  // A sysctl's '/' separated form (kubelet's ConvertSysctlVariableToDotsSeparator).
  CHECK(runtime::sysctlDotted("net/ipv4/conf/eth0.100/rp_filter") ==
        "net.ipv4.conf.eth0/100.rp_filter");
  CHECK(runtime::sysctlDotted("net.ipv4.conf.eth0/100.rp_filter") ==
        "net.ipv4.conf.eth0/100.rp_filter");
  CHECK(runtime::sysctlDotted("kernel") == "kernel");
}

TEST_CASE("spec extras: fields of unexpected types are ignored, never a crash", "[unit][runtime]") {
  auto pod =
      testing::twoContainers()
          .edit([](nlohmann::json& j) {
            j["spec"]["hostname"] = 42;
            j["spec"]["shareProcessNamespace"] = "yes";
            j["spec"]["securityContext"] = {{"sysctls", {{"name", "net.core.somaxconn"}}},
                                            {"seccompProfile", "RuntimeDefault"}};
            j["spec"]["containers"][0]["securityContext"] = {{"seccompProfile", {{"type", 2}}}};
          })
          .build();
  const auto extras = runtime::specExtras(*pod);
  CHECK(extras.hostname.empty());
  CHECK_FALSE(extras.share_process_namespace);
  CHECK(extras.sysctls.empty());
  CHECK_FALSE(extras.pod_seccomp);
  // A type that is not a string reads as "", which kubelet treats as Unconfined.
  CHECK(runtime::seccompProfileFor(*pod, "app", false, kRoot)->type == Type::kUnconfined);
  CHECK(runtime::seccompProfileFor(*pod, "side", false, kRoot)->type == Type::kUnconfined);
  auto listed = testing::twoContainers()
                    .edit([](nlohmann::json& j) {
                      j["spec"]["securityContext"]["sysctls"] = {{{"name", 7}, {"value", true}},
                                                                 "net.core.somaxconn"};
                    })
                    .build();
  // Entries that are not objects or have no string name read as nameless: admission refuses them.
  const auto sysctls = runtime::podSysctls(*listed);
  REQUIRE(sysctls.size() == 2);
  CHECK(sysctls[0].name.empty());
  CHECK(sysctls[1].name.empty());
}
