// The test containerd (test/support/containerd.h) keeps what it runs to itself and takes it all
// away when stopped: the CRI tests rely on it to leave the machine as they found it.
#include "test/support/containerd.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "test/support/cgroup_root.h"
#include "test/support/test_util.h"

using namespace nodeagent::testing;
namespace fs = std::filesystem;

namespace {

std::string commandOutput(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  ::pclose(pipe);
  return out;
}

// The PID `ctr task ls` gives the task `id`, or 0.
int taskPid(const TestContainerd& containerd, const std::string& id) {
  std::istringstream lines(commandOutput(containerd.ctrCommand() + " task ls"));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string task;
    int pid = 0;
    if (fields >> task >> pid && task == id) return pid;
  }
  return 0;
}

bool alive(int pid) {
  std::string stat = readFile("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && stat.size() > close + 2 && stat[close + 2] != 'Z';
}

bool anyProcessMentions(const std::string& text) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string cmd = readFile(entry.path() / "cmdline");
    if (cmd.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("containerd harness: stop takes away a running container and its shim and mounts",
          "[integration][cri]") {
  skipUnlessContainerdCanRun();
  const bool machine_had_run_containerd = fs::exists("/run/containerd");
  const std::string cgroup = isolatedCgroupRoot() + "/c1";
  fs::path dir;
  fs::path socket;
  int pid = 0;
  {
    TestContainerd containerd;
    dir = containerd.dir();
    socket = containerd.socketPath();
    containerd.importTestImages();
    const std::string run = containerd.ctrCommand() + " run -d --fifo-dir " +
                            (dir / "fifo").string() + " --cgroup " + cgroup +
                            " nodeagent.test/busybox:1 c1 sleep 1000 2>&1 && echo started";
    const std::string output = commandOutput(run);
    INFO(output);
    REQUIRE(output.ends_with("started\n"));
    pid = taskPid(containerd, "c1");
    REQUIRE(pid > 0);
    CHECK(alive(pid));
    CHECK(anyProcessMentions(socket.string()));  // the shim
    // The shim's socket went to the harness's /run, not the machine's.
    CHECK(fs::exists(dir / "run" / "containerd" / "s"));
    CHECK(fs::exists("/run/containerd") == machine_had_run_containerd);
    // containerd's mounts (the container's rootfs) are not in the test's mount table.
    CHECK(readFile("/proc/self/mountinfo").find(dir.string()) == std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir));
  CHECK(eventually([&] { return !alive(pid); }, std::chrono::seconds(10)));
  CHECK_FALSE(anyProcessMentions(socket.string()));
}
