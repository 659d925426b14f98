// The volume preparer: emptyDir and hostPath volumes made ready on the node, and a container's
// volumeMounts resolved against them for the runtime.
#include <linux/magic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent/pod_directories.h"
#include "agent/volume/subpath.h"
#include "agent/volume/tmpfs.h"
#include "agent/volumes.h"
#include "test/support/pod_builder.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;

namespace {

api::PodPtr podWithVolumes(nlohmann::json volumes, nlohmann::json mounts,
                           const std::string& source = "file") {
  return testing::PodBuilder()
      .name("web")
      .uid("uid-1")
      .annotation("kubernetes.io/config.source", source)
      .container("c", {"sleep", "1"})
      .edit([&](nlohmann::json& j) {
        j["spec"]["volumes"] = volumes;
        j["spec"]["containers"][0]["volumeMounts"] = mounts;
      })
      .build();
}

}  // namespace

TEST_CASE("volumes: an emptyDir is made under the pod's directory, world-writable",
          "[unit][agent]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  agent::VolumePreparer volumes(dirs, false);
  auto pod = podWithVolumes({{{"name", "data"}, {"emptyDir", nlohmann::json::object()}}},
                            {{{"name", "data"}, {"mountPath", "/data"}, {"subPath", "sub"}}});
  auto prepared = volumes.prepare(*pod);
  REQUIRE(prepared.ok());
  REQUIRE(prepared->size() == 1);
  const auto expected =
      root.path() / "pods" / "uid-1" / "volumes" / "kubernetes.io~empty-dir" / "data";
  CHECK((*prepared)[0].name == "data");
  CHECK((*prepared)[0].host_path == expected);
  struct stat st {};
  REQUIRE(::stat(expected.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0777);

  auto mounts = agent::VolumePreparer::mountsFor(*pod, pod->spec->containers[0], *prepared);
  REQUIRE(mounts.ok());
  REQUIRE(mounts->size() == 1);
  CHECK((*mounts)[0].volume == "data");
  CHECK((*mounts)[0].host_path == expected / "sub");
  CHECK((*mounts)[0].container_path == "/data");
  CHECK_FALSE((*mounts)[0].read_only);
}

TEST_CASE("volumes: a mount naming no volume of the pod or escaping it with subPath is refused",
          "[unit][agent]") {
  std::vector<runtime::PodVolume> prepared{{"data", "/var/lib/x"}};
  auto unknown =
      podWithVolumes(nlohmann::json::array(), {{{"name", "other"}, {"mountPath", "/o"}}});
  auto m = agent::VolumePreparer::mountsFor(*unknown, unknown->spec->containers[0], prepared);
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().code() == base::StatusCode::kInvalidArgument);
  CHECK_THAT(m.status().message(), Catch::Contains("no volume \"other\""));
  for (const char* sub : {"../etc", "a/../../b", "/abs"}) {
    auto escaping = podWithVolumes(nlohmann::json::array(),
                                   {{{"name", "data"}, {"mountPath", "/d"}, {"subPath", sub}}});
    auto e = agent::VolumePreparer::mountsFor(*escaping, escaping->spec->containers[0], prepared);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.status().message(), Catch::Contains("subPath"));
  }
}

TEST_CASE(
    "volumes: a hostPath is checked against its type, and only static pods may have it created",
    "[unit][agent]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  agent::VolumePreparer volumes(dirs, false);
  const auto target = root.path() / "made" / "here";
  nlohmann::json create = {
      {{"name", "h"}, {"hostPath", {{"path", target.string()}, {"type", "DirectoryOrCreate"}}}}};
  auto api_pod = podWithVolumes(create, nlohmann::json::array(), "api");
  auto refused = volumes.prepare(*api_pod);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == base::StatusCode::kPermissionDenied);
  CHECK_FALSE(std::filesystem::exists(target));

  auto static_pod = podWithVolumes(create, nlohmann::json::array(), "file");
  auto made = volumes.prepare(*static_pod);
  REQUIRE(made.ok());
  CHECK(std::filesystem::is_directory(target));

  nlohmann::json file_type = {
      {{"name", "h"}, {"hostPath", {{"path", target.string()}, {"type", "File"}}}}};
  auto not_file = volumes.prepare(*podWithVolumes(file_type, nlohmann::json::array()));
  REQUIRE_FALSE(not_file.ok());
  CHECK_THAT(not_file.status().message(), Catch::Contains("is not a file"));
}

