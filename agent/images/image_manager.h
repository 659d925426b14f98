// ImageManager: kubelet's images.ImageManager for runtimes whose containers run images
// (runtime::Runtime::runsImages, the CRI runtime). Before a container starts, ensureImageExists
// applies the container's imagePullPolicy, pulls the image through the runtime when the policy
// asks for it, and backs off pulls that failed (per pod and image, 10 s doubling to 300 s, as
// kubelet's flowcontrol backoff). What it does becomes the container's events (Pulling, Pulled,
// Failed, BackOff, ErrImageNeverPull, InspectFailed); a failure is answered as kubelet's reason
// and message, which the agent shows as the container's Waiting state.
//
// Pull credentials come from the pod's imagePullSecrets as kubelet's: each Secret is read through
// the ApiObjectSource (one that cannot be read is skipped, with a Warning
// FailedToRetrieveImagePullSecret event), its docker config goes into a Keyring, and the pull is
// tried with each credential matching the image's registry in turn until one succeeds (the errors
// of all of them when none does); without a match the pull is anonymous. Credentials are never
// logged nor put in an event.
//
// Threading: ensureImageExists runs on the pod's strand and waits for the runtime only through
// co_await; the strands of all pods share one manager, whose backoff state is guarded by a mutex
// never held across a co_await.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "agent/images/keyring.h"
#include "agent/runtime/runtime.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::agent {
class ApiObjectSource;
}  // namespace nodeagent::agent

namespace nodeagent::agent::images {

// The container's waiting reasons (kubelet's images errors).
inline constexpr std::string_view kErrImagePull = "ErrImagePull";
inline constexpr std::string_view kImagePullBackOff = "ImagePullBackOff";
inline constexpr std::string_view kErrImageNeverPull = "ErrImageNeverPull";
inline constexpr std::string_view kErrImageInspect = "ErrImageInspect";
inline constexpr std::string_view kInvalidImageName = "InvalidImageName";

inline constexpr std::string_view kPullAlways = "Always";
inline constexpr std::string_view kPullIfNotPresent = "IfNotPresent";
inline constexpr std::string_view kPullNever = "Never";

// What ensureImageExists found or did.
struct EnsureImageResult {
  std::string image_ref;  // the image's ID when it is there
  std::string reason;     // empty when the image is there; else one of the reasons above
  std::string message;    // kubelet's message for the reason
  // A pull failed (ErrImagePull) or is backing off (ImagePullBackOff): the time until the next
  // pull may be tried.
  std::optional<base::Duration> retry_in;
  // The image as the runtime described it when it was already there (ImageStatus: its ID and
  // user), for the container's start (StartContainerOptions::image_info); nullopt after a pull.
  std::optional<runtime::ImageInfo> image;
  bool ok() const { return reason.empty(); }
};

struct ImageManagerOptions {
  base::Duration backoff_initial = std::chrono::seconds(10);
  base::Duration backoff_max = std::chrono::seconds(300);
};

class ImageManager {
 public:
  // Records a container event (type, reason, message, field path) for the apiserver; the same
  // signature as the agent's EventSink. May be empty; must not block.
  using EventSink =
      std::function<void(const api::Pod&, const std::string& type, const std::string& reason,
                         const std::string& message, const std::string& field_path)>;

  // `clock` and `runtime` must outlive the manager. `api_objects` reads the pods' imagePullSecrets
  // (null without an apiserver: every pull secret is then one that cannot be read), on `blocking`
  // (the blocking pool; a null executor reads inline, for tests).
  ImageManager(base::Clock& clock, runtime::Runtime& runtime, EventSink record_event,
               ImageManagerOptions options = {},
               std::shared_ptr<ApiObjectSource> api_objects = nullptr,
               asio::any_io_executor blocking = {});

  // kubelet's EnsureImageExists: makes sure the runtime holds `container`'s image as its pull
  // policy says. Runs on the pod's strand. Never throws; a failure is in the result.
  asio::awaitable<EnsureImageResult> ensureImageExists(api::PodPtr pod, api::Container container);

 private:
  // The pull itself (the policy asked for it and no backoff holds it back).
  asio::awaitable<EnsureImageResult> pull(api::PodPtr pod, api::Container container,
                                          std::string image, std::string key);
  // kubelet's getPullSecretsForPod and MakeDockerKeyring: the keyring of the pod's
  // imagePullSecrets (empty without any), the secrets that could not be read reported; an error
  // for a docker config that cannot be parsed (the pull fails with it, as kubelet's).
  asio::awaitable<base::StatusOr<Keyring>> pullKeyring(const api::PodPtr& pod);
  base::StatusOr<Keyring> readPullSecrets(const api::Pod& pod) const;
  // kubelet's kuberuntime pullImage: with each matching credential in turn, else anonymously.
  asio::awaitable<base::StatusOr<std::string>> pullWithKeyring(std::string image,
                                                               const Keyring& keyring);
  // kubelet's flowcontrol.Backoff, keyed by "<pod uid>_<image>" as kubelet's image backoff: on
  // the monotonic clock, an entry untouched for twice the maximum starts over.
  struct BackoffEntry {
    base::Duration backoff{};
    base::MonotonicTime last_update{};
  };
  // IsInBackOffSinceUpdate: true while the backoff of `key`, counted from the failed pull that
  // set it, runs; the remaining wait in `remaining`.
  bool inBackoff(const std::string& key, base::Duration* remaining);
  // Next: a failed pull; the backoff of `key` doubles (or starts); returns its length.
  base::Duration recordPullFailure(const std::string& key);
  // GC, after a successful pull: drops expired entries.
  void gc();
  bool expired(const BackoffEntry& entry, base::MonotonicTime now) const {
    return now - entry.last_update > 2 * options_.backoff_max;
  }
  void event(const api::Pod& pod, const api::Container& container, const char* type,
             std::string_view reason, const std::string& message) const;

  base::Clock& clock_;
  runtime::Runtime& runtime_;
  EventSink record_event_;
  ImageManagerOptions options_;
  std::shared_ptr<ApiObjectSource> api_objects_;
  asio::any_io_executor blocking_;
  std::mutex mu_;
  std::map<std::string, BackoffEntry> backoff_;
};

// kubelet's shouldPullImage. An empty policy (a pod that skipped API defaulting) takes the API's
// default for the image (config::defaultImagePullPolicy).
bool shouldPullImage(const api::Container& container, bool present);

// kubelet's applyDefaultImageTag: an image without a tag or digest gets ":latest" (the name is not
// otherwise normalized). InvalidArgument for a reference that cannot name an image.
base::StatusOr<std::string> applyDefaultImageTag(std::string_view image);

}  // namespace nodeagent::agent::images
