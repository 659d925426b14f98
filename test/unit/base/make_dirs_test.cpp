// makeDirs: one mkdir where the parent exists, the missing parents made otherwise.
#include <catch2/catch.hpp>

#include <cerrno>
#include <filesystem>

#include "base/make_dirs.h"
#include "test/support/test_util.h"

using namespace nodeagent;

TEST_CASE(
    "make dirs: a directory is made with or without its parents, an existing one is kept, "
    "and a file in the way is ENOTDIR",
    "[unit][base]") {
  testing::TempDir tmp;
  const auto dir = tmp.path() / "a";
  CHECK(base::makeDirs(dir) == 0);
  CHECK(std::filesystem::is_directory(dir));
  testing::writeFile(dir / "kept", "x");
  CHECK(base::makeDirs(dir) == 0);  // exists: fine, untouched
  CHECK(std::filesystem::exists(dir / "kept"));

  const auto deep = tmp.path() / "b" / "c" / "d";
  CHECK(base::makeDirs(deep) == 0);
  CHECK(std::filesystem::is_directory(deep));

  CHECK(base::makeDirs(dir / "kept") == ENOTDIR);
  CHECK(base::makeDirs(dir / "kept" / "below") == ENOTDIR);
}
