// Pure status computations of kubelet's kubelet_pods.go and status/generate.go: the pod phase from
// container statuses, the kubelet-owned pod conditions, and the terminal-state predicates the sync
// loop and pod workers use. No I/O, no clocks: callers stamp transition times.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/pod.h"
#include "api/pod_phase.h"

namespace nodeagent::agent {

// kubelet's getPhase: the phase implied by the spec's restart policy and the container statuses
// (init and regular). See kubelet-behavior.md section 9.
std::string getPhase(const api::PodSpec& spec,
                     const std::vector<api::ContainerStatus>& init_statuses,
                     const std::vector<api::ContainerStatus>& statuses);

// status/generate.go. `statuses_known` is false when the pod has no container statuses at all
// (Go's nil slice), which yields the UnknownContainerStatuses reason.
api::PodCondition generateContainersReadyCondition(
    const api::PodSpec& spec, const std::vector<api::ContainerStatus>& statuses,
    bool statuses_known, std::string_view phase);
api::PodCondition generatePodReadyCondition(const api::PodSpec& spec,
                                            const std::vector<api::PodCondition>& conditions,
                                            const std::vector<api::ContainerStatus>& statuses,
                                            bool statuses_known, std::string_view phase);
api::PodCondition generatePodInitializedCondition(
    const api::PodSpec& spec, const std::vector<api::ContainerStatus>& init_statuses,
    bool statuses_known, std::string_view phase);

// kubelet types.PodConditionByKubelet: the condition types the kubelet owns.
bool podConditionByKubelet(std::string_view type);

// True when every status is Terminated or Waiting (an empty list counts as not running).
bool notRunning(const std::vector<api::ContainerStatus>& statuses);

// The status of `name` in `statuses`, or nullptr.
const api::ContainerStatus* findContainerStatus(const std::vector<api::ContainerStatus>& statuses,
                                                std::string_view name);
const api::PodCondition* findCondition(const std::vector<api::PodCondition>& conditions,
                                       std::string_view type);

// Go's fmt "%s" of a []string: "[a b c]".
std::string goStringList(const std::vector<std::string>& items);

}  // namespace nodeagent::agent
