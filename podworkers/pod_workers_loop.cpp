// The per-pod worker coroutine (kubelet's podWorkerLoop): the start gate, the sync methods, their
// completion and retries, and the static pod ordering.
#include <algorithm>
#include <exception>

#include "base/backoff.h"
#include "podworkers/pod_workers_impl.h"

namespace nodeagent::podworkers {
namespace {

NODEAGENT_LOGGER("podworkers")

// For logs.
std::string_view workTypeName(WorkType type) {
  switch (type) {
    case WorkType::kSync:
      return "sync";
    case WorkType::kTerminating:
      return "terminating";
    case WorkType::kTerminated:
      return "terminated";
  }
  return "unknown";
}

}  // namespace

void BasicPodWorkers::Impl::deliverLocked(const StatusPtr& st, PodWork work) {
  if (closed_) return;
  st->working = true;
  st->stop = std::stop_source();
  ++in_flight_;
  asio::co_spawn(st->strand,
                 runWorker(shared_from_this(), st, std::move(work), st->stop.get_token()),
                 [log = log(), uid = st->uid](std::exception_ptr e) {
                   if (!e) return;
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     log->error("pod worker failed uid={} error={}", uid, ex.what());
                   } catch (...) {
                     log->error("pod worker failed uid={}", uid);
                   }
                 });
}

asio::awaitable<void> BasicPodWorkers::Impl::runWorker(std::shared_ptr<Impl> self, StatusPtr st,
                                                       PodWork work, std::stop_token token) {
  for (;;) {
    std::optional<int64_t> grace;
    PodStatusFn status_fn;
    {
      Deferred deferred;
      std::unique_lock lock(self->mu_);
      if (self->gateLocked(st, work, deferred, grace, status_fn) == Gate::kStop) {
        self->workerExitLocked(*st);
        lock.unlock();
        deferred.run();
        co_return;
      }
    }
    auto execution = self->execute(work, grace, std::move(status_fn), token);
    SyncResult result = co_await std::move(execution);
    {
      Deferred deferred;
      std::unique_lock lock(self->mu_);
      auto next = self->completeLocked(st, work, result, token, deferred);
      if (!next) {
        self->workerExitLocked(*st);
        lock.unlock();
        deferred.run();
        co_return;
      }
      work = std::move(*next);
      st->stop = std::stop_source();
      token = st->stop.get_token();
      lock.unlock();
      deferred.run();
    }
  }
}

BasicPodWorkers::Impl::Gate BasicPodWorkers::Impl::gateLocked(const StatusPtr& st, PodWork& work,
                                                              Deferred& deferred,
                                                              std::optional<int64_t>& grace,
                                                              PodStatusFn& status_fn) {
  if (closed_ || !isCurrent(st)) {
    st->working = false;
    return Gate::kStop;
  }
  if (!st->started && st->is_static) {
    if (st->terminationRequested()) {
      // Killed before it was allowed to start: nothing can be running.
      completeUnstartedTerminatedLocked(st, deferred);
      return Gate::kStop;
    }
    if (!allowStaticPodStartLocked(*st)) {
      log()->info(
          "static pod waits for the pod with the same full name to terminate pod={} "
          "uid={}",
          st->full_name, st->uid);
      if (st->pending) {
        keepCreate(work, *st->pending);
      } else {
        st->pending = std::move(work);
      }
      st->working = false;
      return Gate::kStop;
    }
  }
  st->started = true;
  if (work.type == WorkType::kTerminating) {
    st->started_terminating = true;
    grace = st->gracePeriod();
    if (st->termination && !st->termination->status_post_terminating.empty()) {
      status_fn = st->termination->status_post_terminating.back();
    }
  }
  log()->debug("processing pod work pod={} uid={} work={} type={}", api::podRef(*work.options.pod),
               st->uid, workTypeName(work.type), api::syncPodTypeName(work.options.update_type));
  return Gate::kRun;
}