TEST_CASE("volumes: every hostPath type is checked as kubelet checks it", "[unit][agent]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  agent::VolumePreparer volumes(dirs, false);
  const auto dir = root.path() / "dir";
  const auto file = root.path() / "file";
  const auto sock = root.path() / "sock";
  std::filesystem::create_directories(dir);
  testing::writeFile(file, "x");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
  auto check = [&](const std::filesystem::path& path, const std::string& type) {
    nlohmann::json v = {{{"name", "h"}, {"hostPath", {{"path", path.string()}, {"type", type}}}}};
    auto prepared = volumes.prepare(*podWithVolumes(v, nlohmann::json::array()));
    return prepared.ok() ? std::string("ok") : prepared.status().message();
  };
  CHECK(check(dir, "Directory") == "ok");
  CHECK(check(dir, "") == "ok");
  CHECK(check(root.path() / "missing", "") == "ok");  // no type: no check
  CHECK(check(file, "File") == "ok");
  CHECK(check(file, "FileOrCreate") == "ok");
  CHECK(check(sock, "Socket") == "ok");
  CHECK(check("/dev/null", "CharDevice") == "ok");
  CHECK_THAT(
      check(file, "Directory"),
      Catch::Contains("MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: " +
                      file.string() + " is not a directory"));
  CHECK_THAT(check(file, "DirectoryOrCreate"), Catch::Contains("is not a directory"));
  CHECK_THAT(check(dir, "FileOrCreate"), Catch::Contains("is not a file"));
  CHECK_THAT(check(root.path() / "missing", "Directory"), Catch::Contains("is not a directory"));
  CHECK_THAT(check(root.path() / "missing", "Socket"), Catch::Contains("is not a socket file"));
  CHECK_THAT(check(file, "Socket"), Catch::Contains("is not a socket file"));
  CHECK_THAT(check(file, "CharDevice"), Catch::Contains("is not a character device"));
  CHECK_THAT(check("/dev/null", "BlockDevice"), Catch::Contains("is not a block device"));
  CHECK_THAT(check(sock, "File"), Catch::Contains("is not a file"));
  // A failed check is a failed mount, tried again at the next sync.
  nlohmann::json v = {{{"name", "h"}, {"hostPath", {{"path", file.string()}, {"type", "Socket"}}}}};
  CHECK(volumes.prepare(*podWithVolumes(v, nlohmann::json::array())).status().code() ==
        base::StatusCode::kUnavailable);
}

TEST_CASE("pod directories: made once, forgotten with the pod, orphans removed", "[unit][agent]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  REQUIRE(dirs.ensure("uid-1").ok());
  CHECK(dirs.made("uid-1"));
  CHECK(std::filesystem::is_directory(root.path() / "pods" / "uid-1" / "volumes"));
  CHECK(std::filesystem::is_directory(root.path() / "pods" / "uid-1" / "plugins"));
  CHECK_FALSE(dirs.path("../escape").ok());
  CHECK_FALSE(dirs.ensure("../escape").ok());
  REQUIRE(dirs.ensure("uid-2").ok());
  REQUIRE(dirs.ensure("uid-3").ok());
  CHECK(dirs.removeOrphans({"uid-1"}, {"uid-2"}));
  CHECK(std::filesystem::exists(root.path() / "pods" / "uid-1"));
  CHECK(std::filesystem::exists(root.path() / "pods" / "uid-2"));
  CHECK_FALSE(std::filesystem::exists(root.path() / "pods" / "uid-3"));
  CHECK_FALSE(dirs.made("uid-3"));
  CHECK_FALSE(dirs.removeOrphans({"uid-1", "uid-2"}, {}));
}

