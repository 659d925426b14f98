// kubelet's generatePodSandboxConfig as the agent computes it (agent/pod_lifecycle_sandbox.h):
// hostnames, resolv.conf parsing, the DNS policies, port mappings, namespaces and the privileged
// flag. Pure functions: no runtime, no files but one temp resolv.conf.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/pod_lifecycle_sandbox.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using agent::DnsConfig;
using agent::SandboxWarning;

namespace {

testing::PodBuilder webPod() {
  return testing::PodBuilder().name("web").ns("team").uid("uid-1").container("main", {"sleep"});
}

const char* const kResolvConf =
    "# the node's resolver\n"
    "nameserver 10.255.255.53\n"
    "search old.example\n"
    "  nameserver   192.0.2.53  \n"
    "search example.com corp.example\n"
    "options ndots:2 timeout:1\n";

DnsConfig nodeDns() { return *agent::parseResolvConf(kResolvConf); }

DnsConfig dnsOf(const api::Pod& pod, const agent::PodDnsOptions& options,
                std::vector<SandboxWarning>* warnings = nullptr,
                std::optional<DnsConfig> host = nodeDns()) {
  return agent::podDnsConfig(pod, options, host, "10.0.0.1", warnings);
}

}  // namespace

TEST_CASE("sandbox config: resolv.conf as kubelet parses it", "[unit][agent]") {
  auto dns = agent::parseResolvConf(kResolvConf);
  REQUIRE(dns.ok());
  CHECK(dns->servers == std::vector<std::string>{"10.255.255.53", "192.0.2.53"});
  CHECK(dns->searches == std::vector<std::string>{"example.com", "corp.example"});  // last wins
  CHECK(dns->options == std::vector<std::string>{"ndots:2", "timeout:1"});
  CHECK(agent::parseResolvConf("").ok());
  auto bad = agent::parseResolvConf("nameserver\n");
  CHECK(bad.status().code() == base::StatusCode::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("nameserver list is empty"));
}

TEST_CASE("sandbox config: the hostname is spec.hostname or the pod's name, at most 63",
          "[unit][agent]") {
  CHECK(*agent::generatePodHostname(*webPod().build()) == "web");
  auto named = webPod().edit([](nlohmann::json& j) { j["spec"]["hostname"] = "db-0"; }).build();
  CHECK(*agent::generatePodHostname(*named) == "db-0");
  // kubelet's truncation: 63 characters, then no trailing '-' or '.'.
  const std::string long_name = std::string(62, 'a') + "-b" + std::string(10, 'c');
  auto long_pod = webPod().name(long_name).build();
  CHECK(*agent::generatePodHostname(*long_pod) == std::string(62, 'a'));
  auto bad =
      webPod().edit([](nlohmann::json& j) { j["spec"]["hostname"] = "Not_A_Label"; }).build();
  CHECK(agent::generatePodHostname(*bad).status().code() == base::StatusCode::kInvalidArgument);
  auto bad_sub = webPod().edit([](nlohmann::json& j) { j["spec"]["subdomain"] = "a.b"; }).build();
  CHECK_THAT(agent::generatePodHostname(*bad_sub).status().message(),
             Catch::Contains("pod Subdomain \"a.b\" is not a valid DNS label"));
}

