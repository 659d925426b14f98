// `nodeagent pod-updates` end to end: the built binary on a manifest directory and an HTTP URL,
// its stdout read line by line with deadlines, SIGTERM for a clean exit.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/test_api_server.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"
#include "test/support/tls_cert.h"

extern char** environ;

using namespace nodeagent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string podYaml(const std::string& name, const std::string& image = "busybox:1.36") {
  return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
         "\nspec:\n  containers:\n  - name: main\n    image: " + image +
         "\n    command: [\"sleep\", \"3600\"]\n";
}

void renameIn(const fs::path& path, const std::string& content) {
  auto tmp = path.parent_path() / (path.filename().string() + ".tmp");
  testing::writeFile(tmp, content);
  fs::rename(tmp, path);
}

// The nodeagent binary as a child with its stdout and stderr on pipes.
class Agent {
 public:
  // `prefix` runs the binary through another program (e.g. unshare), which must exec it.
  explicit Agent(std::vector<std::string> args, std::vector<std::string> prefix = {}) {
    int out[2];
    int err[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    std::string bin = testing::binaryPath("nodeagent").string();
    std::vector<std::string> full = std::move(prefix);
    full.push_back(bin);
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawnp(&pid_, full[0].c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
    REQUIRE(rc == 0);
  }
  ~Agent() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
    ::close(out_);
    ::close(err_);
  }

  // The next stdout line, or nullopt after `deadline`.
  std::optional<std::string> nextLine(std::chrono::milliseconds deadline = 5s) {
    auto end = std::chrono::steady_clock::now() + deadline;
    while (true) {
      if (auto nl = out_buf_.find('\n'); nl != std::string::npos) {
        std::string line = out_buf_.substr(0, nl);
        out_buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd pfd{out_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(out_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      out_buf_.append(buf, static_cast<size_t>(n));
    }
  }

  // The next update line matching `pred`, skipping others.
  std::optional<nlohmann::json> nextUpdate(const std::function<bool(const nlohmann::json&)>& pred,
                                           std::chrono::milliseconds deadline = 5s) {
    auto end = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < end) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      auto line = nextLine(left);
      if (!line) return std::nullopt;
      auto j = nlohmann::json::parse(*line, nullptr, false);
      REQUIRE_FALSE(j.is_discarded());  // every stdout line is JSON
      seen_.push_back(j);
      lines_.push_back(*line);
      if (pred(j)) return j;
    }
    return std::nullopt;
  }

  // Waits for the exit and returns its code (-1: killed by a signal or still running).
  int waitExit(std::chrono::milliseconds deadline = 5s) {
    int status = 0;
    bool done =
        testing::eventually([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, deadline);
    if (!done) return -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return *exit_code_;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  std::string drainStderr() {
    std::string out;
    char buf[4096];
    pollfd pfd{err_, POLLIN, 0};
    while (::poll(&pfd, 1, 0) > 0) {
      ssize_t n = ::read(err_, buf, sizeof(buf));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  const std::vector<nlohmann::json>& seen() const { return seen_; }
  // The raw stdout lines nextUpdate read, in order.
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  std::string out_buf_;
  std::optional<int> exit_code_;
  std::vector<nlohmann::json> seen_;
  std::vector<std::string> lines_;
};

bool hasPod(const nlohmann::json& u, const std::string& op, const std::string& name) {
  if (u.value("op", "") != op) return false;
  for (const auto& p : u["pods"]) {
    if (p.value("name", "") == name) return true;
  }
  return false;
}

std::string uidIn(const nlohmann::json& u, const std::string& name) {
  for (const auto& p : u["pods"]) {
    if (p.value("name", "") == name) return p.value("uid", "");
  }
  return "";
}

}  // namespace

TEST_CASE(
    "pod-updates: manifests become ADD, a change REMOVE then ADD, a delete REMOVE, "
    "SIGTERM exits 0",
    "[e2e][config]") {
  testing::TempDir dir("e2e-podupdates");
  testing::writeFile(dir / "web.yaml", podYaml("web"));
  Agent agent({"pod-updates", "--pod-manifest-path=" + dir.path().string(),
               "--hostname-override=Node1", "--file-check-frequency", "1h"});
  auto add = agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "web-node1"); });
  REQUIRE(add);
  CHECK((*add)["source"] == "file");
  CHECK((*add)["pods"][0]["namespace"] == "default");
  auto uid = uidIn(*add, "web-node1");
  CHECK_FALSE(uid.empty());
  // The line exactly as documented, keys in that order.
  CHECK(agent.lines().back() ==
        R"({"op":"ADD","source":"file","pods":[{"namespace":"default","name":"web-node1","uid":")" +
            uid + R"("}]})");

  renameIn(dir / "web.yaml", podYaml("web", "busybox:2"));
  auto removed = agent.nextUpdate([](const auto& u) { return hasPod(u, "REMOVE", "web-node1"); });
  REQUIRE(removed);
  CHECK(uidIn(*removed, "web-node1") == uid);
  auto added = agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "web-node1"); });
  REQUIRE(added);
  CHECK(uidIn(*added, "web-node1") != uid);

  // Identical rewrites print nothing, in place or the way vim saves (rename the file away, write
  // a new one, delete the backup); the next real change is the next line.
  testing::writeFile(dir / "web.yaml", podYaml("web", "busybox:2"));
  fs::rename(dir / "web.yaml", dir / "web.yaml~");
  testing::writeFile(dir / "web.yaml", podYaml("web", "busybox:2"));
  fs::remove(dir / "web.yaml~");
  renameIn(dir / "db.yaml", podYaml("db"));
  auto next = agent.nextUpdate([](const auto&) { return true; });
  REQUIRE(next);
  CHECK(hasPod(*next, "ADD", "db-node1"));

  // Nothing else came in between (a vanished web.yaml would have been removed by now).
  fs::remove(dir / "db.yaml");
  auto gone = agent.nextUpdate([](const auto&) { return true; });
  REQUIRE(gone);
  CHECK(hasPod(*gone, "REMOVE", "db-node1"));
  CHECK((*gone)["pods"].size() == 1);

  agent.signal(SIGTERM);
  CHECK(agent.waitExit() == 0);
}

