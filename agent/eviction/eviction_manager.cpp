#include "agent/eviction/eviction_manager.h"

#include <algorithm>

#include "agent/cm/resources.h"
#include "api/quantity.h"
#include "base/blocking.h"
#include "base/log.h"

namespace nodeagent::eviction {
namespace {

NODEAGENT_LOGGER("eviction")

constexpr char kReason[] = "Evicted";
constexpr NodeCondition kConditionOrder[] = {
    NodeCondition::kMemoryPressure, NodeCondition::kDiskPressure, NodeCondition::kPidPressure};

// Threshold identity as kubelet's mergeThresholds/thresholdsFirstObservedAt compare them.
bool sameThreshold(const Threshold& a, const Threshold& b) {
  return a.signal == b.signal && a.value == b.value && a.grace_period == b.grace_period;
}

int32_t priorityOf(const api::Pod& pod) { return pod.spec->priority.value_or(0); }

int64_t memoryRequest(const api::Pod& pod) { return cm::podRequests(pod).memory_bytes; }
int64_t storageRequest(const api::Pod& pod) { return cm::podRequests(pod).ephemeral_storage_bytes; }

// cmpBool: true first.
int cmpBool(bool a, bool b) {
  if (a == b) return 0;
  return b ? 1 : -1;
}

int cmpInt(int64_t a, int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); }

using CmpFunc = std::function<int(const api::Pod&, const api::Pod&)>;

// kubelet's multiSorter: each cmp in turn decides, the last one finally.
void orderedBy(std::vector<api::PodPtr>& pods, const std::vector<CmpFunc>& cmps) {
  std::stable_sort(pods.begin(), pods.end(), [&](const api::PodPtr& a, const api::PodPtr& b) {
    for (size_t k = 0; k + 1 < cmps.size(); ++k) {
      int r = cmps[k](*a, *b);
      if (r < 0) return true;
      if (r > 0) return false;
    }
    return cmps.back()(*a, *b) < 0;
  });
}

int priorityCmp(const api::Pod& a, const api::Pod& b) {
  return cmpInt(priorityOf(a), priorityOf(b));
}

// Wraps a comparison of two pods that both have stats; a pod without stats goes first.
CmpFunc withStats(
    const PodUsageLookup& usage,
    std::function<int(const api::Pod&, const PodUsage&, const api::Pod&, const PodUsage&)> fn) {
  return [usage, fn](const api::Pod& a, const api::Pod& b) {
    const PodUsage* ua = usage(a);
    const PodUsage* ub = usage(b);
    if (!ua || !ub) return cmpBool(!ua, !ub);
    return fn(a, *ua, b, *ub);
  };
}

int64_t memoryUsage(const PodUsage& u) { return u.memory_working_set_bytes.value_or(0); }
int64_t diskUsage(const PodUsage& u, bool inodes) {
  return inodes ? u.inodes_used.value_or(0) : u.disk_bytes.value_or(0);
}

bool isDiskSignal(Signal s) { return conditionForSignal(s) == NodeCondition::kDiskPressure; }
bool isMemorySignal(Signal s) {
  return s == Signal::kMemoryAvailable || s == Signal::kAllocatableMemoryAvailable;
}

std::string conditionList(const PressureConditions& c) {
  std::string out = "[";
  auto add = [&](NodeCondition nc) {
    if (out.size() > 1) out += " ";
    out += conditionName(nc);
  };
  if (c.memory) add(NodeCondition::kMemoryPressure);
  if (c.disk) add(NodeCondition::kDiskPressure);
  if (c.pid) add(NodeCondition::kPidPressure);
  return out + "]";
}

// v1helper.TolerationsTolerateTaint for node.kubernetes.io/memory-pressure:NoSchedule.
bool toleratesMemoryPressure(const api::Pod& pod) {
  for (const auto& t : pod.spec->tolerations) {
    if (!t.effect.empty() && t.effect != "NoSchedule") continue;
    if (t.operator_ == "Exists") {
      if (t.key.empty() || t.key == "node.kubernetes.io/memory-pressure") return true;
    } else if ((t.operator_.empty() || t.operator_ == "Equal") &&
               t.key == "node.kubernetes.io/memory-pressure" && t.value.empty()) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<Threshold> thresholdsMet(const std::vector<Threshold>& thresholds,
                                     const Observations& observations, bool enforce_min_reclaim) {
  std::vector<Threshold> out;
  for (const auto& t : thresholds) {
    auto it = observations.find(t.signal);
    if (it == observations.end()) {
      log()->debug("No observation found for eviction signal signal={}", signalName(t.signal));
      continue;
    }
    int64_t quantity = thresholdQuantity(t.value, it->second.capacity);
    if (enforce_min_reclaim && t.min_reclaim) {
      quantity += thresholdQuantity(*t.min_reclaim, it->second.capacity);
    }
    if (quantity > it->second.available) out.push_back(t);
  }
  return out;
}

void rankMemoryPressure(std::vector<api::PodPtr>& pods, const PodUsageLookup& usage) {
  auto exceeds = withStats(
      usage, [](const api::Pod& a, const PodUsage& ua, const api::Pod& b, const PodUsage& ub) {
        return cmpBool(memoryUsage(ua) > memoryRequest(a), memoryUsage(ub) > memoryRequest(b));
      });
  auto memory = withStats(
      usage, [](const api::Pod& a, const PodUsage& ua, const api::Pod& b, const PodUsage& ub) {
        return cmpInt(memoryUsage(ub) - memoryRequest(b), memoryUsage(ua) - memoryRequest(a));
      });
  orderedBy(pods, {exceeds, priorityCmp, memory});
}

void rankDiskPressure(std::vector<api::PodPtr>& pods, const PodUsageLookup& usage, Signal signal) {
  const bool inodes = resourceForSignal(signal) == "inodes";
  auto exceeds = withStats(usage, [inodes](const api::Pod& a, const PodUsage& ua, const api::Pod& b,
                                           const PodUsage& ub) {
    // Nothing requests inodes: any use of them exceeds the request of 0.
    auto request = [inodes](const api::Pod& p) { return inodes ? 0 : storageRequest(p); };
    return cmpBool(diskUsage(ua, inodes) > request(a), diskUsage(ub, inodes) > request(b));
  });
  auto disk = withStats(usage, [inodes](const api::Pod& a, const PodUsage& ua, const api::Pod& b,
                                        const PodUsage& ub) {
    // kubelet subtracts the ephemeral-storage request for inodes too.
    return cmpInt(diskUsage(ub, inodes) - storageRequest(b),
                  diskUsage(ua, inodes) - storageRequest(a));
  });
  orderedBy(pods, {exceeds, priorityCmp, disk});
}

void rankPidPressure(std::vector<api::PodPtr>& pods, const PodUsageLookup& usage) {
  auto processes = withStats(
      usage, [](const api::Pod&, const PodUsage& ua, const api::Pod&, const PodUsage& ub) {
        return cmpInt(ub.processes.value_or(0), ua.processes.value_or(0));
      });
  orderedBy(pods, {priorityCmp, processes});
}

std::string evictionMessage(std::string_view resource, const api::Pod& pod, const PodUsage* usage) {
  std::string message = "The node was low on resource: " + std::string(resource) + ". ";
  if (!usage) return message;
  for (const auto& cs : usage->containers) {
    for (const auto& c : pod.spec->containers) {
      if (c.name != cs.name) continue;
      std::optional<int64_t> used;
      if (resource == "memory") {
        used = cs.memory_working_set_bytes;
      } else if (resource == "ephemeral-storage") {
        used = cs.disk_bytes;
      }
      if (!used) continue;
      auto req = c.resources.requests.find(std::string(resource));
      const int64_t request = req == c.resources.requests.end() ? 0 : req->second.value();
      const std::string request_text =
          req == c.resources.requests.end() ? "0" : req->second.toString();
      if (*used > request) {
        message += "Container " + c.name + " was using " +
                   api::Quantity::fromBytes(*used).toString() + ", which exceeds its request of " +
                   request_text + ". ";
      }
    }
  }
  return message;
}

EvictionManager::EvictionManager(asio::any_io_executor executor, base::Clock& clock,
                                 EvictionManagerOptions options)
    : strand_(asio::make_strand(executor)), clock_(clock), options_(std::move(options)) {
  if (!options_.blocking_executor) options_.blocking_executor = executor;
}

EvictionManager::~EvictionManager() = default;

asio::any_io_executor EvictionManager::blockingExecutor() const {
  return options_.blocking_executor;
}

void EvictionManager::start() {
  for (const auto& t : options_.thresholds) {
    log()->info("Eviction threshold {}", formatThreshold(t));
  }
  asio::post(strand_, [self = shared_from_this()] {
    if (self->stopped_) return;
    self->timer_ = self->clock_.makeTimer(self->strand_);
    self->runPass();
  });
}

void EvictionManager::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    if (self->timer_) self->timer_->cancel();
  });
}

