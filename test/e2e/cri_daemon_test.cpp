// The daemon with --runtime=cri (and kubelet's --container-runtime=remote) against a containerd of
// the test's own: a static pod runs as a container of the image (its own PID and mount
// namespaces, the image's root filesystem), a kill -9 and restart of the agent adopts the same
// container, a deleted manifest removes it, and a missing runtime (or CRI module) is a clear
// startup error that names the endpoint (or the module).
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <sstream>

#include "test/e2e/daemon_fixture.h"
#include "test/support/containerd.h"
#include "test/support/skip.h"

namespace nodeagent::e2e {
namespace {

// A host-network static pod of the test busybox image: a shell (with `marker` as its $0, so it
// shows in its command line) that waits for a `sleep` and ends on SIGTERM.
std::string busyboxPod(const std::string& name, const std::string& marker) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  hostNetwork: true\n  containers:\n  - name: main\n"
         "    image: nodeagent.test/busybox:1\n"
         "    imagePullPolicy: Never\n"
         "    command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\", " +
         quoteYaml(marker) + "]\n";
}

std::string nsOf(int pid, const char* ns) {
  std::error_code ec;
  return fs::read_symlink("/proc/" + std::to_string(pid) + "/ns/" + ns, ec).string();
}

}  // namespace

TEST_CASE("cri: a static pod runs in a containerd container and is adopted after kill -9") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-static");
  d.writeManifest("web.yaml", busyboxPod("web", mark));
  d.start(containerd.agentFlags());

  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 60s);
  auto cs = d.containerStatus("web");
  REQUIRE(cs);
  const std::string id = cs->value("containerID", "");
  CHECK(id.starts_with("containerd://"));
  CHECK(cs->value("imageID", "").starts_with("sha256:"));
  CHECK(cs->value("image", "") == "nodeagent.test/busybox:1");

  // The container's process: in namespaces of its own, on the image's root filesystem.
  const int pid = onePid(mark);
  REQUIRE(pid > 0);
  CHECK(nsOf(pid, "pid") != nsOf(::getpid(), "pid"));
  CHECK(nsOf(pid, "mnt") != nsOf(::getpid(), "mnt"));
  struct stat st {};
  CHECK(::stat(("/proc/" + std::to_string(pid) + "/root/bin/busybox").c_str(), &st) == 0);
  // In its pod's cgroup under the agent's kubepods (BestEffort), where containerd made it.
  const auto cgroups = readOr("/proc/" + std::to_string(pid) + "/cgroup");
  INFO(cgroups);
  CHECK_THAT(cgroups, Catch::Contains(d.cgroupRoot() + "/kubepods/besteffort/pod"));
  // Its log is where kubelet puts it (<ns>_<name>_<uid>/main/0.log), written by containerd.
  CHECK(testing::eventually(
      [&] {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(d.logs(), ec)) {
          if (e.path().filename().string().starts_with("default_web-")) {
            return fs::exists(e.path() / "main" / "0.log");
          }
        }
        return false;
      },
      10s));

  // kill -9 and a restart: the same container is adopted, nothing is started twice.
  REQUIRE(d.stop(SIGKILL) == 128 + SIGKILL);
  CHECK(alive(pid));
  d.start(containerd.agentFlags());
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 30s);
  cs = d.containerStatus("web");
  REQUIRE(cs);
  CHECK(cs->value("containerID", "") == id);
  CHECK(cs->value("restartCount", -1) == 0);
  CHECK(alive(pid));
  CHECK(pidsWithArg(mark).size() == 1);

  // The manifest removed: the container and its sandbox go.
  d.removeManifest("web.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return pidsWithArg(mark).empty(); }, 60s);
  REQUIRE_EVENTUALLY(
      d, [&] { return containerd.containerProcesses().empty(); }, 30s);
  // And its pod cgroup.
  const fs::path besteffort =
      fs::path("/sys/fs/cgroup/memory") / d.cgroupRoot().substr(1) / "kubepods" / "besteffort";
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(besteffort, ec)) {
          if (e.path().filename().string().starts_with("pod")) return false;
        }
        return true;
      },
      30s);
}