TEST_CASE("pod-updates: --full prints whole pods, SIGINT exits 0", "[e2e][config]") {
  testing::TempDir dir("e2e-podupdates-full");
  testing::writeFile(dir / "web.yaml", podYaml("web"));
  Agent agent({"pod-updates", "--pod-manifest-path", dir.path().string(),
               "--hostname-override=node1", "--full"});
  auto add = agent.nextUpdate(
      [](const auto& u) { return u.value("op", "") == "ADD" && !u["pods"].empty(); });
  REQUIRE(add);
  const auto& pod = (*add)["pods"][0];
  CHECK(pod["metadata"]["name"] == "web-node1");
  CHECK(pod["spec"]["containers"][0]["image"] == "busybox:1.36");
  CHECK(pod["spec"]["nodeName"] == "node1");
  agent.signal(SIGINT);
  CHECK(agent.waitExit() == 0);
}

TEST_CASE("pod-updates: a missing manifest path is an empty, ready source until it appears",
          "[e2e][config]") {
  testing::TempDir root("e2e-podupdates-missing");
  auto path = root / "manifests";
  Agent agent({"pod-updates", "--pod-manifest-path=" + path.string(), "--hostname-override=n1"});
  auto first = agent.nextUpdate([](const auto&) { return true; });
  REQUIRE(first);
  CHECK((*first)["op"] == "ADD");
  CHECK((*first)["pods"].empty());
  fs::create_directory(root / "staging");
  testing::writeFile(root / "staging" / "web.yaml", podYaml("web"));
  fs::rename(root / "staging", path);
  REQUIRE(agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "web-n1"); }, 5s));
  agent.signal(SIGTERM);
  CHECK(agent.waitExit() == 0);
}

TEST_CASE("pod-updates: pods from a manifest URL, with headers", "[e2e][config]") {
  httplib::Server server;
  std::string seen_header;
  std::mutex mu;
  server.Get("/pods", [&](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard lock(mu);
      seen_header = req.get_header_value("X-Token");
    }
    res.set_content(podYaml("remote"), "application/yaml");
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  testing::eventually([&] { return server.is_running(); });
  {
    Agent agent({"pod-updates", "--manifest-url=http://127.0.0.1:" + std::to_string(port) + "/pods",
                 "--manifest-url-header=X-Token:abc", "--hostname-override=node1",
                 "--http-check-frequency=1s"});
    auto add = agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "remote-node1"); });
    REQUIRE(add);
    CHECK((*add)["source"] == "http");
    {
      std::lock_guard lock(mu);
      CHECK(seen_header == "abc");
    }
    agent.signal(SIGTERM);
    CHECK(agent.waitExit() == 0);
  }
  server.stop();
  t.join();
}

