// The atomic writer of configMap/secret/downwardAPI/projected volumes (kubelet's AtomicWriter).
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "agent/volume/atomic_writer.h"
#include "agent/volume/tmpfs.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
namespace fs = std::filesystem;

namespace {

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

mode_t modeOf(const fs::path& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// The hidden version directories (..2026_...) under `dir`.
int versions(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    auto name = e.path().filename().string();
    if (name.rfind("..", 0) == 0 && name != "..data" && e.is_directory()) ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("atomic writer: files appear through ..data and one symlink per top-level name",
          "[unit][volume]") {
  testing::TempDir tmp;
  const auto dir = tmp.path() / "vol";
  agent::VolumePayload payload{{"config.yaml", {"a: 1\n", 0644}}, {"sub/dir/key", {"deep", 0600}}};
  auto written = agent::writeAtomically(dir, payload, std::nullopt);
  REQUIRE(written.ok());
  CHECK(*written);
  CHECK(readFile(dir / "config.yaml") == "a: 1\n");
  CHECK(readFile(dir / "sub" / "dir" / "key") == "deep");
  CHECK(fs::is_symlink(dir / "config.yaml"));
  CHECK(fs::read_symlink(dir / "config.yaml") == "..data/config.yaml");
  CHECK(fs::read_symlink(dir / "sub") == "..data/sub");
  CHECK(fs::is_symlink(dir / "..data"));
  CHECK(modeOf(dir / "config.yaml") == 0644);
  CHECK(modeOf(dir / "sub" / "dir" / "key") == 0600);
  CHECK(modeOf(dir) == 0755);
  CHECK(versions(dir) == 1);
}

TEST_CASE("atomic writer: an unchanged payload writes nothing, a change swaps the version",
          "[unit][volume]") {
  testing::TempDir tmp;
  const auto dir = tmp.path() / "vol";
  REQUIRE(agent::writeAtomically(dir, {{"a", {"1", 0644}}, {"b", {"2", 0644}}}, std::nullopt).ok());
  const auto first = fs::read_symlink(dir / "..data");
  auto again = agent::writeAtomically(dir, {{"a", {"1", 0644}}, {"b", {"2", 0644}}}, std::nullopt);
  REQUIRE(again.ok());
  CHECK_FALSE(*again);
  CHECK(fs::read_symlink(dir / "..data") == first);

  SECTION("a new value") {
    auto changed =
        agent::writeAtomically(dir, {{"a", {"1b", 0644}}, {"b", {"2", 0644}}}, std::nullopt);
    REQUIRE(changed.ok());
    CHECK(*changed);
    CHECK(readFile(dir / "a") == "1b");
    CHECK(fs::read_symlink(dir / "..data") != first);
    CHECK_FALSE(fs::exists(dir / first));  // the old version is gone
    CHECK(versions(dir) == 1);
  }
  SECTION("a removed key loses its symlink, a new key gets one") {
    REQUIRE(
        agent::writeAtomically(dir, {{"a", {"1", 0644}}, {"c", {"3", 0644}}}, std::nullopt).ok());
    CHECK_FALSE(fs::exists(fs::symlink_status(dir / "b")));
    CHECK(readFile(dir / "c") == "3");
  }
  SECTION("a changed mode") {
    REQUIRE(agent::writeAtomically(dir, {{"a", {"1", 0400}}, {"b", {"2", 0644}}}, std::nullopt)
                .value());
    CHECK(modeOf(dir / "a") == 0400);
  }
  SECTION("an empty payload leaves an empty volume") {
    REQUIRE(agent::writeAtomically(dir, {}, std::nullopt).value());
    CHECK_FALSE(fs::exists(fs::symlink_status(dir / "a")));
    CHECK(fs::is_symlink(dir / "..data"));
  }
}

TEST_CASE("atomic writer: with fsGroup the files are group-readable and of that group",
          "[unit][volume]") {
  testing::TempDir tmp;
  const auto dir = tmp.path() / "vol";
  const gid_t group = ::getegid();
  REQUIRE(agent::writeAtomically(dir, {{"k", {"v", 0600}}}, group).ok());
  struct stat st {};
  REQUIRE(::stat((dir / "k").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  CHECK(st.st_gid == group);
  // The same payload again is unchanged (the group bits are expected).
  CHECK_FALSE(agent::writeAtomically(dir, {{"k", {"v", 0600}}}, group).value());
}

TEST_CASE("atomic writer: paths that would leave the volume or hide in it are refused",
          "[unit][volume]") {
  testing::TempDir tmp;
  for (const std::string bad :
       {"/etc/passwd", "../x", "a/../../x", "..data", "..x", "a//b", "", "a/./b"}) {
    INFO(bad);
    auto written = agent::writeAtomically(tmp.path() / "vol", {{bad, {"x", 0644}}}, std::nullopt);
    REQUIRE_FALSE(written.ok());
    CHECK(written.status().code() == base::StatusCode::kInvalidArgument);
  }
  CHECK(agent::checkPayloadPath("a..b/c..").ok());
  CHECK_FALSE(fs::exists(tmp.path() / "x"));
}

TEST_CASE("tmpfs: a secret volume directory is memory-backed and unmounted with its pod",
          "[unit][volume]") {
  testing::TempDir tmp;
  const auto pod_dir = tmp.path() / "pod";
  const auto dir = pod_dir / "volumes" / "kubernetes.io~secret" / "creds";
  auto mounted = agent::ensureTmpfs(dir);
  REQUIRE(mounted.ok());
  if (!*mounted) testing::skipTest("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
  // Unmounted even when a check below fails, before the temporary directory goes.
  struct Unmount {
    fs::path pod_dir;
    ~Unmount() { agent::unmountPodVolumes(pod_dir); }
  } unmount{pod_dir};
  struct statfs fs_info {};
  REQUIRE(::statfs(dir.c_str(), &fs_info) == 0);
  const bool on_tmpfs = fs_info.f_type == TMPFS_MAGIC;
  CHECK(agent::isMountPoint(dir));
  // A second call finds it there.
  CHECK(agent::ensureTmpfs(dir).value());
  REQUIRE(agent::writeAtomically(dir, {{"password", {"s3cr3t", 0644}}}, std::nullopt).ok());
  agent::unmountPodVolumes(pod_dir);
  CHECK_FALSE(agent::isMountPoint(dir));
  CHECK(on_tmpfs);
  // What was written lived in memory only.
  CHECK_FALSE(fs::exists(fs::symlink_status(dir / "password")));
}