TEST_CASE("cri: a container that exits is restarted and its status follows within the relist") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-exit");
  d.writeManifest("job.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: job\nspec:\n"
                  "  hostNetwork: true\n  restartPolicy: OnFailure\n  containers:\n"
                  "  - name: main\n    image: nodeagent.test/busybox:1\n"
                  "    imagePullPolicy: Never\n"
                  "    command: [\"/bin/sh\", \"-c\", \"exit 3\", " +
                      quoteYaml(mark) + "]\n");
  d.start(containerd.agentFlags());
  // Every attempt fails (exit 3), so the pod keeps restarting; the status shows the last
  // termination with its exit code.
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("job");
        return cs && cs->value("restartCount", 0) >= 1 && cs->contains("lastState") &&
               (*cs)["lastState"].contains("terminated") &&
               (*cs)["lastState"]["terminated"].value("exitCode", 0) == 3;
      },
      60s);
}

TEST_CASE("cri: a runtime that is not there is a startup error naming the endpoint") {
  Daemon d;
  d.writeManifest("web.yaml", busyboxPod("web", marker("cri-missing")));
  const auto socket = d.dir() / "no-such-containerd.sock";
  d.spawn({"--runtime=cri", "--container-runtime-endpoint=unix://" + socket.string()});
  CHECK(d.waitExit(30s) == 1);
  const auto log = readOr(d.dir() / "agent.log");
  CHECK_THAT(log, Catch::Contains("--container-runtime-endpoint"));
  CHECK_THAT(log, Catch::Contains(socket.string()));

  // Without the CRI module (NODEAGENT_CRI_MODULE names where it is, here nowhere).
  Daemon unloaded;
  unloaded.writeManifest("web.yaml", busyboxPod("web", marker("cri-module")));
  const auto module = unloaded.dir() / "nowhere" / "nodeagent-cri.so";
  ::setenv("NODEAGENT_CRI_MODULE", module.c_str(), 1);
  unloaded.spawn({"--runtime=cri", "--container-runtime-endpoint=unix://" + socket.string()});
  ::unsetenv("NODEAGENT_CRI_MODULE");
  CHECK(unloaded.waitExit(30s) == 1);
  CHECK_THAT(
      readOr(unloaded.dir() / "agent.log"),
      Catch::Contains("nodeagent-cri.so is not installed") && Catch::Contains(module.string()));

  Daemon both;
  both.writeManifest("web.yaml", busyboxPod("web", marker("cri-flags")));
  both.spawn({"--runtime=process", "--container-runtime=remote"});
  CHECK(both.waitExit(10s) == 2);
  CHECK_THAT(readOr(both.dir() / "agent.log"), Catch::Contains("disagree"));
}

}  // namespace nodeagent::e2e

namespace nodeagent::e2e {
namespace {

// A static pod of the test busybox image on the pod network (no hostNetwork): a web server on
// port 8080 whose page names the pod's IP as its status.podIP env says it and its hostname.
std::string webServerPod(const std::string& name, const std::string& marker) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  containers:\n  - name: main\n"
         "    image: nodeagent.test/busybox:1\n"
         "    imagePullPolicy: Never\n"
         "    ports:\n    - containerPort: 8080\n"
         "    readinessProbe:\n      httpGet: {path: /, port: 8080}\n      periodSeconds: 1\n"
         "    env:\n    - name: POD_IP\n      valueFrom:\n        fieldRef:\n"
         "          fieldPath: status.podIP\n"
         "    command: [\"/bin/sh\", \"-c\", \"mkdir -p /tmp/www && echo \\\"hello from $POD_IP "
         "on $(hostname)\\\" > /tmp/www/index.html && trap 'exit 0' TERM; httpd -f -p 8080 -h "
         "/tmp/www & wait\", " +
         quoteYaml(marker) + "]\n";
}

std::string podIpOf(const Daemon& d, const std::string& name) {
  auto pod = d.pod(name);
  if (!pod || !pod->contains("status")) return "";
  return (*pod)["status"].value("podIP", "");
}

}  // namespace

