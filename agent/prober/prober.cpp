#include "agent/prober/prober.h"

#include <algorithm>

namespace nodeagent::agent {

struct Prober::Worker {
  Worker(asio::any_io_executor ex, std::string uid, std::string container, ProbeType type)
      : strand(asio::make_strand(ex)),
        pod_uid(std::move(uid)),
        container_name(std::move(container)),
        type(type) {}

  asio::strand<asio::any_io_executor> strand;
  const std::string pod_uid;
  const std::string container_name;
  const ProbeType type;

  // Guarded by the prober's mutex.
  api::Probe spec;
  std::vector<api::ContainerPort> ports;
  std::string container_id;  // the API form ("process://..."), "" before the first container
  bool running = false;
  bool stopped = false;
  bool on_hold = false;  // liveness/startup failed: wait for a new container
  ProbeResult result = ProbeResult::kUnknown;
  ProbeResult last_result = ProbeResult::kUnknown;
  int result_run = 0;
  // Bumped when the container changes or stops: an armed timer or a probe in flight from an
  // older generation is dropped.
  uint64_t generation = 0;

  // Strand only.
  base::TimerPtr timer;
};

namespace {

ProbeResult initialResult(ProbeType type) {
  switch (type) {
    case ProbeType::kReadiness:
      return ProbeResult::kFailure;
    case ProbeType::kLiveness:
      return ProbeResult::kSuccess;
    case ProbeType::kStartup:
      return ProbeResult::kUnknown;
  }
  return ProbeResult::kUnknown;
}

const api::Boxed<api::Probe>& probeOf(const api::Container& c, ProbeType type) {
  switch (type) {
    case ProbeType::kLiveness:
      return c.liveness_probe;
    case ProbeType::kReadiness:
      return c.readiness_probe;
    case ProbeType::kStartup:
      break;
  }
  return c.startup_probe;
}

constexpr ProbeType kProbeTypes[] = {ProbeType::kStartup, ProbeType::kLiveness,
                                     ProbeType::kReadiness};

base::Duration seconds(int32_t s) { return std::chrono::seconds(std::max<int32_t>(s, 0)); }

runtime::ContainerId parseContainerId(const std::string& s) {
  auto sep = s.find("://");
  if (sep == std::string::npos) return {"", s};
  return {s.substr(0, sep), s.substr(sep + 3)};
}

}  // namespace

bool hasProbes(const api::Pod& pod) {
  return std::any_of(pod.spec->containers.begin(), pod.spec->containers.end(),
                     [](const api::Container& c) {
                       return c.liveness_probe || c.readiness_probe || c.startup_probe;
                     });
}

Prober::Prober(asio::any_io_executor executor, base::Clock& clock,
               std::shared_ptr<ProbeHandler> handler, PodIpFn pod_ip, ChangeFn on_change,
               FailureFn on_failure)
    : executor_(std::move(executor)),
      clock_(clock),
      handler_(std::move(handler)),
      pod_ip_(std::move(pod_ip)),
      on_change_(std::move(on_change)),
      on_failure_(std::move(on_failure)) {}

Prober::~Prober() = default;

void Prober::addPod(const api::Pod& pod) {
  const bool probes = hasProbes(pod);
  if (!probes && pods_with_probes_.load() == 0) return;  // the common case costs nothing
  std::vector<std::shared_ptr<Worker>> idle;
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    auto it = pods_.find(pod.metadata.uid);
    if (!probes) {
      if (it == pods_.end()) return;
      stopWorkersLocked(it->second, idle);
      pods_.erase(it);
      --pods_with_probes_;
    } else {
      if (it == pods_.end()) {
        it = pods_.emplace(pod.metadata.uid, PodEntry{}).first;
        ++pods_with_probes_;
      }
      auto& entry = it->second;
      entry.version = ++versions_;
      entry.deleting = pod.metadata.deletion_timestamp.has_value();
      for (const auto& c : pod.spec->containers) {
        for (ProbeType type : kProbeTypes) {
          const auto& probe = probeOf(c, type);
          if (!probe) continue;
          auto w = std::find_if(entry.workers.begin(), entry.workers.end(), [&](const auto& x) {
            return x->container_name == c.name && x->type == type;
          });
          if (w == entry.workers.end()) {
            entry.workers.push_back(
                std::make_shared<Worker>(executor_, pod.metadata.uid, c.name, type));
            w = std::prev(entry.workers.end());
          }
          (*w)->spec = *probe;
          (*w)->ports = c.ports;
        }
      }
    }
  }
  apply({}, std::move(idle));
}

