#include "podmanager/pod_manager.h"

#include <algorithm>
#include <mutex>

#include "api/pod_update.h"

namespace nodeagent::podmanager {
namespace {

// The pods in UID order.
std::vector<api::PodPtr> values(const api::PodsByUid& pods) {
  std::vector<api::PodPtr> out(pods.begin(), pods.end());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a->metadata.uid < b->metadata.uid; });
  return out;
}

// Erases the pod named as `pod` only when it is the one with `pod`'s UID.
void eraseIfUID(api::PodsByFullName& pods, const api::PodPtr& pod) {
  auto it = pods.find(pod);
  if (it != pods.end() && (*it)->metadata.uid == pod->metadata.uid) pods.erase(it);
}

}  // namespace

PodManager::PodManager(MirrorClient& mirror_client) : mirror_client_(mirror_client) {}

void PodManager::setPods(const std::vector<api::PodPtr>& pods) {
  std::unique_lock lock(mu_);
  ++generation_;
  ++version_;
  pod_by_uid_.clear();
  pod_by_full_name_.clear();
  mirror_pod_by_uid_.clear();
  mirror_pod_by_full_name_.clear();
  translation_by_uid_.clear();
  for (const auto& pod : pods) updatePodsLocked(pod);
}

void PodManager::addPod(const api::PodPtr& pod) { updatePod(pod); }

uint64_t PodManager::generation() const { return generation_.load(); }

uint64_t PodManager::version() const { return version_.load(); }

void PodManager::updatePod(const api::PodPtr& pod) {
  std::unique_lock lock(mu_);
  updatePodsLocked(pod);
}

void PodManager::updatePodsLocked(const api::PodPtr& pod) {
  if (!pod) return;
  ++version_;
  const std::string& uid = pod->metadata.uid;
  if (api::isMirrorPod(*pod)) {
    ++generation_;
    api::putPod(mirror_pod_by_uid_, pod);
    api::putByFullName(mirror_pod_by_full_name_, pod);
    if (auto static_pod = api::findByFullName(pod_by_full_name_, pod)) {
      translation_by_uid_[uid] = static_pod->metadata.uid;
    }
    return;
  }
  if (!api::putPod(pod_by_uid_, pod)) ++generation_;
  if (auto named = api::putByFullName(pod_by_full_name_, pod);
      named && named->metadata.uid != uid) {
    ++generation_;  // another UID with this name
  }
  if (auto mirror = api::findByFullName(mirror_pod_by_full_name_, pod)) {
    translation_by_uid_[mirror->metadata.uid] = uid;
  }
}

void PodManager::deletePod(const api::PodPtr& pod) {
  if (!pod) return;
  std::unique_lock lock(mu_);
  ++generation_;
  ++version_;
  const std::string& uid = pod->metadata.uid;
  if (api::isMirrorPod(*pod)) {
    api::erasePod(mirror_pod_by_uid_, uid);
    eraseIfUID(mirror_pod_by_full_name_, pod);
    translation_by_uid_.erase(uid);
    return;
  }
  // NOTE: a translation entry pointing at this UID stays until its mirror is deleted (kubelet).
  api::erasePod(pod_by_uid_, uid);
  eraseIfUID(pod_by_full_name_, pod);
}

std::vector<api::PodPtr> PodManager::getPods() const {
  std::shared_lock lock(mu_);
  return values(pod_by_uid_);
}

PodsAndMirrorPods PodManager::getPodsAndMirrorPods() const {
  std::shared_lock lock(mu_);
  return PodsAndMirrorPods{values(pod_by_uid_), values(mirror_pod_by_uid_)};
}

api::PodPtr PodManager::getPodByUID(std::string_view uid) const {
  std::shared_lock lock(mu_);
  return api::findPod(pod_by_uid_, uid);
}

api::PodPtr PodManager::getPodByFullName(std::string_view full_name) const {
  std::shared_lock lock(mu_);
  return api::findByFullName(pod_by_full_name_, full_name);
}

api::PodPtr PodManager::getPodByName(std::string_view ns, std::string_view name) const {
  return getPodByFullName(api::buildPodFullName(name, ns));
}

api::PodPtr PodManager::getMirrorPodByPod(const api::Pod& pod) const {
  std::shared_lock lock(mu_);
  if (mirror_pod_by_full_name_.empty()) return nullptr;  // (nothing to hash the name for)
  return api::findByFullName(mirror_pod_by_full_name_, pod);
}

api::PodPtr PodManager::getPodByMirrorPod(const api::Pod& mirror_pod) const {
  std::shared_lock lock(mu_);
  return api::findByFullName(pod_by_full_name_, mirror_pod);
}

std::string PodManager::translatePodUID(std::string_view uid) const {
  if (uid.empty()) return std::string();
  std::shared_lock lock(mu_);
  auto it = translation_by_uid_.find(uid);
  return it == translation_by_uid_.end() ? std::string(uid) : it->second;
}

UIDTranslations PodManager::getUIDTranslations() const {
  std::shared_lock lock(mu_);
  UIDTranslations out;
  for (const auto& pod : pod_by_uid_) {
    if (api::isStaticPod(*pod)) out.pod_to_mirror[pod->metadata.uid] = "";
  }
  for (const auto& [mirror_uid, static_uid] : translation_by_uid_) {
    out.mirror_to_pod[mirror_uid] = static_uid;
    out.pod_to_mirror[static_uid] = mirror_uid;
  }
  return out;
}

std::vector<std::string> PodManager::getOrphanedMirrorPodNames() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  for (const auto& mirror : mirror_pod_by_full_name_) {
    if (!pod_by_full_name_.contains(mirror)) out.push_back(mirror->fullName());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool PodManager::isMirrorPodOf(const api::Pod& mirror_pod, const api::Pod& pod) {
  if (mirror_pod.metadata.name != pod.metadata.name ||
      mirror_pod.metadata.namespace_ != pod.metadata.namespace_) {
    return false;
  }
  const auto& annotations = mirror_pod.metadata.annotations;
  auto it = annotations.find(std::string(api::kConfigMirrorAnnotationKey));
  if (it == annotations.end()) return false;
  // kubelet compares with the pod's config.hash annotation, which is "" when absent.
  return it->second == api::configHash(pod);
}

}  // namespace nodeagent::podmanager
