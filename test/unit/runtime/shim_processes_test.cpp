#include "agent/runtime/shim_processes.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "agent/runtime/state_file.h"

using namespace nodeagent::runtime;
using namespace std::string_literals;

TEST_CASE("shim processes: the state directory of a run shim's command line", "[unit][runtime]") {
  CHECK(shimDirFromCmdline("/usr/bin/nodeagent-shim\0run\0/var/lib/nodeagent/containers/ab\0"s) ==
        "/var/lib/nodeagent/containers/ab");
  CHECK(shimDirFromCmdline("nodeagent-shim\0run\0rel/containers/ab"s) == "rel/containers/ab");
  // Not a run shim: exec shims, other arities, other programs, empty directories.
  CHECK(shimDirFromCmdline("nodeagent-shim\0exec\0/r/containers/ab\0sh\0"s).empty());
  CHECK(shimDirFromCmdline("nodeagent-shim\0exec\0/r/containers/ab\0"s).empty());
  CHECK(shimDirFromCmdline("nodeagent-shim\0run\0/r/containers/ab\0extra\0"s).empty());
  CHECK(shimDirFromCmdline("nodeagent-shim\0run\0"s).empty());
  CHECK(shimDirFromCmdline("nodeagent-shim\0run\0\0"s).empty());
  CHECK(shimDirFromCmdline("sleep\0x\0"s).empty());
  CHECK(shimDirFromCmdline("").empty());
}

TEST_CASE("shim processes: only directories directly under this root's containers directory",
          "[unit][runtime]") {
  const std::filesystem::path containers = "/var/lib/nodeagent/containers";
  CHECK(containerIdUnder(containers, "/var/lib/nodeagent/containers/abc") == "abc");
  CHECK(containerIdUnder(containers, "/var/lib/nodeagent/containers/abc/") == "abc");
  CHECK(containerIdUnder(containers, "/var/lib/other/containers/abc").empty());
  CHECK(containerIdUnder(containers, "/var/lib/nodeagent2/containers/abc").empty());
  CHECK(containerIdUnder(containers, "/var/lib/nodeagent/containers/abc/def").empty());
  CHECK(containerIdUnder(containers, "/var/lib/nodeagent/containers").empty());
  CHECK(containerIdUnder(containers, "/var/lib/nodeagent/containers/..").empty());
}

TEST_CASE("shim processes: a process start time is after boot and not in the future",
          "[unit][runtime]") {
  auto self = readProcStat(::getpid());
  REQUIRE(self);
  const int64_t started = processStartNanos(self->start_ticks);
  REQUIRE(started > 0);
  CHECK(processStartNanos(0) <= started);
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  CHECK(started <= static_cast<int64_t>(now.tv_sec + 1) * 1'000'000'000);
}
