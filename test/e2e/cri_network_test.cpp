// Pod networks the agent sets up on containerd: with --cni-conf-dir it writes the CNI config for
// the node's pod CIDR (from --pod-cidr, or from the Node's spec.podCIDRs once the apiserver
// assigns them) and hands the CIDR to containerd (UpdateRuntimeConfig); pods get addresses from
// it, and a hostPort reaches its pod through the config's portmap.
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "test/e2e/apiserver_env.h"
#include "test/e2e/daemon_fixture.h"
#include "test/support/containerd.h"
#include "test/support/skip.h"

namespace nodeagent::e2e {
namespace {

// The portmap plugin programs iptables: without either, hostPort cannot work here.
void skipUnlessPortmapCanRun() {
  testing::skipUnlessCniCanRun();
  const std::string portmap = std::string(testing::kCniBinDir) + "/portmap";
  if (::access(portmap.c_str(), X_OK) != 0) {
    testing::skipTest("no CNI plugin " + portmap + " (Debian package containernetworking-plugins)");
  }
  if (::access("/usr/sbin/iptables", X_OK) != 0 && ::access("/sbin/iptables", X_OK) != 0) {
    testing::skipTest("no iptables: the portmap plugin needs it (Debian package iptables)");
  }
}

// The body of GET / at host:port once it answers 200 within `deadline`.
std::optional<std::string> eventuallyGet(const std::string& host, int port,
                                         std::chrono::seconds deadline) {
  std::optional<std::string> body;
  testing::eventually(
      [&] {
        httplib::Client cli(host, port);
        cli.set_connection_timeout(1, 0);
        cli.set_read_timeout(2, 0);
        auto res = cli.Get("/");
        if (res && res->status == 200) body = res->body;
        return body.has_value();
      },
      deadline);
  return body;
}

std::string readConflist(const testing::TestContainerd& containerd) {
  return testing::readFile((containerd.cniConfDir() / "10-nodeagent.conflist").string());
}

}  // namespace

TEST_CASE(
    "cri: with --cni-conf-dir and --pod-cidr the agent writes the pods' network and a hostPort "
    "reaches its pod at 127.0.0.1",
    "[e2e][cri]") {
  skipUnlessPortmapCanRun();
  testing::TestContainerdOptions options;
  options.agent_writes_cni_config = true;
  testing::TestContainerd containerd(options);
  containerd.importTestImages();
  const int host_port = testing::refusedLoopbackPort();
  Daemon d;
  d.writeManifest(
      "web.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n"
      "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
      "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
      "    ports: [{containerPort: 8080, hostPort: " +
          std::to_string(host_port) +
          "}]\n"
          "    command: [\"/bin/sh\", \"-c\", \"mkdir -p /tmp/www && echo hello-from-pod > "
          "/tmp/www/index.html; trap 'exit 0' TERM; httpd -f -p 8080 -h /tmp/www & wait\"]\n");
  auto flags = containerd.agentFlags();
  for (auto& f : containerd.agentCniFlags()) flags.push_back(std::move(f));
  d.start(flags);

  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 60s);
  const std::string conflist = readConflist(containerd);
  INFO(conflist);
  CHECK_THAT(conflist, Catch::Contains("\"bridge\": \"" + containerd.bridgeName() + "\""));
  CHECK_THAT(conflist, Catch::Contains("\"subnet\": \"" + containerd.podSubnet() + "\""));
  CHECK_THAT(conflist, Catch::Contains("\"type\": \"portmap\""));
  CHECK_THAT(conflist, Catch::Contains("\"ipMasq\": false"));
  CHECK_THAT(d.logTail(),
             Catch::Contains("Setting Pod CIDR:  -> " + containerd.podSubnet() + " source="));
  auto pod = d.pod("web");
  REQUIRE(pod);
  const std::string ip = (*pod)["status"].value("podIP", "");
  INFO("podIP " << ip);
  CHECK(containerd.inPodSubnet(ip));

  // The node's port reaches the pod's (portmap's DNAT, also for the node's own 127.0.0.1).
  auto body = eventuallyGet("127.0.0.1", host_port, 20s);
  INFO(d.logTail());
  REQUIRE(body);
  CHECK(*body == "hello-from-pod\n");
}

