#include "agent/volumes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>

#include <nlohmann/json.hpp>

#include "agent/volume/tmpfs.h"
#include "agent/volume/volume_sources.h"
#include "api/pod_update.h"
#include "base/log.h"
#include "base/path_component.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

// kubelet's emptyDir permissions (0777: containers of any user share it) and, with an fsGroup,
// its SetVolumeOwnership: group fsGroup, group read-write, and setgid so that files made in it
// inherit the group.
base::Status setEmptyDirOwnership(const std::filesystem::path& path,
                                  std::optional<int64_t> fs_group) {
  mode_t mode = 0777;
  if (fs_group) {
    if (::chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(*fs_group)) != 0) {
      return base::internalError("cannot set the group of " + path.string() + " to fsGroup " +
                                 std::to_string(*fs_group) + ": " + std::strerror(errno));
    }
    mode |= S_ISGID;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 07777) == mode) return base::okStatus();
  if (::chmod(path.c_str(), mode) != 0) {
    return base::internalError("cannot chmod " + path.string() + ": " + std::strerror(errno));
  }
  return base::okStatus();
}

// The plugin directory of a volume the agent writes, as kubelet names it.
std::string_view pluginDirectory(std::string_view source_type) {
  if (source_type == "configMap") return "kubernetes.io~configmap";
  if (source_type == "secret") return "kubernetes.io~secret";
  if (source_type == "downwardAPI") return "kubernetes.io~downward-api";
  return "kubernetes.io~projected";
}

// The source object of volume `name` in the pod's spec JSON; null when it is not there.
const nlohmann::json* volumeSource(const nlohmann::json& spec, const api::Volume& v) {
  auto volumes = spec.find("volumes");
  if (volumes == spec.end() || !volumes->is_array()) return nullptr;
  for (const auto& volume : *volumes) {
    auto name = volume.find("name");
    if (name == volume.end() || *name != v.name) continue;
    auto source = volume.find(v.source_type);
    return source == volume.end() ? nullptr : &*source;
  }
  return nullptr;
}

}  // namespace

base::Status VolumePreparer::checkPodPathNames(const api::Pod& pod) {
  RETURN_IF_ERROR(runtime::checkPodPathNames(pod));
  for (const auto& v : pod.spec->volumes) {
    RETURN_IF_ERROR(base::checkPathComponent("volume name", v.name));
  }
  return base::okStatus();
}

base::StatusOr<std::filesystem::path> VolumePreparer::emptyDir(const api::Pod& pod,
                                                               const api::Volume& v) const {
  auto pod_dir = dirs_.path(pod.metadata.uid);
  if (!pod_dir.ok()) return pod_dir.status();
  auto dir =
      base::childPath(*pod_dir / "volumes" / "kubernetes.io~empty-dir", "volume name", v.name);
  if (!dir.ok()) return dir.status();
  std::error_code ec;
  std::filesystem::create_directories(*dir, ec);
  if (ec) {
    return base::internalError("cannot create emptyDir volume " + v.name + " at " + dir->string() +
                               ": " + ec.message());
  }
  if (!v.empty_dir_medium.empty() && v.empty_dir_medium != "Memory") {
    // kubelet's emptyDir plugin fails the mount the same way (HugePages media are not supported
    // here).
    return base::unavailableError("MountVolume.SetUp failed for volume \"" + v.name +
                                  "\" : unknown storage medium \"" + v.empty_dir_medium + "\"");
  }
  const bool holds_files =
      v.empty_dir_medium == "Memory" && !isMountPoint(*dir) &&
      std::filesystem::directory_iterator(*dir, ec) != std::filesystem::directory_iterator();
  if (holds_files) {
    // Made on the disk by an agent that did not mount memory-backed emptyDirs (or one that may
    // not mount), and in use: a tmpfs over it would hide what the pod's containers wrote. Said
    // once, not at every sync.
    static std::once_flag logged;
    std::call_once(logged, [&] {
      log()->warn(
          "An emptyDir of medium Memory already holds files on the disk; it stays there pod={} "
          "volume={} path={}",
          api::podRef(pod), v.name, dir->string());
    });
  } else if (v.empty_dir_medium == "Memory") {
    // kubelet's setupTmpfs: a tmpfs of its own, as large as sizeLimit.
    std::optional<int64_t> size;
    if (v.empty_dir_size_limit && !v.empty_dir_size_limit->isZero()) {
      size = v.empty_dir_size_limit->value();
    }
    auto mounted = ensureEmptyDirTmpfs(*dir, size);
    if (!mounted.ok()) {
      return base::internalError("emptyDir volume " + v.name +
                                 " (medium Memory): " + mounted.status().message());
    }
    static std::once_flag logged;
    if (!*mounted) {
      std::call_once(logged, [&] {
        log()->warn(
            "Cannot mount a tmpfs for emptyDir volumes of medium Memory (not permitted): they are "
            "directories on the disk path={}",
            dir->string());
      });
    }
  }
  const auto& psc = pod.spec->security_context;
  RETURN_IF_ERROR(setEmptyDirOwnership(*dir, psc ? psc->fs_group : std::nullopt));
  return dir;
}