bool BasicPodWorkers::Impl::allowStaticPodStartLocked(const SyncStatus& st) {
  if (auto it = started_static_.find(st.full_name); it != started_static_.end()) {
    return it->second == &st;
  }
  auto wit = waiting_static_.find(st.full_name);
  if (wit != waiting_static_.end()) {
    auto& waiting = wit->second;
    // Those whose termination was requested before they started give up their turn.
    auto first = std::find_if(waiting.begin(), waiting.end(),
                              [](const SyncStatus* w) { return !w->terminationRequested(); });
    const bool ours = first != waiting.end() && *first == &st;
    const bool another_first = first != waiting.end() && !ours;
    waiting.erase(waiting.begin(), ours ? first + 1 : first);
    if (another_first) return false;
    if (waiting.empty()) waiting_static_.erase(wit);
  }
  started_static_[st.full_name] = &st;
  log()->info("static pod starts pod={} uid={}", st.full_name, st.uid);
  return true;
}

asio::awaitable<SyncResult> BasicPodWorkers::Impl::execute(PodWork work,
                                                           std::optional<int64_t> grace,
                                                           PodStatusFn status_fn,
                                                           std::stop_token token) {
  const auto& o = work.options;
  // NOTE: every co_await result goes into a named local first; GCC 12 miscompiles co_await
  // inside braced initializers of non-trivial aggregates.
  SyncResult result;
  try {
    switch (work.type) {
      case WorkType::kSync: {
        base::StatusOr<bool> r =
            co_await syncer_.syncPod(o.update_type, o.pod, o.mirror_pod, token);
        if (r.ok()) {
          result.terminal = *r;
        } else {
          result.status = r.status();
        }
        break;
      }
      case WorkType::kTerminating:
        if (o.runtime_pod) {
          base::Status s = co_await syncer_.syncTerminatingRuntimePod(o.pod, token);
          result.status = std::move(s);
        } else {
          base::Status s =
              co_await syncer_.syncTerminatingPod(o.pod, grace, std::move(status_fn), token);
          result.status = std::move(s);
        }
        break;
      case WorkType::kTerminated: {
        base::Status s = co_await syncer_.syncTerminatedPod(o.pod);
        result.status = std::move(s);
        break;
      }
    }
    co_return result;
  } catch (const std::exception& e) {
    co_return SyncResult{base::internalError(std::string("pod sync threw: ") + e.what())};
  } catch (...) {
    co_return SyncResult{base::internalError("pod sync threw an unknown exception")};
  }
}

std::optional<PodWork> BasicPodWorkers::Impl::completeLocked(const StatusPtr& st,
                                                             const PodWork& work,
                                                             const SyncResult& result,
                                                             const std::stop_token& token,
                                                             Deferred& deferred) {
  if (!isCurrent(st)) return std::nullopt;  // forgotten while syncing
  if (closed_) {
    st->working = false;
    return std::nullopt;
  }
  logSyncResult(*st, work, result, token);
  const bool ok = result.status.ok();
  bool finished = false;
  switch (work.type) {
    case WorkType::kSync:
      completeSyncLocked(st, work, result);
      break;
    case WorkType::kTerminating:
      finished = completeTerminatingLocked(st, work, ok, deferred);
      break;
    case WorkType::kTerminated:
      finished = completeTerminatedLocked(st, work, ok, deferred);
      break;
  }
  if (finished) return std::nullopt;
  return takePendingLocked(st);
}

void BasicPodWorkers::Impl::logSyncResult(const SyncStatus& st, const PodWork& work,
                                          const SyncResult& result, const std::stop_token& token) {
  const auto& pod = *work.options.pod;
  const bool ok = result.status.ok();
  const bool cancelled =
      !ok && (result.status.code() == base::StatusCode::kCancelled || token.stop_requested());
  if (!ok && !cancelled) {
    log()->warn("error syncing pod, will retry pod={} uid={} work={} error={}", api::podRef(pod),
                st.uid, workTypeName(work.type), result.status.toString());
  } else if (cancelled) {
    log()->debug("pod sync cancelled pod={} uid={} work={}", api::podRef(pod), st.uid,
                 workTypeName(work.type));
  }
}

