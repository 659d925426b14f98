#include "agent/eviction/thresholds.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <sstream>

#include "api/quantity.h"
#include "base/duration.h"
#include "base/log.h"

namespace nodeagent::eviction {
namespace {

NODEAGENT_LOGGER("eviction")

constexpr std::array<std::pair<Signal, std::string_view>, 7> kSignalNames = {{
    {Signal::kMemoryAvailable, "memory.available"},
    {Signal::kAllocatableMemoryAvailable, "allocatableMemory.available"},
    {Signal::kNodeFsAvailable, "nodefs.available"},
    {Signal::kNodeFsInodesFree, "nodefs.inodesFree"},
    {Signal::kImageFsAvailable, "imagefs.available"},
    {Signal::kImageFsInodesFree, "imagefs.inodesFree"},
    {Signal::kPidAvailable, "pid.available"},
}};

bool isImageFs(Signal s) { return s == Signal::kImageFsAvailable || s == Signal::kImageFsInodesFree; }

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

// One "key<sep>value" entry of a flag, with the entry's text for errors.
struct Entry {
  std::string text;
  std::string key;
  std::string value;
};

// cliflag.LangleSeparatedMapStringString / MapStringString: comma-separated pairs; a later
// duplicate key replaces the earlier one.
base::StatusOr<std::vector<Entry>> splitFlag(std::string_view flag, const std::string& text,
                                             char sep) {
  std::vector<Entry> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    auto pos = item.find(sep);
    if (pos == std::string::npos) {
      return base::invalidArgumentError(std::string(flag) + ": \"" + item +
                                        "\": malformed pair, expect string" + sep + "string");
    }
    Entry e{item, trim(item.substr(0, pos)), trim(item.substr(pos + 1))};
    auto same = std::find_if(out.begin(), out.end(), [&](const Entry& o) { return o.key == e.key; });
    if (same != out.end()) {
      *same = std::move(e);
    } else {
      out.push_back(std::move(e));
    }
  }
  return out;
}

base::Status entryError(std::string_view flag, const Entry& e, const std::string& message) {
  return base::invalidArgumentError(std::string(flag) + ": \"" + e.text + "\": " + message);
}

// parsePercentage: float32(ParseFloat(trimmed, 32)) / 100.
std::optional<float> parsePercentage(const std::string& value) {
  std::string number = value;
  while (!number.empty() && number.back() == '%') number.pop_back();
  if (number.empty()) return std::nullopt;
  char* end = nullptr;
  float v = std::strtof(number.c_str(), &end);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return v / 100.0f;
}

// parseThresholdStatement; nullopt threshold for "0%" and "100%".
base::StatusOr<std::optional<Threshold>> parseStatement(std::string_view flag, const Entry& e) {
  auto signal = parseSignal(e.key);
  if (!signal) return entryError(flag, e, "unsupported eviction signal " + e.key);
  Threshold t;
  t.signal = *signal;
  if (!e.value.empty() && e.value.back() == '%') {
    if (e.value == "0%" || e.value == "100%") return std::optional<Threshold>();
    auto pct = parsePercentage(e.value);
    if (!pct) return entryError(flag, e, "invalid percentage " + e.value);
    if (*pct < 0) {
      return entryError(flag, e,
                        "eviction percentage threshold " + e.key + " must be >= 0%: " + e.value);
    }
    if (*pct > 1) {
      return entryError(flag, e,
                        "eviction percentage threshold " + e.key + " must be <= 100%: " + e.value);
    }
    t.value.percentage = *pct;
    return std::optional<Threshold>(t);
  }
  auto q = api::Quantity::parse(e.value);
  if (!q.ok()) return entryError(flag, e, q.status().message());
  if (q->nanoValue() <= 0) {
    return entryError(flag, e, "eviction threshold " + e.key + " must be positive: " + e.value);
  }
  t.value.quantity = q->value();
  return std::optional<Threshold>(t);
}

base::StatusOr<std::vector<Threshold>> parseStatements(std::string_view flag,
                                                       const std::string& text) {
  auto entries = splitFlag(flag, text, '<');
  if (!entries.ok()) return entries.status();
  std::vector<Threshold> out;
  for (const auto& e : *entries) {
    auto t = parseStatement(flag, e);
    if (!t.ok()) return t.status();
    if (*t) out.push_back(**t);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Threshold& a, const Threshold& b) { return a.signal < b.signal; });
  return out;
}

std::string formatValue(Signal s, const ThresholdValue& v) {
  if (v.quantity) {
    const bool bytes = s == Signal::kMemoryAvailable || s == Signal::kAllocatableMemoryAvailable ||
                       s == Signal::kNodeFsAvailable || s == Signal::kImageFsAvailable;
    return bytes ? api::Quantity::fromBytes(*v.quantity).toString() : std::to_string(*v.quantity);
  }
  std::ostringstream ss;
  ss << v.percentage * 100 << "%";
  return ss.str();
}

}  // namespace

std::string_view signalName(Signal s) {
  for (const auto& [sig, name] : kSignalNames) {
    if (sig == s) return name;
  }
  return "unknown";
}

std::optional<Signal> parseSignal(std::string_view name) {
  for (const auto& [sig, n] : kSignalNames) {
    if (n == name) return sig;
  }
  return std::nullopt;
}

std::string_view conditionName(NodeCondition c) {
  switch (c) {
    case NodeCondition::kMemoryPressure:
      return "MemoryPressure";
    case NodeCondition::kDiskPressure:
      return "DiskPressure";
    case NodeCondition::kPidPressure:
      return "PIDPressure";
  }
  return "Unknown";
}

