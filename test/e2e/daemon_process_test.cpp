// The nodeagent daemon end to end with the process runtime: the built binary on a manifest
// directory, real containers (sh, sleep) under nodeagent-shim, checked through /proc, the files
// the containers write and the read-only port. Containers deliberately outlive the agent, so each
// test kills the agent and then every container process group recorded under its root dir.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/runtime/apparmor.h"
#include "test/e2e/daemon_fixture.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::e2e;
using namespace std::chrono_literals;

TEST_CASE("daemon runs a new manifest's container and lists the pod Running", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("appear");
  d.writeManifest("web.yaml", shPod("web", m, "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(
      d, [&] { return onePid(m) != 0; }, 15s);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("web"); }, 15s);
  auto p = d.pod("web");
  REQUIRE(p);
  CHECK((*p)["metadata"]["namespace"] == "default");
  CHECK((*p)["spec"]["nodeName"] == kNode);
  CHECK((*p)["status"]["containerStatuses"][0]["restartCount"] == 0);
}

TEST_CASE("daemon raises its open-file limit and starts containers with the one it was given",
          "[e2e][daemon]") {
  rlimit own{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &own) == 0);
  if (own.rlim_max != RLIM_INFINITY && own.rlim_max <= 1024) {
    testing::skipTest("the hard open-file limit is too low to raise anything");
  }
  Daemon d;
  {
    // The agent inherits a soft limit of 512 (as from a unit's default); the test keeps its own.
    rlimit low = own;
    low.rlim_cur = 512;
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    d.spawn();
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &own) == 0);
  }
  REQUIRE_EVENTUALLY(
      d, [&] { return d.get("/healthz").has_value(); }, 15s);
  const auto m = marker("nofile");
  const fs::path out = d.dir() / "nofile.out";
  d.writeManifest("nofile.yaml", shPod("nofile", m,
                                       "ulimit -Sn > " + out.string() + ".tmp && mv " +
                                           out.string() + ".tmp " + out.string() + "; sleep 1000"));
  REQUIRE_EVENTUALLY(
      d, [&] { return fs::exists(out); }, 15s);
  CHECK(readOr(out) == "512\n");
  const std::string limits = readOr("/proc/" + std::to_string(d.pid()) + "/limits");
  const std::string hard =
      own.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(own.rlim_max);
  INFO(limits);
  CHECK(limits.find("Max open files            " + hard + " ") != std::string::npos);
  CHECK(readOr(d.dir() / "agent.log")
            .find("Raised the open-file limit (RLIMIT_NOFILE) to the hard limit from=512") !=
        std::string::npos);
}

TEST_CASE("daemon leaves a container alone on an identical rewrite and replaces it on an edit",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m1 = marker("edit-v1");
  const auto m2 = marker("edit-v2");
  const auto old_exited = d.work() / "old-exited";
  const auto order = d.work() / "order";
  // The old version takes a second to exit after TERM; the new one records whether the old one
  // had already exited when it started.
  const auto v1 = shPod("edit", m1,
                        "trap 'kill $! ; sleep 1; touch " + old_exited.string() +
                            "; exit 0' TERM; sleep 1000 & wait");
  const auto v2 =
      shPod("edit", m2,
            "if [ -e " + old_exited.string() + " ]; then echo after > " + order.string() +
                "; else echo before > " + order.string() + "; fi; sleep 1000 & wait");
  d.writeManifest("edit.yaml", v1);
  REQUIRE_EVENTUALLY(
      d, [&] { return onePid(m1) != 0 && d.running("edit"); }, 15s);
  const int pid1 = onePid(m1);
  const auto uid1 = (*d.pod("edit"))["metadata"]["uid"].get<std::string>();

  // Identical content rewritten (new inode, new mtime): nothing changes.
  d.writeManifest("edit.yaml", v1);
  // A second manifest written after the rewrite: once it runs, the rewrite has been processed.
  const auto probe = marker("edit-probe");
  d.writeManifest("probe.yaml", shPod("probe", probe, "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("probe"); }, 15s);
  CHECK(onePid(m1) == pid1);
  CHECK((*d.pod("edit"))["metadata"]["uid"] == uid1);
  CHECK((*d.containerStatus("edit"))["restartCount"] == 0);

  // Edit: the old container has exited before the new one starts.
  d.writeManifest("edit.yaml", v2);
  REQUIRE_EVENTUALLY(
      d, [&] { return onePid(m2) != 0; }, 20s);
  REQUIRE_EVENTUALLY(
      d, [&] { return !readOr(order).empty(); }, 10s);
  CHECK(readOr(order) == "after\n");
  CHECK(pidsWithArg(m1).empty());
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto p = d.pod("edit");
        return p && (*p)["metadata"]["uid"] != uid1 && d.running("edit");
      },
      15s);
}