TEST_CASE(
    "pod directories: a missing root is made, existing directories are kept, and a file in "
    "the way is an error naming the pod directory",
    "[unit][agent]") {
  testing::TempDir tmp;
  const auto root = tmp.path() / "not" / "yet";  // the pods directory's parents are missing
  agent::PodDirectories dirs(root);
  REQUIRE(dirs.ensure("uid-1").ok());
  CHECK(std::filesystem::is_directory(root / "pods" / "uid-1" / "plugins"));

  // After a restart the directories are there: kept, with what they hold.
  testing::writeFile(root / "pods" / "uid-1" / "volumes" / "kept", "x");
  agent::PodDirectories again(root);
  REQUIRE(again.ensure("uid-1").ok());
  CHECK(std::filesystem::exists(root / "pods" / "uid-1" / "volumes" / "kept"));

  // A file where a directory belongs.
  std::filesystem::create_directories(root / "pods" / "uid-2");
  testing::writeFile(root / "pods" / "uid-2" / "plugins", "not a directory");
  auto blocked = dirs.ensure("uid-2");
  REQUIRE_FALSE(blocked.ok());
  CHECK_THAT(blocked.message(), Catch::Contains((root / "pods" / "uid-2").string()));
  CHECK_THAT(blocked.message(), Catch::Contains("Not a directory"));
  CHECK_FALSE(dirs.made("uid-2"));
  testing::writeFile(root / "pods" / "uid-3", "not a directory");
  CHECK_FALSE(dirs.ensure("uid-3").ok());
}

