#include "agent/volume/atomic_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <set>
#include <system_error>
#include <vector>

namespace nodeagent::agent {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDataDir = "..data";
constexpr std::string_view kDataDirTmp = "..data_tmp";

base::Status errnoError(const std::string& what, const fs::path& path) {
  return base::internalError("cannot " + what + " " + path.string() + ": " + std::strerror(errno));
}

std::string firstComponent(const std::string& path) { return path.substr(0, path.find('/')); }

// The regular files under `dir` (relative paths).
std::set<std::string> filesUnder(const fs::path& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) out.insert(fs::relative(it->path(), dir, ec).string());
  }
  return out;
}

bool sameFile(const fs::path& path, const FileProjection& want) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if ((st.st_mode & 07777) != want.mode || static_cast<size_t>(st.st_size) != want.data.size()) {
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return in.good() || in.eof() ? data == want.data : false;
}

// Whether the current version holds exactly `payload` and every visible name points into it.
bool unchanged(const fs::path& target, const VolumePayload& payload,
               std::optional<gid_t> fs_group) {
  std::error_code ec;
  auto current = fs::read_symlink(target / kDataDir, ec);
  if (ec) return false;
  const fs::path version = target / current;
  std::set<std::string> want_files;
  for (const auto& [path, file] : payload) {
    FileProjection want = file;
    if (fs_group) want.mode |= 0440;
    if (!sameFile(version / path, want)) return false;
    want_files.insert(path);
    if (!fs::is_symlink(fs::symlink_status(target / firstComponent(path), ec))) return false;
  }
  return filesUnder(version) == want_files;
}

base::Status writeFile(const fs::path& path, const FileProjection& file,
                       std::optional<gid_t> fs_group) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec)
    return base::internalError("cannot create " + path.parent_path().string() + ": " +
                               ec.message());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errnoError("create", path);
  const char* p = file.data.data();
  size_t left = file.data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      auto st = errnoError("write", path);
      ::close(fd);
      return st;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  mode_t mode = file.mode;
  if (fs_group) {
    if (::fchown(fd, static_cast<uid_t>(-1), *fs_group) != 0) {
      auto st = errnoError("set the group (fsGroup) of", path);
      ::close(fd);
      return st;
    }
    mode |= 0440;
  }
  if (::fchmod(fd, mode) != 0) {
    auto st = errnoError("chmod", path);
    ::close(fd);
    return st;
  }
  if (::close(fd) != 0) return errnoError("close", path);
  return base::okStatus();
}

// A new hidden version directory under `target`, named by the time as kubelet's.
base::StatusOr<fs::path> makeVersionDir(const fs::path& target, std::optional<gid_t> fs_group) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char stamp[64];
  std::strftime(stamp, sizeof stamp, "..%Y_%m_%d_%H_%M_%S.", &tm);
  std::string templ = (target / (std::string(stamp) + "XXXXXX")).string();
  if (::mkdtemp(templ.data()) == nullptr) return errnoError("create a directory in", target);
  fs::path dir(templ);
  if (fs_group && ::chown(dir.c_str(), static_cast<uid_t>(-1), *fs_group) != 0) {
    return errnoError("set the group (fsGroup) of", dir);
  }
  if (::chmod(dir.c_str(), 0755) != 0) return errnoError("chmod", dir);
  return dir;
}

}  // namespace

base::Status checkPayloadPath(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return base::invalidArgumentError("invalid path \"" + path + "\" in the volume: " + why);
  };
  if (path.empty()) return bad("must not be empty");
  if (path.size() > 4096) return bad("must be at most 4096 bytes");
  if (path.front() == '/') return bad("must be a relative path");
  if (path.rfind("..", 0) == 0) return bad("must not start with '..'");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string_view part(path.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return bad("must not contain empty, '.' or '..' components");
    }
    if (part.size() > 255) return bad("a component must be at most 255 bytes");
    start = end + 1;
  }
  return base::okStatus();
}

base::StatusOr<bool> writeAtomically(const fs::path& target, const VolumePayload& payload,
                                     std::optional<gid_t> fs_group) {
  for (const auto& [path, file] : payload) RETURN_IF_ERROR(checkPayloadPath(path));
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return base::internalError("cannot create " + target.string() + ": " + ec.message());
  if (::chmod(target.c_str(), 0755) != 0) return errnoError("chmod", target);
  if (unchanged(target, payload, fs_group)) return false;

  auto old_version = fs::read_symlink(target / kDataDir, ec);
  ASSIGN_OR_RETURN(fs::path version, makeVersionDir(target, fs_group));
  for (const auto& [path, file] : payload) {
    auto written = writeFile(version / path, file, fs_group);
    if (!written.ok()) {
      fs::remove_all(version, ec);
      return written;
    }
  }
  const fs::path tmp_link = target / kDataDirTmp;
  ::unlink(tmp_link.c_str());
  if (::symlink(version.filename().c_str(), tmp_link.c_str()) != 0) {
    auto st = errnoError("create the symlink", tmp_link);
    fs::remove_all(version, ec);
    return st;
  }
  if (::rename(tmp_link.c_str(), (target / kDataDir).c_str()) != 0) {
    auto st = errnoError("rename over", target / kDataDir);
    fs::remove_all(version, ec);
    return st;
  }
  // The visible names: one symlink per top-level name into ..data, and none left over.
  std::set<std::string> visible;
  for (const auto& [path, file] : payload) visible.insert(firstComponent(path));
  for (const auto& name : visible) {
    const fs::path link = target / name;
    if (fs::is_symlink(fs::symlink_status(link, ec))) continue;
    if (::symlink((std::string(kDataDir) + "/" + name).c_str(), link.c_str()) != 0) {
      return errnoError("create the symlink", link);
    }
  }
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(target, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("..", 0) == 0 || visible.count(name) > 0) continue;
    if (entry.is_symlink(ec)) stale.push_back(entry.path());
  }
  for (const auto& path : stale) fs::remove(path, ec);
  if (!old_version.empty() && old_version != version.filename()) {
    fs::remove_all(target / old_version, ec);
  }
  return true;
}

}  // namespace nodeagent::agent