TEST_CASE(
    "cri: a static pod without hostNetwork gets an IP of the CNI subnet, shown in /pods, and "
    "serves on it",
    "[e2e][cri]") {
  testing::skipUnlessCniCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-net");
  d.writeManifest("net.yaml", webServerPod("net", mark));
  d.start(containerd.agentFlags());
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("net"); }, 60s);

  const auto pod = d.pod("net");
  REQUIRE(pod);
  const auto& status = (*pod)["status"];
  const std::string ip = status.value("podIP", "");
  INFO("pod IP " << ip << ", subnet " << containerd.podSubnet());
  // Only an address of the test's own bridge is ever connected to.
  REQUIRE(containerd.inPodSubnet(ip));
  REQUIRE(status.contains("podIPs"));
  CHECK(status["podIPs"][0].value("ip", "") == ip);
  CHECK(status.value("hostIP", "") != ip);

  // The container: in a network namespace of its own.
  const int pid = onePid(mark);
  REQUIRE(pid > 0);
  CHECK(nsOf(pid, "net") != nsOf(::getpid(), "net"));

  // The test reaches the pod at its IP, through the test's bridge.
  std::string page;
  CHECK(testing::eventually(
      [&] {
        httplib::Client client(ip, 8080);
        client.set_connection_timeout(1, 0);
        client.set_read_timeout(2, 0);
        auto res = client.Get("/");
        if (!res || res->status != 200) return false;
        page = res->body;
        return true;
      },
      20s));
  CHECK(page == "hello from " + ip + " on net-node1\n");
  // Its readiness probe reaches it at that IP too.
  CHECK(testing::eventually(
      [&] {
        auto cs = d.containerStatus("net");
        return cs && cs->value("ready", false);
      },
      20s));

  d.removeManifest("net.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return pidsWithArg(mark).empty(); }, 60s);
  REQUIRE_EVENTUALLY(
      d, [&] { return containerd.containerProcesses().empty(); }, 30s);
}

TEST_CASE(
    "cri: without a CNI config a pod without hostNetwork waits with NetworkNotReady while a "
    "hostNetwork pod runs",
    "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerdOptions options;
  options.cni = false;
  testing::TestContainerd containerd(options);
  containerd.importTestImages();
  Daemon d;
  const auto host_mark = marker("cri-host");
  const auto net_mark = marker("cri-nonet");
  d.writeManifest("web.yaml", busyboxPod("web", host_mark));
  d.writeManifest("net.yaml", webServerPod("net", net_mark));
  d.start(containerd.agentFlags());
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 60s);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        const auto log = readOr(d.dir() / "agent.log");
        return log.find(
                   "network is not ready: runtime network not ready: NetworkReady=false "
                   "reason:NetworkPluginNotReady") != std::string::npos &&
               log.find("pod=default/net-node1") != std::string::npos;
      },
      30s);
  CHECK(d.phase("net") == "Pending");
  CHECK(podIpOf(d, "net").empty());
  CHECK(pidsWithArg(net_mark).empty());
  // The hostNetwork pod has the node's IP.
  CHECK_FALSE(podIpOf(d, "web").empty());
  CHECK(podIpOf(d, "web") == d.pod("web").value()["status"].value("hostIP", ""));
  d.removeManifest("web.yaml");
  d.removeManifest("net.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return pidsWithArg(host_mark).empty(); }, 60s);
  REQUIRE_EVENTUALLY(
      d, [&] { return containerd.containerProcesses().empty(); }, 30s);
}

