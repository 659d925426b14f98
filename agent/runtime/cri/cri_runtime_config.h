// The CRI configs CriRuntime sends for a pod: its sandbox's (RunPodSandbox, and again with each
// CreateContainer) and each container's, as kubelet's kuberuntime manager generates them.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "agent/runtime/cri/cri_types.h"
#include "agent/runtime/runtime.h"
#include "agent/runtime/security_context.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::runtime {

// kubelet's generatePodSandboxConfig, from what the agent decided (namespaces as kubelet's
// namespacesForPod; the pod's name, namespace and UID also as labels).
cri::PodSandboxConfig toCriSandbox(const PodSandboxConfig& config);

// kubelet's termination message file: an empty file of the pod's, writable by any user
// (<pod-dir>/containers/<container>/<attempt>-<random>), mounted at the container's
// terminationMessagePath; nullopt when the container has none.
base::StatusOr<std::optional<cri::Mount>> terminationMessageMount(
    const api::Container& container, int attempt, const std::filesystem::path& pod_dir);

// kubelet's getImageUser: the image's numeric user, else its user name, else root (also for an
// image the runtime does not hold: CreateContainer then fails on it).
DefaultUser imageUser(const std::optional<ImageInfo>& image);

// kubelet's generateContainerConfig, as far as nodeagent goes for now. The security context is
// checked against the image's user: runAsNonRoot as kubelet, and the apiserver pods' policy.
base::StatusOr<cri::ContainerConfig> containerConfig(const api::Pod& pod,
                                                     const api::Container& container, int attempt,
                                                     const StartContainerOptions& options,
                                                     const std::string& image_ref,
                                                     const DefaultUser& image_user);

}  // namespace nodeagent::runtime
