// CriClient's sandbox, container, exec and image calls against a containerd of the test's own
// (test/support/containerd.h): a host-network pod sandbox with a busybox container in it, from
// creation to removal, as kubelet's kuberuntime manager drives them.
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/runtime/cri/cri_client.h"
#include "test/support/containerd.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime::cri;
namespace fs = std::filesystem;

namespace {

constexpr auto kWait = std::chrono::seconds(20);

std::unique_ptr<CriClient> makeClient(const testing::TestContainerd& containerd) {
  auto client = CriClient::create({containerd.endpoint(), std::chrono::seconds(60)});
  REQUIRE(client.ok());
  return *std::move(client);
}

// kubelet's sandbox for a hostNetwork pod: the node's network, so no CNI is needed.
PodSandboxConfig hostNetworkSandbox(const fs::path& log_dir) {
  PodSandboxConfig config;
  config.metadata = {"web", "uid-1234", "default", 0};
  // kubelet sets no hostname for a host-network pod: it has the node's UTS namespace, and runc
  // refuses to set a hostname without a private one.
  config.log_directory = log_dir.string();
  config.labels = {{"io.kubernetes.pod.uid", "uid-1234"}, {"app", "web"}};
  config.annotations = {{"nodeagent.test/note", "sandbox"}};
  config.namespace_options.network = NamespaceMode::kNode;
  return config;
}

ContainerConfig busyboxContainer(const PodSandboxConfig& sandbox) {
  ContainerConfig config;
  config.metadata = {"main", 0};
  config.image = "nodeagent.test/busybox:1";
  config.command = {"sh", "-c"};
  config.args = {"echo hello; sleep 3600"};
  config.working_dir = "/";
  config.envs = {{"GREETING", "hello"}};
  config.labels = {{"io.kubernetes.container.name", "main"}};
  config.annotations = {{"io.kubernetes.container.restartCount", "0"}};
  config.log_path = "main/0.log";
  config.resources.cpu_shares = 256;
  config.resources.memory_limit_in_bytes = 64 * 1024 * 1024;
  config.security_context.namespace_options = sandbox.namespace_options;
  return config;
}

PodSandboxFilter sandboxesLabelled(const StringMap& labels) {
  PodSandboxFilter filter;
  filter.label_selector = labels;
  return filter;
}

PodSandboxFilter sandboxesIn(PodSandboxState state) {
  PodSandboxFilter filter;
  filter.state = state;
  return filter;
}

ContainerFilter containersIn(ContainerState state, const StringMap& labels = {}) {
  ContainerFilter filter;
  filter.state = state;
  filter.label_selector = labels;
  return filter;
}

ContainerFilter containersOf(const std::string& sandbox_id) {
  ContainerFilter filter;
  filter.pod_sandbox_id = sandbox_id;
  return filter;
}

std::vector<std::string> sandboxIds(CriClient& client, const PodSandboxFilter& filter = {}) {
  auto sandboxes = client.listPodSandbox(filter);
  REQUIRE(sandboxes.ok());
  std::vector<std::string> ids;
  for (const auto& sandbox : *sandboxes) ids.push_back(sandbox.id);
  return ids;
}

std::vector<std::string> containerIds(CriClient& client, const ContainerFilter& filter = {}) {
  auto containers = client.listContainers(filter);
  REQUIRE(containers.ok());
  std::vector<std::string> ids;
  for (const auto& container : *containers) ids.push_back(container.id);
  return ids;
}

ContainerState stateOf(CriClient& client, const std::string& id) {
  auto status = client.containerStatus(id);
  return status.ok() ? status->state : ContainerState::kUnknown;
}

// The pid of the container's `sleep 3600` (seen from the test: the host's pid), or 0.
pid_t sleepPid(const testing::TestContainerd& containerd) {
  for (const auto& [pid, cmd] : containerd.containerProcesses()) {
    if (cmd.starts_with("sleep 3600")) return pid;
  }
  return 0;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A sandbox, run, checked and left to the test (the harness removes what a failed test leaves).
std::string runSandbox(CriClient& client, const PodSandboxConfig& config) {
  auto sandbox_id = client.runPodSandbox(config);
  INFO(sandbox_id.status().message());
  REQUIRE(sandbox_id.ok());
  REQUIRE_FALSE(sandbox_id->empty());
  auto status = client.podSandboxStatus(*sandbox_id);
  REQUIRE(status.ok());
  CHECK(status->id == *sandbox_id);
  CHECK(status->state == PodSandboxState::kReady);
  CHECK(status->metadata == config.metadata);
  CHECK(status->created_at > 0);
  CHECK(status->namespaces.network == NamespaceMode::kNode);
  CHECK(status->labels.at("app") == "web");
  CHECK(status->annotations.at("nodeagent.test/note") == "sandbox");
  return *sandbox_id;
}

// Started: Running in containerd's eyes, and a process on the machine in the image's root.
void expectRunning(CriClient& client, const testing::TestContainerd& containerd,
                   const std::string& container_id, const fs::path& log_dir) {
  auto status = client.containerStatus(container_id);
  REQUIRE(status.ok());
  CHECK(status->state == ContainerState::kRunning);
  CHECK(status->metadata == ContainerMetadata{"main", 0});
  CHECK(status->started_at >= status->created_at);
  CHECK(status->image_ref.starts_with("sha256:"));
  CHECK(status->log_path == (log_dir / "main/0.log").string());
  CHECK(status->labels.at("io.kubernetes.container.name") == "main");
  CHECK(status->annotations.at("io.kubernetes.container.restartCount") == "0");
  CHECK(containerIds(client, containersIn(ContainerState::kRunning,
                                          {{"io.kubernetes.container.name", "main"}})) ==
        std::vector<std::string>{container_id});

  // The process is on the machine, in the image's root file system.
  pid_t pid = 0;
  REQUIRE(testing::eventually([&] { return (pid = sleepPid(containerd)) > 0; }, kWait));
  struct stat root_of_pid {};
  struct stat host_root {};
  REQUIRE(::stat(("/proc/" + std::to_string(pid) + "/root/").c_str(), &root_of_pid) == 0);
  REQUIRE(::stat("/", &host_root) == 0);
  CHECK((root_of_pid.st_dev != host_root.st_dev || root_of_pid.st_ino != host_root.st_ino));
  CHECK(fs::exists("/proc/" + std::to_string(pid) + "/root/bin/busybox"));
}

// Its output in the CRI log file; ExecSync's output and exit codes.
void expectLogAndExec(CriClient& client, const std::string& container_id,
                      const fs::path& log_file) {
  // containerd writes the CRI log format: "<RFC 3339 time> stdout F hello".
  REQUIRE(
      testing::eventually([&] { return contains(testing::readFile(log_file), "hello"); }, kWait));
  const std::string log = testing::readFile(log_file);
  INFO(log);
  CHECK(contains(log, " stdout F hello\n"));
  CHECK(log.substr(0, 4).find_first_not_of("0123456789") == std::string::npos);
  CHECK(client.reopenContainerLog(container_id).ok());

  auto hi = client.execSync(container_id, {"echo", "hi"}, std::chrono::seconds(10));
  REQUIRE(hi.ok());
  CHECK(hi->stdout_bytes == "hi\n");
  CHECK(hi->stderr_bytes.empty());
  CHECK(hi->exit_code == 0);
  auto three = client.execSync(container_id, {"sh", "-c", "echo oops >&2; exit 3"},
                               std::chrono::seconds(10));
  REQUIRE(three.ok());
  CHECK(three->exit_code == 3);
  CHECK(three->stderr_bytes == "oops\n");
}

// Stopped with a 1 s grace: killed, Exited with 137.
void expectStopped(CriClient& client, const std::string& container_id) {
  // PID 1 of its own PID namespace with no SIGTERM handler: the kernel drops the SIGTERM, and
  // after the 1 s grace containerd sends SIGKILL (128 + 9).
  auto pid1 = client.execSync(container_id, {"cat", "/proc/1/cmdline"}, std::chrono::seconds(10));
  REQUIRE(pid1.ok());
  // busybox sh runs its last command with exec: sleep itself is PID 1.
  const std::string sleep_cmdline = std::string("sleep") + '\0' + "3600" + '\0';
  CHECK(pid1->stdout_bytes == sleep_cmdline);
  const auto begin = std::chrono::steady_clock::now();
  REQUIRE(client.stopContainer(container_id, std::chrono::seconds(1)).ok());
  CHECK(std::chrono::steady_clock::now() - begin >= std::chrono::milliseconds(900));
  auto status = client.containerStatus(container_id);
  REQUIRE(status.ok());
  CHECK(status->state == ContainerState::kExited);
  CHECK(status->exit_code == 137);
  CHECK(status->reason == "Error");
  CHECK(status->finished_at >= status->started_at);
  CHECK(containerIds(client, containersIn(ContainerState::kExited)) ==
        std::vector<std::string>{container_id});
  CHECK(containerIds(client, containersIn(ContainerState::kRunning)).empty());
}

}  // namespace

TEST_CASE("cri client: a host-network sandbox runs a busybox container, logs, execs, stops",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  auto client = makeClient(containerd);

  const fs::path log_dir = containerd.dir() / "pods" / "default_web_uid-1234";
  fs::create_directories(log_dir / "main");
  const PodSandboxConfig sandbox = hostNetworkSandbox(log_dir);
  const std::string sandbox_id = runSandbox(*client, sandbox);
  CHECK(sandboxIds(*client) == std::vector<std::string>{sandbox_id});
  CHECK(sandboxIds(*client, sandboxesLabelled({{"app", "web"}})) ==
        std::vector<std::string>{sandbox_id});
  CHECK(sandboxIds(*client, sandboxesLabelled({{"app", "other"}})).empty());

  auto container_id = client->createContainer(sandbox_id, busyboxContainer(sandbox), sandbox);
  REQUIRE(container_id.ok());
  CHECK(stateOf(*client, *container_id) == ContainerState::kCreated);
  CHECK(containerIds(*client, containersOf(sandbox_id)) == std::vector<std::string>{*container_id});
  CHECK(containerIds(*client, containersIn(ContainerState::kRunning)).empty());

  REQUIRE(client->startContainer(*container_id).ok());
  expectRunning(*client, containerd, *container_id, log_dir);
  expectLogAndExec(*client, *container_id, log_dir / "main/0.log");
  expectStopped(*client, *container_id);

  REQUIRE(client->removeContainer(*container_id).ok());
  CHECK(containerIds(*client).empty());
  auto gone = client->containerStatus(*container_id);
  CHECK(gone.status().code() == base::StatusCode::kNotFound);

  REQUIRE(client->stopPodSandbox(sandbox_id).ok());
  auto stopped = client->podSandboxStatus(sandbox_id);
  REQUIRE(stopped.ok());
  CHECK(stopped->state == PodSandboxState::kNotReady);
  CHECK(sandboxIds(*client, sandboxesIn(PodSandboxState::kReady)).empty());
  CHECK(sandboxIds(*client, sandboxesIn(PodSandboxState::kNotReady)) ==
        std::vector<std::string>{sandbox_id});
  REQUIRE(client->removePodSandbox(sandbox_id).ok());
  CHECK(sandboxIds(*client).empty());
  CHECK(testing::eventually([&] { return containerd.containerProcesses().empty(); }, kWait));
}

TEST_CASE("cri client: an unknown container or sandbox id is NotFound, naming the method",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  auto client = makeClient(containerd);

  auto status = client->containerStatus("no-such-container");
  REQUIRE_FALSE(status.ok());
  INFO(status.status().message());
  CHECK(status.status().code() == base::StatusCode::kNotFound);
  CHECK(contains(status.status().message(), "CRI runtime at " + containerd.endpoint() +
                                                ": runtime.v1.RuntimeService/ContainerStatus: "));
  CHECK(client->startContainer("no-such-container").code() == base::StatusCode::kNotFound);
  CHECK(client->execSync("no-such-container", {"true"}, std::chrono::seconds(1)).status().code() ==
        base::StatusCode::kNotFound);
  CHECK(client->podSandboxStatus("no-such-sandbox").status().code() == base::StatusCode::kNotFound);
  CHECK(sandboxIds(*client).empty());
  CHECK(containerIds(*client).empty());
}

TEST_CASE("cri client: ListImages shows the imported images and a pull from nowhere fails",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  auto client = makeClient(containerd);

  auto images = client->listImages();
  REQUIRE(images.ok());
  std::vector<std::string> tags;
  for (const auto& image : *images)
    tags.insert(tags.end(), image.repo_tags.begin(), image.repo_tags.end());
  std::sort(tags.begin(), tags.end());
  CHECK(tags == std::vector<std::string>{"nodeagent.test/busybox-nonroot:1",
                                         "nodeagent.test/busybox:1", "nodeagent.test/pause:1"});
  for (const auto& image : *images) {
    CHECK(image.id.starts_with("sha256:"));
    CHECK(image.size > 0);
  }

  // A registry on the loopback that nobody serves: the pull fails at once, and says where.
  AuthConfig auth;
  auth.username = "user";
  auth.password = "secret";
  auto pulled = client->pullImage("127.0.0.1:1/nothing:1", auth);
  REQUIRE_FALSE(pulled.ok());
  INFO(pulled.status().message());
  CHECK(contains(pulled.status().message(), "runtime.v1.ImageService/PullImage: "));
  CHECK(contains(pulled.status().message(), "127.0.0.1:1"));
  CHECK_FALSE(contains(pulled.status().message(), "secret"));
}

TEST_CASE("cri client: a container's env, working dir, mounts, user and read-only root reach it",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  auto client = makeClient(containerd);

  const fs::path log_dir = containerd.dir() / "pods" / "default_web_uid-1234";
  fs::create_directories(log_dir / "main");
  const fs::path data = containerd.dir() / "data";
  fs::create_directories(data);
  testing::writeFile(data / "greeting", "from the host\n");
  const PodSandboxConfig sandbox = hostNetworkSandbox(log_dir);
  const std::string sandbox_id = runSandbox(*client, sandbox);

  ContainerConfig config = busyboxContainer(sandbox);
  config.args = {"sleep 3600"};
  config.working_dir = "/tmp";
  config.mounts = {{"/data", data.string(), true},
                   {"/tmp", (containerd.dir() / "scratch").string(), false}};
  fs::create_directories(containerd.dir() / "scratch");
  config.security_context.run_as_user = 1000;
  config.security_context.run_as_group = 2000;
  config.security_context.readonly_rootfs = true;
  config.security_context.drop_capabilities = {"ALL"};
  auto container_id = client->createContainer(sandbox_id, config, sandbox);
  INFO(container_id.status().message());
  REQUIRE(container_id.ok());
  REQUIRE(client->startContainer(*container_id).ok());

  auto run = [&](const std::string& script) {
    auto result = client->execSync(*container_id, {"sh", "-c", script}, std::chrono::seconds(10));
    REQUIRE(result.ok());
    return *result;
  };
  CHECK(run("echo $GREETING").stdout_bytes == "hello\n");
  CHECK(run("pwd").stdout_bytes == "/tmp\n");
  CHECK(run("id -u; id -g").stdout_bytes == "1000\n2000\n");
  CHECK(run("cat /data/greeting").stdout_bytes == "from the host\n");
  CHECK(run("echo x > /data/new").exit_code != 0);  // a read-only mount
  CHECK(run("echo x > /new").exit_code != 0);       // a read-only root
  CHECK(run("grep CapEff /proc/self/status").stdout_bytes == "CapEff:\t0000000000000000\n");
  auto status = client->containerStatus(*container_id);
  REQUIRE(status.ok());
  CHECK(std::find(status->mounts.begin(), status->mounts.end(),
                  Mount{"/data", data.string(), true}) != status->mounts.end());

  REQUIRE(client->stopPodSandbox(sandbox_id).ok());
  CHECK(stateOf(*client, *container_id) == ContainerState::kExited);
  REQUIRE(client->removePodSandbox(sandbox_id).ok());
  CHECK(containerIds(*client).empty());
}
