// The nodeagent binary joined to the in-process test apiserver (--kubeconfig, --runtime=process),
// driven and observed with the real kubectl: node registration, the lease, mirror pods of static
// pods, API pods from create to graceful deletion, status reconciliation and apiserver outages.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/test_api_server.h"
#include "test/e2e/apiserver_env.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/cgroup_root.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

using namespace apiserver_e2e;

TEST_CASE("node registers Ready with capacity and labels, and its lease renews",
          "[e2e][apiserver][node]") {
  Env env;
  env.startAgent();
  std::optional<json> node;
  bool ready = testing::eventually(
      [&] {
        node = env.kubectlJson({"get", "node", kNode});
        return node && condition(*node, "Ready") == "True";
      },
      30s);
  INFO(env.diagnostics());
  REQUIRE(ready);
  CHECK((*node)["status"]["capacity"].value("pods", "") == "110");
  CHECK(!(*node)["status"]["capacity"].value("cpu", "").empty());
  CHECK(!(*node)["status"]["allocatable"].value("memory", "").empty());
  CHECK((*node)["metadata"]["labels"].value("e2e", "") == "yes");
  CHECK((*node)["metadata"]["labels"].value("kubernetes.io/hostname", "") == kNode);
  const json& info = (*node)["status"]["nodeInfo"];
  CHECK(info.value("kubeletVersion", "") == std::string("v1.18.0-nodeagent.") + NODEAGENT_VERSION);
  CHECK(info.value("containerRuntimeVersion", "") == std::string("process://") + NODEAGENT_VERSION);
  CHECK(info.value("operatingSystem", "") == "linux");
  for (const char* field : {"kernelVersion", "osImage", "architecture", "bootID"}) {
    INFO(field);
    CHECK_FALSE(info.value(field, "").empty());
  }
  if (fs::exists("/etc/machine-id")) CHECK_FALSE(info.value("machineID", "").empty());
  CHECK(condition(*node, "MemoryPressure") == "False");
  auto table = env.kubectl({"get", "nodes"});
  CHECK(table.out.find("Ready") != std::string::npos);
  CHECK(table.out.find("v1.18.0-nodeagent.") != std::string::npos);  // the VERSION column

  std::string first_renew;
  REQUIRE(testing::eventually(
      [&] {
        auto lease = env.kubectlJson({"get", "lease", kNode, "-n", "kube-node-lease"});
        if (!lease) return false;
        first_renew = (*lease)["spec"].value("renewTime", "");
        return !first_renew.empty();
      },
      20s));
  std::optional<json> lease;
  REQUIRE(testing::eventually(
      [&] {
        lease = env.kubectlJson({"get", "lease", kNode, "-n", "kube-node-lease"});
        return lease && (*lease)["spec"].value("renewTime", "") != first_renew;
      },
      25s));
  CHECK((*lease)["spec"].value("leaseDurationSeconds", 0) == 40);
  CHECK((*lease)["metadata"]["ownerReferences"][0].value("kind", "") == "Node");
  CHECK((*lease)["metadata"]["ownerReferences"][0].value("uid", "") ==
        (*node)["metadata"].value("uid", ""));
}