base::StatusOr<std::filesystem::path> VolumePreparer::hostPath(const api::Pod& pod,
                                                               const api::Volume& v) const {
  std::filesystem::path path = v.host_path;
  const auto& type = v.host_path_type;
  const bool creates = type == "DirectoryOrCreate" || type == "FileOrCreate";
  if (creates && !allow_root_api_pods_ && !api::isStaticPod(pod)) {
    // The agent (root) would create any path the pod names: a pod from the apiserver may not.
    return base::permissionDeniedError(
        "hostPath volume " + v.name + ": type " + type + " would have the agent create " +
        path.string() + " as root; pods from the apiserver may not (create it on the node and " +
        "use type " + (type == "FileOrCreate" ? "File" : "Directory") +
        ", or start nodeagent with --allow-root-api-pods)");
  }
  std::error_code ec;
  if (type == "DirectoryOrCreate") {
    std::filesystem::create_directories(path, ec);
  } else if (type == "FileOrCreate" && !std::filesystem::exists(path, ec)) {
    std::filesystem::create_directories(path.parent_path(), ec);
    FILE* f = std::fopen(path.c_str(), "a");
    if (f != nullptr) std::fclose(f);
  }
  // kubelet's hostPath type check (the path's symlinks followed, as its os.Stat). A failure is a
  // failed mount, tried again at the next sync (a socket whose daemon restarts comes back).
  if (type.empty()) return path;
  namespace fs = std::filesystem;
  ec.clear();
  const fs::file_status st = fs::status(path, ec);
  const auto fail = [&](const std::string& what) {
    return base::unavailableError("MountVolume.SetUp failed for volume \"" + v.name +
                                  "\" : hostPath type check failed: " + path.string() + " " + what);
  };
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return fail("cannot be read: " + ec.message());
  }
  if ((type == "Directory" || type == "DirectoryOrCreate") && !fs::is_directory(st)) {
    return fail("is not a directory");
  }
  if ((type == "File" || type == "FileOrCreate") && !fs::is_regular_file(st)) {
    return fail("is not a file");
  }
  if (type == "Socket" && !fs::is_socket(st)) return fail("is not a socket file");
  if (type == "CharDevice" && !fs::is_character_file(st)) return fail("is not a character device");
  if (type == "BlockDevice" && !fs::is_block_file(st)) return fail("is not a block device");
  return path;
}