TEST_CASE("cri: --cluster-dns and --cluster-domain give a ClusterFirst pod the cluster's resolver",
          "[e2e][cri]") {
  testing::skipUnlessCniCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-dns");
  // The default dnsPolicy, ClusterFirst; no hostNetwork.
  d.writeManifest("dns.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: dns\nspec:\n  containers:\n"
                  "  - name: main\n    image: nodeagent.test/busybox:1\n"
                  "    imagePullPolicy: Never\n"
                  "    command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\", " +
                      quoteYaml(mark) + "]\n");
  auto args = containerd.agentFlags();
  args.push_back("--cluster-dns=10.96.0.10");
  args.push_back("--cluster-domain=cluster.local");
  d.start(args);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("dns"); }, 60s);
  const int pid = onePid(mark);
  REQUIRE(pid > 0);
  const auto resolv = readOr("/proc/" + std::to_string(pid) + "/root/etc/resolv.conf");
  INFO(resolv);
  CHECK_THAT(resolv, Catch::Contains("nameserver 10.96.0.10"));
  CHECK_THAT(resolv, Catch::Contains("default.svc.cluster.local svc.cluster.local cluster.local"));
  CHECK_THAT(resolv, Catch::Contains("ndots:5"));

  // A cluster DNS address that is not an IP is a usage error naming the flag.
  Daemon bad;
  bad.writeManifest("dns.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n");
  bad.spawn({"--cluster-dns=dns.example"});
  CHECK(bad.waitExit(10s) == 2);
  CHECK_THAT(readOr(bad.dir() / "agent.log"), Catch::Contains("--cluster-dns"));
}

TEST_CASE("cri: the termination message is a file mounted into the container, or the log's end",
          "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  auto pod = [](const std::string& name, const std::string& script, const std::string& policy) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\nspec:\n  hostNetwork: true\n  restartPolicy: Never\n  containers:\n"
           "  - name: main\n    image: nodeagent.test/busybox-nonroot:1\n"
           "    imagePullPolicy: Never\n    terminationMessagePolicy: " +
           policy + "\n    command: [\"/bin/sh\", \"-c\", " + quoteYaml(script) + "]\n";
  };
  // A non-root container writes the file (it is writable by any user).
  d.writeManifest("file.yaml",
                  pod("file", "echo -n goodbye > /dev/termination-log; exit 1", "File"));
  d.writeManifest("logs.yaml", pod("logs", "echo last words; exit 2", "FallbackToLogsOnError"));
  d.start(containerd.agentFlags());
  auto terminated = [&](const std::string& name) {
    return d.containerState(name, "main", "terminated");
  };
  REQUIRE_EVENTUALLY(
      d, [&] { return terminated("file") && terminated("logs"); }, 60s);
  CHECK(terminated("file")->value("message", "") == "goodbye");
  CHECK(terminated("file")->value("exitCode", 0) == 1);
  CHECK(terminated("logs")->value("message", "") == "last words\n");
}

TEST_CASE(
    "cri: runAsNonRoot refuses a root image with CreateContainerConfigError and runs the User "
    "1000 image while a missing image with imagePullPolicy Never waits in ErrImageNeverPull",
    "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  auto pod = [](const std::string& name, const std::string& image) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\nspec:\n  hostNetwork: true\n  containers:\n  - name: main\n    image: " + image +
           "\n    imagePullPolicy: Never\n    securityContext: {runAsNonRoot: true}\n"
           "    command: [\"/bin/sh\", \"-c\", \"id -u; sleep 3600\"]\n";
  };
  d.writeManifest("root.yaml", pod("root", "nodeagent.test/busybox:1"));
  d.writeManifest("nonroot.yaml", pod("nonroot", "nodeagent.test/busybox-nonroot:1"));
  d.writeManifest("absent.yaml", pod("absent", "nodeagent.test/not-imported:1"));
  d.start(containerd.agentFlags());
  auto waiting = [&](const std::string& name) { return d.containerState(name, "main", "waiting"); };
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("nonroot"); }, 60s);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto w = waiting("root");
        return w && w->value("reason", "") == "CreateContainerConfigError";
      },
      60s);
  // kubelet's message, naming the pod and the container.
  CHECK_THAT(waiting("root")->value("message", ""),
             Catch::StartsWith("container has runAsNonRoot and image will run as root (pod: "
                               "\"root-") &&
                 Catch::EndsWith(")\", container: main)"));
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto w = waiting("absent");
        return w && w->value("reason", "") == "ErrImageNeverPull";
      },
      60s);
  CHECK(waiting("absent")->value("message", "") ==
        "Container image \"nodeagent.test/not-imported:1\" is not present with pull policy of "
        "Never");
  CHECK_FALSE(d.running("root"));
}

