// Pods by full name ("<name>_<namespace>", kubelet's GetPodFullName) without a copy of it: a hash
// set of pods hashed and compared by their own name and namespace, looked up by a full name
// (std::string_view) or by another pod. A node of tens of thousands of pods keeps one pointer per
// pod where a map would keep a string per pod.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <unordered_set>

#include "api/pod.h"

namespace nodeagent::api {

// FNV-1a over the bytes of the full name: the same for a full name and for the pieces it is
// joined from, so a pod hashes as its full name does without the name being built.
struct PodFullNameHash {
  using is_transparent = void;
  static constexpr uint64_t kOffset = 14695981039346656037ULL;
  static uint64_t mix(uint64_t h, std::string_view bytes) noexcept {
    for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    return h;
  }
  size_t operator()(std::string_view full_name) const noexcept { return mix(kOffset, full_name); }
  size_t operator()(const Pod& pod) const noexcept {
    return mix(mix(mix(kOffset, pod.metadata.name), "_"), pod.metadata.namespace_);
  }
  size_t operator()(const PodPtr& pod) const noexcept { return (*this)(*pod); }
};

// Equality of the joined full names (so "a_b" in "c" and "a" in "b_c" are one name, as they are
// as strings), without joining them in the common case.
struct PodFullNameEqual {
  using is_transparent = void;
  static bool named(const Pod& pod, std::string_view full_name) {
    const std::string_view name = pod.metadata.name;
    const std::string_view ns = pod.metadata.namespace_;
    return full_name.size() == name.size() + 1 + ns.size() && full_name.starts_with(name) &&
           full_name[name.size()] == '_' && full_name.substr(name.size() + 1) == ns;
  }
  static bool same(const Pod& a, const Pod& b) {
    if (a.metadata.name.size() == b.metadata.name.size()) {
      return a.metadata.name == b.metadata.name && a.metadata.namespace_ == b.metadata.namespace_;
    }
    // Names of other lengths: one full name only if the lengths add up (then rarely, so the
    // joined name is built only then).
    if (a.metadata.name.size() + a.metadata.namespace_.size() !=
        b.metadata.name.size() + b.metadata.namespace_.size()) {
      return false;
    }
    return named(b, a.fullName());
  }
  static const Pod& podOf(const PodPtr& pod) { return *pod; }
  static const Pod& podOf(const Pod& pod) { return pod; }
  // A pod (or a pointer to one) against a pod, a pointer or a full name, either way round.
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    if constexpr (std::is_convertible_v<const A&, std::string_view>) {
      return named(podOf(b), a);
    } else if constexpr (std::is_convertible_v<const B&, std::string_view>) {
      return named(podOf(a), b);
    } else {
      return same(podOf(a), podOf(b));
    }
  }
};

// Never holds a null pod.
using PodsByFullName = std::unordered_set<PodPtr, PodFullNameHash, PodFullNameEqual>;

// The pod whose full name is `key`'s (a full name, a pod or a pointer to one), or null.
template <typename Key>
PodPtr findByFullName(const PodsByFullName& pods, const Key& key) {
  auto it = pods.find(key);
  return it == pods.end() ? nullptr : *it;
}

// Puts `pod` (not null) in place of the pod with its full name, if any, and returns that pod.
inline PodPtr putByFullName(PodsByFullName& pods, PodPtr pod) {
  auto it = pods.find(pod);
  if (it == pods.end()) {
    pods.insert(std::move(pod));
    return nullptr;
  }
  // Replaced in its node: no allocation.
  auto node = pods.extract(it);
  PodPtr old = std::move(node.value());
  node.value() = std::move(pod);
  pods.insert(std::move(node));
  return old;
}

}  // namespace nodeagent::api