TEST_CASE("pod-updates: without --hostname-override the node is the lower-cased host name",
          "[e2e][config]") {
  testing::TempDir dir("e2e-podupdates-host");
  testing::writeFile(dir / "web.yaml", podYaml("web"));
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof(host) - 1) == 0);
  std::string node = host;
  for (char& c : node) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  Agent agent({"pod-updates", "--pod-manifest-path=" + dir.path().string()});
  REQUIRE(agent.nextUpdate([&](const auto& u) { return hasPod(u, "ADD", "web-" + node); }));
  agent.signal(SIGTERM);
  CHECK(agent.waitExit() == 0);
}

TEST_CASE(
    "pod-updates: without --hostname-override a mixed-case host name (in a UTS namespace of its "
    "own) is lower-cased",
    "[e2e][config]") {
  if (::geteuid() != 0 || std::system("unshare --uts true >/dev/null 2>&1") != 0)
    testing::skipTest("cannot create a UTS namespace here (needs root and unshare --uts)");
  testing::TempDir dir("e2e-podupdates-host-uts");
  testing::writeFile(dir / "web.yaml", podYaml("web"));
  Agent agent({"pod-updates", "--pod-manifest-path=" + dir.path().string()},
              {"unshare", "--uts", "sh", "-c", "hostname Node-A1 && exec \"$0\" \"$@\""});
  auto add = agent.nextUpdate([](const auto& u) { return u.value("op", "") == "ADD"; });
  REQUIRE(add);
  CHECK(uidIn(*add, "web-node-a1") != "");
  agent.signal(SIGTERM);
  CHECK(agent.waitExit() == 0);
}

TEST_CASE("pod-updates: durations take Go's form", "[e2e][config]") {
  httplib::Server server;
  std::mutex mu;
  std::string image = "busybox:1";
  server.Get("/pods", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu);
    res.set_content(podYaml("remote", image), "application/yaml");
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  testing::eventually([&] { return server.is_running(); });
  testing::TempDir dir("e2e-podupdates-durations");
  {
    // 500ms between polls: a changed body shows within a few polls (20s, the default, would not).
    Agent agent({"pod-updates", "--manifest-url=http://127.0.0.1:" + std::to_string(port) + "/pods",
                 "--pod-manifest-path=" + dir.path().string(), "--hostname-override=node1",
                 "--http-check-frequency=500ms", "--file-check-frequency=1h30m"});
    auto add = agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "remote-node1"); });
    REQUIRE(add);
    auto uid = uidIn(*add, "remote-node1");
    {
      std::lock_guard lock(mu);
      image = "busybox:2";
    }
    auto again =
        agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "remote-node1"); }, 4s);
    REQUIRE(again);
    CHECK(uidIn(*again, "remote-node1") != uid);
    agent.signal(SIGTERM);
    CHECK(agent.waitExit() == 0);
  }
  server.stop();
  t.join();
}

TEST_CASE("pod-updates: bad flags exit 2 with a message naming the flag", "[e2e][config]") {
  struct Case {
    std::vector<std::string> args;
    std::string mentions;
  };
  auto c = GENERATE(values<Case>({
      {{"pod-updates", "--pod-manifest-path=/tmp", "--file-check-frequency=20"},
       "--file-check-frequency"},
      {{"pod-updates", "--pod-manifest-path=/tmp", "--http-check-frequency=-1s"},
       "--http-check-frequency"},
      {{"pod-updates", "--pod-manifest-path=/tmp", "--bogus"}, "--bogus"},
      {{"pod-updates", "--manifest-url=ftp://x/"}, "manifest URL"},
      {{"pod-updates", "--manifest-url=http://127.0.0.1/", "--manifest-url-header=novalue"},
       "--manifest-url-header"},
      {{"pod-updates"}, "--pod-manifest-path"},
      {{"pod-updates", "--pod-manifest-path"}, "--pod-manifest-path"},
  }));
  Agent agent(c.args);
  CHECK(agent.waitExit() == 2);
  CHECK_THAT(agent.drainStderr(), Catch::Contains(c.mentions));
  CHECK_FALSE(agent.nextLine(100ms).has_value());
}

