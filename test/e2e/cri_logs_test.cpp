// Container logs with the CRI runtime: containerd writes them at kubelet's paths, the agent
// rotates a log that reached --container-log-max-size (rename, then CRI ReopenContainerLog) and
// keeps at most --container-log-max-files, and the container's later output lands in the new
// live log.
#include <filesystem>
#include <string>
#include <vector>

#include "test/e2e/daemon_fixture.h"
#include "test/support/containerd.h"

namespace nodeagent::e2e {
namespace {

// The container's log directory under the agent's pod log dir, once it exists.
std::optional<fs::path> containerLogDir(const Daemon& d, const std::string& pod,
                                        const std::string& container) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(d.logs(), ec)) {
    if (e.path().filename().string().starts_with("default_" + pod + "-")) {
      return e.path() / container;
    }
  }
  return std::nullopt;
}

std::vector<std::string> rotatedLogs(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const auto name = e.path().filename().string();
    if (name.starts_with("0.log.")) out.push_back(name);
  }
  return out;
}

}  // namespace

TEST_CASE("cri: a container log over the size limit is rotated and the runtime reopens it",
          "[e2e][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  containerd.importTestImages();
  Daemon d;
  // About 2 KiB a second, numbered lines.
  d.writeManifest("chatty.yaml",
                  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: chatty\nspec:\n"
                  "  hostNetwork: true\n  containers:\n  - name: main\n"
                  "    image: nodeagent.test/busybox:1\n    imagePullPolicy: Never\n"
                  "    command: [\"sh\", \"-c\", \"i=0; while true; do echo line-$i "
                  "0123456789012345678901234567890123456789012345678901234567890123456789012345"
                  "678901234567890123456789; i=$((i+1)); sleep 0.05; done\"]\n");
  auto args = containerd.agentFlags();
  args.insert(args.end(), {"--container-log-max-size=4Ki", "--container-log-max-files=2"});
  d.start(args);
  REQUIRE_EVENTUALLY(
      d, [&] { return d.running("chatty"); }, 60s);
  std::optional<fs::path> dir;
  REQUIRE_EVENTUALLY(
      d, [&] { return (dir = containerLogDir(d, "chatty", "main")).has_value(); }, 10s);
  // The manager looks every 10 s: within a few passes the log was rotated at least twice, at
  // most one rotated file is kept (two files with the live one), and the live log grows again.
  REQUIRE_EVENTUALLY(
      d, [&] { return d.logTail().find("Rotated a container log") != std::string::npos; }, 40s);
  const auto first = rotatedLogs(*dir);
  REQUIRE_EVENTUALLY(
      d,
      [&] {
        auto now = rotatedLogs(*dir);
        return now.size() == 1 && now != first;
      },
      40s);
  CHECK(rotatedLogs(*dir).size() == 1);
  REQUIRE_EVENTUALLY(
      d, [&] { return lineCount(*dir / "0.log") > 0; }, 10s);
  const auto live = readOr(*dir / "0.log");
  CHECK_THAT(live, Catch::Contains(" stdout F line-"));
}

}  // namespace nodeagent::e2e
