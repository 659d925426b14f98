// The nodeagent binary joined to the in-process test apiserver (--kubeconfig, --runtime=process)
// for e2e tests, driven and observed with the real kubectl.
#pragma once

#include <signal.h>
#include <sys/mount.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/volume/tmpfs.h"
#include "cmd/test-apiserver/test_api_server.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/cgroup_root.h"
#include "test/support/containerd.h"
#include "test/support/test_util.h"

namespace nodeagent::apiserver_e2e {

using namespace std::chrono_literals;
using nlohmann::json;
namespace fs = std::filesystem;

inline constexpr char kNode[] = "node-e2e";

inline std::string staticPodYaml(const std::string& name, const std::string& command) {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\n  namespace: default\nspec:\n  containers:\n  - name: main\n    image: busybox\n"
         "    command: [\"sh\", \"-c\", \"" +
         command + "\"]\n";
}

inline void writeAtomically(const fs::path& path, const std::string& content) {
  auto tmp = path.parent_path() / ("." + path.filename().string() + ".new");
  testing::writeFile(tmp, content);
  fs::rename(tmp, path);
}

struct Env {
  testing::TempDir dir{"nodeagent-e2e-apiserver"};
  std::unique_ptr<testapiserver::TestApiServer> server;
  fs::path kubeconfig;
  fs::path manifests;
  std::unique_ptr<testing::ChildProcess> agent;
  std::string cgroup_root = testing::isolatedCgroupRoot();  // --cgroup-root
  bool shared_ = false;                                     // shareMounts()

  explicit Env(testapiserver::ServerOptions options = {}) {
    server = testapiserver::TestApiServer::start(std::move(options)).value();
    kubeconfig = dir / "kubeconfig";
    REQUIRE(server->writeKubeconfig(kubeconfig).ok());
    manifests = dir / "manifests";
    fs::create_directories(manifests);
  }
  ~Env() {
    if (agent) {
      agent->signal(SIGTERM);
      agent->wait(10s);
    }
    // The process runtime's containers outlive the agent by design: stop them here.
    killContainers();
    testing::removeCgroupTree(cgroup_root);
    // Memory-backed (secret, projected) volumes stay mounted after the agent: detached here so
    // that the temporary directory can go.
    std::error_code ec;
    for (const auto& pod : fs::directory_iterator(dir / "root" / "pods", ec)) {
      agent::unmountPodVolumes(pod.path());
    }
    if (shared_) testing::unmountSharedMount(dir.path());
    server->stop();
  }

  // Makes the test's directory a shared mount, as / is on a systemd host, so that what the agent
  // mounts in it (the tmpfs of secret volumes) reaches a containerd started afterwards in a mount
  // namespace of its own (test/support/containerd.h), as it reaches the node's containerd.
  void shareMounts() {
    shared_ = true;
    testing::makeSharedMount(dir.path());
  }

  void startAgent(const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> argv = {
        testing::binaryPath("nodeagent").string(),
        "--kubeconfig=" + kubeconfig.string(),
        "--hostname-override=" + std::string(kNode),
        "--node-ip=127.0.0.1",
        "--pod-manifest-path=" + manifests.string(),
        "--file-check-frequency=1s",
        "--root-dir=" + (dir / "root").string(),
        "--pod-log-dir=" + (dir / "logs").string(),
        "--runtime=process",
        "--read-only-port=0",
        "--port=0",
        "--healthz-port=0",
        "--node-labels=e2e=yes",
        "--node-status-update-frequency=1s",
        "--cgroup-root=" + cgroup_root,
        "--v=1",
    };
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    agent = std::make_unique<testing::ChildProcess>(argv, dir / "agent.out", dir / "agent.err");
    REQUIRE(agent->started());
  }