TEST_CASE("pod-updates: --kubeconfig adds the api source: pods bound to the node, not others",
          "[e2e][config]") {
  // Over TLS too: the binary initialises OpenSSL only on first use (cmd/nodeagent/lazy_openssl).
  const bool tls = GENERATE(false, true);
  testing::TempDir dir("e2e-podupdates-api");
  testapiserver::ServerOptions options;
  if (tls) {
    testing::writeSelfSignedCert(dir.path());
    options.tls_cert_file = (dir / "cert.pem").string();
    options.tls_private_key_file = (dir / "key.pem").string();
  }
  auto server = testapiserver::TestApiServer::start(options);
  REQUIRE(server.ok());
  REQUIRE((*server)->writeKubeconfig(dir / "kubeconfig").ok());
  auto pod = [](const std::string& name, const std::string& node) {
    return nlohmann::json{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", "default"}}},
        {"spec", {{"nodeName", node}, {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  };
  REQUIRE((*server)->store().create("pods", "default", pod("mine", "node1")).ok());
  REQUIRE((*server)->store().create("pods", "default", pod("theirs", "node2")).ok());

  Agent agent({"pod-updates", "--kubeconfig=" + (dir / "kubeconfig").string(),
               "--hostname-override=node1", "--root-dir=" + (dir / "root").string()});
  auto add = agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "mine"); }, 10s);
  REQUIRE(add);
  CHECK((*add)["source"] == "api");
  REQUIRE((*server)->store().create("pods", "default", pod("later", "node1")).ok());
  REQUIRE(agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "later"); }, 10s));
  for (const auto& u : agent.seen()) CHECK_FALSE(hasPod(u, "ADD", "theirs"));

  agent.signal(SIGTERM);
  CHECK(agent.waitExit() == 0);
}

TEST_CASE(
    "pod-updates: --root-dir checkpoints come back as one RESTORE before the apiserver's "
    "pods, a corrupt one is reported and skipped",
    "[e2e][config]") {
  auto server = testapiserver::TestApiServer::start();
  REQUIRE(server.ok());
  testing::TempDir dir("e2e-podupdates-restore");
  REQUIRE((*server)->writeKubeconfig(dir / "kubeconfig").ok());
  REQUIRE((*server)
              ->store()
              .create("pods", "default",
                      nlohmann::json{{"apiVersion", "v1"},
                                     {"kind", "Pod"},
                                     {"metadata", {{"name", "mine"}, {"namespace", "default"}}},
                                     {"spec",
                                      {{"nodeName", "node1"},
                                       {"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}})
              .ok());
  auto checkpoints = dir / "root" / "pod-checkpoints";
  fs::create_directories(checkpoints);
  nlohmann::json etcd = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "etcd"},
        {"namespace", "kube-system"},
        {"uid", "etcd-uid"},
        {"annotations", {{"node.kubernetes.io/bootstrap-checkpoint", "true"}}}}},
      {"spec", {{"nodeName", "node1"}, {"containers", {{{"name", "etcd"}, {"image", "etcd"}}}}}}};
  testing::writeFile(checkpoints / "Pod_etcd-uid.json", etcd.dump());
  testing::writeFile(checkpoints / "Pod_broken-uid.json", "{\"metadata\": ");

  Agent agent({"pod-updates", "--kubeconfig=" + (dir / "kubeconfig").string(),
               "--hostname-override=node1", "--root-dir=" + (dir / "root").string()});
  auto first = agent.nextUpdate([](const auto&) { return true; }, 10s);
  REQUIRE(first);
  CHECK((*first)["op"] == "RESTORE");
  CHECK((*first)["source"] == "api");
  REQUIRE((*first)["pods"].size() == 1);
  CHECK((*first)["pods"][0]["uid"] == "etcd-uid");
  REQUIRE(agent.nextUpdate([](const auto& u) { return hasPod(u, "ADD", "mine"); }, 10s));
  int restores = 0;
  for (const auto& u : agent.seen()) restores += u.value("op", "") == "RESTORE" ? 1 : 0;
  CHECK(restores == 1);
  // The apiserver no longer has etcd: its checkpoint goes with its first list.
  CHECK(testing::eventually([&] { return !fs::exists(checkpoints / "Pod_etcd-uid.json"); }));
  agent.signal(SIGTERM);
  CHECK(agent.waitExit() == 0);
  CHECK_THAT(agent.drainStderr(), Catch::Contains("Pod_broken-uid.json"));
}
