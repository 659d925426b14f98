// subPath bind mounts (agent/volume/subpath.h) with real mounts: what the runtime is given is the
// checked directory or file, never a place outside the volume, and it is all undone with the
// pod's volumes without reaching into them. Needs the right to mount (root): SKIPPED otherwise.
#include "agent/volume/subpath.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "agent/pod_directories.h"
#include "test/support/skip.h"
#include "test/support/test_util.h"

using namespace nodeagent;
namespace fs = std::filesystem;

namespace {

void skipUnlessRoot() {
  if (::geteuid() != 0) testing::skipTest("bind mounts need root");
}

void write(const fs::path& file, const std::string& text) { std::ofstream(file) << text; }

// A temp dir with a volume (vol/data/hello says "inside"), a directory outside it
// (outside/hello says "outside") and a pod directory; every mount below it is undone at the end.
struct Dirs {
  testing::TempDir tmp{"nodeagent-subpath"};
  fs::path vol = tmp.path() / "vol";
  fs::path outside = tmp.path() / "outside";
  fs::path pod = tmp.path() / "pods" / "uid-1";
  Dirs() {
    fs::create_directories(vol / "data");
    fs::create_directories(outside);
    fs::create_directories(pod);
    write(vol / "data" / "hello", "inside");
    write(outside / "hello", "outside");
  }
  ~Dirs() {
    for (const auto& m : agent::mountPointsBelow(tmp.path())) ::umount2(m.c_str(), MNT_DETACH);
  }
};

// Runs `step` over and over on a thread of its own until stop() or its destruction (also when an
// assertion ends the test early).
class Swapper {
 public:
  explicit Swapper(std::function<void()> step)
      : thread_([this, step = std::move(step)] {
          while (!stop_.load()) step();
        }) {}
  ~Swapper() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE(
    "subpath: a subPath is bound under the pod's volume-subpaths, kept across a restart and "
    "pinned to what was checked when the volume changes afterwards",
    "[integration][subpath]") {
  skipUnlessRoot();
  Dirs d;
  auto target = agent::bindSubPath(d.vol, d.vol / "data", d.pod, "v", "main", 2);
  INFO(target.status().message());
  REQUIRE(target.ok());
  CHECK(*target == d.pod / "volume-subpaths" / "v" / "main" / "2");
  CHECK(*target == agent::subPathTarget(d.pod, "v", "main", 2));
  CHECK(testing::readFile(*target / "hello") == "inside");
  CHECK(agent::mountPointsBelow(d.pod) == std::vector<fs::path>{*target});
  // Writes through the mount land in the volume.
  write(*target / "written", "x");
  CHECK(fs::exists(d.vol / "data" / "written"));

  // The container starts again: the same mount, not one more on top.
  auto again = agent::bindSubPath(d.vol, d.vol / "data", d.pod, "v", "main", 2);
  REQUIRE(again.ok());
  CHECK(agent::mountPointsBelow(d.pod).size() == 1);

  // A file subPath is bound on a file.
  auto file = agent::bindSubPath(d.vol, d.vol / "data" / "hello", d.pod, "v", "side", 0);
  REQUIRE(file.ok());
  CHECK(fs::is_regular_file(*file));
  CHECK(testing::readFile(*file) == "inside");

  // The volume's directory is swapped for a symlink out of it: the mount still holds the
  // directory that was checked.
  fs::rename(d.vol / "data", d.vol / "data-old");
  fs::create_directory_symlink(d.outside, d.vol / "data");
  CHECK(testing::readFile(*target / "hello") == "inside");
  // A new bind is checked again and refused.
  auto escaped = agent::bindSubPath(d.vol, d.vol / "data", d.pod, "v", "other", 0);
  REQUIRE_FALSE(escaped.ok());
  CHECK(escaped.status().code() == base::StatusCode::kInvalidArgument);
  CHECK_THAT(escaped.status().message(), Catch::Contains("outside of its volume"));
  CHECK_FALSE(fs::exists(agent::subPathTarget(d.pod, "v", "other", 0)));

  // Torn down with the pod's volumes: unmounted, the directory gone, the volume untouched.
  REQUIRE(agent::cleanSubPaths(d.pod).ok());
  CHECK(agent::mountPointsBelow(d.pod).empty());
  CHECK_FALSE(fs::exists(d.pod / "volume-subpaths"));
  CHECK(testing::readFile(d.vol / "data-old" / "hello") == "inside");
  CHECK(fs::exists(d.vol / "data-old" / "written"));
  CHECK(testing::readFile(d.outside / "hello") == "outside");
  // Nothing to clean is no error.
  CHECK(agent::cleanSubPaths(d.pod).ok());
}

TEST_CASE(
    "subpath: while a directory of the subPath flips between a directory and a symlink out of "
    "the volume, no bind ever shows what is outside",
    "[integration][subpath]") {
  skipUnlessRoot();
  Dirs d;
  // The swapper renames a prepared symlink or directory over "data" (atomic), as a container
  // that writes to the volume could.
  Swapper swapper([&d, to_link = true]() mutable {
    std::error_code ec;
    if (to_link) {
      fs::rename(d.vol / "data", d.vol / "real-data", ec);
      fs::create_directory_symlink(d.outside, d.vol / "data-link", ec);
      fs::rename(d.vol / "data-link", d.vol / "data", ec);
    } else {
      fs::remove(d.vol / "data", ec);
      fs::rename(d.vol / "real-data", d.vol / "data", ec);
    }
    to_link = !to_link;
  });
  int bound = 0;
  for (int i = 0; i < 300; ++i) {
    auto target = agent::bindSubPath(d.vol, d.vol / "data", d.pod, "v", "main", 0);
    if (!target.ok()) continue;
    ++bound;
    const std::string seen = testing::readFile(*target / "hello");
    INFO("bind " << i << " shows " << seen);
    CHECK(seen != "outside");
    REQUIRE(agent::cleanSubPaths(d.pod).ok());
  }
  swapper.stop();
  INFO(bound << " of 300 bound");
  CHECK(agent::mountPointsBelow(d.pod).empty());
  CHECK(testing::readFile(d.outside / "hello") == "outside");
}

TEST_CASE(
    "subpath: while the directory a subPath needs made is swapped for a symlink out of the "
    "volume, nothing outside is made or changes its mode",
    "[integration][subpath]") {
  skipUnlessRoot();
  Dirs d;
  ::chmod(d.vol.c_str(), 0777);
  ::chmod(d.outside.c_str(), 0700);
  // The swapper renames each directory "made" it finds away (inside the volume) and puts a
  // symlink to the outside directory in its place, then takes the symlink away again.
  Swapper swapper([&d, n = 0]() mutable {
    std::error_code ec;
    const auto made = d.vol / "made";
    const auto st = fs::symlink_status(made, ec);
    if (fs::is_directory(st)) {
      fs::rename(made, d.vol / ("moved-" + std::to_string(n++)), ec);
      fs::create_directory_symlink(d.outside, made, ec);
    } else if (fs::is_symlink(st)) {
      fs::remove(made, ec);
    }
  });
  int bound = 0;
  for (int i = 0; i < 300; ++i) {
    if (agent::bindSubPath(d.vol, d.vol / "made" / "x", d.pod, "v", "main", 0).ok()) ++bound;
    REQUIRE(agent::cleanSubPaths(d.pod).ok());
  }
  swapper.stop();
  INFO(bound << " of 300 bound");
  struct stat outside {};
  REQUIRE(::stat(d.outside.c_str(), &outside) == 0);
  CHECK((outside.st_mode & 07777) == 0700);
  CHECK_FALSE(fs::exists(d.outside / "x"));
  CHECK(testing::readFile(d.outside / "hello") == "outside");
}

TEST_CASE(
    "subpath: an orphaned pod directory with a subPath of a directory outside it (a hostPath) "
    "is removed without touching that directory's files",
    "[integration][subpath]") {
  skipUnlessRoot();
  Dirs d;
  // The outside directory plays a hostPath volume with a subPath.
  fs::create_directories(d.outside / "sub");
  write(d.outside / "sub" / "keep", "node data");
  auto target = agent::bindSubPath(d.outside, d.outside / "sub", d.pod, "host", "main", 0);
  REQUIRE(target.ok());
  agent::PodDirectories dirs(d.tmp.path());
  CHECK(dirs.removeOrphans({}, {}));
  CHECK_FALSE(fs::exists(d.pod));
  CHECK(agent::mountPointsBelow(d.tmp.path()).empty());
  CHECK(testing::readFile(d.outside / "sub" / "keep") == "node data");

  SECTION("unmountVolumes of a terminated pod undoes its subPath mounts and keeps the directory") {
    fs::create_directories(d.tmp.path() / "pods" / "uid-2");
    const auto pod2 = d.tmp.path() / "pods" / "uid-2";
    REQUIRE(agent::bindSubPath(d.outside, d.outside / "sub", pod2, "host", "main", 0).ok());
    REQUIRE(dirs.unmountVolumes("uid-2").ok());
    CHECK(agent::mountPointsBelow(pod2).empty());
    CHECK(fs::exists(pod2));
    CHECK(testing::readFile(d.outside / "sub" / "keep") == "node data");
  }
}
