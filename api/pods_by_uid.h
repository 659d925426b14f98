// Pods by UID without a copy of the UID: a hash set of pods hashed and compared by their own
// `metadata.uid`, looked up by a UID (std::string_view). A node of tens of thousands of pods keeps
// one pointer per pod where a map would keep a second copy of each UID.
#pragma once

#include <cstddef>
#include <string_view>
#include <unordered_set>

#include "api/pod.h"
#include "base/string_map.h"

namespace nodeagent::api {

// The hash of the project's string-keyed maps (base::StringHashMap), on the pod's own UID.
//
// Hashing a stored pod is not declared noexcept on purpose: libstdc++ then keeps each node's hash
// in the node, so a lookup walks its bucket without reading the pods it passes (a pod and its
// UID are two cache misses each, and a periodic resync of every pod of a large node looks one
// up). The node stays within its 32-byte size class.
struct PodUidHash : base::StringHash {
  using base::StringHash::operator();
  size_t operator()(const PodPtr& pod) const { return (*this)(pod->metadata.uid); }
};

struct PodUidEqual {
  using is_transparent = void;
  static std::string_view uidOf(std::string_view uid) { return uid; }
  static std::string_view uidOf(const PodPtr& pod) { return pod->metadata.uid; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const noexcept {
    return uidOf(a) == uidOf(b);
  }
};

// Never holds a null pod.
using PodsByUid = std::unordered_set<PodPtr, PodUidHash, PodUidEqual>;

// The pod with `uid`, or null.
inline PodPtr findPod(const PodsByUid& pods, std::string_view uid) {
  auto it = pods.find(uid);
  return it == pods.end() ? nullptr : *it;
}

// Puts `pod` (not null) in place of the pod with its UID, if any; whether it was added.
inline bool putPod(PodsByUid& pods, PodPtr pod) {
  auto it = pods.find(std::string_view(pod->metadata.uid));
  if (it == pods.end()) {
    pods.insert(std::move(pod));
    return true;
  }
  // Replaced in its node: no allocation.
  auto node = pods.extract(it);
  node.value() = std::move(pod);
  pods.insert(std::move(node));
  return false;
}

// Erases the pod with `uid`, if any.
inline void erasePod(PodsByUid& pods, std::string_view uid) {
  if (auto it = pods.find(uid); it != pods.end()) pods.erase(it);
}

}  // namespace nodeagent::api
