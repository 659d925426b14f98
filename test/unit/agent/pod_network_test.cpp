// The node's pod CIDR (agent/pod_network.h): --pod-cidr and spec.podCIDRs parsing, the CNI config
// the agent writes, and kubelet's updatePodCIDR order (config, then the runtime; retried after a
// failure; nothing for the same CIDRs).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "agent/pod_network.h"
#include "agent/runtime/fake_runtime.h"
#include "agent/runtime/state_file.h"
#include "test/support/fake_clock.h"
#include "test/support/test_util.h"

using namespace nodeagent;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& path) {
  std::string content, error;
  REQUIRE(runtime::readWholeFile(path.string(), content, error));
  return content;
}

// A PodNetwork writing into a temp dir, on a FakeRuntime, run by the test's io_context.
struct Net {
  explicit Net(std::chrono::milliseconds retry_delay)
      : runtime(ioc.get_executor(), clock), options(makeOptions(dir, retry_delay)) {
    network = std::make_shared<agent::PodNetwork>(ioc.get_executor(), ioc.get_executor(), runtime,
                                                  options);
  }
  static agent::PodNetworkOptions makeOptions(const testing::TempDir& dir,
                                              std::chrono::milliseconds retry_delay) {
    agent::PodNetworkOptions o;
    o.cni_conf_dir = dir / "net.d";
    o.ipam_dir = dir / "ipam";
    o.retry_delay = retry_delay;
    return o;
  }
  // Runs handlers until `calls` updates were carried out.
  void settle(uint64_t calls) {
    ioc.restart();
    while (network->settled() < calls) REQUIRE(ioc.run_one() > 0);
  }
  testing::TempDir dir{"nodeagent-pod-network"};
  testing::FakeClock clock;
  asio::io_context ioc;
  runtime::FakeRuntime runtime;
  agent::PodNetworkOptions options;
  std::shared_ptr<agent::PodNetwork> network;
};

}  // namespace

TEST_CASE("pod network: pod CIDRs as --pod-cidr and spec.podCIDRs give them", "[unit][agent]") {
  auto one = agent::parsePodCidrs("10.244.1.0/24");
  REQUIRE(one.ok());
  CHECK(*one == std::vector<std::string>{"10.244.1.0/24"});
  auto dual = agent::parsePodCidrs(" 10.244.1.0/24 , fd00:10:244:1::/64");
  REQUIRE(dual.ok());
  CHECK(*dual == std::vector<std::string>{"10.244.1.0/24", "fd00:10:244:1::/64"});

  auto refused = [](std::string_view text, std::string_view part) {
    auto parsed = agent::parsePodCidrs(text);
    REQUIRE_FALSE(parsed.ok());
    INFO(parsed.status().message());
    CHECK(parsed.status().message().find(part) != std::string::npos);
  };
  refused("10.244.1.0", "no prefix length");
  refused("10.244.1.300/24", "\"10.244.1.300\" is not an IP address");
  refused("10.244.1.0/33", "prefix length \"33\" is not 1..32");
  refused("10.244.1.0/0", "prefix length \"0\"");
  refused("10.244.1.0/2x", "prefix length \"2x\"");
  refused("10.244.1.1/24", "host bits are set");
  refused("fd00::1/64", "host bits are set");
  refused("10.244.1.0/24,10.244.2.0/24", "at most one IPv4 CIDR");
  refused("fd00::/64,fd01::/64", "at most one IPv6 CIDR");
  refused("", "no CIDR");
  refused(" , ", "no CIDR");
}

TEST_CASE("pod network: the CNI config is a bridge with host-local addresses and portmap",
          "[unit][agent]") {
  agent::PodNetworkOptions o;
  o.bridge = "nabr0001";
  o.masquerade = false;
  o.ipam_dir = "/var/lib/nodeagent/cni/ipam";
  const auto list = nlohmann::json::parse(agent::cniConflist({"10.244.1.0/24", "fd00:1::/64"}, o));
  CHECK(list["cniVersion"] == "0.4.0");
  CHECK(list["name"] == "nodeagent");
  REQUIRE(list["plugins"].size() == 2);
  const auto& bridge = list["plugins"][0];
  CHECK(bridge["type"] == "bridge");
  CHECK(bridge["bridge"] == "nabr0001");
  CHECK(bridge["isGateway"] == true);
  CHECK(bridge["ipMasq"] == false);
  CHECK(bridge["ipam"]["type"] == "host-local");
  CHECK(bridge["ipam"]["dataDir"] == "/var/lib/nodeagent/cni/ipam");
  CHECK(bridge["ipam"]["ranges"] ==
        nlohmann::json::parse(R"([[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:1::/64"}]])"));
  CHECK(bridge["ipam"]["routes"] ==
        nlohmann::json::parse(R"([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}])"));
  const auto& portmap = list["plugins"][1];
  CHECK(portmap["type"] == "portmap");
  CHECK(portmap["capabilities"]["portMappings"] == true);
  o.masquerade = true;
  CHECK(nlohmann::json::parse(agent::cniConflist({"10.244.1.0/24"}, o))["plugins"][0]["ipMasq"] ==
        true);
}

