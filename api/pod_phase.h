// Pod phases and the pod condition types and reasons the node owns (core/v1 PodPhase,
// PodConditionType; kubelet's status/generate.go reasons). Every layer that reads a phase or a
// condition uses these names rather than string literals.
#pragma once

#include <string_view>

namespace nodeagent::api {

inline constexpr std::string_view kPhasePending = "Pending";
inline constexpr std::string_view kPhaseRunning = "Running";
inline constexpr std::string_view kPhaseSucceeded = "Succeeded";
inline constexpr std::string_view kPhaseFailed = "Failed";
inline constexpr std::string_view kPhaseUnknown = "Unknown";

// Succeeded and Failed are final: a pod in either never runs again.
inline bool isTerminalPhase(std::string_view phase) {
  return phase == kPhaseSucceeded || phase == kPhaseFailed;
}

inline constexpr std::string_view kConditionInitialized = "Initialized";
inline constexpr std::string_view kConditionReady = "Ready";
inline constexpr std::string_view kConditionContainersReady = "ContainersReady";
inline constexpr std::string_view kConditionPodScheduled = "PodScheduled";

// Condition reasons (kubelet's status/generate.go).
inline constexpr std::string_view kReasonUnknownContainerStatuses = "UnknownContainerStatuses";
inline constexpr std::string_view kReasonPodCompleted = "PodCompleted";
inline constexpr std::string_view kReasonContainersNotReady = "ContainersNotReady";
inline constexpr std::string_view kReasonContainersNotInitialized = "ContainersNotInitialized";
inline constexpr std::string_view kReasonReadinessGatesNotReady = "ReadinessGatesNotReady";

}  // namespace nodeagent::api