TEST_CASE("volumes: an emptyDir of medium Memory is a tmpfs as large as its sizeLimit",
          "[unit][agent]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  agent::VolumePreparer volumes(dirs, false);
  auto pod = podWithVolumes(
      {{{"name", "cache"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", "8Mi"}}}},
       {{"name", "scratch"}, {"emptyDir", {{"medium", "Memory"}}}}},
      {{{"name", "cache"}, {"mountPath", "/cache"}}});
  auto prepared = volumes.prepare(*pod);
  const auto base = root.path() / "pods" / "uid-1" / "volumes" / "kubernetes.io~empty-dir";
  struct Unmount {
    std::filesystem::path pod_dir;
    ~Unmount() { agent::unmountPodVolumes(pod_dir); }
  } unmount{root.path() / "pods" / "uid-1"};
  REQUIRE(prepared.ok());
  if (!agent::isMountPoint(base / "cache")) {
    testing::skipTest("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
  }
  struct statfs fs {};
  REQUIRE(::statfs((base / "cache").c_str(), &fs) == 0);
  CHECK(fs.f_type == TMPFS_MAGIC);
  CHECK(static_cast<uint64_t>(fs.f_blocks) * fs.f_bsize == 8 * 1024 * 1024);
  struct stat st {};
  REQUIRE(::stat((base / "cache").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0777);
  // Without a sizeLimit: the kernel's default size.
  CHECK(agent::isMountPoint(base / "scratch"));
  REQUIRE(::statfs((base / "scratch").c_str(), &fs) == 0);
  CHECK(fs.f_type == TMPFS_MAGIC);
  // Prepared again (each sync): mounted once.
  REQUIRE(volumes.prepare(*pod).ok());
  agent::unmountPodVolumes(root.path() / "pods" / "uid-1");
  CHECK_FALSE(agent::isMountPoint(base / "cache"));
  CHECK_FALSE(agent::isMountPoint(base / "scratch"));
}

TEST_CASE("volumes: an emptyDir of an unknown medium is refused naming the volume",
          "[unit][agent]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  agent::VolumePreparer volumes(dirs, false);
  auto pod = podWithVolumes({{{"name", "big"}, {"emptyDir", {{"medium", "HugePages"}}}}},
                            nlohmann::json::array());
  auto prepared = volumes.prepare(*pod);
  REQUIRE_FALSE(prepared.ok());
  CHECK(prepared.status().code() == base::StatusCode::kUnavailable);  // a failed mount
  CHECK_THAT(prepared.status().message(),
             Catch::Contains("MountVolume.SetUp failed for volume \"big\" : unknown storage "
                             "medium \"HugePages\""));
}

TEST_CASE("volumes: an emptyDir of medium Memory that already holds files stays on the disk",
          "[unit][agent]") {
  testing::TempDir root;
  agent::PodDirectories dirs(root.path());
  agent::VolumePreparer volumes(dirs, false);
  // What an agent that did not mount memory-backed emptyDirs left, in use by a running pod.
  const auto dir = root.path() / "pods" / "uid-1" / "volumes" / "kubernetes.io~empty-dir" / "cache";
  std::filesystem::create_directories(dir);
  testing::writeFile(dir / "kept", "data");
  auto pod = podWithVolumes({{{"name", "cache"}, {"emptyDir", {{"medium", "Memory"}}}}},
                            nlohmann::json::array());
  REQUIRE(volumes.prepare(*pod).ok());
  CHECK_FALSE(agent::isMountPoint(dir));
  CHECK(testing::readFile(dir / "kept") == "data");
  agent::unmountPodVolumes(root.path() / "pods" / "uid-1");
}

TEST_CASE("volumes: a subPath is resolved and may not lead out of its volume", "[unit][agent]") {
  testing::TempDir root;
  const auto volume = root.path() / "volume";
  std::filesystem::create_directories(volume / "data" / "inner");
  std::filesystem::create_directories(root.path() / "outside");
  std::filesystem::create_symlink("data/inner", volume / "link-in");
  std::filesystem::create_symlink(root.path() / "outside", volume / "link-out");
  std::filesystem::create_symlink("../../outside", volume / "data" / "up");
  std::filesystem::create_symlink("/etc/passwd", volume / "passwd");

  auto plain = agent::resolveSubPath(volume, volume / "data");
  REQUIRE(plain.ok());
  CHECK(*plain == std::filesystem::canonical(volume / "data"));
  auto inside = agent::resolveSubPath(volume, volume / "link-in");
  REQUIRE(inside.ok());
  CHECK(*inside == std::filesystem::canonical(volume / "data" / "inner"));
  CHECK(agent::resolveSubPath(volume, volume).ok());

  for (const char* escape : {"link-out", "data/up", "passwd"}) {
    INFO(escape);
    auto out = agent::resolveSubPath(volume, volume / escape);
    REQUIRE_FALSE(out.ok());
    CHECK(out.status().code() == base::StatusCode::kInvalidArgument);
    CHECK_THAT(out.status().message(), Catch::Contains("outside of its volume"));
  }
  // A sibling whose name begins like the volume's is outside too.
  std::filesystem::create_directories(root.path() / "volume-2");
  std::filesystem::create_symlink(root.path() / "volume-2", volume / "sibling");
  CHECK_FALSE(agent::resolveSubPath(volume, volume / "sibling").ok());
  // Missing: made inside the volume with the volume's mode, as kubelet does.
  std::filesystem::permissions(volume, std::filesystem::perms::all);
  auto made = agent::resolveSubPath(volume, volume / "new" / "deeper");
  REQUIRE(made.ok());
  CHECK(*made == std::filesystem::canonical(volume / "new" / "deeper"));
  CHECK(std::filesystem::is_directory(volume / "new" / "deeper"));
  struct stat st {};
  REQUIRE(::stat((volume / "new").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0777);
  // Nothing is made through a symlink that leads out.
  auto through = agent::resolveSubPath(volume, volume / "link-out" / "new");
  REQUIRE_FALSE(through.ok());
  CHECK_THAT(through.status().message(), Catch::Contains("outside of its volume"));
  CHECK_FALSE(std::filesystem::exists(root.path() / "outside" / "new"));
  // Below a file: an error naming the subPath.
  testing::writeFile(volume / "file", "x");
  auto under_file = agent::resolveSubPath(volume, volume / "file" / "x");
  REQUIRE_FALSE(under_file.ok());
  CHECK_THAT(under_file.status().message(), Catch::Contains("file/x"));
}