TEST_CASE("daemon sends TERM on manifest removal and KILL after the grace period",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto polite = marker("term-polite");
  const auto stubborn = marker("term-stubborn");
  const auto got_term = d.work() / "got-term";
  d.writeManifest("polite.yaml", shPod("polite", polite,
                                       "trap 'echo term > " + got_term.string() +
                                           "; kill $! ; exit 0' TERM; sleep 1000 & wait"));
  d.writeManifest("stubborn.yaml",
                  shPod("stubborn", stubborn, "trap '' TERM; while true; do sleep 0.2; done",
                        "  terminationGracePeriodSeconds: 2\n"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("polite") && d.running("stubborn"); }, 15s);
  const int polite_pid = onePid(polite);
  const int stubborn_pid = onePid(stubborn);
  REQUIRE(polite_pid != 0);
  REQUIRE(stubborn_pid != 0);

  d.removeManifest("polite.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return !alive(polite_pid); }, 15s);
  CHECK(readOr(got_term) == "term\n");
  REQUIRE_EVENTUALLY(
      d, [&] { return !d.pod("polite"); }, 15s);

  const auto removed_at = std::chrono::steady_clock::now();
  d.removeManifest("stubborn.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return !alive(stubborn_pid); }, 15s);
  const auto took = std::chrono::steady_clock::now() - removed_at;
  // It ignored TERM, so only the KILL after the 2 s grace period ended it.
  CHECK(took >= 1800ms);
  CHECK(took < 10s);
}

TEST_CASE("daemon restarts a crashing container with growing delays and counts restarts",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("crash");
  const auto runs = d.work() / "runs";
  d.writeManifest("crash.yaml", shPod("crash", m, "date +%s.%N >> " + runs.string() + "; exit 3"));
  REQUIRE_EVENTUALLY(
      d, [&] { return lineCount(runs) >= 5; }, 40s);
  std::vector<double> times;
  {
    std::istringstream in(readOr(runs));
    double t;
    while (in >> t) times.push_back(t);
  }
  REQUIRE(times.size() >= 5);
  // kubelet's backoff with a 1 s base: restarts about 0, 1, 2, 4 s after each exit.
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  INFO("gaps: " << gaps[0] << " " << gaps[1] << " " << gaps[2] << " " << gaps[3]);
  CHECK(gaps[1] >= 0.8);
  CHECK(gaps[2] >= 1.7);
  CHECK(gaps[3] >= 3.5);
  CHECK(gaps[3] > gaps[1]);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto cs = d.containerStatus("crash");
        return cs && (*cs)["restartCount"].get<int>() >= 4 &&
               (*cs)["lastState"]["terminated"].value("exitCode", 0) == 3;
      },
      15s);
}

