// ConfigMaps and Secrets from the test apiserver reaching API pods on the process runtime:
// configMap and secret volumes (updated in place), env from them, and the waiting reasons and
// events of missing ones, driven with the real kubectl.
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "test/e2e/apiserver_env.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace apiserver_e2e;

namespace {

// How many times the agent read `path` with a plain GET, and whether it watches `collection`
// for `name` (kubelet's Watch strategy: LIST and WATCH with fieldSelector metadata.name=<name>).
size_t getsOf(const Env& env, const std::string& path) {
  size_t n = 0;
  for (const auto& r : env.server->requests()) n += r.method == "GET" && r.path == path;
  return n;
}

bool watches(const Env& env, const std::string& collection, const std::string& name) {
  for (const auto& r : env.server->requests()) {
    if (r.method == "GET" && r.path == collection &&
        r.query.find("watch=true") != std::string::npos &&
        r.query.find("fieldSelector=metadata.name=" + name) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE(
    "an API pod reads a ConfigMap and a Secret through volumes and env, and a ConfigMap change "
    "reaches the mounted file through the agent's watch of it",
    "[e2e][apiserver][volumes]") {
  if (::geteuid() != 0) testing::skipTest("the test pod runs as root: needs root");
  Env env;
  REQUIRE(env.kubectl({"create", "configmap", "app", "-n", "default",
                       "--from-literal=greeting=hello", "--from-literal=mode=fast"})
              .exit_code == 0);
  REQUIRE(env.kubectl({"create", "secret", "generic", "creds", "-n", "default",
                       "--from-literal=password=s3cr3t"})
              .exit_code == 0);
  // The default change detection strategy, Watch.
  env.startAgent({"--allow-root-api-pods", "--sync-frequency=1s"});
  env.createFrom(
      "pod.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: reader\n  namespace: default\n"
      "spec:\n  nodeName: " +
          std::string(kNode) +
          "\n  volumes:\n  - name: cfg\n    configMap: {name: app}\n"
          "  - name: sec\n    secret: {secretName: creds, defaultMode: 0400}\n"
          "  containers:\n  - name: main\n    image: busybox\n"
          "    env:\n    - name: MODE\n      valueFrom:\n        configMapKeyRef: {name: app, "
          "key: mode}\n"
          "    envFrom:\n    - prefix: S_\n      secretRef: {name: creds}\n"
          "    command: [\"sh\", \"-c\", \"echo mode=$MODE pw=$S_password; "
          "echo secret=$(cat $NODEAGENT_VOLUME_SEC/password); "
          "while true; do echo greeting=$(cat $NODEAGENT_VOLUME_CFG/greeting); "
          "sleep 0.2; done\"]\n");
  std::optional<json> pod;
  bool running = testing::eventually(
      [&] {
        pod = env.pod("reader");
        return pod && (*pod)["status"].value("phase", "") == "Running";
      },
      30s);
  INFO(env.diagnostics());
  REQUIRE(running);
  REQUIRE(testing::eventually(
      [&] {
        return env.containerLog("reader", "main").find("greeting=hello") != std::string::npos;
      },
      20s));
  const std::string log = env.containerLog("reader", "main");
  CHECK(log.find("mode=fast pw=s3cr3t") != std::string::npos);
  CHECK(log.find("secret=s3cr3t") != std::string::npos);

  // The files as kubelet lays them out, the secret with its defaultMode.
  const fs::path volumes =
      env.dir / "root" / "pods" / (*pod)["metadata"].value("uid", "") / "volumes";
  const fs::path cfg = volumes / "kubernetes.io~configmap" / "cfg";
  CHECK(fs::is_symlink(cfg / "..data"));
  CHECK(fs::read_symlink(cfg / "greeting") == "..data/greeting");
  struct stat st {};
  REQUIRE(::stat((volumes / "kubernetes.io~secret" / "sec" / "password").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0400);
  // The secret is in memory (a tmpfs of its own), the ConfigMap on the disk, as kubelet has them.
  struct statfs secret_fs {};
  REQUIRE(::statfs((volumes / "kubernetes.io~secret" / "sec").c_str(), &secret_fs) == 0);
  CHECK(secret_fs.f_type == TMPFS_MAGIC);

  // Both objects are watched by name, and a sync (every second here) reads neither.
  CHECK(testing::eventually([&] {
    return watches(env, "/api/v1/namespaces/default/configmaps", "app") &&
           watches(env, "/api/v1/namespaces/default/secrets", "creds");
  }));

  // An edit reaches the running container's file without a restart.
  auto patched = env.kubectl({"patch", "configmap", "app", "-n", "default", "--type=merge", "-p",
                              R"({"data":{"greeting":"bye"}})"});
  INFO(patched.err);
  REQUIRE(patched.exit_code == 0);
  // (kubectl patch reads the object first.)
  const size_t config_map_gets = getsOf(env, "/api/v1/namespaces/default/configmaps/app");
  CHECK(testing::eventually(
      [&] { return env.containerLog("reader", "main").find("greeting=bye") != std::string::npos; },
      20s));
  pod = env.pod("reader");
  REQUIRE(pod);
  CHECK((*pod)["status"]["containerStatuses"][0].value("restartCount", -1) == 0);
  // The change came by the watch, not by a read of the object at a sync.
  CHECK(getsOf(env, "/api/v1/namespaces/default/configmaps/app") == config_map_gets);
}

TEST_CASE(
    "a missing ConfigMap keeps the pod ContainerCreating with FailedMount until it is created, "
    "a missing key is CreateContainerConfigError",
    "[e2e][apiserver][volumes]") {
  if (::geteuid() != 0) testing::skipTest("the test pods run as root: needs root");
  Env env;
  env.startAgent({"--allow-root-api-pods"});
  REQUIRE(env.kubectl({"create", "configmap", "present", "-n", "default", "--from-literal=a=b"})
              .exit_code == 0);
  env.createFrom(
      "late.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: late\n  namespace: default\n"
      "spec:\n  nodeName: " +
          std::string(kNode) +
          "\n  volumes:\n  - name: cfg\n    configMap: {name: later}\n"
          "  containers:\n  - name: main\n    image: busybox\n"
          "    command: [\"sh\", \"-c\", \"echo k=$(cat $NODEAGENT_VOLUME_CFG/k); sleep 3600\"]\n");
  env.createFrom("nokey.yaml",
                 "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nokey\n  namespace: default\n"
                 "spec:\n  nodeName: " +
                     std::string(kNode) +
                     "\n  containers:\n  - name: main\n    image: busybox\n"
                     "    env:\n    - name: X\n      valueFrom:\n        configMapKeyRef: {name: "
                     "present, key: missing}\n"
                     "    command: [\"sh\", \"-c\", \"sleep 3600\"]\n");

  CHECK(testing::eventually(
      [&] {
        return env.hasEvent("late", "FailedMount",
                            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"later\" not "
                            "found");
      },
      30s));
  auto late = env.pod("late");
  REQUIRE(late);
  CHECK((*late)["status"].value("phase", "") == "Pending");

  std::string message;
  CHECK(testing::eventually(
      [&] {
        auto pod = env.pod("nokey");
        return pod && waitingReason(*pod, &message) == "CreateContainerConfigError";
      },
      30s));
  CHECK(message == "couldn't find key missing in ConfigMap default/present");

  // Once the ConfigMap exists the pod starts (the failed sync is retried).
  REQUIRE(env.kubectl({"create", "configmap", "later", "-n", "default", "--from-literal=k=v"})
              .exit_code == 0);
  INFO(env.diagnostics());
  CHECK(testing::eventually(
      [&] {
        auto pod = env.pod("late");
        return pod && (*pod)["status"].value("phase", "") == "Running";
      },
      40s));
  CHECK(testing::eventually(
      [&] { return env.containerLog("late", "main").find("k=v") != std::string::npos; }, 10s));
}

TEST_CASE(
    "a projected volume as a cluster's kube-api-access gets a service account token bound to the "
    "pod, which the apiserver's TokenReview accepts",
    "[e2e][apiserver][volumes]") {
  if (::geteuid() != 0) testing::skipTest("the test pod runs as root: needs root");
  Env env;
  env.startAgent({"--allow-root-api-pods"});
  env.createFrom(
      "token.yaml",
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: token-reader\n  namespace: default\n"
      "spec:\n  nodeName: " +
          std::string(kNode) +
          "\n  volumes:\n  - name: kube-api-access\n    projected:\n      sources:\n"
          "      - serviceAccountToken: {path: token, expirationSeconds: 3607}\n"
          "      - downwardAPI:\n          items:\n          - path: namespace\n"
          "            fieldRef: {fieldPath: metadata.namespace}\n"
          "  containers:\n  - name: main\n    image: busybox\n"
          "    command: [\"sh\", \"-c\", \"echo ns=$(cat "
          "$NODEAGENT_VOLUME_KUBE_API_ACCESS/namespace); "
          "echo token=$(cat $NODEAGENT_VOLUME_KUBE_API_ACCESS/token); sleep 3600\"]\n");
  std::string token;
  const bool written = testing::eventually(
      [&] {
        const std::string log = env.containerLog("token-reader", "main");
        const auto at = log.find("token=");
        if (at == std::string::npos) return false;
        token = log.substr(at + 6, log.find('\n', at) - at - 6);
        return !token.empty();
      },
      30s);
  INFO(env.diagnostics());
  REQUIRE(written);
  CHECK(env.containerLog("token-reader", "main").find("ns=default") != std::string::npos);

  // The apiserver authenticates the token as the pod's service account, bound to the pod.
  testing::writeFile(
      env.dir / "review.yaml",
      "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: " + token + "\n");
  auto review = env.kubectl({"create", "-o", "json", "-f", (env.dir / "review.yaml").string()});
  INFO(review.err);
  REQUIRE(review.exit_code == 0);
  const auto status = json::parse(review.out)["status"];
  CHECK(status.value("authenticated", false));
  CHECK(status["user"].value("username", "") == "system:serviceaccount:default:default");
  const auto pod = env.pod("token-reader");
  REQUIRE(pod);
  CHECK(status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] ==
        json::array({(*pod)["metadata"].value("uid", "")}));
}
