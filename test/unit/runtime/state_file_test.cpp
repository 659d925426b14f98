#include "agent/runtime/state_file.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "test/support/test_util.h"

using namespace nodeagent::runtime;

TEST_CASE("state file: config round-trips every field, including newlines and backslashes",
          "[unit][runtime]") {
  ShimConfig c;
  c.container_id = "abc123";
  c.pod_uid = "uid-1";
  c.pod_name = "web";
  c.pod_namespace = "default";
  c.container_name = "main";
  c.attempt = 3;
  c.hash = "00112233445566778899aabbccddeeff";
  c.image = "busybox:1.36";
  c.created_at = 1'700'000'000'123'456'789;
  c.argv = {"/bin/sh", "-c", "echo 'a\nb' \\ c=d"};
  c.env = {"PATH=/bin", "MULTI=line1\nline2", "EMPTY="};
  c.working_dir = "/tmp/x";
  c.uid = 1000;
  c.gid = 0;
  c.no_new_privs = true;
  c.set_groups = true;
  c.groups = {2000, 3000};
  c.capabilities = (uint64_t{1} << 40) | 1;
  c.ambient_capabilities = uint64_t{1} << 12;
  c.log_path = "/var/log/pods/default_web_uid-1/main/3.log";
  c.log_max_size = 1024;
  c.log_max_files = 2;
  c.pre_stop = {"/bin/sh", "-c", "sleep 1"};
  c.grace_period_seconds = 7;
  c.termination_message_path = "/var/lib/nodeagent/containers/abc123/termination-log";
  c.termination_message_fallback = true;

  ShimConfig d;
  std::string error;
  REQUIRE(decodeShimConfig(encodeShimConfig(c), d, error));
  CHECK(d.container_id == c.container_id);
  CHECK(d.pod_uid == c.pod_uid);
  CHECK(d.pod_name == c.pod_name);
  CHECK(d.pod_namespace == c.pod_namespace);
  CHECK(d.container_name == c.container_name);
  CHECK(d.attempt == 3);
  CHECK(d.hash == c.hash);
  CHECK(d.image == c.image);
  CHECK(d.created_at == c.created_at);
  CHECK(d.argv == c.argv);
  CHECK(d.env == c.env);
  CHECK(d.working_dir == c.working_dir);
  CHECK(d.uid == c.uid);
  CHECK(d.gid == c.gid);
  CHECK(d.no_new_privs);
  CHECK(d.set_groups);
  CHECK(d.groups == c.groups);
  CHECK(d.capabilities == c.capabilities);
  CHECK(d.ambient_capabilities == c.ambient_capabilities);
  CHECK(d.log_path == c.log_path);
  CHECK(d.log_max_size == 1024);
  CHECK(d.log_max_files == 2);
  CHECK(d.pre_stop == c.pre_stop);
  CHECK(d.grace_period_seconds == 7);
  CHECK(d.termination_message_path == c.termination_message_path);
  CHECK(d.termination_message_fallback);
}

TEST_CASE("state file: state round-trips and malformed input names the field", "[unit][runtime]") {
  ShimState s;
  s.status = ShimStatus::kExited;
  s.shim_pid = 42;
  s.shim_start_ticks = 123456789012ULL;
  s.boot_id = "b-1";
  s.pid = 43;
  s.pid_start_ticks = 99;
  s.started_at = 10;
  s.finished_at = 20;
  s.exit_code = 137;
  s.signal = 9;
  s.reason = "Error";
  s.message = "killed\nby SIGKILL";
  ShimState d;
  std::string error;
  REQUIRE(decodeShimState(encodeShimState(s), d, error));
  CHECK(d.status == ShimStatus::kExited);
  CHECK(d.shim_pid == 42);
  CHECK(d.shim_start_ticks == 123456789012ULL);
  CHECK(d.boot_id == "b-1");
  CHECK(d.pid == 43);
  CHECK(d.pid_start_ticks == 99);
  CHECK(d.started_at == 10);
  CHECK(d.finished_at == 20);
  CHECK(d.exit_code == 137);
  CHECK(d.signal == 9);
  CHECK(d.reason == "Error");
  CHECK(d.message == s.message);

  CHECK_FALSE(decodeShimState("version=1\nstatus=sleeping\n", d, error));
  CHECK(error.find("status") != std::string::npos);
  CHECK_FALSE(decodeShimState("version=1\nstatus=running\npid=abc\n", d, error));
  CHECK(error.find("pid") != std::string::npos);
  CHECK_FALSE(decodeShimState("status=running\n", d, error));
  CHECK(error.find("version") != std::string::npos);
  CHECK_FALSE(decodeShimState("version=2\nstatus=running\n", d, error));
  CHECK_FALSE(decodeShimState("version=1\ngarbage\n", d, error));
  CHECK(error.find("line 2") != std::string::npos);
  // Unknown keys are ignored (forward compatibility).
  CHECK(decodeShimState("version=1\nstatus=created\nfuture_key=1\n", d, error));

  ShimConfig c;
  CHECK_FALSE(decodeShimConfig("version=1\ncontainer_id=x\n", c, error));
  CHECK(error.find("arg") != std::string::npos);
}