TEST_CASE(
    "cri: image garbage collection over the high threshold removes the unused image and keeps "
    "the wanted one and the sandbox image",
    "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  auto has = [&](const std::string& ref) {
    const auto refs = containerd.imageReferences();
    return std::find(refs.begin(), refs.end(), ref) != refs.end();
  };
  REQUIRE(has("nodeagent.test/busybox-nonroot:1"));
  Daemon d;
  const auto mark = marker("cri-image-gc");
  d.writeManifest("web.yaml", busyboxPod("web", mark));
  // Any usage is over a 1 % threshold: the first pass, at start, removes every image it may.
  auto args = containerd.agentFlags();
  args.insert(args.end(), {"--image-gc-high-threshold=1", "--image-gc-low-threshold=0",
                           "--minimum-image-ttl-duration=0s"});
  d.start(args);

  REQUIRE_EVENTUALLY(
      d, [&] { return !has("nodeagent.test/busybox-nonroot:1"); }, 60s);
  // The static pod's image is kept even if the pass ran before its container existed.
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 60s);
  CHECK(has("nodeagent.test/busybox:1"));
  CHECK(has("nodeagent.test/pause:1"));
  CHECK_THAT(d.logTail(), Catch::Contains("Removing image to free"));
  CHECK_THAT(d.logTail(), Catch::Contains("failed to garbage collect required amount of images"));
}

TEST_CASE(
    "cri: an imagefs eviction threshold is watched on containerd's image filesystem and its "
    "reclaim removes unused images",
    "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-imagefs");
  d.writeManifest("web.yaml", busyboxPod("web", mark));
  // Periodic image GC off: only the eviction manager's reclaim can remove the image. The
  // threshold is above what containerd's filesystem has available: met at once.
  struct statvfs fs {};
  REQUIRE(::statvfs(containerd.dir().c_str(), &fs) == 0);
  const uint64_t above = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize + (uint64_t{1} << 30);
  auto args = containerd.agentFlags();
  args.insert(args.end(), {"--image-gc-high-threshold=100",
                           "--eviction-hard=imagefs.available<" + std::to_string(above)});
  d.start(args);

  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 60s);
  const auto refs = [&] { return containerd.imageReferences(); };
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto r = refs();
        return std::find(r.begin(), r.end(), "nodeagent.test/busybox-nonroot:1") == r.end();
      },
      60s);
  CHECK_THAT(d.logTail(), Catch::Contains("imagefs.available"));
  CHECK_THAT(d.logTail(), Catch::Contains("Removed unused images to reclaim node resources"));
  // A static pod is not evicted; its image and the sandbox image stay.
  CHECK(d.running("web"));
  auto r = refs();
  CHECK(std::find(r.begin(), r.end(), "nodeagent.test/busybox:1") != r.end());
  CHECK(std::find(r.begin(), r.end(), "nodeagent.test/pause:1") != r.end());
}

TEST_CASE("cri: containerd restarted under a running agent: the agent carries on, nothing twice",
          "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-restart");
  d.writeManifest("web.yaml", busyboxPod("web", mark));
  d.start(containerd.agentFlags());
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 60s);
  const std::string id = d.containerStatus("web")->value("containerID", "");
  const int pid = onePid(mark);
  REQUIRE(pid > 0);

  containerd.restart();
  // The container ran on under its shim; the agent keeps it, and starts a new pod.
  const auto mark2 = marker("cri-restart-2");
  d.writeManifest("web2.yaml", busyboxPod("web2", mark2));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web2"); }, 60s);
  CHECK(d.running("web"));
  CHECK(d.containerStatus("web")->value("containerID", "") == id);
  CHECK(d.containerStatus("web")->value("restartCount", -1) == 0);
  CHECK(alive(pid));
  CHECK(onePid(mark) == pid);
  // (onePid waits for exactly one: just after the start, the shell's fork for its `sleep &` still
  // carries the marker until it execs.)
  CHECK(onePid(mark2) > 0);
  CHECK(alive(d.pid()));
}

}  // namespace nodeagent::e2e

