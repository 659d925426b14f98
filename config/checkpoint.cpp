#include "config/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "api/pod_json.h"
#include "api/pod_update.h"
#include "base/log.h"
#include "base/path_component.h"
#include "base/printable.h"

namespace nodeagent::config {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFilePrefix = "Pod_";
constexpr std::string_view kFileSuffix = ".json";
constexpr std::string_view kTempSuffix = ".tmp";
// A checkpoint is one pod; anything this large is not one of ours.
constexpr uintmax_t kMaxCheckpointBytes = 10 * 1024 * 1024;

NODEAGENT_LOGGER("config")

std::string errnoText(int err) { return std::strerror(err); }

bool validUid(std::string_view uid) {
  if (uid.empty() || uid.size() > 253) return false;
  return std::all_of(uid.begin(), uid.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::string fileNameFor(std::string_view uid) {
  std::string name(kFilePrefix);
  name += uid;
  name += kFileSuffix;
  return name;
}

// The UID a checkpoint file name stands for, or "" if the name is not a checkpoint's.
std::string uidFromFileName(std::string_view name) {
  if (name.size() <= kFilePrefix.size() + kFileSuffix.size()) return {};
  if (!name.starts_with(kFilePrefix) || !name.ends_with(kFileSuffix)) return {};
  std::string uid(
      name.substr(kFilePrefix.size(), name.size() - kFilePrefix.size() - kFileSuffix.size()));
  return validUid(uid) ? uid : std::string();
}

base::Status writeAll(int fd, std::string_view data, const fs::path& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return base::internalError("writing checkpoint " + path.string() + ": " + errnoText(errno));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return base::okStatus();
}

// Makes a rename inside `dir` durable.
base::Status syncDir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return base::internalError("opening checkpoint folder " + dir.string() + ": " +
                               errnoText(errno));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return base::internalError("syncing checkpoint folder " + dir.string() + ": " + errnoText(err));
  }
  return base::okStatus();
}

base::Status writeFileAtomically(const fs::path& path, std::string_view content) {
  fs::path tmp = path.parent_path() / ("." + path.filename().string() + std::string(kTempSuffix));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return base::internalError("creating checkpoint " + tmp.string() + ": " + errnoText(errno));
  }
  base::Status status = writeAll(fd, content, tmp);
  if (status.ok() && ::fsync(fd) != 0) {
    status = base::internalError("syncing checkpoint " + tmp.string() + ": " + errnoText(errno));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = base::internalError("closing checkpoint " + tmp.string() + ": " + errnoText(errno));
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = base::internalError("renaming checkpoint " + tmp.string() + " to " + path.string() +
                                 ": " + errnoText(errno));
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  return syncDir(path.parent_path());
}

base::StatusOr<std::string> readSmallFile(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return base::internalError("reading checkpoint " + path.string() + ": " + ec.message());
  if (size > kMaxCheckpointBytes) {
    return base::dataLossError("checkpoint " + path.string() + " is " + std::to_string(size) +
                               " bytes, more than the limit of " +
                               std::to_string(kMaxCheckpointBytes));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::internalError("opening checkpoint " + path.string());
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return base::internalError("reading checkpoint " + path.string());
  return buf.str();
}

}  // namespace

bool wantsBootstrapCheckpoint(const api::Pod& pod) {
  auto it = pod.metadata.annotations.find(std::string(api::kBootstrapCheckpointAnnotationKey));
  return it != pod.metadata.annotations.end() && it->second == "true";
}

CheckpointManager::CheckpointManager(std::filesystem::path dir) : dir_(std::move(dir)) {}

base::StatusOr<std::filesystem::path> CheckpointManager::pathFor(const std::string& uid) const {
  if (!validUid(uid)) {
    return base::invalidArgumentError("pod uid " + base::goQuote(uid) +
                                      " cannot name a checkpoint file (metadata.uid)");
  }
  return base::childPath(dir_, "checkpoint file name", fileNameFor(uid));
}

base::Status CheckpointManager::ensureDirLocked() {
  if (dir_ready_) return base::okStatus();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    return base::internalError("creating checkpoint folder " + dir_.string() + ": " + ec.message());
  }
  ::chmod(dir_.c_str(), 0700);  // pods can carry sensitive specs; best effort
  dir_ready_ = true;
  return base::okStatus();
}

