#include "agent/images/image_manager.h"

#include <algorithm>
#include <cctype>

#include "agent/volume/api_objects.h"
#include "base/blocking.h"
#include "base/duration.h"
#include "base/log.h"
#include "config/pod_defaults.h"

namespace nodeagent::agent::images {
namespace {

NODEAGENT_LOGGER("images")

std::string quoteImage(const std::string& image) { return "\"" + image + "\""; }

// kubelet's container reference: init containers are named by their own list.
std::string fieldPath(const api::Pod& pod, const api::Container& container) {
  const auto& init = pod.spec->init_containers;
  const bool is_init = std::any_of(
      init.begin(), init.end(), [&](const api::Container& c) { return c.name == container.name; });
  return std::string(is_init ? "spec.initContainers{" : "spec.containers{") + container.name + "}";
}

EnsureImageResult failure(std::string_view reason, std::string message,
                          std::optional<base::Duration> retry_in = std::nullopt) {
  return EnsureImageResult{"", std::string(reason), std::move(message), retry_in, std::nullopt};
}

// kubelet's utilerrors aggregate of the pulls' errors: one as itself, more (deduplicated) in
// brackets.
std::string aggregateErrors(const std::vector<std::string>& errors) {
  std::vector<std::string> seen;
  for (const auto& error : errors) {
    if (std::find(seen.begin(), seen.end(), error) == seen.end()) seen.push_back(error);
  }
  if (seen.size() == 1) return seen.front();
  std::string joined;
  for (const auto& error : seen) joined += (joined.empty() ? "" : ", ") + error;
  return "[" + joined + "]";
}

}  // namespace

bool shouldPullImage(const api::Container& container, bool present) {
  const std::string policy = container.image_pull_policy.empty()
                                 ? config::defaultImagePullPolicy(container.image)
                                 : container.image_pull_policy;
  if (policy == kPullNever) return false;
  return policy == kPullAlways || (policy == kPullIfNotPresent && !present);
}

base::StatusOr<std::string> applyDefaultImageTag(std::string_view image) {
  const bool blank =
      std::any_of(image.begin(), image.end(), [](unsigned char c) { return std::isspace(c) != 0; });
  if (image.empty() || blank || image.front() == '/' || image.back() == '/' ||
      image.back() == ':' || image.back() == '@') {
    return base::invalidArgumentError("couldn't parse image reference " +
                                      quoteImage(std::string(image)) +
                                      ": invalid reference format");
  }
  // A tag is a ':' after the last '/' (a ':' before it belongs to the registry's port).
  const size_t last_slash = image.rfind('/');
  const size_t colon = image.rfind(':');
  const bool tagged = colon != std::string_view::npos &&
                      (last_slash == std::string_view::npos || colon > last_slash);
  const bool digested = image.find('@') != std::string_view::npos;
  if (tagged || digested) return std::string(image);
  return std::string(image) + ":latest";
}

ImageManager::ImageManager(base::Clock& clock, runtime::Runtime& runtime, EventSink record_event,
                           ImageManagerOptions options,
                           std::shared_ptr<ApiObjectSource> api_objects,
                           asio::any_io_executor blocking)
    : clock_(clock),
      runtime_(runtime),
      record_event_(std::move(record_event)),
      options_(options),
      api_objects_(std::move(api_objects)),
      blocking_(std::move(blocking)) {}

void ImageManager::event(const api::Pod& pod, const api::Container& container, const char* type,
                         std::string_view reason, const std::string& message) const {
  if (std::string_view(type) == "Warning") {
    log()->warn("{} pod={} container={}", message, api::podRef(pod), container.name);
  } else {
    log()->info("{} pod={} container={}", message, api::podRef(pod), container.name);
  }
  if (record_event_) {
    record_event_(pod, type, std::string(reason), message, fieldPath(pod, container));
  }
}

asio::awaitable<EnsureImageResult> ImageManager::ensureImageExists(api::PodPtr pod,
                                                                   api::Container container) {
  auto image = applyDefaultImageTag(container.image);
  if (!image.ok()) {
    auto message = "Failed to apply default image tag " + quoteImage(container.image) + ": " +
                   image.status().message();
    event(*pod, container, "Warning", "InspectFailed", message);
    co_return failure(kInvalidImageName, std::move(message));
  }
  auto inspect = runtime_.imageStatus(*image);
  auto status = co_await std::move(inspect);
  if (!status.ok()) {
    auto message =
        "Failed to inspect image " + quoteImage(container.image) + ": " + status.status().message();
    event(*pod, container, "Warning", "InspectFailed", message);
    co_return failure(kErrImageInspect, std::move(message));
  }
  const bool present = status->has_value();
  if (!shouldPullImage(container, present)) {
    if (present) {
      event(*pod, container, "Normal", "Pulled",
            "Container image " + quoteImage(container.image) + " already present on machine");
      co_return EnsureImageResult{(*status)->id, "", "", std::nullopt, **status};
    }
    auto message = "Container image " + quoteImage(container.image) +
                   " is not present with pull policy of Never";
    event(*pod, container, "Warning", kErrImageNeverPull, message);
    co_return failure(kErrImageNeverPull, std::move(message));
  }
  auto key = pod->metadata.uid + "_" + container.image;
  auto pulled = pull(std::move(pod), std::move(container), *std::move(image), std::move(key));
  co_return co_await std::move(pulled);
}

asio::awaitable<EnsureImageResult> ImageManager::pull(api::PodPtr pod, api::Container container,
                                                      std::string image, std::string key) {
  base::Duration remaining{};
  if (inBackoff(key, &remaining)) {
    auto message = "Back-off pulling image " + quoteImage(container.image);
    event(*pod, container, "Normal", "BackOff", message);
    co_return failure(kImagePullBackOff, std::move(message), remaining);
  }
  auto keyring = co_await pullKeyring(pod);
  event(*pod, container, "Normal", "Pulling", "Pulling image " + quoteImage(container.image));
  const auto started = clock_.now();
  base::StatusOr<std::string> pulled = keyring.status();
  if (keyring.ok()) {
    auto call = pullWithKeyring(std::move(image), *keyring);
    pulled = co_await std::move(call);
  }
  if (!pulled.ok()) {
    event(*pod, container, "Warning", "Failed",
          "Failed to pull image " + quoteImage(container.image) + ": " + pulled.status().message());
    const auto backoff = recordPullFailure(key);
    co_return failure(kErrImagePull, pulled.status().message(), backoff);
  }
  event(*pod, container, "Normal", "Pulled",
        "Successfully pulled image " + quoteImage(container.image) + " in " +
            base::formatDuration(clock_.now() - started));
  gc();
  co_return EnsureImageResult{*std::move(pulled), "", "", std::nullopt, std::nullopt};
}

asio::awaitable<base::StatusOr<Keyring>> ImageManager::pullKeyring(const api::PodPtr& pod) {
  if (pod->spec->image_pull_secrets.empty()) co_return Keyring{};
  if (!blocking_) co_return readPullSecrets(*pod);
  auto read = [this, pod] { return readPullSecrets(*pod); };
  co_return co_await base::runBlocking(blocking_, std::move(read));
}

base::StatusOr<Keyring> ImageManager::readPullSecrets(const api::Pod& pod) const {
  Keyring keyring;
  std::string failed;
  for (const auto& name : pod.spec->image_pull_secrets) {
    // The API allowed entries without a name; kubelet ignores them.
    if (name.empty()) continue;
    base::Status error = base::unavailableError("no apiserver to read secrets from");
    if (api_objects_) {
      auto secret = api_objects_->get(ApiObjectKind::kSecret, pod.metadata.namespace_, name,
                                      pod.metadata.uid);
      auto data = secret.ok() ? apiObjectData(ApiObjectKind::kSecret, **secret)
                              : base::StatusOr<std::map<std::string, std::string>>(secret.status());
      if (data.ok()) {
        ASSIGN_OR_RETURN(auto config,
                         dockerConfigFromSecret(stringMember(**secret, "type"), *data));
        keyring.add(config);
        continue;
      }
      error = data.status();
    }
    log()->warn(
        "Unable to retrieve pull secret, the image pull may not succeed. pod={} secret={}/{} "
        "err={}",
        api::podRef(pod), pod.metadata.namespace_, name, error.message());
    failed += (failed.empty() ? "" : ", ") + name;
  }
  if (!failed.empty() && record_event_) {
    record_event_(pod, "Warning", "FailedToRetrieveImagePullSecret",
                  "Unable to retrieve some image pull secrets (" + failed +
                      "); attempting to pull the image may not succeed.",
                  "");
  }
  return keyring;
}

asio::awaitable<base::StatusOr<std::string>> ImageManager::pullWithKeyring(std::string image,
                                                                           const Keyring& keyring) {
  const auto credentials = keyring.lookup(repositoryToPull(image));
  if (credentials.empty()) {
    auto call = runtime_.pullImage(std::move(image), std::nullopt);
    co_return co_await std::move(call);
  }
  std::vector<std::string> errors;
  base::Status last = base::okStatus();
  for (const auto& credential : credentials) {
    runtime::RegistryAuth auth;
    auth.username = credential.username;
    auth.password = credential.password;
    auto call = runtime_.pullImage(image, std::move(auth));
    auto pulled = co_await std::move(call);
    if (pulled.ok()) co_return pulled;
    errors.push_back(pulled.status().message());
    last = pulled.status();
  }
  co_return base::Status(last.code(), aggregateErrors(errors));
}

bool ImageManager::inBackoff(const std::string& key, base::Duration* remaining) {
  std::lock_guard lock(mu_);
  auto it = backoff_.find(key);
  if (it == backoff_.end()) return false;
  const auto now = clock_.now();
  if (expired(it->second, now)) return false;
  const auto since = now - it->second.last_update;
  if (since >= it->second.backoff) return false;
  *remaining = std::chrono::duration_cast<base::Duration>(it->second.backoff - since);
  return true;
}

base::Duration ImageManager::recordPullFailure(const std::string& key) {
  std::lock_guard lock(mu_);
  const auto now = clock_.now();
  auto it = backoff_.find(key);
  if (it == backoff_.end() || expired(it->second, now)) {
    backoff_[key] = BackoffEntry{options_.backoff_initial, now};
    return options_.backoff_initial;
  }
  it->second.backoff = std::min(it->second.backoff * 2, options_.backoff_max);
  it->second.last_update = now;
  return it->second.backoff;
}

void ImageManager::gc() {
  std::lock_guard lock(mu_);
  const auto now = clock_.now();
  std::erase_if(backoff_, [&](const auto& kv) { return expired(kv.second, now); });
}

}  // namespace nodeagent::agent::images