namespace nodeagent::e2e {

TEST_CASE(
    "cri: the pod's user, groups, sysctls and seccomp profiles reach its containers, and a sysctl "
    "not on the allowlist refuses the pod with SysctlForbidden",
    "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::skipUnlessCniCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  // Each container prints what it runs with and ends: its log's end is its termination message.
  const std::string report =
      "id -u; id -G; cat /proc/sys/net/ipv4/ip_local_port_range /proc/sys/kernel/msgmax; "
      "grep Seccomp: /proc/self/status; exit 1";
  auto container = [&](const std::string& name, const std::string& security) {
    return "  - name: " + name +
           "\n    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
           "    terminationMessagePolicy: FallbackToLogsOnError\n" +
           security + "    command: [\"/bin/sh\", \"-c\", " + quoteYaml(report) + "]\n";
  };
  d.writeManifest(
      "secure.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: secure\nspec:\n  restartPolicy: Never\n"
      "  securityContext:\n    runAsUser: 1000\n    runAsGroup: 3000\n    fsGroup: 2000\n"
      "    supplementalGroups: [4000]\n    seccompProfile: {type: RuntimeDefault}\n"
      "    sysctls:\n    - {name: net.ipv4.ip_local_port_range, value: \"20000 20999\"}\n"
      "    - {name: kernel/msgmax, value: \"12345\"}\n"
      "  containers:\n" +
          container("main", "") +
          container("loose", "    securityContext:\n      seccompProfile: {type: Unconfined}\n"));
  d.writeManifest("unsafe.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unsafe\nspec:\n"
                  "  securityContext:\n    sysctls:\n    - {name: net.core.somaxconn, value: "
                  "\"1024\"}\n  containers:\n" +
                      container("main", ""));
  auto args = containerd.agentFlags();
  args.push_back("--allowed-unsafe-sysctls=kernel.msg*");
  d.start(args);
  auto message = [&](const std::string& name) -> std::optional<std::string> {
    auto terminated = d.containerState("secure", name, "terminated");
    if (!terminated) return std::nullopt;
    return terminated->value("message", "");
  };
  REQUIRE_EVENTUALLY(
      d, [&] { return message("main") && message("loose"); }, 90s);
  const std::string main = *message("main");
  INFO("main:\n" << main << "loose:\n" << *message("loose"));
  // runAsUser and runAsGroup; fsGroup and supplementalGroups as further groups.
  CHECK_THAT(main, Catch::StartsWith("1000\n3000 2000 4000\n"));
  // The sysctls, in the pod's own network and IPC namespaces.
  CHECK_THAT(main, Catch::Contains("20000\t20999\n12345\n"));
  // RuntimeDefault is containerd's filter (mode 2); Unconfined is none.
  CHECK_THAT(main, Catch::EndsWith("Seccomp:\t2\n"));
  CHECK_THAT(*message("loose"), Catch::EndsWith("Seccomp:\t0\n"));
  // The node's own values are untouched.
  CHECK(testing::readFile("/proc/sys/kernel/msgmax") != "12345\n");

  REQUIRE_EVENTUALLY(
      d, [&] { return d.phase("unsafe") == "Failed"; }, 30s);
  const auto status = (*d.pod("unsafe"))["status"];
  CHECK(status.value("reason", "") == "SysctlForbidden");
  CHECK(status.value("message", "") ==
        "Pod forbidden sysctl: \"net.core.somaxconn\" not allowlisted");
}

}  // namespace nodeagent::e2e

namespace nodeagent::e2e {

TEST_CASE(
    "cri: a sandbox whose pause process dies is replaced at the next relist and its container "
    "started again in the new one",
    "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-sandbox-lost");
  d.writeManifest("web.yaml", busyboxPod("web", mark));
  auto args = containerd.agentFlags();
  args.push_back("--sync-frequency=10m");  // only the relist (every second) can notice
  d.start(args);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 60s);
  const int first = onePid(mark);
  REQUIRE(first != 0);
  // The test's pause image runs `sleep 2147483647`.
  auto pauses = [&] {
    std::vector<pid_t> out;
    for (const auto& [pid, command] : containerd.containerProcesses()) {
      if (command.find("sleep 2147483647") != std::string::npos) out.push_back(pid);
    }
    return out;
  };
  const auto before = pauses();
  REQUIRE(before.size() == 1);
  REQUIRE(::kill(before[0], SIGKILL) == 0);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("web");
        return d.running("web") && cs && cs->value("restartCount", 0) >= 1;
      },
      60s);
  const int second = onePid(mark);
  CHECK(second != 0);
  CHECK(second != first);
  const auto after = pauses();
  CHECK(after.size() == 1);
  CHECK(after != before);
  CHECK_THAT(d.logTail(), Catch::Contains("no ready sandbox"));
}

}  // namespace nodeagent::e2e