cm::AdmitResult EvictionManager::admitPod(const api::Pod& pod) const {
  PressureConditions c = conditions();
  if (!c.any()) return {};
  // Critical pods are needed for the node's stability.
  if (cm::isCriticalPod(pod)) return {};
  if (c.memory && !c.disk && !c.pid) {
    if (cm::podQos(pod) != cm::QosClass::kBestEffort) return {};
    if (toleratesMemoryPressure(pod)) return {};
  }
  log()->warn("Failed to admit pod: the node has conditions pod={} conditions={}", api::podRef(pod),
              conditionList(c));
  return {false, kReason, "The node had condition: " + conditionList(c) + ". "};
}

PressureConditions EvictionManager::conditions() const {
  std::lock_guard lock(mu_);
  return conditions_;
}

Observations EvictionManager::lastObservations() const {
  std::lock_guard lock(mu_);
  return last_observations_;
}

void EvictionManager::schedule(base::Duration d) {
  if (stopped_ || !timer_) return;
  timer_->asyncWaitFor(d, [self = shared_from_this()] { self->runPass(); });
}

void EvictionManager::runPass() {
  if (stopped_) return;
  asio::co_spawn(
      strand_,
      [](std::shared_ptr<EvictionManager> self) -> asio::awaitable<void> {
        api::PodPtr evicted;
        try {
          auto r = co_await self->synchronize();
          if (r) evicted = *r;
        } catch (const std::exception& e) {
          log()->error("Eviction manager pass failed err={}", e.what());
        }
        self->passes_.fetch_add(1);
        if (evicted && self->options_.pod_cleaned_up) {
          log()->info("Pod evicted, waiting for it to be cleaned up pod={}", api::podRef(*evicted));
          self->cleanup_pod_ = evicted;
          self->cleanup_deadline_ = self->clock_.now() + self->options_.cleanup_timeout;
          // kubelet's first look is one poll period later (a ticker).
          if (!self->stopped_ && self->timer_) {
            self->timer_->asyncWaitFor(self->options_.cleanup_poll,
                                       [self] { self->pollCleanup(); });
          }
        } else {
          self->schedule(self->options_.monitoring_period);
        }
      }(shared_from_this()),
      asio::detached);
}