TEST_CASE("sandbox config: kubelet's DNS policies", "[unit][agent]") {
  agent::PodDnsOptions options;
  std::vector<SandboxWarning> warnings;

  SECTION("Default: the node's resolv.conf") {
    auto pod = webPod().edit([](nlohmann::json& j) { j["spec"]["dnsPolicy"] = "Default"; }).build();
    CHECK(dnsOf(*pod, options, &warnings) == nodeDns());
    CHECK(warnings.empty());
  }
  SECTION("ClusterFirst without cluster DNS falls back to Default, with a warning") {
    for (const char* policy : {"ClusterFirst", ""}) {
      warnings.clear();
      auto pod = webPod().edit([&](nlohmann::json& j) { j["spec"]["dnsPolicy"] = policy; }).build();
      CHECK(dnsOf(*pod, options, &warnings) == nodeDns());
      REQUIRE(warnings.size() == 1);
      CHECK(warnings[0].reason == "MissingClusterDNS");
      CHECK_THAT(warnings[0].message, Catch::Contains("pod: \"web_team(uid-1)\". kubelet does not "
                                                      "have ClusterDNS IP configured"));
    }
  }
  SECTION("ClusterFirst with cluster DNS: its servers, the cluster's searches first, ndots:5") {
    options.cluster_dns = {"10.96.0.10"};
    options.cluster_domain = "cluster.local";
    auto dns = dnsOf(*webPod().build(), options, &warnings);
    CHECK(dns.servers == std::vector<std::string>{"10.96.0.10"});
    CHECK(dns.searches == std::vector<std::string>{"team.svc.cluster.local", "svc.cluster.local",
                                                   "cluster.local", "example.com", "corp.example"});
    CHECK(dns.options == std::vector<std::string>{"ndots:5"});
    CHECK(warnings.empty());
    SECTION(
        "a hostNetwork pod with ClusterFirst gets the node's, with ClusterFirstWithHostNet "
        "the cluster's") {
      auto host = webPod().hostNetwork().build();
      CHECK(dnsOf(*host, options) == nodeDns());
      auto with =
          webPod()
              .hostNetwork()
              .edit([](nlohmann::json& j) { j["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"; })
              .build();
      CHECK(dnsOf(*with, options).servers == std::vector<std::string>{"10.96.0.10"});
    }
  }
  SECTION("None: only the pod's dnsConfig") {
    auto pod = webPod()
                   .edit([](nlohmann::json& j) {
                     j["spec"]["dnsPolicy"] = "None";
                     j["spec"]["dnsConfig"] = {
                         {"nameservers", {"192.0.2.1", "192.0.2.1"}},
                         {"searches", {"svc.example"}},
                         {"options", {{{"name", "ndots"}, {"value", "3"}}, {{"name", "edns0"}}}}};
                   })
                   .build();
    auto dns = dnsOf(*pod, options);
    CHECK(dns.servers == std::vector<std::string>{"192.0.2.1"});  // duplicates omitted
    CHECK(dns.searches == std::vector<std::string>{"svc.example"});
    CHECK(dns.options == std::vector<std::string>{"edns0", "ndots:3"});
  }
  SECTION("dnsConfig is appended to a policy's; its options replace the node's of that name") {
    auto pod = webPod()
                   .edit([](nlohmann::json& j) {
                     j["spec"]["dnsPolicy"] = "Default";
                     j["spec"]["dnsConfig"] = {{"options", {{{"name", "ndots"}, {"value", "7"}}}}};
                   })
                   .build();
    CHECK(dnsOf(*pod, options).options == std::vector<std::string>{"ndots:7", "timeout:1"});
  }
  SECTION("no resolv.conf (--resolv-conf=\"\"): the local resolver") {
    auto pod = webPod().edit([](nlohmann::json& j) { j["spec"]["dnsPolicy"] = "Default"; }).build();
    auto dns = dnsOf(*pod, options, nullptr, std::nullopt);
    CHECK(dns.servers == std::vector<std::string>{"127.0.0.1"});
    CHECK(dns.searches == std::vector<std::string>{"."});
  }
  SECTION("more than 3 servers or 6 searches are cut, with a DNSConfigForming warning") {
    auto pod = webPod()
                   .edit([](nlohmann::json& j) {
                     j["spec"]["dnsPolicy"] = "Default";
                     j["spec"]["dnsConfig"] = {{"nameservers", {"192.0.2.1", "192.0.2.2"}},
                                               {"searches", {"a", "b", "c", "d", "e"}}};
                   })
                   .build();
    auto dns = dnsOf(*pod, options, &warnings);
    CHECK(dns.servers == std::vector<std::string>{"10.255.255.53", "192.0.2.53", "192.0.2.1"});
    CHECK(dns.searches.size() == 6);
    REQUIRE(warnings.size() == 2);
    CHECK(warnings[0].reason == "DNSConfigForming");
    CHECK_THAT(warnings[0].message,
               Catch::Contains("the applied nameserver line is: 10.255.255.53 192.0.2.53 "
                               "192.0.2.1"));
    CHECK_THAT(warnings[1].message, Catch::Contains("Search Line limits were exceeded"));
  }
}

TEST_CASE("sandbox config: port mappings, namespaces, privileged, cgroup and DNS of a pod",
          "[unit][agent]") {
  testing::TempDir dir;
  testing::writeFile(dir / "resolv.conf", kResolvConf);
  auto pod = webPod()
                 .container("sidecar", {"sleep"})
                 .edit([](nlohmann::json& j) {
                   j["spec"]["dnsPolicy"] = "Default";
                   j["spec"]["hostPID"] = true;
                   j["spec"]["containers"][0]["ports"] = {
                       {{"containerPort", 8080}, {"name", "http"}},
                       {{"containerPort", 8081}, {"name", "http"}},  // the same name: skipped
                       {{"containerPort", 53},
                        {"protocol", "UDP"},
                        {"hostPort", 5353},
                        {"hostIP", "127.0.0.1"}}};
                   j["spec"]["containers"][1]["securityContext"] = {{"privileged", true}};
                 })
                 .build();
  agent::SandboxInputs inputs;
  inputs.attempt = 2;
  inputs.log_directory = "/var/log/pods/team_web_uid-1";
  inputs.cgroup_parent = "/kubepods/besteffort/poduid-1";
  inputs.node_ip = "10.0.0.1";
  inputs.dns.resolv_conf = dir / "resolv.conf";
  inputs.with_dns = true;
  auto content = agent::readResolvConf(inputs.dns.resolv_conf);
  REQUIRE(content.ok());
  inputs.host_resolv_conf = *content;

  auto generated = agent::generatePodSandboxConfig(*pod, inputs);
  REQUIRE(generated.ok());
  const auto& config = generated->config;
  CHECK(config.uid == "uid-1");
  CHECK(config.attempt == 2);
  CHECK(config.hostname == "web");
  REQUIRE(config.dns_config);
  CHECK(*config.dns_config == nodeDns());
  using PortMapping = runtime::PodSandboxConfig::PortMapping;
  CHECK(config.port_mappings ==
        std::vector<PortMapping>{{"TCP", 8080, 0, ""}, {"UDP", 53, 5353, "127.0.0.1"}});
  CHECK(config.cgroup_parent == "/kubepods/besteffort/poduid-1");
  CHECK_FALSE(config.host_network);
  CHECK(config.host_pid);
  CHECK_FALSE(config.host_ipc);
  CHECK_FALSE(config.share_process_namespace);
  CHECK(config.privileged);

  SECTION("a hostNetwork pod has no hostname of its own") {
    auto host = webPod()
                    .hostNetwork()
                    .edit([](nlohmann::json& j) { j["spec"]["shareProcessNamespace"] = true; })
                    .build();
    auto g = agent::generatePodSandboxConfig(*host, inputs);
    REQUIRE(g.ok());
    CHECK(g->config.hostname.empty());
    CHECK(g->config.host_network);
    CHECK(g->config.share_process_namespace);
    CHECK_FALSE(g->config.privileged);
  }
  SECTION("without DNS (a runtime whose containers see the node's /etc) no resolv.conf is read") {
    inputs.with_dns = false;
    inputs.host_resolv_conf = "nameserver\n";  // would be an error
    auto g = agent::generatePodSandboxConfig(*pod, inputs);
    REQUIRE(g.ok());
    CHECK_FALSE(g->config.dns_config);
  }
  SECTION("a bad resolv.conf or hostname fails the sandbox") {
    inputs.host_resolv_conf = "nameserver\n";
    CHECK_THAT(agent::generatePodSandboxConfig(*pod, inputs).status().message(),
               Catch::Contains("resolv.conf: nameserver list is empty"));
    CHECK(agent::readResolvConf(dir / "missing").status().code() == base::StatusCode::kNotFound);
    CHECK_FALSE(*agent::readResolvConf(""));
  }
}

TEST_CASE(
    "sandbox config: the pod's runAsUser and runAsGroup and its groups (fsGroup first), sysctls, "
    "seccomp profile and SELinux options go into the sandbox's Linux config",
    "[unit][agent]") {
  agent::SandboxInputs inputs;
  inputs.seccomp_profile_root = "/var/lib/nodeagent/seccomp";
  auto pod = webPod()
                 .edit([](nlohmann::json& j) {
                   j["spec"]["securityContext"] = {
                       {"runAsUser", 1000},
                       {"runAsGroup", 3000},
                       {"fsGroup", 2000},
                       {"supplementalGroups", {4000, 5000}},
                       {"sysctls",
                        {{{"name", "net.ipv4.ip_local_port_range"}, {"value", "1024 65000"}},
                         {{"name", "kernel/shm_rmid_forced"}, {"value", "1"}}}},
                       {"seccompProfile",
                        {{"type", "Localhost"}, {"localhostProfile", "profiles/audit.json"}}},
                       {"seLinuxOptions", {{"type", "spc_t"}, {"level", "s0:c1,c2"}}}};
                   j["spec"]["containers"][0]["securityContext"]["seLinuxOptions"] = {
                       {"type", "container_t"}};
                 })
                 .build();
  auto g = agent::generatePodSandboxConfig(*pod, inputs);
  REQUIRE(g.ok());
  const auto& config = g->config;
  CHECK(config.run_as_user == 1000);
  CHECK(config.run_as_group == 3000);
  CHECK(config.supplemental_groups == std::vector<int64_t>{2000, 4000, 5000});
  CHECK(config.sysctls ==
        std::map<std::string, std::string>{{"kernel.shm_rmid_forced", "1"},
                                           {"net.ipv4.ip_local_port_range", "1024 65000"}});
  CHECK(config.seccomp ==
        runtime::SecurityProfile{runtime::SecurityProfile::Type::kLocalhost,
                                 "/var/lib/nodeagent/seccomp/profiles/audit.json"});
  // The pod's, not a container's (kubelet's generatePodSandboxLinuxConfig).
  CHECK(config.selinux_options == runtime::SELinuxOption{"", "", "spc_t", "s0:c1,c2"});

  SECTION("a pod without a securityContext: none of it, and Unconfined unless seccompDefault") {
    auto plain = webPod().build();
    auto none = agent::generatePodSandboxConfig(*plain, inputs);
    REQUIRE(none.ok());
    CHECK_FALSE(none->config.run_as_user);
    CHECK_FALSE(none->config.run_as_group);
    CHECK(none->config.supplemental_groups.empty());
    CHECK(none->config.sysctls.empty());
    CHECK(none->config.seccomp.type == runtime::SecurityProfile::Type::kUnconfined);
    CHECK_FALSE(none->config.selinux_options);
    inputs.seccomp_default = true;
    auto defaulted = agent::generatePodSandboxConfig(*plain, inputs);
    REQUIRE(defaulted.ok());
    CHECK(defaulted->config.seccomp.type == runtime::SecurityProfile::Type::kRuntimeDefault);
  }
  SECTION("a Localhost profile without a file fails the sandbox with kubelet's message") {
    auto bad = webPod()
                   .edit([](nlohmann::json& j) {
                     j["spec"]["securityContext"]["seccompProfile"] = {{"type", "Localhost"}};
                   })
                   .build();
    CHECK(agent::generatePodSandboxConfig(*bad, inputs).status().message() ==
          "localhostProfile must be set if seccompProfile type is Localhost.");
  }
}