TEST_CASE("daemon follows restartPolicy Never and OnFailure", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto never_fail_runs = d.work() / "never-fail";
  const auto never_ok_runs = d.work() / "never-ok";
  const auto onfailure_runs = d.work() / "onfailure";
  const auto always_runs = d.work() / "always";
  d.writeManifest("never-fail.yaml",
                  shPod("never-fail", marker("never-fail"),
                        "echo run >> " + never_fail_runs.string() + "; exit 2", "", "Never"));
  d.writeManifest("never-ok.yaml",
                  shPod("never-ok", marker("never-ok"),
                        "echo run >> " + never_ok_runs.string() + "; exit 0", "", "Never"));
  // Fails twice, then succeeds. `$$(` is kubelet's escape for a literal `$(`.
  d.writeManifest("onfailure.yaml",
                  shPod("onfailure", marker("onfailure"),
                        "echo run >> " + onfailure_runs.string() + "; if [ $$(wc -l < " +
                            onfailure_runs.string() + ") -lt 3 ]; then exit 1; fi; exit 0",
                        "", "OnFailure"));
  // A clock for the negative checks: an Always pod that exits 0 keeps being restarted.
  d.writeManifest("always.yaml", shPod("always", marker("always"),
                                       "echo run >> " + always_runs.string() + "; exit 0"));

  REQUIRE_EVENTUALLY(
      d, [&] { return d.phase("never-fail") == "Failed"; }, 15s);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.phase("never-ok") == "Succeeded"; }, 15s);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.phase("onfailure") == "Succeeded"; }, 20s);
  CHECK((*d.containerStatus("never-fail"))["state"]["terminated"]["exitCode"] == 2);
  CHECK((*d.containerStatus("never-ok"))["state"]["terminated"]["reason"] == "Completed");
  CHECK((*d.containerStatus("onfailure"))["restartCount"] == 2);

  // Once the Always pod has been restarted three more times, the others would have been too.
  const size_t base = lineCount(always_runs);
  REQUIRE_EVENTUALLY(
      d, [&] { return lineCount(always_runs) >= base + 3; }, 30s);
  CHECK(lineCount(never_fail_runs) == 1);
  CHECK(lineCount(never_ok_runs) == 1);
  CHECK(lineCount(onfailure_runs) == 3);
  CHECK(d.phase("always") == "Running");
}

TEST_CASE("daemon runs init containers in order before the app container", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("init-main");
  const auto trace = d.work() / "trace";
  const std::string manifest =
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: init\nspec:\n"
      "  initContainers:\n"
      "  - name: first\n    image: debian:12\n    command: [\"/bin/sh\", \"-c\", \"sleep 0.3; echo "
      "first >> " +
      trace.string() +
      "\"]\n"
      "  - name: second\n    image: debian:12\n    command: [\"/bin/sh\", \"-c\", \"echo second "
      ">> " +
      trace.string() +
      "\"]\n"
      "  containers:\n"
      "  - name: main\n    image: debian:12\n    command: [\"/bin/sh\", \"-c\", \"echo main >> " +
      trace.string() + "; sleep 1000 & wait\", \"" + m + "\"]\n";
  d.writeManifest("init.yaml", manifest);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("init"); }, 20s);
  REQUIRE_EVENTUALLY(
      d, [&] { return readOr(trace) == "first\nsecond\nmain\n"; }, 5s);
  for (const char* name : {"first", "second"}) {
    auto cs = d.containerStatus("init", name, "initContainerStatuses");
    REQUIRE(cs);
    CHECK((*cs)["state"]["terminated"]["reason"] == "Completed");
    CHECK((*cs)["ready"] == true);
  }
}

TEST_CASE("daemon writes container output as CRI logs under the pod log dir", "[e2e][daemon]") {
  Daemon d;
  d.start();
  d.writeManifest("logger.yaml", shPod("logger", marker("logger"),
                                       "echo hello-out; echo hello-err >&2; sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("logger"); }, 15s);
  const auto uid = (*d.pod("logger"))["metadata"]["uid"].get<std::string>();
  const auto log = d.logs() / ("default_logger-node1_" + uid) / "main" / "0.log";
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto text = readOr(log);
        return text.find("hello-out") != std::string::npos &&
               text.find("hello-err") != std::string::npos;
      },
      10s);
  std::istringstream in(testing::readFile(log));
  std::string line;
  bool saw_out = false, saw_err = false;
  while (std::getline(in, line)) {
    // <RFC3339Nano timestamp> <stream> <F|P> <text>
    std::istringstream fields(line);
    std::string ts, stream, tag, text;
    fields >> ts >> stream >> tag;
    std::getline(fields, text);
    CHECK(ts.find('T') != std::string::npos);
    CHECK(tag == "F");
    if (stream == "stdout" && text == " hello-out") saw_out = true;
    if (stream == "stderr" && text == " hello-err") saw_err = true;
  }
  CHECK(saw_out);
  CHECK(saw_err);
}