TEST_CASE("a static pod is mirrored, recreated after kubectl delete, replaced on edit and removed",
          "[e2e][apiserver][mirror]") {
  Env env;
  writeAtomically(env.manifests / "web.yaml", staticPodYaml("web", "exec sleep 3600"));
  // Two bad manifests: one that names its pod (an invalid container name), one that is not YAML.
  writeAtomically(env.manifests / "bad.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n"
                  "  - name: Bad_Name\n    image: busybox\n    command: [sleep, '1']\n");
  writeAtomically(env.manifests / "broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n");
  env.startAgent();
  const std::string mirror_name = std::string("web-") + kNode;
  std::optional<json> mirror;
  bool running = testing::eventually(
      [&] {
        mirror = env.pod(mirror_name);
        return mirror && (*mirror)["status"].value("phase", "") == "Running" &&
               condition(*mirror, "Ready") == "True";
      },
      30s);
  INFO(env.diagnostics());
  REQUIRE(running);
  CHECK((*mirror)["metadata"]["annotations"].value("kubernetes.io/config.mirror", "") ==
        (*mirror)["metadata"]["annotations"].value("kubernetes.io/config.hash", "x"));
  CHECK((*mirror)["metadata"]["ownerReferences"][0].value("kind", "") == "Node");
  auto table = env.kubectl({"get", "pods", "-A"});
  CHECK(table.out.find(mirror_name) != std::string::npos);
  CHECK(table.out.find("1/1") != std::string::npos);
  // The bad manifests are FailedValidation Warning events: on the pod the manifest names, else on
  // the Node (uid = node name, as kubelet refers to its node).
  auto failedValidation = [&env](const std::string& kind) -> std::optional<json> {
    auto events = env.kubectlJson({"get", "events", "-n", "default"});
    if (!events) return std::nullopt;
    for (const auto& e : (*events)["items"]) {
      if (e.value("reason", "") == "FailedValidation" &&
          e["involvedObject"].value("kind", "") == kind) {
        return e;
      }
    }
    return std::nullopt;
  };
  std::optional<json> pod_event, node_event;
  REQUIRE(testing::eventually(
      [&] {
        pod_event = failedValidation("Pod");
        node_event = failedValidation("Node");
        return pod_event && node_event;
      },
      20s));
  CHECK((*pod_event).value("type", "") == "Warning");
  CHECK((*pod_event)["involvedObject"].value("name", "") == std::string("bad-") + kNode);
  CHECK_THAT((*pod_event).value("message", ""),
             Catch::Contains((env.manifests / "bad.yaml").string()) &&
                 Catch::Contains("spec.containers[0].name"));
  CHECK((*node_event)["involvedObject"].value("name", "") == kNode);
  CHECK((*node_event)["involvedObject"].value("uid", "") == kNode);
  CHECK_THAT((*node_event).value("message", ""),
             Catch::Contains((env.manifests / "broken.yaml").string()));
  const std::string first_uid = (*mirror)["metadata"].value("uid", "");
  const std::string started_at =
      (*mirror)["status"]["containerStatuses"][0]["state"]["running"].value("startedAt", "");

  // kubectl delete of the mirror: the agent recreates it and the static pod keeps running.
  auto del = env.kubectl({"delete", "pod", mirror_name, "-n", "default", "--wait=false"});
  REQUIRE(del.exit_code == 0);
  REQUIRE(testing::eventually(
      [&] {
        mirror = env.pod(mirror_name);
        return mirror && (*mirror)["metadata"].value("uid", "") != first_uid &&
               (*mirror)["status"].value("phase", "") == "Running";
      },
      40s));
  CHECK((*mirror)["status"]["containerStatuses"][0]["state"]["running"].value("startedAt", "") ==
        started_at);
  CHECK((*mirror)["status"]["containerStatuses"][0].value("restartCount", -1) == 0);

  // Restarts are counted: a container that exits is restarted and the mirror shows it.
  writeAtomically(env.manifests / "web.yaml", staticPodYaml("web", "sleep 1; exit 3"));
  const std::string old_hash =
      (*mirror)["metadata"]["annotations"].value("kubernetes.io/config.mirror", "");
  const bool replaced = testing::eventually(
      [&] {
        mirror = env.pod(mirror_name);
        return mirror &&
               (*mirror)["metadata"]["annotations"].value("kubernetes.io/config.mirror",
                                                          old_hash) != old_hash &&
               !(*mirror)["status"].value("containerStatuses", json::array()).empty() &&
               (*mirror)["status"]["containerStatuses"][0].value("restartCount", 0) >= 1;
      },
      60s);
  INFO(env.diagnostics());
  REQUIRE(replaced);

  fs::remove(env.manifests / "web.yaml");
  REQUIRE(testing::eventually(
      [&] {
        auto r = env.kubectl({"get", "pod", mirror_name, "-n", "default"});
        return r.exit_code != 0 && r.err.find("NotFound") != std::string::npos;
      },
      40s));

  // Many 1 s relists later, the unchanged bad manifests were reported once each.
  pod_event = failedValidation("Pod");
  node_event = failedValidation("Node");
  REQUIRE(pod_event);
  REQUIRE(node_event);
  CHECK((*pod_event).value("count", 0) == 1);
  CHECK((*node_event).value("count", 0) == 1);
}

