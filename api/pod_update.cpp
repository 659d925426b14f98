#include "api/pod_update.h"

namespace nodeagent::api {

std::string_view podOperationName(PodOperation op) {
  switch (op) {
    case PodOperation::kSet:
      return "SET";
    case PodOperation::kAdd:
      return "ADD";
    case PodOperation::kDelete:
      return "DELETE";
    case PodOperation::kRemove:
      return "REMOVE";
    case PodOperation::kUpdate:
      return "UPDATE";
    case PodOperation::kReconcile:
      return "RECONCILE";
    case PodOperation::kRestore:
      return "RESTORE";
  }
  return "UNKNOWN";
}

std::string_view syncPodTypeName(SyncPodType type) {
  switch (type) {
    case SyncPodType::kSync:
      return "sync";
    case SyncPodType::kUpdate:
      return "update";
    case SyncPodType::kCreate:
      return "create";
    case SyncPodType::kKill:
      return "kill";
  }
  return "unknown";
}

base::StatusOr<std::vector<std::string>> getValidatedSources(
    const std::vector<std::string>& sources) {
  std::vector<std::string> out;
  for (const auto& s : sources) {
    if (s == kAllSource) {
      return std::vector<std::string>{std::string(kFileSource), std::string(kHttpSource),
                                      std::string(kApiserverSource)};
    }
    if (s.empty()) continue;
    if (s == kFileSource || s == kHttpSource || s == kApiserverSource) {
      out.push_back(s);
      continue;
    }
    return base::invalidArgumentError("unknown pod source \"" + s + "\"");
  }
  return out;
}

std::string buildPodFullName(std::string_view name, std::string_view ns) {
  std::string out(name);
  out += '_';
  out += ns;
  return out;
}

base::StatusOr<std::pair<std::string, std::string>> parsePodFullName(std::string_view full_name) {
  auto pos = full_name.find('_');
  if (pos == std::string_view::npos || pos == 0 || pos + 1 == full_name.size() ||
      full_name.find('_', pos + 1) != std::string_view::npos) {
    return base::invalidArgumentError("failed to parse the pod full name \"" +
                                      std::string(full_name) + "\"");
  }
  return std::pair<std::string, std::string>(std::string(full_name.substr(0, pos)),
                                             std::string(full_name.substr(pos + 1)));
}

base::StatusOr<std::string> getPodSource(const Pod& pod) {
  auto it = pod.metadata.annotations.find(std::string(kConfigSourceAnnotationKey));
  if (it == pod.metadata.annotations.end()) {
    return base::notFoundError("cannot get source of pod \"" + pod.metadata.uid + "\"");
  }
  return it->second;
}

bool isStaticPod(const Pod& pod) {
  auto source = getPodSource(pod);
  return source.ok() && *source != kApiserverSource;
}

bool isMirrorPod(const Pod& pod) {
  return pod.metadata.annotations.count(std::string(kConfigMirrorAnnotationKey)) > 0;
}

bool isCriticalPod(const Pod& pod) {
  if (isStaticPod(pod) || isMirrorPod(pod)) return true;
  return pod.spec->priority && *pod.spec->priority >= kSystemCriticalPriority;
}

std::string configHash(const Pod& pod) {
  return std::string(pod.metadata.annotations.get(kConfigHashAnnotationKey));
}

}  // namespace nodeagent::api
