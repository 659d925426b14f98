// `nodeagent validate` end to end: the built binary on the manifest catalog.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test/support/test_util.h"

extern char** environ;

namespace nodeagent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs the nodeagent binary with `args`, stdout and stderr captured in files (no pipes to drain).
RunResult runNodeagent(const std::vector<std::string>& args) {
  testing::TempDir dir("nodeagent-validate");
  std::string out_path = (dir / "stdout").string();
  std::string err_path = (dir / "stderr").string();
  std::string binary = testing::binaryPath("nodeagent").string();
  std::vector<char*> argv;
  argv.push_back(binary.data());
  std::vector<std::string> copies = args;
  for (auto& a : copies) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  RunResult result;
  REQUIRE(WIFEXITED(status));
  result.exit_code = WEXITSTATUS(status);
  result.out = testing::readFile(out_path);
  result.err = testing::readFile(err_path);
  return result;
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<fs::path> catalog(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(testing::testDataPath("manifests/" + dir))) {
    if (e.path().extension() != ".expected") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_CASE("validate prints each good manifest's defaulted pod as one JSON line", "[e2e][config]") {
  auto files = catalog("good");
  // The catalog is kubelet-valid; not every pod in it is runnable by the process runtime.
  std::vector<std::string> args = {"validate", "--hostname-override=node1", "--runtime=fake"};
  for (const auto& f : files) args.push_back(f.string());
  auto result = runNodeagent(args);
  CHECK(result.err.empty());
  CHECK(result.exit_code == 0);
  auto lines = splitLines(result.out);
  REQUIRE(lines.size() == files.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    CAPTURE(files[i].filename().string());
    json pod = json::parse(lines[i]);
    CHECK(pod["kind"] == "Pod");
    CHECK(pod["spec"]["nodeName"] == "node1");
    CHECK(pod["status"]["phase"] == "Pending");
    CHECK(pod["metadata"]["annotations"]["kubernetes.io/config.hash"] == pod["metadata"]["uid"]);
    CHECK(pod["spec"]["tolerations"].back() ==
          json{{"operator", "Exists"}, {"effect", "NoExecute"}});
    CHECK(lines[i].find('\n') == std::string::npos);
  }
}

TEST_CASE("validate reports every problem of every bad manifest and exits 1", "[e2e][config]") {
  auto files = catalog("bad");
  REQUIRE(files.size() >= 40);
  std::vector<std::string> args = {"validate", "--hostname-override", "node1"};
  std::string expected_err;
  for (const auto& f : files) {
    args.push_back(f.string());
    fs::path expected_file = f;
    expected_file.replace_extension(".expected");
    for (const auto& line : splitLines(testing::readFile(expected_file))) {
      expected_err += f.string() + ": " + line + "\n";
    }
  }
  auto result = runNodeagent(args);
  CHECK(result.exit_code == 1);
  CHECK(result.out.empty());
  CHECK(result.err == expected_err);
}

TEST_CASE("validate on good and bad files prints both and exits 1", "[e2e][config]") {
  auto good = testing::testDataPath("manifests/good/minimal.yaml").string();
  auto bad = testing::testDataPath("manifests/bad/missing-image.yaml").string();
  auto result = runNodeagent({"validate", "--hostname-override=node1", good, bad});
  CHECK(result.exit_code == 1);
  REQUIRE(splitLines(result.out).size() == 1);
  CHECK(json::parse(result.out)["metadata"]["name"] == "minimal-node1");
  CHECK(result.err == bad + ": spec.containers[0].image: Required value\n");
}

TEST_CASE("validate names an unreadable file and goes on", "[e2e][config]") {
  testing::TempDir dir;
  auto missing = (dir / "missing.yaml").string();
  auto good = testing::testDataPath("manifests/good/minimal.yaml").string();
  auto result =
      runNodeagent({"validate", "--hostname-override=node1", missing, good, dir.path().string()});
  CHECK(result.exit_code == 1);
  CHECK(splitLines(result.out).size() == 1);
  CHECK(result.err == missing + ": cannot open: No such file or directory\n" + dir.path().string() +
                          ": is a directory, not a manifest file\n");
}

TEST_CASE("validate usage errors exit 2", "[e2e][config]") {
  auto none = runNodeagent({"validate"});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("no manifest files given") != std::string::npos);
  CHECK(none.err.find("usage: nodeagent validate") != std::string::npos);

  auto unknown = runNodeagent({"validate", "--frobnicate", "x.yaml"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("unknown flag --frobnicate") != std::string::npos);

  auto no_value = runNodeagent({"validate", "--hostname-override"});
  CHECK(no_value.exit_code == 2);

  auto help = runNodeagent({"validate", "--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("usage: nodeagent validate") != std::string::npos);

  auto no_command = runNodeagent({"frobnicate"});
  CHECK(no_command.exit_code == 2);
}

TEST_CASE("validate lower-cases the node name, defaulting to the host name", "[e2e][config]") {
  auto file = testing::testDataPath("manifests/good/minimal.yaml").string();
  auto upper = runNodeagent({"validate", "--hostname-override=Node-A", file});
  REQUIRE(upper.exit_code == 0);
  CHECK(json::parse(upper.out)["metadata"]["name"] == "minimal-node-a");

  char host[HOST_NAME_MAX + 1] = {};
  REQUIRE(gethostname(host, sizeof(host) - 1) == 0);
  std::string node = host;
  std::transform(node.begin(), node.end(), node.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  auto defaulted = runNodeagent({"validate", file});
  REQUIRE(defaulted.exit_code == 0);
  CHECK(json::parse(defaulted.out)["spec"]["nodeName"] == node);
}

TEST_CASE("validate gives the same UID for the same file however it is named", "[e2e][config]") {
  auto file = fs::absolute(testing::testDataPath("manifests/good/web.yaml"));
  auto dotted = file.parent_path() / "." / ".." / "good" / file.filename();
  auto a = runNodeagent({"validate", "--hostname-override=node1", file.string()});
  auto b = runNodeagent({"validate", "--hostname-override=node1", dotted.string()});
  auto other_node = runNodeagent({"validate", "--hostname-override=node2", file.string()});
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  REQUIRE(other_node.exit_code == 0);
  auto uid = json::parse(a.out)["metadata"]["uid"];
  CHECK(json::parse(b.out)["metadata"]["uid"] == uid);
  CHECK(json::parse(other_node.out)["metadata"]["uid"] != uid);
}

TEST_CASE("validate reports what the process runtime will refuse to run, as the agent would",
          "[e2e][config]") {
  testing::TempDir dir("nodeagent-e2e-validate-runtime");
  const auto file = dir / "image-only.yaml";
  testing::writeFile(file,
                     "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n"
                     "  securityContext:\n    seccompProfile: {type: RuntimeDefault}\n"
                     "    sysctls: [{name: net.core.somaxconn, value: '1024'}]\n"
                     "  volumes:\n  - name: cfg\n    persistentVolumeClaim: {claimName: web}\n"
                     "  containers:\n  - name: web\n    image: nginx\n"
                     "    securityContext: {readOnlyRootFilesystem: true, seccompProfile: "
                     "{type: Localhost, localhostProfile: web.json}}\n"
                     "  - name: ok\n    image: x\n    command: [sleep, '1']\n");
  for (const std::vector<std::string>& runtime_flag :
       {std::vector<std::string>{}, {"--runtime=process"}, {"--runtime", "process"}}) {
    std::vector<std::string> args{"validate", "--hostname-override=node1"};
    args.insert(args.end(), runtime_flag.begin(), runtime_flag.end());
    args.push_back(file.string());
    auto r = runNodeagent(args);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    const std::string f = file.string() + ": ";
    CHECK(splitLines(r.err) ==
          std::vector<std::string>{
              f + "spec.containers[0].command: Required value: the process runtime runs the "
                  "command as a host process and does not pull or run images, so a container "
                  "needs a command (an image's entrypoint does not exist here)",
              f + "spec.containers[0].securityContext.readOnlyRootFilesystem: Forbidden: cannot "
                  "be honoured by the process runtime (a host process shares the node's root "
                  "filesystem)",
              f + "spec.containers[0].securityContext.seccompProfile.type: Forbidden: cannot be "
                  "honoured by the process runtime (it does not filter a host process's system "
                  "calls)",
              f + "spec.volumes[0]: Unsupported value: \"persistentVolumeClaim\": nodeagent "
                  "supports emptyDir, hostPath, configMap, secret, downwardAPI and projected "
                  "volumes",
              f + "spec.securityContext.seccompProfile.type: Forbidden: cannot be honoured by the "
                  "process runtime (it does not filter a host process's system calls)",
              f + "spec.securityContext.sysctls[0]: Forbidden: the process runtime runs every pod "
                  "in the node's namespaces, where \"net.core.somaxconn\" would be set for the "
                  "whole node"});
  }
  auto fake =
      runNodeagent({"validate", "--hostname-override=node1", "--runtime=fake", file.string()});
  CHECK(fake.exit_code == 0);
  CHECK(splitLines(fake.out).size() == 1);
  auto bad = runNodeagent({"validate", "--runtime=docker", file.string()});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--runtime: \"docker\" is not process or fake"));
}

TEST_CASE("the daemon's --help shows each flag's default, and kubelet's short forms -h and -v work",
          "[e2e][flags]") {
  auto help = runNodeagent({"--help"});
  REQUIRE(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("--file-check-frequency=VALUE") &&
                           Catch::Contains("manifest directory relist period (default 20s)") &&
                           Catch::Contains("(default \"/var/lib/nodeagent\")") &&
                           Catch::Contains("(default 10255)") && Catch::Contains("-v, --v=VALUE") &&
                           Catch::Contains("-h, --help"));
  CHECK(help.out.find("--allow-no-sources                  start even with no pod source") !=
        std::string::npos);  // a false bool shows no default, as pflag
  auto short_help = runNodeagent({"-h"});
  CHECK(short_help.exit_code == 0);
  CHECK(short_help.out == help.out);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"-v=2", "-h"}, {"-v", "2", "-h"}, {"-v2", "-h"}}) {
    INFO(args[0]);
    auto r = runNodeagent(args);
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
  }
  auto bad_level = runNodeagent({"-v=loud", "-h"});
  CHECK(bad_level.exit_code == 2);
  CHECK_THAT(bad_level.err, Catch::Contains("--v: \"loud\" is not an integer"));
  auto unknown = runNodeagent({"-q"});
  CHECK(unknown.exit_code == 2);
  CHECK_THAT(unknown.err, Catch::Contains("unknown shorthand flag 'q' in -q"));
}

}  // namespace
}  // namespace nodeagent