TEST_CASE("an API pod runs, its status is reconciled, and kubectl delete stops it and returns",
          "[e2e][apiserver][status]") {
  Env env;
  // The container writes into the test's directory, which only root may.
  env.startAgent({"--allow-root-api-pods"});
  REQUIRE(testing::eventually(
      [&] {
        return env.kubectlJson({"get", "node", kNode}).has_value();
      },
      30s));
  const fs::path marker = env.dir / "term-marker";
  const std::string yaml =
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: api-pod\n  namespace: default\nspec:\n"
      "  nodeName: " +
      std::string(kNode) +
      "\n  terminationGracePeriodSeconds: 30\n  containers:\n  - name: main\n    image: busybox\n"
      "    command: [\"sh\", \"-c\", \"trap 'echo term > " +
      marker.string() + "; exit 0' TERM; while true; do sleep 0.1; done\"]\n";
  testing::writeFile(env.dir / "api-pod.yaml", yaml);
  auto created = env.kubectl({"create", "-f", (env.dir / "api-pod.yaml").string()});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::optional<json> pod;
  bool running = testing::eventually(
      [&] {
        pod = env.pod("api-pod");
        return pod && (*pod)["status"].value("phase", "") == "Running" &&
               condition(*pod, "Ready") == "True";
      },
      30s);
  INFO(env.diagnostics());
  REQUIRE(running);
  CHECK((*pod)["status"].value("podIP", "") == "127.0.0.1");
  CHECK((*pod)["status"].value("hostIP", "") == "127.0.0.1");
  CHECK(testing::eventually(
      [&] {
        auto events = env.kubectlJson({"get", "events", "-n", "default"});
        if (!events) return false;
        for (const auto& e : (*events)["items"]) {
          if (e.value("reason", "") == "Started" &&
              e["involvedObject"].value("name", "") == "api-pod" &&
              e["source"].value("host", "") == kNode) {
            return true;
          }
        }
        return false;
      },
      20s));

  // Another client edits the status: the agent puts its own back.
  auto patched =
      env.kubectl({"patch", "pod", "api-pod", "-n", "default", "--subresource=status",
                   "--type=merge", "-p", R"({"status":{"message":"edited elsewhere"}})"});
  REQUIRE(patched.exit_code == 0);
  REQUIRE(testing::eventually(
      [&] {
        pod = env.pod("api-pod");
        return pod && !(*pod)["status"].contains("message");
      },
      30s));

  // Default-grace delete: SIGTERM reaches the process, the object goes once it exited, and
  // kubectl delete (which waits for that) returns.
  auto del = env.kubectl({"delete", "pod", "api-pod", "-n", "default"}, 60s);
  INFO(del.err);
  CHECK(del.exit_code == 0);
  CHECK(testing::readFile(marker).find("term") != std::string::npos);
  auto get = env.kubectl({"get", "pod", "api-pod", "-n", "default"});
  CHECK(get.exit_code != 0);
}

