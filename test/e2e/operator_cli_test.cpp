// The operator commands against a real agent's root dir: `nodeagent ps` lists its containers
// with their PIDs, `nodeagent logs` prints a container's output by pod name, and
// `nodeagent stop-all` refuses while the agent runs and stops every container once it is gone.
#include "test/e2e/daemon_fixture.h"
#include "test/integration/apiserver_test_util.h"
#include "test/support/skip.h"

using namespace nodeagent;
using namespace nodeagent::e2e;
using namespace std::chrono_literals;

TEST_CASE("operator CLI: ps, logs and stop-all", "[e2e][daemon][cli]") {
  Daemon d;
  const auto m = marker("cli-web");
  d.writeManifest("web.yaml",
                  shPod("web", m, "echo first line; echo second line; sleep 1000 & wait",
                        "  terminationGracePeriodSeconds: 2\n"));
  d.start();
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 20s);
  const int pid = onePid(m);
  REQUIRE(pid != 0);
  testing::TempDir out("nodeagent-e2e-cli");
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), testing::binaryPath("nodeagent").string());
    args.push_back("--root-dir=" + d.root().string());
    return testing::runCommand(args, out, 60s);
  };

  auto ps = run({"ps"});
  INFO(ps.out << ps.err);
  REQUIRE(ps.exit_code == 0);
  CHECK_THAT(ps.out, Catch::Contains("CONTAINER ID") && Catch::Contains("web-node1") &&
                         Catch::Contains("running") && Catch::Contains(" " + std::to_string(pid)));

  std::string logs_out;
  REQUIRE(testing::eventually(
      [&]() -> bool {
        auto logs = run({"logs", "web-node1"});
        logs_out = logs.out;
        return logs.exit_code == 0 && logs_out == "first line\nsecond line\n";
      },
      10s));
  CHECK(run({"logs", "web-node1", "main", "-n", "default"}).out == logs_out);
  auto missing = run({"logs", "nope"});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Catch::Contains("no container of pod nope"));

  // While the agent holds the root dir, stop-all refuses and touches nothing.
  auto refused = run({"stop-all"});
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Catch::Contains("stop it first"));
  CHECK(alive(pid));

  // The agent stops (its containers keep running); stop-all ends them within their grace.
  REQUIRE(d.stop(SIGTERM) == 0);
  REQUIRE(alive(pid));
  auto stopped = run({"stop-all"});
  INFO(stopped.out << stopped.err);
  CHECK(stopped.exit_code == 0);
  CHECK_THAT(stopped.out, Catch::Contains("stopping default/web-node1 container main"));
  CHECK(testing::eventually([&] { return pidsWithArg(m).empty(); }, 10s));
  // The shim records the exit just after the container's processes are gone.
  std::string after;
  CHECK(testing::eventually(
      [&] {
        after = run({"ps", "-a"}).out;
        return after.find("web-node1") != std::string::npos &&
               after.find("exited(") != std::string::npos;
      },
      10s));
  INFO(after);
  CHECK(run({"ps"}).out.find("web-node1") == std::string::npos);
}

TEST_CASE("daemon: --logging-format=json writes one JSON object per line, text quotes values",
          "[e2e][daemon][logging]") {
  Daemon d;
  d.writeManifest("broken name.yaml", "kind: Pod\nmetadata: [\n");
  d.start({"--logging-format=json"});
  std::string log;
  REQUIRE(testing::eventually(
      [&]() -> bool {
        log = readOr(d.dir() / "agent.log");
        return log.find("Could not process manifest file") != std::string::npos;
      },
      10s));
  std::istringstream in(log);
  int lines = 0;
  bool saw_file = false;
  for (std::string line; std::getline(in, line); ++lines) {
    INFO(line);
    auto j = json::parse(line, nullptr, false);
    REQUIRE(j.is_object());
    CHECK(j.contains("ts"));
    CHECK(j.contains("level"));
    CHECK(j.contains("msg"));
    if (j.value("msg", "") == "Could not process manifest file, keeping its last good pod") {
      CHECK(j.value("file", "") == (d.manifests() / "broken name.yaml").string());
      saw_file = true;
    }
  }
  CHECK(lines > 3);
  CHECK(saw_file);

  testing::TempDir out("nodeagent-e2e-logfmt");
  auto bad = testing::runCommand(
      {testing::binaryPath("nodeagent").string(), "--logging-format=xml"}, out, 30s);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--logging-format: \"xml\" is not text or json"));
}

TEST_CASE("daemon: image garbage collection thresholds out of order are a usage error",
          "[e2e][flags]") {
  testing::TempDir out("nodeagent-e2e-imagegc");
  auto bad = testing::runCommand({testing::binaryPath("nodeagent").string(), "--allow-no-sources",
                                  "--image-gc-high-threshold=80", "--image-gc-low-threshold=85"},
                                 out, 30s);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--image-gc-low-threshold 85 must be less than "
                                      "--image-gc-high-threshold 80"));
}

TEST_CASE("daemon: an image max age not above the min age is a usage error naming both",
          "[e2e][flags]") {
  testing::TempDir out("nodeagent-e2e-imagemaxage");
  testing::writeFile(out.path() / "config.yaml",
                     "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                     "imageMinimumGCAge: 5m\nimageMaximumGCAge: 3m\n");
  auto bad = testing::runCommand({testing::binaryPath("nodeagent").string(), "--allow-no-sources",
                                  "--config=" + (out.path() / "config.yaml").string()},
                                 out, 30s);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--image-maximum-gc-age (imageMaximumGCAge) 3m0s must be "
                                      "greater than --minimum-image-ttl-duration "
                                      "(imageMinimumGCAge) 5m0s"));
}

