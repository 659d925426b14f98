// kubelet's pkg/kubelet/types: pod operations, updates, sources, the local annotation keys, pod
// full names and the static/mirror predicates.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/chunked_pods.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::api {

inline constexpr std::string_view kConfigSourceAnnotationKey = "kubernetes.io/config.source";
inline constexpr std::string_view kConfigMirrorAnnotationKey = "kubernetes.io/config.mirror";
inline constexpr std::string_view kConfigFirstSeenAnnotationKey = "kubernetes.io/config.seen";
inline constexpr std::string_view kConfigHashAnnotationKey = "kubernetes.io/config.hash";
inline constexpr std::string_view kBootstrapCheckpointAnnotationKey =
    "node.kubernetes.io/bootstrap-checkpoint";

inline constexpr std::string_view kFileSource = "file";
inline constexpr std::string_view kHttpSource = "http";
inline constexpr std::string_view kApiserverSource = "api";
inline constexpr std::string_view kAllSource = "*";
inline constexpr std::string_view kNamespaceDefault = "default";

inline constexpr int32_t kSystemCriticalPriority = 2000000000;

// Values match kubelet's iota order.
enum class PodOperation {
  kSet = 0,
  kAdd = 1,
  kDelete = 2,
  kRemove = 3,
  kUpdate = 4,
  kReconcile = 5,
  kRestore = 6
};

std::string_view podOperationName(PodOperation op);  // "SET", "ADD", ...

struct PodUpdate {
  // Never null entries. Kept in shared chunks: a SET resent after one change shares all but a
  // chunk with the SET before it (see ChunkedPods).
  ChunkedPods pods;
  PodOperation op = PodOperation::kSet;
  std::string source;
  // The source set config.source (to `source`) and config.seen on its pods itself, overwriting
  // anything the manifest said: PodConfig stores and emits new pods as they are instead of
  // annotated copies (one pod object shared by the source and PodConfig).
  bool source_annotated = false;
  // For a SET: the source read all of its input. False when part of it could not be used (an
  // unlistable manifest directory, a manifest that never parsed, an unreachable URL): the pods
  // are still merged, but the source does not count as seen, so nothing is cleaned up on the
  // strength of an answer that may be missing pods. `incomplete_reason` says what is missing.
  bool complete = true;
  std::string incomplete_reason{};
};

enum class SyncPodType { kSync = 0, kUpdate = 1, kCreate = 2, kKill = 3 };
std::string_view syncPodTypeName(SyncPodType type);  // "sync", "update", "create", "kill"

// "*" expands to file, http, api; "" is skipped; anything else is an error naming it.
base::StatusOr<std::vector<std::string>> getValidatedSources(
    const std::vector<std::string>& sources);

std::string buildPodFullName(std::string_view name, std::string_view ns);
// Splits "name_namespace"; error unless exactly two non-empty parts.
base::StatusOr<std::pair<std::string, std::string>> parsePodFullName(std::string_view full_name);

// The config.source annotation, or NotFound.
base::StatusOr<std::string> getPodSource(const Pod& pod);
bool isStaticPod(const Pod& pod);  // has a source and it is not "api"
bool isMirrorPod(const Pod& pod);  // has the config.mirror annotation (any value)
bool isCriticalPod(const Pod& pod);
// The config.hash annotation ("" when absent).
std::string configHash(const Pod& pod);

}  // namespace nodeagent::api
