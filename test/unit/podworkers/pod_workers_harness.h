// The harness of the pod workers' unit tests: real BasicPodWorkers on an io_context polled by
// hand, a fake clock, a fixed random source and a recording fake syncer.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/pod_update.h"
#include "base/log.h"
#include "podworkers/pod_workers.h"
#include "test/support/fake_clock.h"
#include "test/support/fake_pod_syncer.h"
#include "test/support/fake_pod_workers.h"

// GCC 12 warns about designated initializers that leave defaulted members out.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace nodeagent::podworkers_test {

using namespace std::chrono_literals;
using api::SyncPodType;
using Method = testing::FakePodSyncer::Method;
using podworkers::KillPodOptions;
using podworkers::PodWorkerState;
using podworkers::UpdatePodOptions;

class FixedRandom final : public base::Random {
 public:
  explicit FixedRandom(double v) : v_(v) {}
  double uniform() override { return v_; }
  uint64_t next64() override { return 0; }

 private:
  double v_;
};

struct PodSpec {
  std::string uid;
  std::string name;
  std::string ns = "default";
  bool is_static = false;
  std::optional<int64_t> grace = 30;
  std::optional<int64_t> deletion_grace;
  std::string phase;
};

inline api::PodPtr makePod(const PodSpec& s) {
  api::Pod pod;
  pod.metadata.uid = s.uid;
  pod.metadata.name = s.name.empty() ? s.uid : s.name;
  pod.metadata.namespace_ = s.ns;
  pod.metadata.annotations.set(api::kConfigSourceAnnotationKey, s.is_static ? "file" : "api");
  if (s.is_static) pod.metadata.annotations.set(api::kConfigHashAnnotationKey, s.uid);
  pod.spec->termination_grace_period_seconds = s.grace;
  if (s.deletion_grace) {
    pod.metadata.deletion_timestamp = api::Timestamp(std::chrono::seconds(1767225600));
    pod.metadata.deletion_grace_period_seconds = s.deletion_grace;
  }
  pod.status->phase = s.phase;
  return std::make_shared<const api::Pod>(std::move(pod));
}

inline api::PodPtr pod(const std::string& uid, const std::string& name = "") {
  return makePod({.uid = uid, .name = name});
}

inline api::PodPtr staticPod(const std::string& uid, const std::string& name) {
  return makePod({.uid = uid, .name = name, .is_static = true});
}

inline KillPodOptions killOptions(std::optional<int64_t> grace = std::nullopt,
                                  std::function<void()> done = {}) {
  KillPodOptions k;
  k.grace_period_seconds_override = grace;
  k.on_completed = std::move(done);
  return k;
}

// Declaration order matters: the clock outlives the io_context (posted handlers own timers),
// and everything is drained before the io_context goes.
struct Harness {
  explicit Harness(podworkers::PodWorkersOptions options = {}, double random = 0.0)
      : random_(random) {
    base::initLogging({.verbosity = 0, .quiet = true});
    workers = std::make_unique<podworkers::BasicPodWorkers>(ioc.get_executor(), clock, random_,
                                                            syncer, options);
  }
  ~Harness() {
    workers->shutdown();
    syncer.stopHolding();
    syncer.release();
    ioc.poll();
    workers.reset();
    ioc.poll();
  }

  void update(SyncPodType type, api::PodPtr p, std::optional<KillPodOptions> kill = std::nullopt,
              api::PodPtr mirror = nullptr) {
    UpdatePodOptions o;
    o.update_type = type;
    o.pod = std::move(p);
    o.mirror_pod = std::move(mirror);
    o.kill_pod_options = std::move(kill);
    workers->updatePod(std::move(o));
  }
  void poll() { ioc.poll(); }
  void advance(base::Duration d) {
    clock.advance(d);
    ioc.poll();
  }
  std::vector<Method> methods(const std::string& uid) const {
    std::vector<Method> out;
    for (const auto& c : syncer.callsFor(uid)) out.push_back(c.method);
    return out;
  }

  testing::FakeClock clock;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  FixedRandom random_;
  testing::FakePodSyncer syncer;
  std::unique_ptr<podworkers::BasicPodWorkers> workers;
};

inline const std::vector<Method> kFullLife = {Method::kSyncPod, Method::kSyncTerminatingPod,
                                              Method::kSyncTerminatedPod};

}  // namespace nodeagent::podworkers_test
