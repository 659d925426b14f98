#include "agent/volume/watching_api_objects.h"

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "config/reflector.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("volume")

using json = nlohmann::json;

const json* member(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Calls `fn` for each element of the array at `object[key]`, if it is one.
template <typename Fn>
void forEach(const json& object, const char* key, Fn fn) {
  const json* list = member(object, key);
  if (list == nullptr || !list->is_array()) return;
  for (const auto& item : *list) fn(item);
}

class References {
 public:
  explicit References(std::string ns) : ns_(std::move(ns)) {}

  // The object named by `object[key]`, when it is a non-empty string.
  void add(ApiObjectKind kind, const json* object, const char* key) {
    if (object == nullptr) return;
    std::string name = stringMember(*object, key);
    if (!name.empty()) refs_.insert(ApiObjectRef{kind, ns_, std::move(name)});
  }

  void addContainer(const json& container) {
    forEach(container, "envFrom", [&](const json& source) {
      add(ApiObjectKind::kConfigMap, member(source, "configMapRef"), "name");
      add(ApiObjectKind::kSecret, member(source, "secretRef"), "name");
    });
    forEach(container, "env", [&](const json& var) {
      const json* from = member(var, "valueFrom");
      if (from == nullptr) return;
      add(ApiObjectKind::kConfigMap, member(*from, "configMapKeyRef"), "name");
      add(ApiObjectKind::kSecret, member(*from, "secretKeyRef"), "name");
    });
  }

  void addVolume(const json& volume) {
    add(ApiObjectKind::kConfigMap, member(volume, "configMap"), "name");
    add(ApiObjectKind::kSecret, member(volume, "secret"), "secretName");
    const json* projected = member(volume, "projected");
    if (projected == nullptr) return;
    forEach(*projected, "sources", [&](const json& source) {
      add(ApiObjectKind::kConfigMap, member(source, "configMap"), "name");
      add(ApiObjectKind::kSecret, member(source, "secret"), "name");
    });
  }

  std::set<ApiObjectRef> take() { return std::move(refs_); }

 private:
  std::string ns_;
  std::set<ApiObjectRef> refs_;
};

std::string describe(const ApiObjectRef& ref) {
  return std::string(apiObjectKindName(ref.kind)) + " " + ref.ns + "/" + ref.name;
}

}  // namespace

std::set<ApiObjectRef> apiObjectReferences(const api::Pod& pod) {
  // Every reference spells "configMap..." or "secret..."/"...Secrets": most pods have none, and
  // cost no parse.
  if (!pod.raw || (!pod.raw->contains("onfigMap") && !pod.raw->contains("ecret"))) {
    return {};
  }
  References refs(pod.metadata.namespace_);
  try {
    const json object = json::parse(pod.raw->str());
    const json* spec = member(object, "spec");
    if (spec == nullptr) return {};
    forEach(*spec, "imagePullSecrets",
            [&](const json& ref) { refs.add(ApiObjectKind::kSecret, &ref, "name"); });
    for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
      forEach(*spec, list, [&](const json& c) { refs.addContainer(c); });
    }
    forEach(*spec, "volumes", [&](const json& v) { refs.addVolume(v); });
  } catch (const json::exception&) {
    // The pod's JSON was parsed when it was decoded; a failure here leaves it unwatched (its
    // objects are then read as the Get strategy reads them).
  }
  return refs.take();
}

// ---------------------------------------------------------------------------------------------

// Keeps one object's slot current from its reflector (on the reflector's strand).
class WatchingApiObjectSource::SlotHandler final : public config::Reflector::Handler {
 public:
  SlotHandler(std::shared_ptr<Slot> slot, std::string name)
      : slot_(std::move(slot)), name_(std::move(name)) {}

  void onReplace(std::vector<nlohmann::json> items, const std::string&) override {
    std::shared_ptr<const json> object;
    for (auto& item : items) {
      if (stringMember(item.value("metadata", json::object()), "name") != name_) continue;
      object = std::make_shared<const json>(std::move(item));
      break;
    }
    std::lock_guard lock(slot_->mu);
    slot_->object = std::move(object);
    slot_->listed = true;
  }

  void onWatchEvent(api::WatchEventType type, nlohmann::json object) override {
    if (stringMember(object.value("metadata", json::object()), "name") != name_) return;
    std::shared_ptr<const json> now;
    if (type != api::WatchEventType::kDeleted) {
      now = std::make_shared<const json>(std::move(object));
    }
    std::lock_guard lock(slot_->mu);
    slot_->object = std::move(now);
  }

 private:
  std::shared_ptr<Slot> slot_;
  std::string name_;
};