TEST_CASE(
    "an API pod that would run as root is refused unless --allow-root-api-pods, and a non-root "
    "one runs, with its fsGroup on its emptyDir",
    "[e2e][apiserver][security]") {
  if (::geteuid() != 0)
    testing::skipTest("needs root (an unprivileged agent runs no container as root)");
  Env env;
  // The non-root container must reach its pod directory under the agent's root dir.
  fs::permissions(env.dir.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  env.startAgent();
  REQUIRE(testing::eventually(
      [&] {
        return env.kubectlJson({"get", "node", kNode}).has_value();
      },
      30s));
  const std::string head = "apiVersion: v1\nkind: Pod\nmetadata:\n  namespace: default\n  name: ";
  const std::string node = "\nspec:\n  nodeName: " + std::string(kNode) + "\n";
  testing::writeFile(env.dir / "root-pod.yaml",
                     head + "root-pod" + node +
                         "  containers:\n  - name: main\n    image: busybox\n"
                         "    command: [\"sleep\", \"3600\"]\n");
  testing::writeFile(env.dir / "user-pod.yaml",
                     head + "user-pod" + node +
                         "  securityContext: {runAsUser: 65534, fsGroup: 4000}\n"
                         "  volumes: [{name: data, emptyDir: {}}]\n"
                         "  containers:\n  - name: main\n    image: busybox\n"
                         "    command: [\"sh\", \"-c\", \"id -u > $NODEAGENT_VOLUME_DATA/by-user "
                         "&& exec sleep 3600\"]\n");
  for (const char* name : {"root-pod.yaml", "user-pod.yaml"}) {
    auto created = env.kubectl({"create", "-f", (env.dir / name).string()});
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
  }
  auto waiting = [&](const std::string& name) -> std::optional<json> {
    auto pod = env.pod(name);
    if (!pod) return std::nullopt;
    for (const auto& cs : (*pod)["status"].value("containerStatuses", json::array())) {
      if (cs["state"].contains("waiting")) return cs["state"]["waiting"];
    }
    return std::nullopt;
  };
  auto running = [&](const std::string& name) {
    auto pod = env.pod(name);
    return pod && (*pod)["status"].value("phase", "") == "Running";
  };
  std::optional<json> w;
  const bool refused = testing::eventually(
      [&] {
        w = waiting("root-pod");
        return w && w->value("reason", "") == "CreateContainerConfigError";
      },
      30s);
  INFO(env.diagnostics());
  REQUIRE(refused);
  CHECK_THAT(w->value("message", ""),
             Catch::Contains("container \"main\" of pod default/root-pod would run as root") &&
                 Catch::Contains("--allow-root-api-pods"));

  REQUIRE(testing::eventually([&] { return running("user-pod"); }, 30s));
  auto user_pod = env.pod("user-pod");
  REQUIRE(user_pod);
  const fs::path data = env.dir / "root" / "pods" / (*user_pod)["metadata"].value("uid", "") /
                        "volumes" / "kubernetes.io~empty-dir" / "data";
  REQUIRE(testing::eventually([&] { return fs::exists(data / "by-user"); }, 10s));
  CHECK(testing::readFile(data / "by-user") == "65534\n");
  struct stat dir_st {};
  struct stat file_st {};
  REQUIRE(::stat(data.c_str(), &dir_st) == 0);
  REQUIRE(::stat((data / "by-user").c_str(), &file_st) == 0);
  CHECK(dir_st.st_gid == 4000);
  CHECK((dir_st.st_mode & 07777) == (S_ISGID | 0777));
  CHECK(file_st.st_uid == 65534);
  CHECK(file_st.st_gid == 4000);  // setgid: files made in it get the fsGroup

  // The operator allows root API pods (here in the --config file): the refused pod starts.
  env.agent->signal(SIGTERM);
  REQUIRE(env.agent->wait(10s).has_value());
  testing::writeFile(env.dir / "config.yaml",
                     "kind: KubeletConfiguration\nallowRootAPIPods: true\n");
  env.startAgent({"--config=" + (env.dir / "config.yaml").string()});
  CHECK(testing::eventually([&] { return running("root-pod"); }, 30s));
}

TEST_CASE("while the apiserver fails, static pods keep restarting, status and lease catch up",
          "[e2e][apiserver][outage]") {
  Env env;
  writeAtomically(env.manifests / "crash.yaml", staticPodYaml("crash", "sleep 1; exit 1"));
  env.startAgent();
  const std::string mirror_name = std::string("crash-") + kNode;
  REQUIRE(testing::eventually(
      [&] {
        auto m = env.pod(mirror_name);
        return m && !(*m)["status"].value("containerStatuses", json::array()).empty();
      },
      30s));
  // The lease comes once the Node is registered, which may be after the first status.
  REQUIRE(testing::eventually(
      [&] { return env.server->store().get("leases", "kube-node-lease", kNode).ok(); }, 30s));
  auto lease_before = env.server->store().get("leases", "kube-node-lease", kNode);
  REQUIRE(lease_before.ok());

  // Outage: every API request fails for a while.
  env.server->failNextRequests(503, 1'000'000, "/api");
  const auto restarts_in_log = [&] {
    const std::string log = env.agent->err();
    size_t n = 0;
    for (size_t pos = 0;
         (pos = log.find("Container started pod=default/crash", pos)) != std::string::npos; ++pos)
      ++n;
    return n;
  };
  const size_t before = restarts_in_log();
  INFO(env.diagnostics());
  REQUIRE(testing::eventually([&] { return restarts_in_log() >= before + 1; }, 40s));
  env.server->failNextRequests(503, 0, "/api");

  // Back: the mirror's status shows the restarts made during the outage and the lease renews.
  const int restarts_seen = static_cast<int>(restarts_in_log()) - 1;
  REQUIRE(testing::eventually(
      [&] {
        auto m = env.pod(mirror_name);
        return m && !(*m)["status"].value("containerStatuses", json::array()).empty() &&
               (*m)["status"]["containerStatuses"][0].value("restartCount", 0) >= restarts_seen;
      },
      40s));
  REQUIRE(testing::eventually(
      [&] {
        auto lease = env.server->store().get("leases", "kube-node-lease", kNode);
        return lease.ok() && (*lease)["spec"]["renewTime"] != (*lease_before)["spec"]["renewTime"];
      },
      30s));
}

TEST_CASE(
    "an apiserver that comes back with an empty store gets the Node, the lease, the mirror "
    "pod and its status again within seconds",
    "[e2e][apiserver][outage]") {
  Env env;
  const json first_mirror = env.startWithRunningMirror();
  const std::string mirror_name = std::string("web-") + kNode;
  const std::string started_at =
      first_mirror["status"]["containerStatuses"][0]["state"]["running"].value("startedAt", "");
  // The agent has watched its pods for a while: its resourceVersion is well past a new store's.
  for (int i = 0; i < 20; ++i) {
    env.kubectl({"annotate", "node", kNode, "--overwrite", "e2e/round=" + std::to_string(i)});
  }

  // As after an etcd restore: the same address, nothing in the store.
  const int port = env.server->port();
  env.server->stop();
  env.server.reset();
  testapiserver::ServerOptions options;
  options.port = port;
  std::unique_ptr<testapiserver::TestApiServer> fresh;
  REQUIRE(testing::eventually(
      [&] {
        auto started = testapiserver::TestApiServer::start(options);
        if (!started.ok()) return false;
        fresh = std::move(*started);
        return true;
      },
      10s));
  env.server = std::move(fresh);
  REQUIRE_FALSE(env.server->store().get("nodes", "", kNode).ok());

  std::optional<json> mirror;
  const bool back = testing::eventually(
      [&] {
        mirror = env.pod(mirror_name);
        return env.server->store().get("nodes", "", kNode).ok() &&
               env.server->store().get("leases", "kube-node-lease", kNode).ok() && mirror &&
               (*mirror)["status"].value("phase", "") == "Running" &&
               condition(*mirror, "Ready") == "True";
      },
      20s);
  INFO(env.diagnostics());
  REQUIRE(back);
  // The same container, not a restart.
  CHECK((*mirror)["status"]["containerStatuses"][0]["state"]["running"].value("startedAt", "") ==
        started_at);
  CHECK((*mirror)["status"]["containerStatuses"][0].value("restartCount", -1) == 0);
  CHECK_THAT(env.agent->err(), Catch::Contains("Apiserver lost its state"));
}

TEST_CASE("kubectl delete of a mirror pod returns and the mirror comes back with a new UID",
          "[e2e][apiserver][mirror]") {
  Env env;
  const std::string mirror_name = std::string("web-") + kNode;
  std::optional<json> mirror = env.startWithRunningMirror();
  INFO(env.diagnostics());
  // kubectl waits for the deletion (GET, then LIST+WATCH by name); the agent re-creates the
  // mirror at once. Several rounds, since a lost race hangs only some of them.
  for (int round = 0; round < 3; ++round) {
    const std::string old_uid = (*mirror)["metadata"].value("uid", "");
    const auto start = std::chrono::steady_clock::now();
    auto del = env.kubectl({"delete", "pod", mirror_name, "-n", "default"}, 30s);
    INFO("round " << round << " kubectl: " << del.out << del.err);
    REQUIRE(del.exit_code == 0);
    CHECK(std::chrono::steady_clock::now() - start < 20s);
    REQUIRE(testing::eventually(
        [&] {
          mirror = env.pod(mirror_name);
          return mirror && (*mirror)["metadata"].value("uid", "") != old_uid &&
                 !(*mirror)["metadata"].contains("deletionTimestamp") &&
                 (*mirror)["status"].value("phase", "") == "Running";
        },
        30s));
  }
}

TEST_CASE("kube-api-qps and kube-api-burst flags pace the agent's apiserver requests",
          "[e2e][apiclient]") {
  Env env;
  // Requests of the agent's main client (events have their own budget).
  auto agent_requests = [&] {
    size_t n = 0;
    for (const auto& r : env.server->requests()) {
      if (r.path.find("/events") == std::string::npos) ++n;
    }
    return n;
  };
  const auto t0 = std::chrono::steady_clock::now();
  env.startAgent({"--kube-api-qps=2", "--kube-api-burst=1"});
  // Registering, the lease, the pod LIST and WATCH and status updates every second need more
  // than 7 requests; at 2 per second after a burst of 1, the 7th cannot leave before 3 s.
  REQUIRE(testing::eventually([&] { return agent_requests() >= 7; }, 30s));
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  INFO(env.diagnostics());
  CHECK(elapsed >= 3s);
}

TEST_CASE("a kubeconfig with an exec user stops the agent and pod-updates with an error naming it",
          "[e2e][apiclient]") {
  testing::TempDir dir("nodeagent-e2e-kubeconfig");
  testing::writeFile(dir / "kubeconfig", R"(apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: k, user: eks}}]
clusters: [{name: k, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: eks, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}}]
)");
  const std::string kubeconfig = "--kubeconfig=" + (dir / "kubeconfig").string();
  auto daemon =
      testing::runCommand({testing::binaryPath("nodeagent").string(), kubeconfig,
                           "--hostname-override=n1", "--root-dir=" + (dir / "root").string(),
                           "--read-only-port=0", "--port=0", "--healthz-port=0", "--runtime=fake"},
                          dir, 20s);
  REQUIRE(daemon.exit_code.has_value());
  CHECK(*daemon.exit_code == 2);
  CHECK_THAT(daemon.err, Catch::Contains("users[eks].user.exec") &&
                             Catch::Contains("not supported") &&
                             Catch::Contains((dir / "kubeconfig").string()));
  auto updates =
      testing::runCommand({testing::binaryPath("nodeagent").string(), "pod-updates", kubeconfig,
                           "--hostname-override=n1", "--root-dir=" + (dir / "root2").string()},
                          dir, 20s);
  REQUIRE(updates.exit_code.has_value());
  CHECK(*updates.exit_code != 0);
  CHECK_THAT(updates.err, Catch::Contains("users[eks].user.exec"));
}