void EvictionManager::pollCleanup() {
  if (stopped_ || !timer_) return;
  if (options_.pod_cleaned_up(*cleanup_pod_)) {
    log()->info("Pod successfully cleaned up pod={}", api::podRef(*cleanup_pod_));
    cleanup_pod_.reset();
    runPass();
    return;
  }
  if (clock_.now() >= cleanup_deadline_) {
    log()->warn("Timed out waiting for pod to be cleaned up pod={}", api::podRef(*cleanup_pod_));
    cleanup_pod_.reset();
    runPass();
    return;
  }
  timer_->asyncWaitFor(options_.cleanup_poll, [self = shared_from_this()] { self->pollCleanup(); });
}

asio::awaitable<bool> EvictionManager::reclaimNodeLevel(Signal signal) {
  // kubelet's node-level reclaim exists for disk signals only (container and image GC).
  if (!isDiskSignal(signal) || !options_.reclaim_node_level) co_return false;
  // Raw pointers into the manager, which the pass's coroutine keeps alive: GCC 12 destroys
  // some copied shared_ptr locals of a coroutine twice.
  const auto* reclaim = &options_.reclaim_node_level;
  asio::awaitable<base::Status> reclaiming = (*reclaim)(signal);
  base::Status status = co_await std::move(reclaiming);
  if (!status.ok()) {
    log()->warn("Unexpected error when attempting to reduce pressure resource={} err={}",
                resourceForSignal(signal), status.toString());
  }
  SignalSource* source = options_.signals.get();
  Observations observations =
      co_await base::runBlocking(blockingExecutor(), [source] { return source->observe(); });
  {
    std::lock_guard lock(mu_);
    last_observations_ = observations;
  }
  co_return thresholdsMet(options_.thresholds, observations, false).empty();
}

