// An operator's mistakes never cost running containers: a second agent on the same root dir, a
// typo in the configuration file, an agent with no pod source, a manifest that is garbage when
// the agent starts. Each case runs the built binary against real containers.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "test/e2e/daemon_fixture.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::e2e;
using namespace std::chrono_literals;

namespace {

// Runs `nodeagent args...` to its exit (killed after `deadline`).
testing::RunResult runAgent(const testing::TempDir& dir, std::vector<std::string> args,
                            std::chrono::milliseconds deadline = 15s) {
  args.insert(args.begin(), testing::binaryPath("nodeagent").string());
  return testing::runCommand(args, dir, deadline);
}

// A value of the agent's /metrics counter `name`, or -1.
double metric(const Daemon& d, const std::string& name) {
  auto text = d.get("/metrics");
  if (!text) return -1;
  std::smatch m;
  if (!std::regex_search(*text, m, std::regex("\n" + name + " ([0-9.e+]+)\n"))) return -1;
  return std::stod(m[1]);
}

}  // namespace

TEST_CASE(
    "a second agent on the same root dir exits at once naming the first one's pid, and "
    "the first one's containers keep running",
    "[e2e][safety]") {
  Daemon first;
  first.start();
  const auto m = marker("lock");
  first.writeManifest("web.yaml", shPod("web", m, "sleep 1000 & wait"));
  int pid = 0;
  REQUIRE_EVENTUALLY(
      first, [&] { return (pid = onePid(m)) != 0; }, 15s);

  testing::TempDir other("e2e-lock");
  std::filesystem::create_directories(other / "manifests");
  auto second = runAgent(
      other, {"--pod-manifest-path=" + (other / "manifests").string(),
              "--root-dir=" + first.root().string(), "--pod-log-dir=" + (other / "logs").string(),
              "--read-only-port=0", "--port=0", "--healthz-port=0"});
  INFO("second agent stderr:\n" << second.err);
  REQUIRE(second.exit_code.has_value());
  CHECK(*second.exit_code != 0);
  CHECK_THAT(second.err, Catch::Contains("nodeagent.lock"));
  CHECK_THAT(second.err, Catch::Contains("pid " + std::to_string(first.pid())));
  CHECK(alive(pid));
  CHECK(onePid(m) == pid);
  CHECK(first.running("web"));
}

TEST_CASE("the --lock-file is held too: two agents with their own root dirs but one lock file",
          "[e2e][safety]") {
  Daemon first;
  testing::TempDir other("e2e-lockfile");
  const auto lock = (other / "shared.lock").string();
  first.start({"--lock-file=" + lock});
  std::filesystem::create_directories(other / "manifests");
  auto second =
      runAgent(other, {"--pod-manifest-path=" + (other / "manifests").string(),
                       "--root-dir=" + (other / "root").string(), "--lock-file=" + lock,
                       "--runtime=fake", "--read-only-port=0", "--port=0", "--healthz-port=0"});
  INFO("second agent stderr:\n" << second.err);
  REQUIRE(second.exit_code.has_value());
  CHECK(*second.exit_code != 0);
  CHECK_THAT(second.err, Catch::Contains(lock));
  CHECK(first.get("/healthz").has_value());
}

TEST_CASE(
    "with --exit-on-lock-contention the new agent waits, the old one steps down, and the "
    "containers are handed over untouched",
    "[e2e][safety]") {
  Daemon old_agent;
  old_agent.start({"--exit-on-lock-contention"});
  const auto m = marker("handover");
  old_agent.writeManifest("web.yaml", shPod("web", m, "sleep 1000 & wait"));
  int pid = 0;
  REQUIRE_EVENTUALLY(
      old_agent, [&] { return (pid = onePid(m)) != 0; }, 15s);

  // The new agent uses the old one's directories; its start() waits until it serves.
  Daemon new_agent;
  new_agent.start({"--exit-on-lock-contention", "--root-dir=" + old_agent.root().string(),
                   "--pod-manifest-path=" + old_agent.manifests().string(),
                   "--pod-log-dir=" + old_agent.logs().string(),
                   "--cgroup-root=" + old_agent.cgroupRoot()});
  CHECK(old_agent.waitExit(15s) == 0);
  REQUIRE_EVENTUALLY(
      new_agent, [&] { return new_agent.running("web"); }, 15s);
  CHECK(onePid(m) == pid);
}