TEST_CASE("API pods whose names would escape the agent's directories are refused with an event",
          "[e2e][apiserver][security]") {
  // An apiserver that does not validate names (kube-apiserver would refuse these pods).
  testapiserver::ServerOptions options;
  options.store.validate_pods = false;
  Env env(options);
  env.startAgent({"--allow-root-api-pods"});  // the good pod runs as the spec says (root)
  REQUIRE(testing::eventually(
      [&] {
        return env.kubectlJson({"get", "node", kNode}).has_value();
      },
      30s));
  auto apiPod = [&](const std::string& name, const std::string& container) {
    return json{{"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"nodeName", kNode},
                  {"containers",
                   {{{"name", container},
                     {"image", "busybox"},
                     {"command", {"sh", "-c", "sleep 3600"}}}}}}}};
  };
  // <logs>/default_<pod>_<uid>/<container>/0.log and <root>/pods/<uid>/volumes/
  // kubernetes.io~empty-dir/<volume>: both names climb back to the test's directory.
  json container = apiPod("escape-container", "../../escape-c");
  json absolute = apiPod("escape-absolute", (env.dir / "escape-a").string());
  json volume = apiPod("escape-volume", "main");
  volume["spec"]["volumes"] = {{{"name", "../../../../../escape-v"}, {"emptyDir", json::object()}}};
  for (const auto& p : {container, absolute, volume, apiPod("good", "main")}) {
    REQUIRE(env.server->store().create("pods", "default", p).ok());
  }
  REQUIRE(testing::eventually(
      [&] {
        auto pod = env.pod("good");
        return pod && (*pod)["status"].value("phase", "") == "Running";
      },
      30s));
  // Each refused pod gets a FailedValidation event naming it and the field.
  std::map<std::string, std::string> events;
  bool all = testing::eventually(
      [&] {
        auto list = env.kubectlJson({"get", "events", "-n", "default"});
        if (!list) return false;
        for (const auto& e : (*list)["items"]) {
          if (e.value("reason", "") == "FailedValidation") {
            events[e["involvedObject"].value("name", "")] = e.value("message", "");
          }
        }
        return events.size() >= 3;
      },
      20s);
  INFO(env.diagnostics());
  REQUIRE(all);
  CHECK(events["escape-container"].find("spec.containers[0].name") != std::string::npos);
  CHECK(events["escape-absolute"].find("spec.containers[0].name") != std::string::npos);
  CHECK(events["escape-volume"].find("spec.volumes[0].name") != std::string::npos);
  // Nothing was created for them, in or out of the agent's directories.
  for (const char* escaped : {"escape-c", "escape-a", "escape-v"}) {
    INFO(escaped);
    CHECK_FALSE(fs::exists(env.dir / escaped));
  }
  for (const auto& e : fs::directory_iterator(env.dir / "logs")) {
    CHECK(e.path().filename().string().find("escape") == std::string::npos);
  }
  CHECK(env.pod("escape-container").value()["status"].value("phase", "") == "Pending");
  // The agent stays healthy and keeps serving the good pod.
  CHECK(env.agent->running());
}