base::StatusOr<std::filesystem::path> VolumePreparer::apiData(const api::Pod& pod,
                                                              const api::Volume& v,
                                                              const nlohmann::json& spec) const {
  const nlohmann::json* source = volumeSource(spec, v);
  if (source == nullptr) return base::internalError("the pod's JSON has no such volume");
  ASSIGN_OR_RETURN(VolumePayload payload,
                   apiDataVolumePayload(pod, v.source_type, *source, objects_.get(), node_));
  auto pod_dir = dirs_.path(pod.metadata.uid);
  if (!pod_dir.ok()) return pod_dir.status();
  ASSIGN_OR_RETURN(
      auto dir, base::childPath(*pod_dir / "volumes" / std::string(pluginDirectory(v.source_type)),
                                "volume name", v.name));
  if (v.source_type == "secret" || v.source_type == "projected") {
    // kubelet's memory medium for them: secrets and tokens stay off the disk where it may.
    auto tmpfs = ensureTmpfs(dir);
    if (!tmpfs.ok()) return tmpfs.status();
    static std::once_flag logged;
    if (!*tmpfs) {
      std::call_once(logged, [&] {
        log()->warn(
            "Cannot mount a tmpfs for secret and projected volumes (not permitted): their "
            "files are written to the disk path={}",
            dir.string());
      });
    }
  }
  const auto& psc = pod.spec->security_context;
  std::optional<gid_t> fs_group;
  if (psc && psc->fs_group) fs_group = static_cast<gid_t>(*psc->fs_group);
  RETURN_IF_ERROR(writeAtomically(dir, payload, fs_group).status());
  return dir;
}

base::StatusOr<std::vector<runtime::PodVolume>> VolumePreparer::prepare(const api::Pod& pod) const {
  std::vector<runtime::PodVolume> out;
  std::optional<nlohmann::json> spec;  // parsed once, for the volumes the agent writes
  for (const auto& v : pod.spec->volumes) {
    base::StatusOr<std::filesystem::path> path = std::filesystem::path();
    if (v.source_type == "emptyDir") {
      path = emptyDir(pod, v);
    } else if (v.source_type == "hostPath") {
      path = hostPath(pod, v);
    } else if (isApiDataVolume(v.source_type)) {
      if (!spec) {
        spec = pod.raw->spec().empty() ? nlohmann::json::object()
                                       : nlohmann::json::parse(pod.raw->spec());
      }
      path = apiData(pod, v, *spec);
      if (!path.ok()) {
        // Unavailable (the next sync tries again), in kubelet's FailedMount event wording.
        return base::unavailableError("MountVolume.SetUp failed for volume \"" + v.name +
                                      "\" : " + path.status().message());
      }
    } else {
      return base::unimplementedError("volume " + v.name + ": type \"" + v.source_type +
                                      "\" is not supported by nodeagent (only emptyDir, hostPath, "
                                      "configMap, secret, downwardAPI and projected)");
    }
    if (!path.ok()) return path.status();
    out.push_back({v.name, std::move(*path)});
  }
  return out;
}

base::StatusOr<std::vector<runtime::Mount>> VolumePreparer::mountsFor(
    const api::Pod& pod, const api::Container& container,
    const std::vector<runtime::PodVolume>& volumes) {
  std::vector<runtime::Mount> out;
  for (const auto& m : container.volume_mounts) {
    const runtime::PodVolume* volume = nullptr;
    for (const auto& v : volumes) {
      if (v.name == m.name) volume = &v;
    }
    if (volume == nullptr) {
      return base::invalidArgumentError("container \"" + container.name + "\": volumeMount " +
                                        m.mount_path + ": the pod has no volume \"" + m.name +
                                        "\"");
    }
    auto host = volume->host_path;
    std::filesystem::path volume_root;
    if (!m.sub_path.empty()) {
      volume_root = volume->host_path;
      const std::filesystem::path sub(m.sub_path);
      bool escapes = sub.is_absolute();
      for (const auto& part : sub) escapes = escapes || part == "..";
      if (escapes) {
        return base::invalidArgumentError("container \"" + container.name + "\": volumeMount " +
                                          m.mount_path + ": subPath \"" + m.sub_path +
                                          "\" must be a relative path without '..'");
      }
      host /= sub;
    }
    bool read_only = m.read_only;
    for (const auto& v : pod.spec->volumes) {
      if (v.name == m.name && isApiDataVolume(v.source_type)) read_only = true;
    }
    out.push_back({m.name, std::move(host), m.mount_path, read_only, std::move(volume_root)});
  }
  return out;
}

}  // namespace nodeagent::agent
