// Eviction thresholds (kubelet's pkg/kubelet/eviction/api and ParseThresholdConfig): the signals
// the eviction manager observes, the thresholds --eviction-hard, --eviction-soft,
// --eviction-soft-grace-period and --eviction-minimum-reclaim set on them, and the node
// condition each signal drives. Pure functions, any thread.
//
// The process runtime keeps no images, so it has no image filesystem: with `has_image_fs` false
// the imagefs.* thresholds (one is in kubelet's default --eviction-hard) are dropped when parsed,
// and the log says so. A runtime with an image filesystem passes true and keeps them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::eviction {

// evictionapi.Signal.
enum class Signal {
  kMemoryAvailable,             // memory.available
  kAllocatableMemoryAvailable,  // allocatableMemory.available (added for --enforce-node-allocatable=pods)
  kNodeFsAvailable,             // nodefs.available
  kNodeFsInodesFree,            // nodefs.inodesFree
  kImageFsAvailable,            // imagefs.available
  kImageFsInodesFree,           // imagefs.inodesFree
  kPidAvailable,                // pid.available
};
std::string_view signalName(Signal s);
std::optional<Signal> parseSignal(std::string_view name);

// The node condition a met threshold of the signal reports (signalToNodeCondition).
enum class NodeCondition { kMemoryPressure, kDiskPressure, kPidPressure };
std::string_view conditionName(NodeCondition c);  // "MemoryPressure", "DiskPressure", "PIDPressure"
NodeCondition conditionForSignal(Signal s);
// The resource the signal reclaims (signalToResource): "memory", "ephemeral-storage", "inodes",
// "pids".
std::string_view resourceForSignal(Signal s);

// evictionapi.ThresholdValue: a quantity (bytes, inodes or PIDs), else a fraction of the
// signal's capacity.
struct ThresholdValue {
  std::optional<int64_t> quantity;
  float percentage = 0;  // 0.1 for "10%" (float32, as kubelet: the arithmetic matches its)
  bool operator==(const ThresholdValue&) const = default;
};
// GetThresholdQuantity: the quantity, or int64(float64(capacity) * float64(percentage)).
int64_t thresholdQuantity(const ThresholdValue& value, int64_t capacity);

// evictionapi.Threshold (the operator is always LessThan). A zero grace period makes it hard.
struct Threshold {
  Signal signal = Signal::kMemoryAvailable;
  ThresholdValue value;
  base::Duration grace_period{0};
  std::optional<ThresholdValue> min_reclaim;
  bool hard() const { return grace_period.count() == 0; }
  bool operator==(const Threshold&) const = default;
};

// "threshold(signal=memory.available, operator=LessThan, value=100Mi, gracePeriod=0s)".
std::string formatThreshold(const Threshold& t);

// kubelet's defaults (DefaultEvictionHard, DefaultEvictionPressureTransitionPeriod).
inline constexpr char kDefaultEvictionHard[] =
    "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%";
inline constexpr auto kDefaultPressureTransitionPeriod = std::chrono::minutes(5);
inline constexpr auto kDefaultEvictionMonitoringPeriod = std::chrono::seconds(10);

struct ThresholdFlags {
  // --eviction-hard / --eviction-soft: "signal<value,signal<value" (value a quantity or "N%").
  // As with kubelet 1.18's flag, a given --eviction-hard replaces the whole default map; ""
  // sets no hard threshold.
  std::string eviction_hard = kDefaultEvictionHard;
  std::string eviction_soft;
  // --eviction-soft-grace-period: "signal=duration,..." (Go durations); each soft signal needs one.
  std::string eviction_soft_grace_period;
  // --eviction-minimum-reclaim: "signal=quantity|N%,...".
  std::string eviction_minimum_reclaim;
  // --enforce-node-allocatable contains "pods": each hard memory.available threshold is copied
  // to allocatableMemory.available (addAllocatableThresholds).
  bool enforce_pods_allocatable = false;
  // The runtime has an image filesystem; false drops imagefs.* thresholds.
  bool has_image_fs = false;
};

// ParseThresholdConfig. Hard thresholds first (in signal order), then soft ones, then the
// allocatable copies. An error names the flag and the entry and carries kubelet's text:
//   --eviction-hard: "foo<1": unsupported eviction signal foo
//   --eviction-soft: "memory.available<1Gi": grace period must be specified for the soft
//   eviction threshold memory.available
// "0%" and "100%" thresholds are ignored, as kubelet's.
base::StatusOr<std::vector<Threshold>> parseThresholdConfig(const ThresholdFlags& flags);

// The hard thresholds of `all` (what node allocatable reserves).
std::vector<Threshold> hardThresholds(const std::vector<Threshold>& all);

}  // namespace nodeagent::eviction