TEST_CASE("state file: kubelet exit reasons and signal exit codes", "[unit][runtime]") {
  CHECK(exitReason(0) == "Completed");
  CHECK(exitReason(1) == "Error");
  CHECK(exitCodeForSignal(9) == 137);
  CHECK(exitCodeForSignal(15) == 143);
}

TEST_CASE("state file: atomic write replaces the whole file", "[unit][runtime]") {
  nodeagent::testing::TempDir dir;
  std::string path = (dir / "state").string();
  std::string error;
  REQUIRE(writeFileAtomic(path, "first version, long", error));
  REQUIRE(writeFileAtomic(path, "second", error));
  std::string got;
  REQUIRE(readWholeFile(path, got, error));
  CHECK(got == "second");
  CHECK_FALSE(readWholeFile((dir / "missing").string(), got, error));
  CHECK(error.find("missing") != std::string::npos);
}

TEST_CASE("state file: a failed atomic write leaves the old file and no temp file behind",
          "[unit][runtime]") {
  nodeagent::testing::TempDir dir;
  std::string error;
  auto leftovers = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
      n += e.path().filename().string().find(".tmp.") != std::string::npos ? 1 : 0;
    }
    return n;
  };
  SECTION("success") {
    REQUIRE(writeFileAtomic((dir / "state").string(), "content", error));
    CHECK(nodeagent::testing::readFile(dir / "state") == "content");
  }
  SECTION("the rename fails: the target is a non-empty directory") {
    std::filesystem::create_directories(dir / "state" / "inside");
    CHECK_FALSE(writeFileAtomic((dir / "state").string(), "content", error));
    CHECK(error.find("rename") != std::string::npos);
    CHECK(std::filesystem::is_directory(dir / "state" / "inside"));
  }
  SECTION("the directory does not exist") {
    CHECK_FALSE(writeFileAtomic((dir / "gone" / "state").string(), "content", error));
    CHECK(error.find("open") != std::string::npos);
    CHECK(error.find("gone") != std::string::npos);
  }
  SECTION("a relative path in the working directory") {
    // The directory fsync uses "." when the path has no directory part.
    const auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(dir.path());
    const bool ok = writeFileAtomic("state", "here", error);
    std::filesystem::current_path(cwd);
    CHECK(ok);
    CHECK(nodeagent::testing::readFile(dir / "state") == "here");
  }
  CHECK(leftovers() == 0);
}

TEST_CASE("state file: /proc/<pid>/stat fields after a command name with spaces and parentheses",
          "[unit][runtime]") {
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  // cutime cstime priority nice threads itrealvalue starttime vsize ...
  const std::string line =
      "4242 (sh) (x) y) S 17 4242 4243 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1 0 987654 1000 "
      "250 18446744073709551615\n";
  auto st = parseProcStat(line);
  REQUIRE(st);
  CHECK(st->state == 'S');
  CHECK(st->ppid == 17);
  CHECK(st->session == 4243);
  CHECK(st->start_ticks == 987654);
  CHECK(st->utime_ticks == 1);
  CHECK(st->stime_ticks == 2);
  CHECK(st->vsize_bytes == 1000);
  CHECK(st->rss_pages == 250);
  CHECK_FALSE(parseProcStat("4242 (sh) S 1 2 3"));
  CHECK_FALSE(parseProcStat("no parenthesis"));
  CHECK_FALSE(parseProcStat(""));
}

TEST_CASE("state file: process liveness compares the start time", "[unit][runtime]") {
  auto self = readProcStat(getpid());
  REQUIRE(self);
  CHECK(processAlive(getpid(), self->start_ticks));
  CHECK_FALSE(processAlive(getpid(), self->start_ticks + 1));
  CHECK_FALSE(readProcStat(-1));
  CHECK(self->ppid == getppid());
  CHECK(self->session == getsid(0));
}