void BasicPodWorkers::Impl::completeSyncLocked(const StatusPtr& st, const PodWork& work,
                                               const SyncResult& result) {
  const bool ok = result.status.ok();
  if (ok && result.terminal) {
    log()->info("pod reached a terminal phase, begin teardown pod={} uid={}",
                api::podRef(*work.options.pod), st->uid);
    if (!st->term().terminating_at) st->term().terminating_at = clock_.now();
    st->started_terminating = true;
    ++generation_;
    unqueueLocked(*st);
    st->pending = PodWork{WorkType::kTerminating, st->last};
  } else if (!st->terminationRequested()) {
    base::Duration delay = options_.resync_interval;
    if (!ok) {
      delay = result.status.message().find(kNetworkNotReadyErrorMsg) != std::string::npos
                  ? options_.transient_backoff_period
                  : options_.backoff_period;
    }
    queueAfterLocked(*st, delay);
  }
}

bool BasicPodWorkers::Impl::completeTerminatingLocked(const StatusPtr& st, const PodWork& work,
                                                      bool ok, Deferred& deferred) {
  const auto& pod = *work.options.pod;
  if (!ok) {
    if (!st->pending) armRetryLocked(st);
    return false;
  }
  if (work.options.runtime_pod) {
    log()->info("orphaned pod terminated pod={} uid={}", api::podRef(pod), st->uid);
    st->term().terminated_at = clock_.now();
    ++generation_;
    notifyTerminatedLocked(*st, deferred);
    finishLocked(st, deferred);
    return true;
  }
  log()->info("pod terminated all containers pod={} uid={}", api::podRef(pod), st->uid);
  st->term().terminated_at = clock_.now();
  ++generation_;
  notifyTerminatedLocked(*st, deferred);
  releaseStaticLocked(*st);
  st->pending = PodWork{WorkType::kTerminated, st->last};
  return false;
}

bool BasicPodWorkers::Impl::completeTerminatedLocked(const StatusPtr& st, const PodWork& work,
                                                     bool ok, Deferred& deferred) {
  if (ok) {
    log()->info("pod is finished pod={} uid={}", api::podRef(*work.options.pod), st->uid);
    finishLocked(st, deferred);
    return true;
  }
  if (!st->pending) armRetryLocked(st);
  return false;
}

std::optional<PodWork> BasicPodWorkers::Impl::takePendingLocked(const StatusPtr& st) {
  if (st->pending) {
    PodWork next = std::move(*st->pending);
    st->pending.reset();
    return next;
  }
  st->working = false;
  return std::nullopt;
}

void BasicPodWorkers::Impl::notifyTerminatedLocked(SyncStatus& st, Deferred& deferred) {
  if (!st.termination) return;
  for (auto& cb : st.termination->notify_post_terminating) {
    deferred.callbacks.push_back(std::move(cb));
  }
  st.termination->notify_post_terminating.clear();
  st.termination->status_post_terminating.clear();
}

void BasicPodWorkers::Impl::finishLocked(const StatusPtr& st, Deferred& deferred) {
  st->finished = true;
  ++generation_;
  st->working = false;
  st->pending.reset();
  releaseStaticLocked(*st);
  if (st->restart) restartLocked(st, deferred);
}

void BasicPodWorkers::Impl::completeUnstartedTerminatedLocked(const StatusPtr& st,
                                                              Deferred& deferred) {
  log()->info("static pod terminated before it started pod={} uid={}", st->full_name, st->uid);
  st->started_terminating = true;
  st->term().terminated_at = clock_.now();
  notifyTerminatedLocked(*st, deferred);
  finishLocked(st, deferred);  // bumps the generation
}