uint64_t Prober::resultsVersion(const std::string& pod_uid) const {
  if (pods_with_probes_.load() == 0) return 0;
  std::lock_guard lock(mu_);
  auto it = pods_.find(pod_uid);
  return it == pods_.end() ? 0 : it->second.version;
}

void Prober::bumpVersionLocked(const std::string& pod_uid) {
  if (auto it = pods_.find(pod_uid); it != pods_.end()) it->second.version = ++versions_;
}

void Prober::removePod(const std::string& pod_uid) {
  if (pods_with_probes_.load() == 0) return;
  std::vector<std::shared_ptr<Worker>> idle;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(pod_uid);
    if (it == pods_.end()) return;
    stopWorkersLocked(it->second, idle);
    pods_.erase(it);
    --pods_with_probes_;
  }
  apply({}, std::move(idle));
}

void Prober::cleanupPods(const std::set<std::string>& desired) {
  if (pods_with_probes_.load() == 0) return;
  std::vector<std::shared_ptr<Worker>> idle;
  {
    std::lock_guard lock(mu_);
    for (auto it = pods_.begin(); it != pods_.end();) {
      if (desired.count(it->first) > 0) {
        ++it;
        continue;
      }
      stopWorkersLocked(it->second, idle);
      it = pods_.erase(it);
      --pods_with_probes_;
    }
  }
  apply({}, std::move(idle));
}

void Prober::stop() {
  std::vector<std::shared_ptr<Worker>> idle;
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    for (auto& [uid, entry] : pods_) stopWorkersLocked(entry, idle);
    pods_.clear();
    pods_with_probes_ = 0;
  }
  apply({}, std::move(idle));
}

void Prober::stopWorkersLocked(PodEntry& entry, std::vector<std::shared_ptr<Worker>>& idle) {
  for (auto& w : entry.workers) {
    w->stopped = true;
    ++w->generation;
    idle.push_back(w);
  }
}

void Prober::observeLocked(const std::shared_ptr<Worker>& worker,
                           const api::ContainerStatus& status, std::vector<Schedule>& schedules,
                           std::vector<std::shared_ptr<Worker>>& idle) {
  Worker& w = *worker;
  const bool running = status.state.running.has_value() && !status.container_id.empty();
  const bool new_container = w.container_id != status.container_id;
  if (!new_container && w.running == running) return;
  ++w.generation;
  w.running = running;
  if (new_container) {
    w.container_id = status.container_id;
    if (w.result != initialResult(w.type)) bumpVersionLocked(w.pod_uid);
    w.result = initialResult(w.type);
    w.last_result = ProbeResult::kUnknown;
    w.result_run = 0;
    w.on_hold = false;
  }
  if (!running) {
    idle.push_back(worker);
    return;
  }
  base::Duration delay = seconds(w.spec.initial_delay_seconds);
  if (status.state.running->started_at) {
    auto since = clock_.wallNow() - *status.state.running->started_at;
    delay = std::max<base::Duration>(delay - since, base::Duration::zero());
  }
  schedules.push_back({worker, w.generation, delay});
}