TEST_CASE(
    "cri: with a dual-stack --pod-cidr the agent's CNI config gives pods an IPv4 and an IPv6 "
    "address, both in status.podIPs, and the pod answers on the IPv6 one",
    "[e2e][cri]") {
  testing::skipUnlessCniCanRun();
  if (!testing::readFile("/proc/sys/net/ipv6/conf/all/disable_ipv6").starts_with("0")) {
    testing::skipTest("IPv6 is disabled on this node (net.ipv6.conf.all.disable_ipv6)");
  }
  testing::TestContainerdOptions options;
  options.agent_writes_cni_config = true;
  testing::TestContainerd containerd(options);
  containerd.importTestImages();
  // A unique-local /64 of the test's own (the bridge's name and IPv4 /24 are unique already).
  char prefix[40];
  std::snprintf(prefix, sizeof prefix, "fd%02x:%x:%x:1::", static_cast<unsigned>(::getpid() & 0xff),
                static_cast<unsigned>(std::random_device()() & 0xffff),
                static_cast<unsigned>(std::random_device()() & 0xffff));
  const std::string v6_cidr = std::string(prefix) + "/64";
  Daemon d;
  d.writeManifest(
      "web6.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web6\nspec:\n"
      "  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
      "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
      "    command: [\"/bin/sh\", \"-c\", \"mkdir -p /tmp/www && echo hello-over-ipv6 > "
      "/tmp/www/index.html; trap 'exit 0' TERM; httpd -f -p 8080 -h /tmp/www & wait\"]\n");
  auto flags = containerd.agentFlags();
  for (auto& f : containerd.agentCniFlags(false)) flags.push_back(std::move(f));
  flags.push_back("--pod-cidr=" + containerd.podSubnet() + "," + v6_cidr);
  d.start(flags);

  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web6"); }, 60s);
  const std::string conflist = readConflist(containerd);
  INFO(conflist);
  CHECK_THAT(conflist, Catch::Contains("\"subnet\": \"" + containerd.podSubnet() + "\""));
  CHECK_THAT(conflist, Catch::Contains("\"subnet\": \"" + v6_cidr + "\""));
  auto pod = d.pod("web6");
  REQUIRE(pod);
  const auto& ips = (*pod)["status"]["podIPs"];
  INFO("podIPs " << ips.dump());
  REQUIRE(ips.size() == 2);
  const std::string v4 = ips[0].value("ip", "");
  const std::string v6 = ips[1].value("ip", "");
  CHECK(containerd.inPodSubnet(v4));
  CHECK(v6.starts_with(prefix));
  CHECK((*pod)["status"].value("podIP", "") == v4);

  // The node reaches the pod over IPv6 through the bridge (its gateway address); duplicate
  // address detection may hold the addresses back for a moment.
  auto body = eventuallyGet(v6, 8080, 30s);
  INFO(d.logTail());
  REQUIRE(body);
  CHECK(*body == "hello-over-ipv6\n");
}

}  // namespace nodeagent::e2e

namespace nodeagent::apiserver_e2e {

TEST_CASE(
    "cri: without --pod-cidr API pods wait for the network until the Node is given spec.podCIDRs, "
    "then the agent writes the CNI config and they run with addresses from it",
    "[e2e][apiserver][cri]") {
  testing::skipUnlessCniCanRun();
  testing::TestContainerdOptions options;
  options.agent_writes_cni_config = true;
  testing::TestContainerd containerd(options);
  containerd.importTestImages();
  Env env;
  env.startCriAgent(containerd.endpoint(), containerd.agentCniFlags(/*pod_cidr=*/false));
  testing::writeFile(env.dir / "net.yaml",
                     "apiVersion: v1\nkind: Pod\nmetadata:\n  name: net\n  namespace: default\n"
                     "spec:\n  nodeName: " +
                         std::string(kNode) +
                         "\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n"
                         "    image: nodeagent.test/busybox:1\n    imagePullPolicy: IfNotPresent\n"
                         "    command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & "
                         "wait\"]\n");
  auto created = env.kubectl({"create", "-f", (env.dir / "net.yaml").string()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);

  // No pod CIDR yet: containerd has no network config, the pod waits (kubelet's
  // NetworkNotReady) and no config is written.
  const bool waiting = testing::eventually(
      [&] {
        auto events = env.kubectl({"get", "events", "-n", "default"});
        return events.out.find("NetworkNotReady") != std::string::npos;
      },
      30s);
  INFO(env.diagnostics());
  CHECK(waiting);
  CHECK_FALSE(fs::exists(containerd.cniConfDir() / "10-nodeagent.conflist"));

  const std::string subnet = containerd.podSubnet();
  auto patched = env.kubectl(
      {"patch", "node", kNode, "--type=merge", "-p",
       "{\"spec\":{\"podCIDR\":\"" + subnet + "\",\"podCIDRs\":[\"" + subnet + "\"]}}"});
  INFO(patched.out << patched.err);
  REQUIRE(patched.exit_code == 0);

  std::optional<json> pod;
  const bool running = testing::eventually(
      [&] {
        pod = env.pod("net");
        return pod && (*pod)["status"].value("phase", "") == "Running";
      },
      60s);
  INFO(env.diagnostics());
  REQUIRE(running);
  CHECK(containerd.inPodSubnet((*pod)["status"].value("podIP", "")));
  const std::string conflist =
      testing::readFile((containerd.cniConfDir() / "10-nodeagent.conflist").string());
  CHECK_THAT(conflist, Catch::Contains("\"subnet\": \"" + subnet + "\""));
}

}  // namespace nodeagent::apiserver_e2e
