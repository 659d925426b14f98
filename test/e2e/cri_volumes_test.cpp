// Volumes of an API pod on the CRI runtime, mounted into real containerd containers: a ConfigMap
// (read-only, an edit reaching the running container), a Secret (read-only, on a tmpfs) and an
// emptyDir shared by two containers of the pod.
#include <linux/magic.h>
#include <sys/statfs.h>

#include <string>

#include "test/e2e/apiserver_env.h"
#include "test/support/containerd.h"

namespace nodeagent::apiserver_e2e {

TEST_CASE(
    "cri: an API pod's ConfigMap and Secret are mounted read-only, an edit reaches the running "
    "container, and two containers share an emptyDir",
    "[e2e][apiserver][cri][volumes]") {
  testing::skipUnlessCniCanRun();
  Env env;
  env.shareMounts();  // before containerd starts: its mount namespace follows the test's mounts
  testing::TestContainerd containerd;
  containerd.importTestImages();
  REQUIRE(
      env.kubectl({"create", "configmap", "app", "-n", "default", "--from-literal=greeting=hello"})
          .exit_code == 0);
  REQUIRE(env.kubectl({"create", "secret", "generic", "creds", "-n", "default",
                       "--from-literal=password=s3cr3t"})
              .exit_code == 0);
  // The busybox image runs as root: API pods may only with --allow-root-api-pods.
  env.startAgent({"--runtime=cri", "--container-runtime-endpoint=" + containerd.endpoint(),
                  "--allow-root-api-pods", "--sync-frequency=1s",
                  "--config-map-and-secret-change-detection-strategy=Get"});
  const std::string image =
      "    image: nodeagent.test/busybox:1\n    imagePullPolicy: IfNotPresent\n";
  env.createFrom(
      "volumes.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: vols\n  namespace: default\nspec:\n"
      "  nodeName: " +
          std::string(kNode) +
          "\n  terminationGracePeriodSeconds: 1\n  volumes:\n"
          "  - name: cfg\n    configMap: {name: app}\n"
          "  - name: sec\n    secret: {secretName: creds}\n"
          "  - name: shared\n    emptyDir: {}\n"
          "  containers:\n  - name: writer\n" +
          image +
          "    volumeMounts:\n    - {name: shared, mountPath: /shared}\n"
          "    command: [\"/bin/sh\", \"-c\", \"echo from-writer > /shared/note; "
          "trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
          "  - name: reader\n" +
          image +
          "    volumeMounts:\n    - {name: cfg, mountPath: /etc/app}\n"
          "    - {name: sec, mountPath: /etc/secret}\n    - {name: shared, mountPath: /shared}\n"
          "    command: [\"/bin/sh\", \"-c\", \"echo secret=$(cat /etc/secret/password); "
          "touch /etc/app/x 2>/dev/null || echo cfg-read-only; "
          "while true; do echo greeting=$(cat /etc/app/greeting) shared=$(cat /shared/note); "
          "sleep 0.2; done\"]\n");
  std::optional<json> pod;
  const bool running = testing::eventually(
      [&] {
        pod = env.pod("vols");
        return pod && (*pod)["status"].value("phase", "") == "Running";
      },
      60s);
  INFO(env.diagnostics());
  REQUIRE(running);
  REQUIRE(testing::eventually(
      [&] {
        return env.containerLog("vols", "reader").find("greeting=hello shared=from-writer") !=
               std::string::npos;
      },
      30s));
  const std::string log = env.containerLog("vols", "reader");
  INFO(log.substr(0, 2000));
  CHECK(log.find("secret=s3cr3t") != std::string::npos);
  CHECK(log.find("cfg-read-only") != std::string::npos);

  // The secret the container reads lives in memory on the node.
  const fs::path secret = env.dir / "root" / "pods" / (*pod)["metadata"].value("uid", "") /
                          "volumes" / "kubernetes.io~secret" / "sec";
  struct statfs secret_fs {};
  REQUIRE(::statfs(secret.c_str(), &secret_fs) == 0);
  CHECK(secret_fs.f_type == TMPFS_MAGIC);

  auto patched = env.kubectl({"patch", "configmap", "app", "-n", "default", "--type=merge", "-p",
                              R"({"data":{"greeting":"bye"}})"});
  INFO(patched.err);
  REQUIRE(patched.exit_code == 0);
  CHECK(testing::eventually(
      [&] { return env.containerLog("vols", "reader").find("greeting=bye") != std::string::npos; },
      30s));

  // Deleting the pod stops its containers and unmounts the secret's tmpfs as the pod terminates
  // (the directory itself goes with the pod's directory once its exited containers are removed).
  auto deleted = env.kubectl({"delete", "pod", "vols", "-n", "default"}, 60s);
  INFO(deleted.err);
  CHECK(deleted.exit_code == 0);
  CHECK(testing::eventually(
      [&] {
        struct statfs fs_now {};
        return ::statfs(secret.c_str(), &fs_now) != 0 || fs_now.f_type != TMPFS_MAGIC;
      },
      30s));
  // Once the pod is gone from the apiserver, its exited containers and its sandbox are removed
  // from containerd, and then its directory from the node.
  const fs::path pod_dir = env.dir / "root" / "pods" / (*pod)["metadata"].value("uid", "");
  CHECK(testing::eventually([&] { return !fs::exists(pod_dir); }, 60s));
  CHECK(containerd.containerProcesses().empty());
}

}  // namespace nodeagent::apiserver_e2e