// thresholdsMet, first-observed times, the pressure conditions (reported when they change) and
// the thresholds whose grace period has passed, which drive eviction. Strand only.
std::vector<Threshold> EvictionManager::updateThresholds(const Observations& observations) {
  const auto now = clock_.now();

  // The thresholds met now, and those met before that have not reclaimed their minimum yet.
  std::vector<Threshold> met = thresholdsMet(options_.thresholds, observations, false);
  if (!thresholds_met_.empty()) {
    for (const auto& t : thresholdsMet(thresholds_met_, observations, true)) {
      bool known = std::any_of(met.begin(), met.end(),
                               [&](const Threshold& m) { return sameThreshold(m, t); });
      if (!known) met.push_back(t);
    }
  }
  // When each threshold was first observed (kept while it stays met).
  std::vector<std::pair<Threshold, base::MonotonicTime>> first_observed;
  for (const auto& t : met) {
    auto prev = std::find_if(first_observed_.begin(), first_observed_.end(),
                             [&](const auto& p) { return sameThreshold(p.first, t); });
    first_observed.emplace_back(t, prev == first_observed_.end() ? now : prev->second);
  }
  // Conditions observed now, and those still within the transition period.
  for (const auto& t : met) condition_last_observed_[conditionForSignal(t.signal)] = now;
  PressureConditions conditions;
  for (auto nc : kConditionOrder) {
    auto it = condition_last_observed_.find(nc);
    if (it == condition_last_observed_.end()) continue;
    if (now - it->second < options_.pressure_transition_period) {
      if (nc == NodeCondition::kMemoryPressure) conditions.memory = true;
      if (nc == NodeCondition::kDiskPressure) conditions.disk = true;
      if (nc == NodeCondition::kPidPressure) conditions.pid = true;
    }
  }
  // The thresholds whose grace period has passed drive eviction.
  std::vector<Threshold> graced;
  for (const auto& [t, at] : first_observed) {
    if (now - at >= t.grace_period) graced.push_back(t);
  }
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    changed = !(conditions_ == conditions);
    conditions_ = conditions;
    last_observations_ = observations;
  }
  first_observed_ = std::move(first_observed);
  thresholds_met_ = graced;
  if (changed) {
    log()->info("Node conditions changed conditions={}", conditionList(conditions));
    if (options_.on_conditions_changed) options_.on_conditions_changed(conditions);
  }
  return graced;
}

