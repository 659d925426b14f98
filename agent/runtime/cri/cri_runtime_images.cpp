// CriRuntime's images: ImageStatus and PullImage for the image manager, and what image garbage
// collection asks (ListImages, RemoveImage, ImageFsInfo, the images containers were created from).
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "agent/images/image_gc_manager.h"
#include "agent/runtime/cri/cri_runtime.h"
#include "base/blocking.h"

namespace nodeagent::runtime {
namespace {

ImageInfo toRuntimeImage(const cri::ImageInfo& in) {
  ImageInfo out{in.id, in.repo_tags, in.repo_digests, in.size, in.uid, in.username};
  out.pinned = in.pinned;
  return out;
}

// The runtime's sandbox (pause) image as its verbose Status tells it (containerd's CRI plugin:
// info["config"] is its configuration as JSON, with "sandboxImage"); "" when it does not say. An
// error when the runtime does not answer: without it the sandbox image could not be kept.
base::StatusOr<std::string> sandboxImage(cri::CriClient& client) {
  auto status = client.status(/*verbose=*/true);
  if (!status.ok()) return status.status();
  auto config = status->info.find("config");
  if (config == status->info.end()) return std::string();
  auto json = nlohmann::json::parse(config->second, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::string();
  auto image = json.find("sandboxImage");
  if (image == json.end() || !image->is_string()) return std::string();
  return image->get<std::string>();
}

}  // namespace

base::StatusOr<std::optional<ImageInfo>> CriRuntime::lookUpImage(cri::CriClient& client,
                                                                 const std::string& image) {
  auto answer = client.imageStatus(image);
  if (!answer.ok()) return answer.status();
  if (!answer->has_value()) return std::optional<ImageInfo>();
  return std::optional<ImageInfo>(toRuntimeImage(**answer));
}

asio::awaitable<base::StatusOr<std::optional<ImageInfo>>> CriRuntime::imageStatus(
    std::string image) {
  auto client = client_;
  auto ask = [client, image = std::move(image)]() -> base::StatusOr<std::optional<ImageInfo>> {
    return lookUpImage(*client, image);
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(ask));
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<std::string>> CriRuntime::pullImage(
    std::string image, std::optional<RegistryAuth> auth) {
  auto client = client_;
  auto pull = [client, image = std::move(image),
               auth = std::move(auth)]() -> base::StatusOr<std::string> {
    std::optional<cri::AuthConfig> cri_auth;
    if (auth) {
      cri_auth = cri::AuthConfig{auth->username,       auth->password,       auth->auth,
                                 auth->server_address, auth->identity_token, auth->registry_token};
    }
    return client->pullImage(image, cri_auth);
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(pull));
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<std::vector<ImageInfo>>> CriRuntime::listImages() {
  auto client = client_;
  auto list = [client]() -> base::StatusOr<std::vector<ImageInfo>> {
    auto images = client->listImages();
    if (!images.ok()) return images.status();
    // The sandbox image is used by every pod's sandbox, which no container names: pinned, as
    // kubelet pins its --pod-infra-container-image.
    auto sandbox = sandboxImage(*client);
    if (!sandbox.ok()) return sandbox.status();
    std::vector<ImageInfo> out;
    out.reserve(images->size());
    for (const auto& in : *images) {
      out.push_back(toRuntimeImage(in));
      if (agent::images::imageNamedBy(out.back(), *sandbox)) out.back().pinned = true;
    }
    return out;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(list));
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> CriRuntime::removeImage(std::string image) {
  auto client = client_;
  auto remove = [client, image = std::move(image)]() -> base::Status {
    auto status = client->removeImage(image);
    return status.code() == base::StatusCode::kNotFound ? base::okStatus() : status;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(remove));
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<ImageFsInfo>> CriRuntime::imageFsInfo() {
  auto client = client_;
  auto ask = [client]() -> base::StatusOr<ImageFsInfo> {
    auto usage = client->imageFsInfo();
    if (!usage.ok()) return usage.status();
    ImageFsInfo out;
    out.mountpoint = usage->mountpoint;
    out.used_bytes = usage->used_bytes;
    out.inodes_used = usage->inodes_used;
    struct statvfs fs {};
    if (::statvfs(usage->mountpoint.c_str(), &fs) != 0) {
      return base::unknownError("statvfs of the image filesystem " + usage->mountpoint + ": " +
                                std::strerror(errno));
    }
    out.capacity_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
    out.available_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    return out;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(ask));
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<std::set<std::string>>> CriRuntime::imagesInUse() {
  auto client = client_;
  auto list = [client]() -> base::StatusOr<std::set<std::string>> {
    auto containers = client->listContainers();
    if (!containers.ok()) return containers.status();
    std::set<std::string> out;
    for (const auto& c : *containers) {
      if (!c.image_ref.empty()) out.insert(c.image_ref);
    }
    return out;
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(list));
  co_return co_await std::move(task);
}

}  // namespace nodeagent::runtime