TEST_CASE(
    "under memory pressure a BestEffort pod is evicted first, a Guaranteed pod is kept, the Node "
    "reports MemoryPressure and admission refuses a new BestEffort pod",
    "[e2e][apiserver][eviction]") {
  if (::geteuid() != 0) testing::skipTest("needs root for the kubepods cgroup");
  // The pods may use 200Mi (kubepods' limit: capacity - system-reserved), and eviction starts
  // when less than 100Mi of that is left (allocatableMemory.available, kubelet's signal with
  // --enforce-node-allocatable=pods): the pressure comes from the test's own pod, whatever the
  // rest of the machine does, and nothing near the node's memory is used.
  const std::string meminfo = testing::readFile("/proc/meminfo");
  const int64_t total_kib = std::stoll(meminfo.substr(meminfo.find("MemTotal:") + 9));
  const int64_t reserved = total_kib * 1024 - (int64_t{200} << 20);
  Env env;
  env.startAgent({"--allow-root-api-pods", "--system-reserved=memory=" + std::to_string(reserved),
                  "--eviction-hard=memory.available<100Mi",
                  "--eviction-pressure-transition-period=2m"});
  REQUIRE(testing::eventually(
      [&] {
        return env.kubectlJson({"get", "node", kNode}).has_value();
      },
      30s));
  auto create = [&](const std::string& name, const std::string& command,
                    const std::string& resources) {
    const std::string yaml =
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
        "\n  namespace: default\nspec:\n  nodeName: " + std::string(kNode) +
        "\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: debian\n"
        "    command: [\"sh\", \"-c\", " +
        json(command).dump() + "]\n" + resources;
    testing::writeFile(env.dir / (name + ".yaml"), yaml);
    auto created = env.kubectl({"create", "-f", (env.dir / (name + ".yaml")).string()});
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
  };
  auto phase = [&](const std::string& name) {
    auto p = env.pod(name);
    return p ? (*p)["status"].value("phase", "") : std::string();
  };
  create("guaranteed", "exec sleep 3600",
         "    resources:\n      requests: {cpu: 10m, memory: 32Mi}\n      limits: {cpu: 10m, "
         "memory: 32Mi}\n");
  REQUIRE(testing::eventually([&] { return phase("guaranteed") == "Running"; }, 30s));
  // perl-base is essential on Debian: 130 MB held in one (zero-filled) string, well below
  // kubepods' limit.
  create("hog", "exec perl -e 'vec($x, 130000000, 8) = 1; sleep 3600'", "");

  std::optional<json> hog;
  const bool evicted = testing::eventually(
      [&] {
        hog = env.pod("hog");
        return hog && (*hog)["status"].value("phase", "") == "Failed";
      },
      60s);
  if (!evicted) FAIL("not evicted: " << (hog ? hog->dump() : "") << "\n" << env.diagnostics());
  CHECK((*hog)["status"].value("reason", "") == "Evicted");
  CHECK_THAT((*hog)["status"].value("message", ""),
             Catch::Contains("The node was low on resource: memory"));
  CHECK(phase("guaranteed") == "Running");
  auto node = env.kubectlJson({"get", "node", kNode});
  REQUIRE(node.has_value());
  CHECK(condition(*node, "MemoryPressure") == "True");
  CHECK(testing::eventually(
      [&] {
        auto events = env.kubectlJson({"get", "events", "-n", "default"});
        if (!events) return false;
        for (const auto& e : (*events)["items"]) {
          if (e.value("reason", "") == "Evicted" &&
              e["involvedObject"].value("name", "") == "hog") {
            return true;
          }
        }
        return false;
      },
      20s));

  // The condition holds for the transition period: a new BestEffort pod is refused.
  create("late", "exec sleep 3600", "");
  std::optional<json> late;
  REQUIRE(testing::eventually(
      [&] {
        late = env.pod("late");
        return late && (*late)["status"].value("phase", "") == "Failed";
      },
      30s));
  CHECK((*late)["status"].value("reason", "") == "Evicted");
  CHECK_THAT((*late)["status"].value("message", ""), Catch::Contains("MemoryPressure"));
  CHECK(phase("guaranteed") == "Running");
}