void Prober::updatePodStatus(const api::Pod& pod, std::vector<api::ContainerStatus>& statuses) {
  if (pods_with_probes_.load() == 0 || !hasProbes(pod)) return;
  std::vector<Schedule> schedules;
  std::vector<std::shared_ptr<Worker>> idle;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(pod.metadata.uid);
    if (it == pods_.end()) return;
    for (auto& status : statuses) {
      const Worker* startup = nullptr;
      const Worker* readiness = nullptr;
      for (auto& w : it->second.workers) {
        if (w->container_name != status.name) continue;
        observeLocked(w, status, schedules, idle);
        if (w->type == ProbeType::kStartup) startup = w.get();
        if (w->type == ProbeType::kReadiness) readiness = w.get();
      }
      const bool running = status.state.running.has_value();
      bool started = running;
      if (running && startup != nullptr) started = startup->result == ProbeResult::kSuccess;
      bool ready = running && started;
      if (ready && readiness != nullptr) ready = readiness->result == ProbeResult::kSuccess;
      status.started = started;
      status.ready = ready;
    }
  }
  apply(std::move(schedules), std::move(idle));
}

void Prober::apply(std::vector<Schedule> schedules, std::vector<std::shared_ptr<Worker>> idle) {
  auto self = shared_from_this();
  for (auto& w : idle) {
    asio::post(w->strand, [w] {
      if (w->timer) w->timer->cancel();
    });
  }
  for (auto& s : schedules) {
    asio::post(s.worker->strand, [self, s] { self->arm(s.worker, s.generation, s.delay); });
  }
}

void Prober::arm(const std::shared_ptr<Worker>& w, uint64_t generation, base::Duration delay) {
  {
    std::lock_guard lock(mu_);
    if (w->stopped || w->generation != generation) return;
  }
  if (!w->timer) w->timer = clock_.makeTimer(w->strand);
  // Weak both ways: the timer lives in the worker and must not keep it (or the prober) alive.
  std::weak_ptr<Prober> weak = weak_from_this();
  std::weak_ptr<Worker> weak_worker = w;
  w->timer->asyncWaitFor(delay, [weak, weak_worker, generation] {
    auto self = weak.lock();
    auto worker = weak_worker.lock();
    if (self && worker) self->tick(worker, generation);
  });
}

const Prober::Worker* Prober::findLocked(const std::string& pod_uid, const std::string& container,
                                         ProbeType type) const {
  auto it = pods_.find(pod_uid);
  if (it == pods_.end()) return nullptr;
  for (const auto& w : it->second.workers) {
    if (w->container_name == container && w->type == type) return w.get();
  }
  return nullptr;
}

void Prober::tick(const std::shared_ptr<Worker>& w, uint64_t generation) {
  ProbeTarget target;
  base::Duration period{};
  bool skip = false;
  {
    std::lock_guard lock(mu_);
    if (w->stopped || w->generation != generation || !w->running || w->on_hold) return;
    if (w->type == ProbeType::kStartup && w->result == ProbeResult::kSuccess) return;  // done
    period = seconds(std::max(w->spec.period_seconds, 1));
    auto it = pods_.find(w->pod_uid);
    skip = it == pods_.end();
    if (!skip && it->second.deleting && w->type != ProbeType::kReadiness) skip = true;
    if (!skip && w->type != ProbeType::kStartup) {
      // Gated by the startup probe until it succeeds for this container.
      const Worker* startup = findLocked(w->pod_uid, w->container_name, ProbeType::kStartup);
      skip = startup != nullptr &&
             (startup->container_id != w->container_id || startup->result != ProbeResult::kSuccess);
    }
    if (!skip) {
      target.handler = w->spec.handler;
      target.timeout = seconds(std::max(w->spec.timeout_seconds, 1));
      target.container_id = parseContainerId(w->container_id);
      target.ports = w->ports;
    }
  }
  if (skip) {
    arm(w, generation, period);
    return;
  }
  target.pod_ip = pod_ip_(w->pod_uid);  // outside the lock: it asks the status manager
  auto task = runProbe(shared_from_this(), w, generation, std::move(target));
  asio::co_spawn(w->strand, std::move(task), asio::detached);
}

