// A PodWorkers for tests of its callers (the sync loop, housekeeping): records every call and
// answers queries from state the test sets. With a PodSyncer it also runs each update at once,
// one after another and without coalescing (kubelet's fakePodWorkers): creates, updates and syncs
// call syncPod; kills call syncTerminatingPod then syncTerminatedPod.
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "podworkers/pod_workers.h"

namespace nodeagent::testing {

class FakePodWorkers final : public podworkers::PodWorkers {
 public:
  FakePodWorkers() = default;
  // `syncer` must outlive the handlers posted to `executor`.
  FakePodWorkers(asio::any_io_executor executor, podworkers::PodSyncer& syncer);

  void updatePod(podworkers::UpdatePodOptions options) override;
  std::map<std::string, podworkers::PodWorkerSync> syncKnownPods(
      const std::vector<api::PodPtr>& desired) override;
  void forgetWorker(const std::string& uid) override;
  std::vector<std::string> getWorkToSync() override;

  bool isPodTerminationRequested(const std::string& uid) const override;
  bool isPodKnownTerminated(const std::string& uid) const override;
  bool couldHaveRunningContainers(const std::string& uid) const override;
  bool shouldPodContainersBeTerminating(const std::string& uid) const override;
  bool shouldPodRuntimeBeRemoved(const std::string& uid) const override;
  bool shouldPodContentBeRemoved(const std::string& uid) const override;
  bool isPodForMirrorPodTerminatingByFullName(const std::string& full_name) const override;
  // Bumped by every call that changes what syncKnownPods reports.
  uint64_t generation() const override;

  // What the test sees.
  std::vector<podworkers::UpdatePodOptions> updates() const;
  std::vector<std::string> forgotten() const;
  std::vector<std::vector<api::PodPtr>> knownPodsCalls() const;

  // What the queries answer. A UID without a state is unknown: the queries then answer as the
  // real workers do before/after the first syncKnownPods.
  void setState(const std::string& uid, podworkers::PodWorkerState state, bool is_static = false);
  void clearState(const std::string& uid);
  void setTerminatingStaticFullName(const std::string& full_name, bool terminating);
  // UIDs getWorkToSync returns (once) on its next call.
  void addDue(const std::string& uid);

 private:
  asio::awaitable<void> drain();

  mutable std::mutex mu_;
  std::optional<asio::strand<asio::any_io_executor>> strand_;
  podworkers::PodSyncer* syncer_ = nullptr;
  bool draining_ = false;
  std::deque<podworkers::UpdatePodOptions> queue_;
  std::vector<podworkers::UpdatePodOptions> updates_;
  std::vector<std::string> forgotten_;
  std::vector<std::vector<api::PodPtr>> known_calls_;
  bool pods_synced_ = false;
  std::map<std::string, podworkers::PodWorkerSync> states_;
  std::set<std::string> terminating_static_;
  std::vector<std::string> due_;
  uint64_t generation_ = 0;
};

}  // namespace nodeagent::testing
