// The pod manager: the agent's index of desired pods (kubelet's pkg/kubelet/pod basicManager).
//
// PodConfig's updates reach it through the sync loop (addPod/updatePod/deletePod). It stores
// regular and static pods by UID and by full name ("name_namespace"), mirror pods (pods carrying
// the kubernetes.io/config.mirror annotation, i.e. the apiserver's copy of a static pod) in
// separate maps, and the translation from a mirror pod's UID to its static pod's UID. It is a
// passive index: it never calls out, it owns no executor, and every method is safe from any thread
// (a std::shared_mutex guards the maps and is never held across a co_await or a callback).
//
// Behaviour follows kubelet v1.18 including its documented quirks: getPodByUID/getPods never return
// mirror pods; a static pod's deletion leaves its mirror's translation entry until the mirror goes;
// a new UID under an existing full name replaces the full-name entry while the old UID stays until
// it is deleted. One deliberate change: deleting a pod removes its full-name entry only when that
// entry still points at the deleted UID, so REMOVE and ADD of two versions of one static pod give
// the same index in either order.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "api/pod.h"
#include "api/pods_by_full_name.h"
#include "api/pods_by_uid.h"
#include "base/string_map.h"

namespace nodeagent::podmanager {

class MirrorClient;

// getUIDTranslations' result. pod_to_mirror has an entry for every static pod; its value is ""
// when the static pod has no mirror yet.
struct UIDTranslations {
  std::map<std::string, std::string> pod_to_mirror;
  std::map<std::string, std::string> mirror_to_pod;
};

struct PodsAndMirrorPods {
  std::vector<api::PodPtr> pods;         // non-mirror pods, by UID
  std::vector<api::PodPtr> mirror_pods;  // mirror pods, by UID
};

class PodManager {
 public:
  // `mirror_client` must outlive the manager (use NoopMirrorClient without an apiserver).
  explicit PodManager(MirrorClient& mirror_client);
  PodManager(const PodManager&) = delete;
  PodManager& operator=(const PodManager&) = delete;

  // Replaces the whole content with `pods` (mirror and non-mirror mixed). Any thread.
  void setPods(const std::vector<api::PodPtr>& pods);
  // Adds or replaces `pod` (same as updatePod). Null pods are ignored. Any thread.
  void addPod(const api::PodPtr& pod);
  void updatePod(const api::PodPtr& pod);
  // Removes `pod` (looked up by its UID, full name and mirror-ness). Any thread.
  void deletePod(const api::PodPtr& pod);

  // Non-mirror pods, ordered by UID. Any thread.
  std::vector<api::PodPtr> getPods() const;
  PodsAndMirrorPods getPodsAndMirrorPods() const;

  // Lookups return nullptr when absent. None of them ever returns a mirror pod except
  // getMirrorPodByPod. Any thread.
  api::PodPtr getPodByUID(std::string_view uid) const;
  api::PodPtr getPodByFullName(std::string_view full_name) const;
  api::PodPtr getPodByName(std::string_view ns, std::string_view name) const;
  // The mirror pod with the static pod's full name (by name only; the hash is not checked).
  api::PodPtr getMirrorPodByPod(const api::Pod& pod) const;
  // The static pod with the mirror pod's full name.
  api::PodPtr getPodByMirrorPod(const api::Pod& mirror_pod) const;

  // A mirror UID becomes its static pod's UID; "" stays ""; any other UID is returned unchanged.
  std::string translatePodUID(std::string_view uid) const;
  UIDTranslations getUIDTranslations() const;
  // Full names of mirror pods whose static pod is not (or no longer) known, sorted.
  std::vector<std::string> getOrphanedMirrorPodNames() const;

  // True when `mirror_pod` is the current mirror of `pod`: same name and namespace, and its
  // config.mirror annotation equals the pod's config.hash.
  static bool isMirrorPodOf(const api::Pod& mirror_pod, const api::Pod& pod);

  MirrorClient& mirrorClient() const { return mirror_client_; }

  // Changes whenever a pod is removed or replaced (an update of a known UID, or another UID
  // taking a full name) and with every change of a mirror pod; adding a pod with a new UID and
  // name leaves it alone. What depends only on the set of known pods (housekeeping, the pods
  // admission counts as active) can be reused while it does not change. Any thread.
  uint64_t generation() const;
  // Changes with every change of what getPods answers or of a mirror pod (additions too). Any
  // thread.
  uint64_t version() const;

 private:
  void updatePodsLocked(const api::PodPtr& pod);

  MirrorClient& mirror_client_;
  mutable std::shared_mutex mu_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> version_{0};
  // Hash maps: a periodic sync of each of a large node's pods looks them up; the few callers
  // that list them get them sorted.
  api::PodsByUid pod_by_uid_;
  api::PodsByFullName pod_by_full_name_;
  api::PodsByUid mirror_pod_by_uid_;
  api::PodsByFullName mirror_pod_by_full_name_;
  // mirror UID -> static pod UID
  base::StringHashMap<std::string> translation_by_uid_;
};

}  // namespace nodeagent::podmanager