asio::awaitable<void> Prober::runProbe(std::shared_ptr<Prober> self, std::shared_ptr<Worker> w,
                                       uint64_t generation, ProbeTarget target) {
  const auto began = self->clock_.now();
  ProbeOutcome outcome;
  try {
    auto probe = self->handler_->probe(std::move(target));
    outcome = co_await std::move(probe);
  } catch (const std::exception& e) {
    outcome = ProbeOutcome{ProbeOutcome::Kind::kUnknown, e.what()};
  }
  using Kind = ProbeOutcome::Kind;
  bool changed = false;
  bool rearm = false;
  base::Duration period{};
  std::vector<Schedule> triggers;
  {
    std::lock_guard lock(self->mu_);
    if (w->stopped || w->generation != generation) co_return;
    period = seconds(std::max(w->spec.period_seconds, 1));
    if (outcome.kind != Kind::kUnknown) {  // an error keeps the previous result
      const ProbeResult r =
          outcome.kind == Kind::kFailure ? ProbeResult::kFailure : ProbeResult::kSuccess;
      changed = self->recordResultLocked(*w, r, triggers);
    }
    rearm = !w->on_hold && !(w->type == ProbeType::kStartup && w->result == ProbeResult::kSuccess);
  }
  if (outcome.kind == Kind::kFailure || outcome.kind == Kind::kUnknown) {
    if (self->on_failure_) self->on_failure_(w->pod_uid, w->container_name, w->type, outcome);
  }
  if (changed && self->on_change_) self->on_change_(w->pod_uid);
  if (rearm) {
    auto elapsed = self->clock_.now() - began;
    self->arm(w, generation, std::max<base::Duration>(period - elapsed, base::Duration::zero()));
  }
  self->apply(std::move(triggers), {});
}

bool Prober::recordResultLocked(Worker& w, ProbeResult r, std::vector<Schedule>& triggers) {
  if (w.last_result == r) {
    ++w.result_run;
  } else {
    w.last_result = r;
    w.result_run = 1;
  }
  const bool below = (r == ProbeResult::kFailure && w.result_run < w.spec.failure_threshold) ||
                     (r == ProbeResult::kSuccess && w.result_run < w.spec.success_threshold);
  if (below) return false;
  const bool changed = w.result != r;
  w.result = r;
  if (changed) bumpVersionLocked(w.pod_uid);
  if (r == ProbeResult::kFailure && w.type != ProbeType::kReadiness) {
    // The container is restarted: stop probing it until a new container runs.
    w.on_hold = true;
    w.result_run = 0;
  }
  if (changed && r == ProbeResult::kSuccess && w.type == ProbeType::kStartup) {
    triggerAfterStartupLocked(w, triggers);
  }
  return changed;
}

void Prober::triggerAfterStartupLocked(const Worker& startup, std::vector<Schedule>& triggers) {
  auto it = pods_.find(startup.pod_uid);
  if (it == pods_.end()) return;
  for (auto& other : it->second.workers) {
    if (other->container_name == startup.container_name && other.get() != &startup &&
        other->container_id == startup.container_id && other->running) {
      ++other->generation;
      triggers.push_back({other, other->generation, base::Duration::zero()});
    }
  }
}

std::string_view Prober::failedProbe(const std::string& pod_uid, const std::string& container_name,
                                     const runtime::ContainerId& id) const {
  if (pods_with_probes_.load() == 0) return {};
  const std::string cid = id.toString();
  std::lock_guard lock(mu_);
  for (ProbeType type : {ProbeType::kLiveness, ProbeType::kStartup}) {
    const Worker* w = findLocked(pod_uid, container_name, type);
    if (w != nullptr && w->container_id == cid && w->result == ProbeResult::kFailure) {
      return type == ProbeType::kLiveness ? "liveness" : "startup";
    }
  }
  return {};
}

ProbeResult Prober::result(const std::string& pod_uid, const std::string& container_name,
                           ProbeType type) const {
  std::lock_guard lock(mu_);
  const Worker* w = findLocked(pod_uid, container_name, type);
  return w != nullptr ? w->result : ProbeResult::kUnknown;
}

size_t Prober::workerCount() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [uid, entry] : pods_) n += entry.workers.size();
  return n;
}

}  // namespace nodeagent::agent
