// Pod networks the agent sets up on containerd: with --cni-conf-dir it writes the CNI config for
// the node's pod CIDR (from --pod-cidr, or from the Node's spec.podCIDRs once the apiserver
// assigns them) and hands the CIDR to containerd (UpdateRuntimeConfig); pods get addresses from
// it, and a hostPort reaches its pod through the config's portmap.
#include <httplib.h>

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
  std::string body;
  const bool answered = testing::eventually(
      [&] {
        httplib::Client cli("127.0.0.1", host_port);
        cli.set_connection_timeout(1, 0);
        cli.set_read_timeout(2, 0);
        auto res = cli.Get("/");
        if (!res || res->status != 200) return false;
        body = res->body;
        return true;
      },
      20s);
  INFO(d.logTail());
  REQUIRE(answered);
  CHECK(body == "hello-from-pod\n");
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