TEST_CASE(
    "daemon killed with SIGKILL adopts its containers on restart and reports exits "
    "that happened meanwhile",
    "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto keep = marker("adopt-keep");
  const auto quit = marker("adopt-quit");
  const auto go = d.work() / "go";
  d.writeManifest("keep.yaml", shPod("keep", keep, "sleep 1000 & wait"));
  d.writeManifest(
      "quit.yaml",
      shPod("quit", quit, "while [ ! -e " + go.string() + " ]; do sleep 0.05; done; exit 7", "",
            "Never"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("keep") && d.running("quit"); }, 15s);
  const int keep_pid = onePid(keep);
  const int quit_pid = onePid(quit);
  REQUIRE(keep_pid != 0);
  REQUIRE(quit_pid != 0);
  // The container's shim was started by the agent's spawn helper, the agent's child.
  const auto parent = [](int pid) {
    auto st = runtime::readProcStat(pid);
    return st ? st->ppid : 0;
  };
  const int shim = parent(keep_pid);
  const int helper = parent(shim);
  REQUIRE(helper > 0);
  CHECK(parent(helper) == d.pid());
  CHECK_THAT(testing::readFile("/proc/" + std::to_string(helper) + "/cmdline"),
             Catch::EndsWith(std::string("nodeagent-shim\0spawner\0", 23)));
  // The container ignores neither of the C library's own real-time signals (32, 33), which
  // glibc's posix_spawn from the threaded agent leaves ignored in the helper.
  const std::string status = testing::readFile("/proc/" + std::to_string(keep_pid) + "/status");
  const auto ignored_at = status.find("SigIgn:\t");
  REQUIRE(ignored_at != std::string::npos);
  const uint64_t ignored = std::stoull(status.substr(ignored_at + 8, 16), nullptr, 16);
  CHECK((ignored & (uint64_t{3} << 31)) == 0);

  REQUIRE(d.stop(SIGKILL) == 128 + SIGKILL);
  // The helper saw the agent's end of its socket close and exited; the shims stay.
  CHECK(testing::eventually([&] {
    auto st = runtime::readProcStat(helper);
    return !st || st->state == 'Z';
  }));
  CHECK(alive(shim));
  testing::writeFile(go, "");
  REQUIRE_EVENTUALLY(
      d, [&] { return !alive(quit_pid); }, 10s);
  CHECK(alive(keep_pid));

  d.start();
  REQUIRE_EVENTUALLY(
      d, [&] { return d.phase("quit") == "Failed"; }, 15s);
  auto cs = d.containerStatus("quit");
  REQUIRE(cs);
  CHECK((*cs)["state"]["terminated"]["exitCode"] == 7);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("keep"); }, 15s);
  CHECK((*d.containerStatus("keep"))["restartCount"] == 0);
  CHECK(onePid(keep) == keep_pid);
  CHECK(pidsWithArg(quit).empty());
}

TEST_CASE("daemon keeps good pods running next to a bad manifest and reports the error",
          "[e2e][daemon]") {
  Daemon d;
  d.writeManifest("good1.yaml", shPod("good1", marker("good1"), "sleep 1000 & wait"));
  d.writeManifest("bad.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers: [\n");
  d.writeManifest("good2.yaml", shPod("good2", marker("good2"), "sleep 1000 & wait"));
  d.start();
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("good1") && d.running("good2"); }, 15s);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto body = d.get("/manifest-errors");
        return body && body->find("bad.yaml") != std::string::npos;
      },
      10s);
  auto errors = json::parse(*d.get("/manifest-errors"));
  REQUIRE(errors.is_array());
  REQUIRE(errors.size() == 1);
  CHECK(errors[0]["location"].get<std::string>().find("bad.yaml") != std::string::npos);
  CHECK_FALSE(errors[0]["message"].get<std::string>().empty());
  auto metrics = d.get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->find("nodeagent_manifest_errors{") != std::string::npos);
  CHECK(metrics->find("bad.yaml") != std::string::npos);
  CHECK_FALSE(d.pod("bad"));

  // A good manifest that goes bad keeps its last good version running.
  const int good1_pid = onePid(marker("good1"));
  REQUIRE(good1_pid != 0);
  d.writeManifest("good1.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [oops\n");
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto body = d.get("/manifest-errors");
        return body && body->find("good1.yaml") != std::string::npos;
      },
      10s);
  CHECK(alive(good1_pid));
  CHECK(d.running("good1"));

  // Fixing the bad file clears its error and starts its pod.
  d.writeManifest("bad.yaml", shPod("bad", marker("bad-fixed"), "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("bad"); }, 15s);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto body = d.get("/manifest-errors");
        return body && body->find("bad.yaml") == std::string::npos;
      },
      10s);
}