NodeCondition conditionForSignal(Signal s) {
  switch (s) {
    case Signal::kMemoryAvailable:
    case Signal::kAllocatableMemoryAvailable:
      return NodeCondition::kMemoryPressure;
    case Signal::kPidAvailable:
      return NodeCondition::kPidPressure;
    default:
      return NodeCondition::kDiskPressure;
  }
}

std::string_view resourceForSignal(Signal s) {
  switch (s) {
    case Signal::kMemoryAvailable:
    case Signal::kAllocatableMemoryAvailable:
      return "memory";
    case Signal::kNodeFsAvailable:
    case Signal::kImageFsAvailable:
      return "ephemeral-storage";
    case Signal::kNodeFsInodesFree:
    case Signal::kImageFsInodesFree:
      return "inodes";
    case Signal::kPidAvailable:
      return "pids";
  }
  return "";
}

int64_t thresholdQuantity(const ThresholdValue& value, int64_t capacity) {
  if (value.quantity) return *value.quantity;
  return static_cast<int64_t>(static_cast<double>(capacity) * static_cast<double>(value.percentage));
}

std::string formatThreshold(const Threshold& t) {
  return "threshold(signal=" + std::string(signalName(t.signal)) +
         ", operator=LessThan, value=" + formatValue(t.signal, t.value) +
         ", gracePeriod=" + base::formatDuration(t.grace_period) + ")";
}

base::StatusOr<std::vector<Threshold>> parseThresholdConfig(const ThresholdFlags& flags) {
  auto hard = parseStatements("--eviction-hard", flags.eviction_hard);
  if (!hard.ok()) return hard.status();
  auto soft = parseStatements("--eviction-soft", flags.eviction_soft);
  if (!soft.ok()) return soft.status();

  std::map<Signal, base::Duration> grace;
  auto grace_entries = splitFlag("--eviction-soft-grace-period", flags.eviction_soft_grace_period, '=');
  if (!grace_entries.ok()) return grace_entries.status();
  for (const auto& e : *grace_entries) {
    const std::string_view flag = "--eviction-soft-grace-period";
    auto signal = parseSignal(e.key);
    if (!signal) return entryError(flag, e, "unsupported eviction signal " + e.key);
    auto d = base::parseDuration(e.value);
    if (!d.ok()) return entryError(flag, e, d.status().message());
    if (d->count() < 0) {
      return entryError(flag, e,
                        "invalid eviction grace period specified: " + e.value +
                            ", must be a positive value");
    }
    grace[*signal] = *d;
  }

  std::map<Signal, ThresholdValue> reclaim;
  auto reclaim_entries = splitFlag("--eviction-minimum-reclaim", flags.eviction_minimum_reclaim, '=');
  if (!reclaim_entries.ok()) return reclaim_entries.status();
  for (const auto& e : *reclaim_entries) {
    const std::string_view flag = "--eviction-minimum-reclaim";
    auto signal = parseSignal(e.key);
    if (!signal) return entryError(flag, e, "unsupported eviction signal " + e.key);
    ThresholdValue v;
    if (!e.value.empty() && e.value.back() == '%') {
      auto pct = parsePercentage(e.value);
      if (!pct) return entryError(flag, e, "invalid percentage " + e.value);
      if (*pct <= 0) {
        return entryError(flag, e,
                          "eviction percentage minimum reclaim " + e.key +
                              " must be positive: " + e.value);
      }
      v.percentage = *pct;
    } else {
      auto q = api::Quantity::parse(e.value);
      if (!q.ok()) return entryError(flag, e, q.status().message());
      if (q->nanoValue() < 0) {
        return entryError(flag, e, "negative eviction minimum reclaim specified for " + e.key);
      }
      v.quantity = q->value();
    }
    reclaim[*signal] = v;
  }

  std::vector<Threshold> out = std::move(*hard);
  for (auto& t : *soft) {
    auto it = grace.find(t.signal);
    if (it == grace.end()) {
      return base::invalidArgumentError(
          "--eviction-soft: \"" + std::string(signalName(t.signal)) +
          "\": grace period must be specified for the soft eviction threshold " +
          std::string(signalName(t.signal)) + " (--eviction-soft-grace-period)");
    }
    t.grace_period = it->second;
    out.push_back(t);
  }
  for (auto& t : out) {
    if (auto it = reclaim.find(t.signal); it != reclaim.end()) t.min_reclaim = it->second;
  }
  if (!flags.has_image_fs) {
    std::vector<Threshold> kept;
    for (auto& t : out) {
      if (isImageFs(t.signal)) {
        log()->info(
            "Ignoring eviction threshold: the runtime has no image filesystem threshold={}",
            formatThreshold(t));
        continue;
      }
      kept.push_back(std::move(t));
    }
    out = std::move(kept);
  }
  if (flags.enforce_pods_allocatable) {
    std::vector<Threshold> extra;
    for (const auto& t : out) {
      if (t.signal == Signal::kMemoryAvailable && t.hard()) {
        Threshold copy = t;
        copy.signal = Signal::kAllocatableMemoryAvailable;
        extra.push_back(copy);
      }
    }
    out.insert(out.end(), extra.begin(), extra.end());
  }
  return out;
}

std::vector<Threshold> hardThresholds(const std::vector<Threshold>& all) {
  std::vector<Threshold> out;
  for (const auto& t : all) {
    if (t.hard()) out.push_back(t);
  }
  return out;
}

}  // namespace nodeagent::eviction
