// What deploy/ ships: the systemd unit passes `systemd-analyze verify` with no warning, and
// install.sh installs (into a scratch root) only the agent and the shim unless asked, the README
// the unit documents, and uninstalls them again keeping configuration and state.
#include <unistd.h>

#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "test/integration/apiserver_test_util.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
namespace fs = std::filesystem;

namespace {

// <source>/test/data/manifests, three levels down.
fs::path sourceRoot() {
  return fs::absolute(testing::testDataPath("manifests")).parent_path().parent_path().parent_path();
}

bool onPath(const std::string& program) {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"}) {
    if (::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("deploy: the systemd unit verifies without warnings", "[e2e][deploy]") {
  if (!onPath("systemd-analyze"))
    testing::skipTest("systemd-analyze is not installed (Debian package systemd)");
  testing::TempDir dir("nodeagent-e2e-unit");
  // The unit as installed, its binary path pointed at the built agent (verify checks it exists).
  std::string unit = testing::readFile(sourceRoot() / "deploy" / "nodeagent.service");
  const std::string installed = "/usr/local/bin/nodeagent";
  REQUIRE(unit.find(installed) != std::string::npos);
  unit.replace(unit.find(installed), installed.size(), testing::binaryPath("nodeagent").string());
  testing::writeFile(dir / "nodeagent.service", unit);
  auto r = testing::runCommand({"systemd-analyze", "verify", (dir / "nodeagent.service").string()},
                               dir, std::chrono::seconds(60));
  INFO(r.err);
  REQUIRE(r.exit_code);
  CHECK(*r.exit_code == 0);
  CHECK(r.err.find("nodeagent.service") == std::string::npos);  // no line about our unit
  for (const char* setting :
       {"Delegate=yes", "TasksMax=infinity", "OOMScoreAdjust=-999",
        "EnvironmentFile=-/etc/default/nodeagent", "KillMode=process", "Type=notify"}) {
    CHECK_THAT(unit, Catch::Contains(setting));
  }
}

TEST_CASE(
    "deploy: install.sh installs the agent, the shim and the README, test-apiserver only "
    "when asked, and --uninstall keeps configuration and state",
    "[e2e][deploy]") {
  testing::TempDir dir("nodeagent-e2e-install");
  const fs::path root = dir / "root";
  const std::string script = (sourceRoot() / "deploy" / "install.sh").string();
  const std::string build = testing::binaryPath("nodeagent").parent_path().string();
  auto install = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv{"bash",        script, "--root",    root.string(),
                                  "--build-dir", build,  "--no-start"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = testing::runCommand(argv, dir, std::chrono::seconds(60));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code);
    REQUIRE(*r.exit_code == 0);
  };
  install({});
  for (const char* path : {"usr/local/bin/nodeagent", "usr/local/bin/nodeagent-shim",
                           "usr/local/lib/nodeagent/nodeagent-cri.so",
                           "usr/local/share/doc/nodeagent/README.md",
                           "etc/systemd/system/nodeagent.service", "etc/nodeagent/config.yaml"}) {
    INFO(path);
    CHECK(fs::exists(root / path));
  }
  CHECK_FALSE(fs::exists(root / "usr/local/bin/test-apiserver"));
  CHECK(fs::is_directory(root / "etc/nodeagent/manifests"));
  // The unit's Documentation= is the installed README.
  const std::string unit = testing::readFile(root / "etc/systemd/system/nodeagent.service");
  CHECK_THAT(unit,
             Catch::Contains("Documentation=file:///usr/local/share/doc/nodeagent/README.md"));

  // An operator's configuration survives a reinstall.
  testing::writeFile(root / "etc/nodeagent/config.yaml", "# mine\n");
  install({"--with-test-apiserver", "--with-examples"});
  CHECK(fs::exists(root / "usr/local/bin/test-apiserver"));
  CHECK(testing::readFile(root / "etc/nodeagent/config.yaml") == "# mine\n");
  CHECK_FALSE(fs::is_empty(root / "etc/nodeagent/manifests"));

  install({"--uninstall"});
  for (const char* path :
       {"usr/local/bin/nodeagent", "usr/local/bin/nodeagent-shim", "usr/local/bin/test-apiserver",
        "usr/local/lib/nodeagent", "usr/local/share/doc/nodeagent",
        "etc/systemd/system/nodeagent.service"}) {
    INFO(path);
    CHECK_FALSE(fs::exists(root / path));
  }
  CHECK(testing::readFile(root / "etc/nodeagent/config.yaml") == "# mine\n");
  CHECK(fs::is_directory(root / "var/lib/nodeagent"));
}