TEST_CASE("daemon: a negative --eviction-max-pod-grace-period is a usage error naming the flag",
          "[e2e][flags]") {
  testing::TempDir out("nodeagent-e2e-evictgrace");
  auto bad = testing::runCommand({testing::binaryPath("nodeagent").string(), "--allow-no-sources",
                                  "--eviction-max-pod-grace-period=-1"},
                                 out, 30s);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--eviction-max-pod-grace-period must not be negative: -1"));
}

TEST_CASE(
    "daemon: an unsafe sysctl that is not namespaced is a usage error naming the flag, also from "
    "allowedUnsafeSysctls in --config, and --seccomp-default needs a container runtime",
    "[e2e][flags]") {
  testing::TempDir out("nodeagent-e2e-sysctlflag");
  const auto agent = testing::binaryPath("nodeagent").string();
  auto bad = testing::runCommand(
      {agent, "--allow-no-sources", "--allowed-unsafe-sysctls=kernel.msg*,vm.swappiness"}, out,
      30s);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--allowed-unsafe-sysctls: the sysctl \"vm.swappiness\" is "
                                      "not known to be namespaced"));
  testing::writeFile(out.path() / "config.yaml",
                     "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                     "allowedUnsafeSysctls: [\"net.core.somaxconn\", \"kernel.*\"]\n");
  auto from_file = testing::runCommand(
      {agent, "--allow-no-sources", "--config=" + (out.path() / "config.yaml").string()}, out, 30s);
  CHECK(from_file.exit_code == 2);
  CHECK_THAT(from_file.err, Catch::Contains("the sysctls \"kernel.*\" are not known to be "
                                            "namespaced"));
  auto seccomp = testing::runCommand({agent, "--allow-no-sources", "--seccomp-default"}, out, 30s);
  CHECK(seccomp.exit_code == 2);
  CHECK_THAT(seccomp.err, Catch::Contains("--seccomp-default needs --runtime=cri"));
}

TEST_CASE(
    "daemon: a bad --pod-cidr or podCIDR in --config and --cni-conf-dir without a container "
    "runtime are usage errors naming the flag",
    "[e2e][flags]") {
  testing::TempDir out("nodeagent-e2e-podcidr");
  const auto agent = testing::binaryPath("nodeagent").string();
  auto bad =
      testing::runCommand({agent, "--allow-no-sources", "--pod-cidr=10.244.1.7/24"}, out, 30s);
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--pod-cidr: \"10.244.1.7/24\" is not a CIDR: host bits "
                                      "are set"));
  testing::writeFile(out.path() / "config.yaml",
                     "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                     "podCIDR: 10.244.1.0/40\n");
  auto from_file = testing::runCommand(
      {agent, "--allow-no-sources", "--config=" + (out.path() / "config.yaml").string()}, out, 30s);
  CHECK(from_file.exit_code == 2);
  CHECK_THAT(from_file.err, Catch::Contains("--pod-cidr: \"10.244.1.0/40\" is not a CIDR"));
  auto process = testing::runCommand(
      {agent, "--allow-no-sources", "--cni-conf-dir=" + out.path().string()}, out, 30s);
  CHECK(process.exit_code == 2);
  CHECK_THAT(process.err, Catch::Contains("--cni-conf-dir needs --runtime=cri"));
  auto bridge = testing::runCommand(
      {agent, "--allow-no-sources", "--runtime=cri", "--cni-conf-dir=" + out.path().string(),
       "--cni-bridge=a-very-long-bridge-name"},
      out, 30s);
  CHECK(bridge.exit_code == 2);
  CHECK_THAT(bridge.err,
             Catch::Contains("--cni-bridge: \"a-very-long-bridge-name\" is not an interface name"));
}

TEST_CASE("stop-all ends what a container left in its cgroup even when its shim is gone",
          "[e2e][daemon][cli][cgroups]") {
  if (::geteuid() != 0) testing::skipTest("needs root for container cgroups");
  Daemon d;
  const auto m = marker("cli-setsid");
  const auto child = marker("cli-setsid-child");
  d.writeManifest("web.yaml",
                  shPod("web", m, "(setsid sh -c 'sleep 1000' " + child + " &); sleep 1000",
                        "  terminationGracePeriodSeconds: 2\n"));
  d.start();
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web") && onePid(child) != 0; }, 20s);
  REQUIRE(d.stop(SIGTERM) == 0);
  // The shim dies: nothing would kill the session it does not know about.
  for (const auto& entry : fs::directory_iterator(d.root() / "containers")) {
    std::string text, error;
    runtime::ShimState st;
    if (runtime::readWholeFile((entry.path() / "state").string(), text, error) &&
        runtime::decodeShimState(text, st, error) && st.shim_pid > 0 &&
        runtime::processAlive(st.shim_pid, st.shim_start_ticks)) {
      ::kill(st.shim_pid, SIGKILL);
    }
  }
  testing::TempDir out("nodeagent-e2e-cli");
  auto stopped = testing::runCommand(
      {testing::binaryPath("nodeagent").string(), "stop-all", "--root-dir=" + d.root().string()},
      out, 60s);
  INFO(stopped.out << stopped.err);
  CHECK(stopped.exit_code == 0);
  CHECK(testing::eventually([&] { return pidsWithArg(m).empty() && pidsWithArg(child).empty(); },
                            10s));
}