TEST_CASE("daemon exits 0 on SIGTERM and leaves its containers running", "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("survive");
  d.writeManifest("survive.yaml", shPod("survive", m, "sleep 1000 & wait"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("survive"); }, 15s);
  const int pid = onePid(m);
  REQUIRE(pid != 0);
  CHECK(d.stop(SIGTERM) == 0);
  CHECK(alive(pid));
  CHECK(onePid(m) == pid);
}

TEST_CASE("daemon starts a pod again when its manifest is deleted and written back",
          "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto m = marker("readd");
  const auto manifest = shPod("readd", m, "sleep 1000 & wait");
  d.writeManifest("readd.yaml", manifest);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("readd"); }, 15s);
  const int pid1 = onePid(m);
  REQUIRE(pid1 != 0);
  d.removeManifest("readd.yaml");
  REQUIRE_EVENTUALLY(
      d, [&] { return !alive(pid1); }, 15s);
  // Same content, same UID: the worker must not treat it as the pod it just killed.
  d.writeManifest("readd.yaml", manifest);
  REQUIRE_EVENTUALLY(
      d, [&] { return onePid(m) != 0 && d.running("readd"); }, 20s);
  CHECK(onePid(m) != pid1);
}

TEST_CASE("daemon escapes hostile manifest file names in /manifest-errors, /metrics and its log",
          "[e2e][daemon][security]") {
  Daemon d;
  // Invalid UTF-8, a newline that would forge a log line, a terminal escape.
  const std::string bad_utf8 = "bad\xff\xfe.yaml";
  const std::string newline = "nl\nE0101 00:00:00.000000 forged line.yaml";
  const std::string escape = "esc\x1b[2J.yaml";
  for (const auto& name : {bad_utf8, newline, escape}) d.writeManifest(name, "garbage: [\n");
  d.start();
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto body = d.get("/manifest-errors");
        return body && json::parse(*body).size() == 3;
      },
      15s);
  const std::string body = *d.get("/manifest-errors");
  auto errors = json::parse(body);  // valid UTF-8 JSON, or parse throws
  std::vector<std::string> locations;
  for (const auto& e : errors) locations.push_back(e["location"].get<std::string>());
  std::sort(locations.begin(), locations.end());
  CHECK(locations[0] == (d.manifests() / "bad\xef\xbf\xbd\xef\xbf\xbd.yaml").string());
  CHECK(locations[1] == (d.manifests() / escape).string());
  CHECK(locations[2] == (d.manifests() / newline).string());

  auto metrics = d.get("/metrics");
  REQUIRE(metrics);
  std::vector<std::string> lines;
  std::istringstream in(*metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("nodeagent_manifest_errors{")) lines.push_back(line);
  }
  REQUIRE(lines.size() == 3);  // the newline did not split a sample
  CHECK(metrics->find("location=\"" + d.manifests().string() +
                      "/nl\\nE0101 00:00:00.000000 forged line.yaml\"} 1") != std::string::npos);
  CHECK(metrics->find("bad\xef\xbf\xbd\xef\xbf\xbd.yaml\"} 1") != std::string::npos);

  // No log line starts with the forged text, and no raw escape or invalid byte reached the log.
  const std::string log = readOr(d.work().parent_path() / "agent.log");
  CHECK(log.find("\nE0101 00:00:00.000000 forged") == std::string::npos);
  CHECK(log.find("nl\\nE0101 00:00:00.000000 forged line.yaml") != std::string::npos);
  CHECK(log.find('\x1b') == std::string::npos);
  CHECK(log.find('\xff') == std::string::npos);
  CHECK(log.find("esc\\x1b[2J.yaml") != std::string::npos);
}