TEST_CASE("a typo in the --config file is an error naming the key and its line, and nothing starts",
          "[e2e][safety]") {
  testing::TempDir dir("e2e-config");
  auto run = [&](const std::string& text) {
    testing::writeFile(dir / "config.yaml", text);
    return runAgent(
        dir, {"--config=" + (dir / "config.yaml").string(), "--root-dir=" + (dir / "root").string(),
              "--runtime=fake", "--read-only-port=0", "--port=0", "--healthz-port=0"});
  };
  const std::string head =
      "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
  auto typo = run(head + "staticPodPth: /etc/nodeagent/manifests\n");
  REQUIRE(typo.exit_code.has_value());
  CHECK(*typo.exit_code == 2);
  CHECK_THAT(typo.err, Catch::Contains("config.yaml:3: staticPodPth: unknown field"));

  auto wrong_type = run(head + "staticPodPath: /tmp\nmaxPods: \"110\"\n");
  REQUIRE(wrong_type.exit_code.has_value());
  CHECK(*wrong_type.exit_code == 2);
  CHECK_THAT(wrong_type.err,
             Catch::Contains("config.yaml:4: maxPods: expected an integer, got a string"));

  auto bad_duration = run(head + "staticPodPath: /tmp\nsyncFrequency: 10 minutes\n");
  REQUIRE(bad_duration.exit_code.has_value());
  CHECK(*bad_duration.exit_code == 2);
  CHECK_THAT(bad_duration.err, Catch::Contains("config.yaml:4: syncFrequency"));

  auto duplicate = run(head + "staticPodPath: /tmp\nstaticPodPath: /etc\n");
  REQUIRE(duplicate.exit_code.has_value());
  CHECK(*duplicate.exit_code == 2);
  CHECK_THAT(duplicate.err, Catch::Contains("duplicate key \"staticPodPath\""));
  CHECK_THAT(duplicate.err, Catch::Contains("line 4"));

  auto nested_typo = run(head +
                         "staticPodPath: /tmp\nauthentication:\n  anonymus:\n    enabled: "
                         "true\n");
  REQUIRE(nested_typo.exit_code.has_value());
  CHECK(*nested_typo.exit_code == 2);
  CHECK_THAT(nested_typo.err,
             Catch::Contains("config.yaml:5: anonymus: unknown field authentication.anonymus"));

  auto other_kind = run("apiVersion: v1\nkind: Pod\n");
  REQUIRE(other_kind.exit_code.has_value());
  CHECK(*other_kind.exit_code == 2);
  CHECK_THAT(other_kind.err, Catch::Contains("kind: expected KubeletConfiguration"));
}

TEST_CASE(
    "a kubelet's configuration field nodeagent does not implement is a warning, not an "
    "error",
    "[e2e][safety]") {
  Daemon d;
  testing::writeFile(d.dir() / "config.yaml",
                     "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                     "imageGCHighThresholdPercent: 85\nregistryPullQPS: 5\n"
                     "clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\n");
  d.start({"--config=" + (d.dir() / "config.yaml").string()});
  CHECK_THAT(d.logTail(), Catch::Contains("key=registryPullQPS"));
  // Implemented since: taken, not warned about.
  CHECK_THAT(d.logTail(), !Catch::Contains("key=clusterDNS"));
  CHECK_THAT(d.logTail(), !Catch::Contains("key=imageGCHighThresholdPercent"));
}

TEST_CASE("an agent with no pod source refuses to start unless told to", "[e2e][safety]") {
  testing::TempDir dir("e2e-nosource");
  auto refused = runAgent(dir, {"--root-dir=" + (dir / "root").string(), "--runtime=fake",
                                "--read-only-port=0", "--port=0", "--healthz-port=0"});
  REQUIRE(refused.exit_code.has_value());
  CHECK(*refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Contains("no pod source"));
  CHECK_THAT(refused.err, Catch::Contains("--allow-no-sources"));
  // Nothing was touched: not even the root dir.
  CHECK_FALSE(std::filesystem::exists(dir / "root"));
}

TEST_CASE(
    "a manifest that is garbage when the agent starts does not get its running container "
    "killed as an orphan, and once fixed the container is adopted",
    "[e2e][safety]") {
  Daemon d;
  d.start();
  const auto m = marker("garbage");
  const auto manifest = shPod("web", m, "sleep 1000 & wait");
  d.writeManifest("web.yaml", manifest);
  int pid = 0;
  REQUIRE_EVENTUALLY(
      d, [&] { return (pid = onePid(m)) != 0; }, 15s);
  REQUIRE(d.stop(SIGTERM) == 0);

  d.writeManifest("web.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n");
  d.start();
  // Several housekeeping periods pass without cleanup, and the reason is visible.
  REQUIRE_EVENTUALLY(
      d, [&] { return metric(d, "nodeagent_housekeeping_waiting_for_sources_total") >= 3; }, 20s);
  CHECK(alive(pid));
  auto health = d.get("/healthz?verbose");
  REQUIRE(health.has_value());
  CHECK_THAT(*health, Catch::Contains("[-]source/file not seen"));
  CHECK_THAT(*health, Catch::Contains("web.yaml"));

  d.writeManifest("web.yaml", manifest);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 15s);
  CHECK(onePid(m) == pid);
  health = d.get("/healthz?verbose");
  REQUIRE(health.has_value());
  CHECK_THAT(*health, Catch::Contains("[+]source/file ok"));
}