  // Starts the agent on the CRI runtime of the containerd at `endpoint` and waits for its Node.
  // The test images run as root: API pods may only with --allow-root-api-pods.
  void startCriAgent(const std::string& endpoint, const std::vector<std::string>& extra_args = {}) {
    std::vector<std::string> args = {"--runtime=cri", "--container-runtime-endpoint=" + endpoint,
                                     "--allow-root-api-pods"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    startAgent(args);
    REQUIRE(testing::eventually(
        [&] {
          return kubectlJson({"get", "node", kNode}).has_value();
        },
        30s));
  }

  void killContainers() {
    // Every process whose command line names our root dir (shims and containers) is ours.
    const std::string root = (dir / "root").string();
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
      std::string cmdline;
      try {
        cmdline = testing::readFile(e.path() / "cmdline");
      } catch (...) {
        continue;
      }
      if (cmdline.find(root) != std::string::npos ||
          cmdline.find((dir / "logs").string()) != std::string::npos) {
        ::kill(std::stoi(name), SIGKILL);
      }
    }
  }

  testing::RunResult kubectl(std::vector<std::string> args,
                             std::chrono::milliseconds deadline = 30s) {
    std::vector<std::string> argv = {"kubectl", "--kubeconfig=" + kubeconfig.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::runCommand(argv, dir, deadline);
  }

  std::optional<json> kubectlJson(std::vector<std::string> args) {
    args.push_back("-o");
    args.push_back("json");
    auto r = kubectl(args);
    if (r.exit_code != 0) return std::nullopt;
    try {
      return json::parse(r.out);
    } catch (...) {
      return std::nullopt;
    }
  }

  std::optional<json> pod(const std::string& name) {
    return kubectlJson({"get", "pod", name, "-n", "default"});
  }

  // The log of container `container` of pod `name` of namespace default (its first run), or "".
  std::string containerLog(const std::string& name, const std::string& container) {
    std::error_code ec;
    for (const auto& pod_dir : fs::directory_iterator(dir / "logs", ec)) {
      if (pod_dir.path().filename().string().rfind("default_" + name + "_", 0) != 0) continue;
      const auto log = pod_dir.path() / container / "0.log";
      return fs::exists(log, ec) ? testing::readFile(log) : std::string();
    }
    return "";
  }

  // Whether an event of `reason` with `message_part` in its message names pod `pod`.
  bool hasEvent(const std::string& pod, const std::string& reason,
                const std::string& message_part) {
    auto events = kubectlJson({"get", "events", "-n", "default"});
    if (!events) return false;
    for (const auto& e : (*events)["items"]) {
      if (e.value("reason", "") == reason && e["involvedObject"].value("name", "") == pod &&
          e.value("message", "").find(message_part) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

  // kubectl create -f of `yaml`, written to `file` in the test's directory.
  void createFrom(const std::string& file, const std::string& yaml) {
    testing::writeFile(dir / file, yaml);
    auto created = kubectl({"create", "-f", (dir / file).string()});
    INFO(created.err);
    REQUIRE(created.exit_code == 0);
  }

  std::string diagnostics() {
    const bool alive = agent->running();
    return std::string("agent ") +
           (alive ? "running" : "exited with " + std::to_string(agent->wait(0ms).value_or(-1))) +
           ", stderr:\n" + agent->err();
  }

  // Starts the agent with one static pod, web, and returns its mirror once it is Running and the
  // lease exists.
  json startWithRunningMirror() {
    writeAtomically(manifests / "web.yaml", staticPodYaml("web", "exec sleep 3600"));
    startAgent();
    std::optional<json> mirror;
    REQUIRE(testing::eventually(
        [&] {
          mirror = pod(std::string("web-") + kNode);
          return mirror && (*mirror)["status"].value("phase", "") == "Running" &&
                 server->store().get("leases", "kube-node-lease", kNode).ok();
        },
        30s));
    return *mirror;
  }
};

// The reason (and message) of the first waiting container of a pod's status, or "".
inline std::string waitingReason(const json& pod, std::string* message = nullptr) {
  for (const auto& cs : pod["status"].value("containerStatuses", json::array())) {
    if (cs.contains("state") && cs["state"].contains("waiting")) {
      if (message != nullptr) *message = cs["state"]["waiting"].value("message", "");
      return cs["state"]["waiting"].value("reason", "");
    }
  }
  return "";
}

inline std::string condition(const json& obj, const std::string& type) {
  for (const auto& c : obj["status"].value("conditions", json::array())) {
    if (c.value("type", "") == type) return c.value("status", "");
  }
  return "";
}

}  // namespace nodeagent::apiserver_e2e
