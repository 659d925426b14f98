// kubelet's "Watch" change detection strategy for ConfigMaps and Secrets (its watch-based
// configmap and secret managers, the default): every object that a registered pod references is
// watched while any pod references it, each by a reflector of its own (LIST and WATCH of its
// collection with fieldSelector metadata.name=<name>, which the apiserver's node authorizer
// allows for the objects of the node's pods), and get() answers from the watched copy: no read of
// the apiserver per sync, and a change is there at the pod's next sync.
//
// Pods register with the objects they reference (volumes, projected sources, env and envFrom of
// every container, imagePullSecrets) when the agent adds or updates them, and unregister when
// they are removed or reach a terminal phase; a watch ends with its last pod.
//
// An object that is not watched (no registered pod references it) or whose watch has not listed
// it yet is read from the apiserver, as the Get strategy does. kubelet instead waits up to a
// second for the watch and then fails the pod's sync; reading once more is never worse.
//
// Threading: registerPod/unregisterPod from any thread (the agent's sync loop); get() blocks only
// when it reads the apiserver (call it on the blocking pool). The reflectors run on strands of
// the given executor, their LISTs on the blocking pool and their WATCHes on those strands, with no
// thread per watch (config::AsyncListerWatcher). stop() ends every watch; the client they use
// must outlive it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "agent/volume/api_objects.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/random.h"
#include "base/status.h"

namespace nodeagent::config {
class ListerWatcher;
class Reflector;
}  // namespace nodeagent::config

namespace nodeagent::agent {

// An object a pod references: its kind, namespace and name.
struct ApiObjectRef {
  ApiObjectKind kind = ApiObjectKind::kConfigMap;
  std::string ns;
  std::string name;
  auto operator<=>(const ApiObjectRef&) const = default;
};

// The ConfigMaps and Secrets `pod` references, as kubelet's VisitPodConfigmapNames and
// VisitPodSecretNames find them: configMap and secret volumes and projected sources, env
// valueFrom configMapKeyRef/secretKeyRef and envFrom of init and regular containers, and
// imagePullSecrets. Names that are empty or not strings are left out (the pod fails where it uses
// them).
std::set<ApiObjectRef> apiObjectReferences(const api::Pod& pod);

class WatchingApiObjectSource final : public ApiObjectSource {
 public:
  // A ListerWatcher for the collection `path` with `field_selector` (the real one is a
  // config::AsyncListerWatcher; tests script one).
  using MakeListerWatcher = std::function<std::shared_ptr<config::ListerWatcher>(
      const std::string& path, const std::string& field_selector)>;

  // `direct` reads what is not watched yet, and serves service account tokens.
  WatchingApiObjectSource(asio::any_io_executor executor, base::Clock& clock, base::Random& random,
                          MakeListerWatcher make_lister_watcher,
                          std::shared_ptr<ApiObjectSource> direct);
  ~WatchingApiObjectSource() override;

  void registerPod(const api::Pod& pod) override;
  void unregisterPod(const std::string& pod_uid) override;

  base::StatusOr<std::string> serviceAccountToken(
      const ServiceAccountTokenRequest& request) override;
  base::StatusOr<std::shared_ptr<const nlohmann::json>> get(ApiObjectKind kind,
                                                            const std::string& ns,
                                                            const std::string& name,
                                                            const std::string& pod_uid) override;

  // Ends every watch; later registrations watch nothing. Any thread; idempotent.
  void stop();

  // Tests: the objects watched now.
  std::set<ApiObjectRef> watched() const;

 private:
  // What one object's reflector has seen; shared with its handler on the reflector's strand.
  struct Slot {
    std::mutex mu;
    bool listed = false;
    std::shared_ptr<const nlohmann::json> object;  // null: the apiserver has no such object
  };
  class SlotHandler;
  struct Watch {
    int refs = 0;
    std::shared_ptr<Slot> slot;
    std::shared_ptr<config::Reflector> reflector;
  };
  // What a registered pod references, found in the spec with this hash.
  struct PodRefs {
    api::Hash128 spec_hash;
    std::set<ApiObjectRef> refs;
  };

  void addRefLocked(const ApiObjectRef& ref);
  // Returns the reflector to stop (outside the lock) when the last reference went.
  std::shared_ptr<config::Reflector> dropRefLocked(const ApiObjectRef& ref);

  asio::any_io_executor executor_;
  base::Clock& clock_;
  base::Random& random_;
  MakeListerWatcher make_lister_watcher_;
  std::shared_ptr<ApiObjectSource> direct_;

  mutable std::mutex mu_;
  bool stopped_ = false;
  std::map<ApiObjectRef, Watch> watches_;
  std::map<std::string, PodRefs> pods_;  // by pod UID
};

}  // namespace nodeagent::agent