TEST_CASE("daemon refuses a manifest whose metadata.uid would leave its directories",
          "[e2e][daemon][security]") {
  Daemon d;
  d.writeManifest("escape.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: escape\n  uid: ../../escape-u\n"
                  "spec:\n  containers:\n  - name: main\n    image: debian:12\n"
                  "    command: [\"/bin/sh\", \"-c\", \"sleep 1000\"]\n");
  d.writeManifest("good.yaml", shPod("good", marker("uid-good"), "sleep 1000 & wait"));
  d.start();
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("good"); }, 15s);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto body = d.get("/manifest-errors");
        return body && body->find("metadata.uid") != std::string::npos;
      },
      10s);
  CHECK_FALSE(d.pod("escape"));
  // <root>/pods/../../escape-u would be the test's directory; nothing is created anywhere.
  CHECK_FALSE(fs::exists(d.work().parent_path() / "escape-u"));
  CHECK_FALSE(fs::exists(d.logs() / "escape-u"));
}

TEST_CASE(
    "daemon with processes refuses a pod's sysctls with SysctlForbidden and a seccomp profile "
    "with CreateContainerConfigError, and runs its other pods",
    "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto good = marker("sysctl-good");
  const auto bad_sysctl = marker("sysctl-bad");
  const auto bad_seccomp = marker("seccomp-bad");
  d.writeManifest("good.yaml", shPod("good", good, "sleep 1000 & wait"));
  d.writeManifest("sysctl.yaml",
                  shPod("sysctl", bad_sysctl, "sleep 1000 & wait",
                        "  securityContext:\n    sysctls:\n    - {name: kernel.shm_rmid_forced, "
                        "value: \"1\"}\n"));
  d.writeManifest("seccomp.yaml",
                  shPod("seccomp", bad_seccomp, "sleep 1000 & wait",
                        "  securityContext:\n    seccompProfile: {type: RuntimeDefault}\n"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("good"); }, 15s);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.phase("sysctl") == "Failed"; }, 15s);
  const auto rejected = (*d.pod("sysctl"))["status"];
  CHECK(rejected.value("reason", "") == "SysctlForbidden");
  CHECK(rejected.value("message", "") ==
        "Pod forbidden sysctl: \"kernel.shm_rmid_forced\" not allowed with host ipc enabled (the "
        "process runtime runs every pod in the node's namespaces)");
  auto waiting = [&] { return d.containerState("seccomp", "main", "waiting"); };
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto w = waiting();
        return w && w->value("reason", "") == "CreateContainerConfigError";
      },
      15s);
  CHECK_THAT(waiting()->value("message", ""),
             Catch::Contains("seccompProfile RuntimeDefault cannot be honoured by the process "
                             "runtime"));
  CHECK(onePid(good) != 0);
  CHECK(pidsWithArg(bad_sysctl).empty());
  CHECK(pidsWithArg(bad_seccomp).empty());
}

TEST_CASE(
    "daemon with processes refuses a pod that asks for an AppArmor profile with kubelet's "
    "AppArmor reason, and runs one that asks for unconfined",
    "[e2e][daemon]") {
  Daemon d;
  d.start();
  const auto confined = marker("apparmor-confined");
  const auto loose = marker("apparmor-loose");
  auto pod = [](const std::string& name, const std::string& mark, const std::string& profile) {
    return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name +
           "\n  annotations:\n    container.apparmor.security.beta.kubernetes.io/main: " + profile +
           "\nspec:\n  containers:\n  - name: main\n    image: debian:12\n"
           "    command: [\"/bin/sh\", \"-c\", \"sleep 1000 & wait\", " +
           quoteYaml(mark) + "]\n";
  };
  d.writeManifest("confined.yaml", pod("confined", confined, "runtime/default"));
  d.writeManifest("loose.yaml", pod("loose", loose, "unconfined"));
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("loose"); }, 15s);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.phase("confined") == "Failed"; }, 15s);
  const auto rejected = (*d.pod("confined"))["status"];
  CHECK(rejected.value("reason", "") == "AppArmor");
  // This machine's kernel decides which of kubelet's checks refuses it first.
  CHECK_THAT(rejected.value("message", ""),
             Catch::Contains(runtime::appArmorEnabled()
                                 ? "Cannot enforce AppArmor: the process runtime cannot confine "
                                   "containers"
                                 : "Cannot enforce AppArmor: AppArmor is not enabled on the host"));
  CHECK(pidsWithArg(confined).empty());
  CHECK(onePid(loose) != 0);
}
