// The pod lifecycle on containerd, end to end with the daemon: init containers, postStart and
// preStop hooks, exec, httpGet and tcpSocket probes (run in the container or at the pod's own
// address), liveness restarts and crash-loop backoff.
#include <sys/stat.h>

#include "test/e2e/daemon_fixture.h"
#include "test/support/containerd.h"

namespace nodeagent::e2e {

TEST_CASE(
    "cri: init containers run first, postStart and exec probes run in the container, a failing "
    "liveness probe restarts it and a crashing container backs off",
    "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  const std::string image =
      "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
      "    volumeMounts: [{name: work, mountPath: /work}]\n";
  // The init container leaves a file the app container needs; postStart writes the file the
  // readiness probe looks for; the app removes the file of its liveness probe after a while.
  d.writeManifest(
      "life.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: life\nspec:\n  hostNetwork: true\n"
      "  terminationGracePeriodSeconds: 1\n"
      "  volumes: [{name: work, emptyDir: {}}]\n"
      "  initContainers:\n  - name: prepare\n" +
          image +
          "    command: [\"/bin/sh\", \"-c\", \"echo prepared > /work/init-done\"]\n"
          "  containers:\n  - name: main\n" +
          image +
          "    command: [\"/bin/sh\", \"-c\", \"cat /work/init-done || exit 7; touch /tmp/alive; "
          "sleep 4; rm /tmp/alive; sleep 3600\"]\n"
          "    lifecycle:\n      postStart:\n        exec: {command: [\"/bin/sh\", \"-c\", "
          "\"echo started > /work/post-start\"]}\n"
          "    readinessProbe:\n      exec: {command: [\"cat\", \"/work/post-start\"]}\n"
          "      periodSeconds: 1\n"
          "    livenessProbe:\n      exec: {command: [\"test\", \"-f\", \"/tmp/alive\"]}\n"
          "      periodSeconds: 1\n      failureThreshold: 2\n");
  d.writeManifest("crash.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: crash\nspec:\n"
                  "  hostNetwork: true\n  containers:\n  - name: main\n"
                  "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
                  "    command: [\"/bin/sh\", \"-c\", \"exit 3\"]\n");
  d.start(containerd.agentFlags());

  // Ready: the init container completed, postStart ran, the readiness probe passes.
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("life");
        return d.running("life") && cs && cs->value("ready", false);
      },
      60s);
  auto init = d.containerStatus("life", "prepare", "initContainerStatuses");
  REQUIRE(init);
  CHECK((*init)["state"]["terminated"].value("reason", "") == "Completed");
  CHECK((*init)["state"]["terminated"].value("exitCode", -1) == 0);
  // The liveness probe fails once /tmp/alive is gone: the container is killed and started again.
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("life");
        return cs && cs->value("restartCount", 0) >= 1 && cs->contains("lastState") &&
               (*cs)["lastState"].contains("terminated");
      },
      60s);
  CHECK_THAT(d.logTail(), Catch::Contains("Container main failed liveness probe, will be "
                                          "restarted"));
  // The second run found the init container's file again (no exit 7).
  CHECK((*d.containerStatus("life"))["lastState"]["terminated"].value("exitCode", 0) != 7);

  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("crash");
        auto waiting = d.containerState("crash", "main", "waiting");
        return cs && cs->value("restartCount", 0) >= 2 && waiting &&
               waiting->value("reason", "") == "CrashLoopBackOff";
      },
      60s);
  auto crash = d.containerStatus("crash");
  CHECK((*crash)["lastState"]["terminated"].value("exitCode", 0) == 3);
  CHECK_THAT((*crash)["state"]["waiting"].value("message", ""),
             Catch::StartsWith("back-off ") &&
                 Catch::Contains("restarting failed container=main pod=crash-"));
}

}  // namespace nodeagent::e2e

namespace nodeagent::e2e {

TEST_CASE(
    "cri: a tcpSocket liveness probe at a port nobody listens on restarts its container, an "
    "httpGet readiness probe answered 404 keeps one unready, and removing the pod runs the preStop "
    "hook before the SIGTERM",
    "[e2e][cri]") {
  testing::skipUnlessCniCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  testing::TempDir out("nodeagent-e2e-cri-probes");
  ::chmod(out.path().c_str(), 0777);
  Daemon d;
  const auto mark = marker("cri-probes");
  const std::string image = "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n";
  d.writeManifest(
      "probed.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: probed\nspec:\n"
      "  terminationGracePeriodSeconds: 10\n"
      "  volumes: [{name: out, hostPath: {path: " +
          quoteYaml(out.path().string()) +
          ", type: Directory}}]\n"
          "  containers:\n  - name: server\n" +
          image +
          "    volumeMounts: [{name: out, mountPath: /out}]\n"
          "    readinessProbe:\n      httpGet: {path: /missing, port: 8080}\n"
          "      periodSeconds: 1\n"
          "    livenessProbe:\n      tcpSocket: {port: 8080}\n      periodSeconds: 1\n"
          "    lifecycle:\n      preStop:\n        exec: {command: [\"/bin/sh\", \"-c\", "
          "\"echo pre-stop >> /out/order\"]}\n"
          "    command: [\"/bin/sh\", \"-c\", \"mkdir -p /tmp/www && echo up > "
          "/tmp/www/index.html; "
          "trap 'echo term >> /out/order; exit 0' TERM; httpd -f -p 8080 -h /tmp/www & wait\", " +
          quoteYaml(mark) +
          "]\n"
          "  - name: deaf\n" +
          image +
          "    livenessProbe:\n      tcpSocket: {port: 9999}\n      periodSeconds: 1\n"
          "      failureThreshold: 1\n"
          "    command: [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n");
  d.start(containerd.agentFlags());
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("probed", "server"); }, 60s);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("probed", "deaf");
        return cs && cs->value("restartCount", 0) >= 1;
      },
      60s);
  CHECK_THAT(d.logTail(), Catch::Contains("Container deaf failed liveness probe, will be "
                                          "restarted"));
  // The server answers its liveness probe (no restart) but not its readiness probe's path.
  auto server = d.containerStatus("probed", "server");
  REQUIRE(server);
  CHECK(server->value("restartCount", -1) == 0);
  CHECK_FALSE(server->value("ready", true));
  const auto pod = d.pod("probed");
  REQUIRE(pod);
  bool pod_ready = true;
  for (const auto& c : (*pod)["status"]["conditions"]) {
    if (c.value("type", "") == "Ready") pod_ready = c.value("status", "") == "True";
  }
  CHECK_FALSE(pod_ready);

  d.removeManifest("probed.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return pidsWithArg(mark).empty(); }, 60s);
  // The hook ran in the container before its SIGTERM.
  CHECK(testing::readFile(out.path() / "order") == "pre-stop\nterm\n");
  REQUIRE_EVENTUALLY(
      d, [&] { return containerd.containerProcesses().empty(); }, 30s);
}

}  // namespace nodeagent::e2e