TEST_CASE(
    "pod network: the config file is written when it changes and configs that sort first are "
    "named",
    "[unit][agent]") {
  testing::TempDir dir("nodeagent-pod-network");
  agent::PodNetworkOptions o;
  o.cni_conf_dir = dir / "net.d";
  o.ipam_dir = dir / "ipam";
  std::vector<std::string> warnings;
  auto wrote = agent::writeCniConfig({"10.1.0.0/24"}, o, warnings);
  REQUIRE(wrote.ok());
  CHECK(*wrote);
  CHECK(warnings.empty());
  CHECK(fs::is_directory(o.ipam_dir));
  const fs::path file = o.cni_conf_dir / agent::kCniConfigFileName;
  CHECK(read(file) == agent::cniConflist({"10.1.0.0/24"}, o));

  testing::writeFile(o.cni_conf_dir / "05-other.conflist", "{}");
  testing::writeFile(o.cni_conf_dir / "99-late.conf", "{}");
  testing::writeFile(o.cni_conf_dir / "00-notes.txt", "not a config");
  wrote = agent::writeCniConfig({"10.1.0.0/24"}, o, warnings);
  REQUIRE(wrote.ok());
  CHECK_FALSE(*wrote);  // unchanged
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("05-other.conflist comes before 10-nodeagent.conflist") !=
        std::string::npos);

  warnings.clear();
  wrote = agent::writeCniConfig({"10.2.0.0/24"}, o, warnings);
  REQUIRE(wrote.ok());
  CHECK(*wrote);
  CHECK(read(file).find("10.2.0.0/24") != std::string::npos);
  // No temp file is left behind.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(o.cni_conf_dir)) ++files;
  CHECK(files == 4);

  SECTION("a conf dir that cannot be made is an error naming it") {
    testing::writeFile(dir / "file", "x");
    o.cni_conf_dir = dir / "file" / "net.d";
    auto failed = agent::writeCniConfig({"10.1.0.0/24"}, o, warnings);
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.status().message().find("--cni-conf-dir " + o.cni_conf_dir.string()) !=
          std::string::npos);
  }
}

TEST_CASE(
    "pod network: kubelet's updatePodCIDR writes the config, then tells the runtime, and tries "
    "again after a failure",
    "[unit][agent]") {
  Net n(std::chrono::hours(1));  // retried here by the next set()
  auto& ioc = n.ioc;
  auto& runtime = n.runtime;
  const auto& o = n.options;
  auto& network = n.network;
  auto settle = [&](uint64_t calls) { n.settle(calls); };
  const fs::path file = o.cni_conf_dir / agent::kCniConfigFileName;

  network->set("", "--pod-cidr");  // nothing at all
  network->set("10.1.0.0/33", "--pod-cidr");
  settle(1);
  CHECK(runtime.podCidrUpdates().empty());
  CHECK(network->podCidr().empty());
  CHECK_FALSE(fs::exists(file));

  runtime.setPodCidrError(base::unavailableError("runtime down"));
  network->set("10.1.0.0/24", "Node n1 spec.podCIDRs");
  settle(2);
  CHECK(runtime.podCidrUpdates() == std::vector<std::string>{"10.1.0.0/24"});
  CHECK(network->podCidr().empty());  // not settled: the next set tries again
  CHECK(fs::exists(file));            // the config comes first

  runtime.setPodCidrError(base::okStatus());
  network->set("10.1.0.0/24", "Node n1 spec.podCIDRs");
  settle(3);
  CHECK(runtime.podCidrUpdates().size() == 2);
  CHECK(network->podCidr() == "10.1.0.0/24");

  network->set("10.1.0.0/24", "Node n1 spec.podCIDRs");  // the same: nothing to do
  settle(4);
  CHECK(runtime.podCidrUpdates().size() == 2);

  SECTION("without --cni-conf-dir only the runtime is told") {
    auto bare = std::make_shared<agent::PodNetwork>(ioc.get_executor(), ioc.get_executor(), runtime,
                                                    agent::PodNetworkOptions{});
    bare->set("10.9.0.0/24", "--pod-cidr");
    ioc.restart();
    while (bare->settled() < 1) REQUIRE(ioc.run_one() > 0);
    CHECK(runtime.podCidrUpdates().back() == "10.9.0.0/24");
    CHECK(bare->podCidr() == "10.9.0.0/24");
  }
}

TEST_CASE(
    "pod network: a failed update is tried again on its own, the latest CIDRs win and the "
    "runtime gets them without blanks",
    "[unit][agent]") {
  Net n(std::chrono::milliseconds(1));
  auto& ioc = n.ioc;
  auto& runtime = n.runtime;
  const auto& o = n.options;
  auto& network = n.network;
  auto settle = [&](uint64_t calls) { n.settle(calls); };
  runtime.setPodCidrError(base::unavailableError("runtime down"));
  network->set(" 10.1.0.0/24 , fd00:1::/64,", "--pod-cidr");
  settle(2);  // the first try and one retry, both failed
  CHECK(runtime.podCidrUpdates() ==
        std::vector<std::string>{"10.1.0.0/24,fd00:1::/64", "10.1.0.0/24,fd00:1::/64"});
  CHECK(network->podCidr().empty());
  runtime.setPodCidrError(base::okStatus());
  while (network->podCidr().empty()) REQUIRE(ioc.run_one() > 0);
  CHECK(network->podCidr() == "10.1.0.0/24,fd00:1::/64");

  // Two calls before the first is carried out: the second wins, the first is never applied.
  const auto before = runtime.podCidrUpdates().size();
  network->set("10.2.0.0/24", "Node n1 spec.podCIDRs");
  network->set("10.3.0.0/24", "Node n1 spec.podCIDRs");
  const auto settled = network->settled();
  settle(settled + 1);
  CHECK(network->podCidr() == "10.3.0.0/24");
  CHECK(runtime.podCidrUpdates().size() == before + 1);
  CHECK(runtime.podCidrUpdates().back() == "10.3.0.0/24");
  CHECK(read(o.cni_conf_dir / agent::kCniConfigFileName).find("10.3.0.0/24") != std::string::npos);
}
