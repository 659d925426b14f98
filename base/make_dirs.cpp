#include "base/make_dirs.h"

#include <sys/stat.h>

#include <cerrno>
#include <system_error>

namespace nodeagent::base {

int makeDirs(const std::filesystem::path& dir) {
  if (::mkdir(dir.c_str(), 0777) == 0) return 0;
  const int err = errno;
  std::error_code ec;
  if (err == EEXIST) return std::filesystem::is_directory(dir, ec) ? 0 : ENOTDIR;
  if (err != ENOENT) return err;
  std::filesystem::create_directories(dir, ec);
  return ec ? ec.value() : 0;
}

}  // namespace nodeagent::base