WatchingApiObjectSource::WatchingApiObjectSource(asio::any_io_executor executor, base::Clock& clock,
                                                 base::Random& random,
                                                 MakeListerWatcher make_lister_watcher,
                                                 std::shared_ptr<ApiObjectSource> direct)
    : executor_(std::move(executor)),
      clock_(clock),
      random_(random),
      make_lister_watcher_(std::move(make_lister_watcher)),
      direct_(std::move(direct)) {}

WatchingApiObjectSource::~WatchingApiObjectSource() { stop(); }

void WatchingApiObjectSource::registerPod(const api::Pod& pod) {
  {
    // A status update (most updates, and every reconcile) keeps the spec: nothing to parse.
    std::lock_guard lock(mu_);
    auto it = pods_.find(pod.metadata.uid);
    if (stopped_ || (it != pods_.end() && it->second.spec_hash == pod.spec_hash)) return;
  }
  std::set<ApiObjectRef> refs = apiObjectReferences(pod);
  std::vector<std::shared_ptr<config::Reflector>> doomed;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    auto it = pods_.find(pod.metadata.uid);
    if (it == pods_.end()) {
      if (refs.empty()) return;
      it = pods_.emplace(pod.metadata.uid, PodRefs{}).first;
    }
    // New references first, then the dropped ones: an object the pod keeps is never unwatched.
    for (const auto& ref : refs) {
      if (it->second.refs.count(ref) == 0) addRefLocked(ref);
    }
    for (const auto& ref : it->second.refs) {
      if (refs.count(ref) > 0) continue;
      if (auto r = dropRefLocked(ref)) doomed.push_back(std::move(r));
    }
    if (refs.empty()) {
      pods_.erase(it);
    } else {
      it->second = PodRefs{pod.spec_hash, std::move(refs)};
    }
  }
  for (auto& r : doomed) r->stop();
}

void WatchingApiObjectSource::unregisterPod(const std::string& pod_uid) {
  std::vector<std::shared_ptr<config::Reflector>> doomed;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(pod_uid);
    if (it == pods_.end()) return;
    for (const auto& ref : it->second.refs) {
      if (auto r = dropRefLocked(ref)) doomed.push_back(std::move(r));
    }
    pods_.erase(it);
  }
  for (auto& r : doomed) r->stop();
}

void WatchingApiObjectSource::addRefLocked(const ApiObjectRef& ref) {
  Watch& w = watches_[ref];
  if (w.refs++ > 0) return;
  w.slot = std::make_shared<Slot>();
  config::Reflector::Options options;
  options.name = describe(ref);
  w.reflector = std::make_shared<config::Reflector>(
      asio::make_strand(executor_), clock_, random_,
      make_lister_watcher_(apiObjectCollectionPath(ref.kind, ref.ns), "metadata.name=" + ref.name),
      std::make_shared<SlotHandler>(w.slot, ref.name), options);
  w.reflector->start();
  log()->debug("watching {}", describe(ref));
}

std::shared_ptr<config::Reflector> WatchingApiObjectSource::dropRefLocked(const ApiObjectRef& ref) {
  auto it = watches_.find(ref);
  if (it == watches_.end() || --it->second.refs > 0) return nullptr;
  auto reflector = std::move(it->second.reflector);
  watches_.erase(it);
  log()->debug("no longer watching {}", describe(ref));
  return reflector;
}

void WatchingApiObjectSource::stop() {
  std::map<ApiObjectRef, Watch> doomed;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    doomed.swap(watches_);
    pods_.clear();
  }
  for (auto& [ref, w] : doomed) w.reflector->stop();
}

std::set<ApiObjectRef> WatchingApiObjectSource::watched() const {
  std::lock_guard lock(mu_);
  std::set<ApiObjectRef> out;
  for (const auto& [ref, w] : watches_) out.insert(ref);
  return out;
}

base::StatusOr<std::string> WatchingApiObjectSource::serviceAccountToken(
    const ServiceAccountTokenRequest& request) {
  return direct_->serviceAccountToken(request);
}

base::StatusOr<std::shared_ptr<const nlohmann::json>> WatchingApiObjectSource::get(
    ApiObjectKind kind, const std::string& ns, const std::string& name,
    const std::string& pod_uid) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mu_);
    auto it = watches_.find(ApiObjectRef{kind, ns, name});
    if (it != watches_.end()) slot = it->second.slot;
  }
  if (slot) {
    std::lock_guard lock(slot->mu);
    if (slot->listed) {
      if (slot->object) return slot->object;
      return apiObjectNotFound(kind, name);
    }
  }
  return direct_->get(kind, ns, name, pod_uid);
}

}  // namespace nodeagent::agent