void BasicPodWorkers::Impl::restartLocked(const StatusPtr& old, Deferred& deferred) {
  UpdatePodOptions options = std::move(*old->restart);
  old->restart.reset();
  log()->info("restarting pod with the same UID pod={} uid={}", api::podRef(*options.pod),
              old->uid);
  Strand strand = old->strand;
  retireLocked(old);
  updatePodLocked(std::move(options), deferred, strand);
}

void BasicPodWorkers::Impl::releaseStaticLocked(const SyncStatus& st) {
  if (!st.is_static) return;
  auto it = started_static_.find(st.full_name);
  if (it != started_static_.end() && it->second == &st) started_static_.erase(it);
  kickStaticLocked(st.full_name);
}

void BasicPodWorkers::Impl::kickStaticLocked(const std::string& full_name) {
  if (started_static_.contains(full_name)) return;
  auto wit = waiting_static_.find(full_name);
  if (wit == waiting_static_.end()) return;
  for (const SyncStatus* waiting : wit->second) {
    if (waiting->terminationRequested()) continue;
    auto s = statuses_.find(waiting->uid);
    if (s == statuses_.end() || s->second.get() != waiting) continue;
    const StatusPtr& next = s->second;
    if (!next->working && next->pending) {
      PodWork work = std::move(*next->pending);
      next->pending.reset();
      deliverLocked(next, std::move(work));
    }
    return;
  }
}

void BasicPodWorkers::Impl::armRetryLocked(const StatusPtr& st) {
  // Runs on st's strand (called from its coroutine), the only place the timer is touched.
  if (!st->retry_timer) st->retry_timer = clock_.makeTimer(st->strand);
  const auto delay = base::jitter(options_.backoff_period, options_.jitter_factor, random_);
  st->retry_timer->asyncWaitFor(
      delay, [weak_self = weak_from_this(), weak_st = std::weak_ptr<SyncStatus>(st)]() {
        auto self = weak_self.lock();
        auto status = weak_st.lock();
        if (self && status) self->onRetry(status);
      });
}

void BasicPodWorkers::Impl::onRetry(const StatusPtr& st) {
  std::lock_guard lock(mu_);
  if (closed_ || !isCurrent(st) || st->working || st->finished || !st->terminationRequested()) {
    return;
  }
  PodWork work{st->terminated() ? WorkType::kTerminated : WorkType::kTerminating, st->last};
  deliverLocked(st, std::move(work));
}

void BasicPodWorkers::Impl::retireLocked(StatusPtr st) {
  if (isCurrent(st)) statuses_.erase(st->uid);
  ++generation_;
  unqueueLocked(*st);
  st->pending.reset();
  retireTimerLocked(*st);
  if (st->is_static) {
    if (auto wit = waiting_static_.find(st->full_name); wit != waiting_static_.end()) {
      std::erase(wit->second, st.get());
      if (wit->second.empty()) waiting_static_.erase(wit);
    }
    releaseStaticLocked(*st);
  }
}

void BasicPodWorkers::Impl::retireTimerLocked(SyncStatus& st) {
  if (!st.retry_timer) return;
  std::shared_ptr<base::Timer> timer(std::move(st.retry_timer));
  asio::post(st.strand, [timer]() mutable {
    timer->cancel();
    timer.reset();
  });
}

void BasicPodWorkers::Impl::workerExitLocked(SyncStatus& st) {
  // Nothing is in flight to cancel: a worker at rest keeps no stop state.
  st.stop = std::stop_source(std::nostopstate);
  --in_flight_;
  if (closed_ && in_flight_ == 0) {
    for (auto& cb : on_idle_) asio::post(executor_, std::move(cb));
    on_idle_.clear();
  }
}

}  // namespace nodeagent::podworkers