namespace nodeagent::e2e {
namespace {

// The cgroup of `controller` that /proc/<pid>/cgroup names for a v1 hierarchy ("4:memory:/x").
std::string v1CgroupOf(int pid, const std::string& controller) {
  std::istringstream lines(readOr("/proc/" + std::to_string(pid) + "/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    std::istringstream names(line.substr(first + 1, second - first - 1));
    for (std::string name; std::getline(names, name, ',');) {
      if (name == controller) return line.substr(second + 1);
    }
  }
  return "";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

TEST_CASE(
    "cri: a Guaranteed pod's limits reach its container's cgroup on containerd, and a container "
    "past its memory limit ends OOMKilled",
    "[e2e][cri][cgroups]") {
  testing::skipUnlessContainerdCanRun();
  if (!fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") ||
      !fs::exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")) {
    testing::skipTest("no cgroup v1 memory and cpu hierarchies at /sys/fs/cgroup/<controller>");
  }
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const auto mark = marker("cri-limits");
  const std::string resources =
      "    resources:\n      limits: {cpu: 250m, memory: 64Mi}\n"
      "      requests: {cpu: 250m, memory: 64Mi}\n";
  d.writeManifest("limited.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: limited\nspec:\n"
                  "  hostNetwork: true\n  containers:\n  - name: main\n"
                  "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n" +
                      resources +
                      "    command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & "
                      "wait\", " +
                      quoteYaml(mark) + "]\n");
  // dd's one 256 MiB block is written as it is read: the kernel's OOM killer ends it at 64 MiB.
  d.writeManifest("hog.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hog\nspec:\n"
                  "  hostNetwork: true\n  restartPolicy: Never\n  containers:\n  - name: main\n"
                  "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n" +
                      resources +
                      "    command: [\"dd\", \"if=/dev/zero\", \"of=/dev/null\", \"bs=256M\", "
                      "\"count=1\"]\n");
  d.start(containerd.agentFlags());

  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("limited"); }, 60s);
  const int pid = onePid(mark);
  REQUIRE(pid > 0);
  // Guaranteed: the pod's cgroup is right under kubepods; the container's below it.
  const std::string memory = v1CgroupOf(pid, "memory");
  INFO("memory cgroup " << memory);
  CHECK_THAT(memory, Catch::StartsWith(d.cgroupRoot() + "/kubepods/pod"));
  CHECK(trimmed(readOr(fs::path("/sys/fs/cgroup/memory") / memory.substr(1) /
                       "memory.limit_in_bytes")) == "67108864");
  const std::string cpu = v1CgroupOf(pid, "cpu");
  INFO("cpu cgroup " << cpu);
  const fs::path cpu_dir = fs::path("/sys/fs/cgroup/cpu") / cpu.substr(1);
  CHECK(trimmed(readOr(cpu_dir / "cpu.cfs_quota_us")) == "25000");
  CHECK(trimmed(readOr(cpu_dir / "cpu.cfs_period_us")) == "100000");
  CHECK(trimmed(readOr(cpu_dir / "cpu.shares")) == "256");

  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto terminated = d.containerState("hog", "main", "terminated");
        return terminated.has_value();
      },
      60s);
  auto terminated = d.containerState("hog", "main", "terminated");
  INFO(terminated->dump());
  CHECK(terminated->value("reason", "") == "OOMKilled");
  CHECK(terminated->value("exitCode", 0) == 137);
  CHECK(d.running("limited"));  // its neighbour is untouched
}

}  // namespace nodeagent::e2e