base::Status CheckpointManager::listLocked() {
  if (known_) return base::okStatus();
  RETURN_IF_ERROR(ensureDirLocked());
  std::set<std::string> uids;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(".") && name.ends_with(kTempSuffix)) {
      // An interrupted write: the rename never happened, so the real checkpoint (if any) is whole.
      std::error_code rm_ec;
      fs::remove(it->path(), rm_ec);
      continue;
    }
    std::string uid = uidFromFileName(name);
    if (!uid.empty()) uids.insert(std::move(uid));
  }
  if (ec) {
    return base::internalError("listing checkpoint folder " + dir_.string() + ": " + ec.message());
  }
  known_ = std::move(uids);
  return base::okStatus();
}

base::Status CheckpointManager::removeLocked(const std::string& uid) {
  RETURN_IF_ERROR(listLocked());
  if (!known_->count(uid)) return base::okStatus();
  ASSIGN_OR_RETURN(fs::path path, pathFor(uid));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return base::internalError("removing checkpoint " + path.string() + ": " + errnoText(errno));
  }
  known_->erase(uid);
  log()->info("Removed pod checkpoint uid={} path={}", uid, path.string());
  return base::okStatus();
}

base::Status CheckpointManager::writePod(const api::Pod& pod) {
  std::lock_guard lock(mu_);
  if (!wantsBootstrapCheckpoint(pod)) return removeLocked(pod.metadata.uid);
  ASSIGN_OR_RETURN(fs::path path, pathFor(pod.metadata.uid));
  RETURN_IF_ERROR(listLocked());
  if (!pod.raw)
    return base::internalError("pod " + api::podRef(pod) + " has no JSON to checkpoint");
  std::string content = pod.raw->str();
  content += '\n';
  RETURN_IF_ERROR(writeFileAtomically(path, content));
  if (known_->insert(pod.metadata.uid).second) {
    log()->info("Wrote pod checkpoint pod={} uid={} path={}", api::podRef(pod), pod.metadata.uid,
                path.string());
  }
  return base::okStatus();
}

base::Status CheckpointManager::deletePod(const std::string& uid) {
  std::lock_guard lock(mu_);
  return removeLocked(uid);
}

base::StatusOr<std::set<std::string>> CheckpointManager::checkpointedUids() {
  std::lock_guard lock(mu_);
  RETURN_IF_ERROR(listLocked());
  return *known_;
}

base::StatusOr<CheckpointLoad> CheckpointManager::loadPods() {
  std::lock_guard lock(mu_);
  known_.reset();  // re-read what is on disk now
  RETURN_IF_ERROR(listLocked());
  CheckpointLoad out;
  for (const std::string& uid : *known_) {
    const fs::path path = dir_ / fileNameFor(uid);
    auto report = [&](base::Status status) {
      log()->error("Failed to restore pod checkpoint, skipping it path={} err={}", path.string(),
                   status.message());
      out.errors.push_back(std::move(status));
    };
    auto content = readSmallFile(path);
    if (!content.ok()) {
      report(content.status());
      continue;
    }
    auto pod = api::decodePodJson(*content);
    if (!pod.ok()) {
      report(base::dataLossError("corrupt checkpoint " + path.string() + ": " +
                                 pod.status().message()));
      continue;
    }
    if (pod->metadata.uid != uid) {
      report(base::dataLossError("corrupt checkpoint " + path.string() + ": metadata.uid is \"" +
                                 pod->metadata.uid + "\", expected \"" + uid + "\""));
      continue;
    }
    out.pods.push_back(std::make_shared<const api::Pod>(std::move(*pod)));
  }
  log()->info("Loaded pod checkpoints dir={} pods={} skipped={}", dir_.string(), out.pods.size(),
              out.errors.size());
  return out;
}

}  // namespace nodeagent::config