asio::awaitable<std::optional<api::PodPtr>> EvictionManager::synchronize() {
  if (options_.thresholds.empty() || !options_.signals) co_return std::nullopt;
  SignalSource* source = options_.signals.get();
  Observations observations =
      co_await base::runBlocking(blockingExecutor(), [source] { return source->observe(); });
  if (stopped_) co_return std::nullopt;
  std::vector<Threshold> graced = updateThresholds(observations);
  if (graced.empty()) {
    log()->debug("No resources are starved");
    co_return std::nullopt;
  }

  // byEvictionPriority: memory first.
  std::stable_partition(graced.begin(), graced.end(),
                        [](const Threshold& t) { return isMemorySignal(t.signal); });
  const Threshold to_reclaim = graced.front();
  const std::string resource(resourceForSignal(to_reclaim.signal));
  log()->warn("Attempting to reclaim resource={} threshold={}", resource,
              formatThreshold(to_reclaim));
  if (options_.record_node_event) {
    options_.record_node_event("Warning", "EvictionThresholdMet",
                               "Attempting to reclaim " + resource);
  }
  // (GCC 12 mishandles temporaries and conditions around co_await: plain statements only.)
  const bool relieved = co_await reclaimNodeLevel(to_reclaim.signal);
  if (relieved) {
    log()->info("Able to reduce pressure without evicting pods resource={}", resource);
    co_return std::nullopt;
  }
  if (stopped_) co_return std::nullopt;

  std::vector<api::PodPtr> pods;
  if (options_.active_pods) pods = options_.active_pods();
  if (pods.empty()) {
    log()->error("Eviction thresholds have been met, but no pods are active to evict");
    co_return std::nullopt;
  }
  PodUsageMap usage;
  if (options_.pod_usage) {
    const auto* fn = &options_.pod_usage;
    const auto* pods_ptr = &pods;
    usage =
        co_await base::runBlocking(blockingExecutor(), [fn, pods_ptr] { return (*fn)(*pods_ptr); });
  }
  PodUsageLookup lookup = [&usage](const api::Pod& pod) -> const PodUsage* {
    auto it = usage.find(pod.metadata.uid);
    return it == usage.end() ? nullptr : &it->second;
  };
  switch (conditionForSignal(to_reclaim.signal)) {
    case NodeCondition::kMemoryPressure:
      rankMemoryPressure(pods, lookup);
      break;
    case NodeCondition::kDiskPressure:
      rankDiskPressure(pods, lookup, to_reclaim.signal);
      break;
    case NodeCondition::kPidPressure:
      rankPidPressure(pods, lookup);
      break;
  }
  // At most one pod per pass: the first that is not critical.
  api::PodPtr victim;
  for (const auto& pod : pods) {
    if (cm::isCriticalPod(*pod)) {
      log()->error("Cannot evict a critical pod pod={}", api::podRef(*pod));
      continue;
    }
    victim = pod;
    break;
  }
  if (!victim) {
    log()->info("Unable to evict any pods from the node");
    co_return std::nullopt;
  }
  if (!options_.kill_pod) {
    log()->error("No way to kill pods: cannot evict pod={}", api::podRef(*victim));
    co_return std::nullopt;
  }
  // kubelet 1.18: 0 for a hard threshold, --eviction-max-pod-grace-period as it is for a soft one
  // (the pod's terminationGracePeriodSeconds plays no part).
  std::optional<int64_t> grace = 0;
  if (!to_reclaim.hard()) grace = options_.max_pod_grace_period_seconds;
  api::PodStatus status;
  status.phase = "Failed";
  status.reason = kReason;
  status.message = evictionMessage(resource, *victim, lookup(*victim));
  log()->info("Evicting pod pod={} uid={} resource={} grace_seconds={}", api::podRef(*victim),
              victim->metadata.uid, resource, *grace);
  if (options_.record_pod_event) {
    options_.record_pod_event(*victim, "Warning", kReason, status.message, "");
  }
  auto kill = options_.kill_pod(victim, status, grace);
  const bool killed = co_await std::move(kill);
  if (killed) {
    log()->info("Pod is evicted successfully pod={}", api::podRef(*victim));
  } else {
    log()->error("Pod failed to evict pod={}", api::podRef(*victim));
  }
  evictions_.fetch_add(1);
  std::optional<api::PodPtr> out = victim;
  co_return out;
}

}  // namespace nodeagent::eviction
