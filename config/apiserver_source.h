// The `api` pod source: the pods bound to this node in the apiserver (kubelet's
// pkg/kubelet/config/apiserver.go). A Reflector lists
// /api/v1/pods?fieldSelector=spec.nodeName=<node> and watches from there; the source turns that
// into PodUpdates for PodConfig's "api" entry point:
//  - after every (re)list, one SET with every pod (an empty list still sends SET [], which marks
//    the source seen); PodConfig's merge turns it into ADD/UPDATE/DELETE/RECONCILE/REMOVE, so
//    pods deleted while the watch was down disappear and unchanged ones produce nothing;
//  - per watch event, one incremental update: ADDED/MODIFIED -> ADD (UID new to the source) or
//    UPDATE (known UID), DELETED -> REMOVE. Unlike kubelet, which re-sends the whole list on every
//    event, the cost of one event does not grow with the number of pods on the node. PodConfig
//    classifies them (graceful deletion -> DELETE, status-only -> RECONCILE) as for a SET.
// Pods whose spec.nodeName is not this node are ignored; a pod that fails to decode is logged and
// skipped. A pod whose names break kube-apiserver's rules (validatePodNames: they become paths on
// the node) is refused: logged, reported to ManifestErrors until it is deleted, never passed on.
// The source never exits on errors: the reflector retries with backoff, re-opening the watch where
// it stopped or relisting (config/reflector.h).
//
// A lost apiserver state (restored from an old backup, or a new store that reused the
// resourceVersions we hold) leaves a resumed watch blind to everything that vanished with it, so
// the source relists at once when the reflector sees the resourceVersion go backwards
// (`reflector.on_state_lost` reports it to the owner) or when the owner calls relist() because
// other requests showed the loss (our Node or Lease answering 404). The SET after that relist
// removes the pods that are gone, mirror pods included, so they are recreated.
//
// Lifetime: stop() (also run by the destructor) joins the watch thread and posts the reflector's
// teardown to its strand, so stop or destroy the source while its io_context still exists.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "api/pod.h"
#include "api/rate_limiter.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/random.h"
#include "base/status.h"
#include "config/manifest_errors.h"
#include "config/pod_source.h"
#include "config/reflector.h"

namespace nodeagent::api {
class RestClient;
}

namespace nodeagent::config {

struct ApiserverSourceOptions {
  // kubelet's --kubeconfig.
  std::filesystem::path kubeconfig;
  // The node whose pods to serve: --hostname-override, else resolveNodeName("").
  std::string node_name;
  // --kube-api-qps / --kube-api-burst.
  double kube_api_qps = api::kDefaultKubeApiQps;
  int kube_api_burst = api::kDefaultKubeApiBurst;
  Reflector::Options reflector;
  // Pod decoder; defaults to api::decodePodPtr.
  std::function<base::StatusOr<api::PodPtr>(const nlohmann::json&)> decode;
  // Where refused pods are reported (source "api", location "<namespace>/<name>"), which makes
  // them FailedValidation events; nullable.
  ManifestErrors* errors = nullptr;
};

// The api source, with its relist trigger.
class ApiserverSource : public PodSource {
 public:
  // Relists at once with a quorum read, dropping the watch and the resourceVersion it resumed
  // from: the apiserver's state was lost. Any thread; ignored before start() and after stop().
  virtual void relist(std::string reason) = 0;
};

// kubelet's node name: the override if non-empty, else the host name, lower-cased.
std::string resolveNodeName(std::string_view hostname_override);

// Loads the kubeconfig, builds a RestClient and the source. `ex` is the io_context executor (the
// source makes its own strand). `sink` is PodConfig's "api" entry point. Errors name the
// kubeconfig and the field.
base::StatusOr<std::unique_ptr<PodSource>> makeApiserverSource(asio::any_io_executor ex,
                                                               base::Clock& clock,
                                                               base::Random& random,
                                                               ApiserverSourceOptions options,
                                                               PodUpdateSink sink);

// The same over an existing client (shared with the status manager, the node and lease
// controllers). `client` must outlive the source.
std::unique_ptr<ApiserverSource> makeApiserverSource(asio::any_io_executor ex, base::Clock& clock,
                                                     base::Random& random, api::RestClient& client,
                                                     ApiserverSourceOptions options,
                                                     PodUpdateSink sink);

// The same over any ListerWatcher (unit tests script one).
std::unique_ptr<ApiserverSource> makeApiserverSource(asio::any_io_executor ex, base::Clock& clock,
                                                     base::Random& random,
                                                     std::shared_ptr<ListerWatcher> lister_watcher,
                                                     ApiserverSourceOptions options,
                                                     PodUpdateSink sink);

}  // namespace nodeagent::config
