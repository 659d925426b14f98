// SyncHandler: what the sync loop calls (kubelet's SyncHandler). Every method runs on the sync
// loop's strand, one at a time, and must not block: work for a pod is handed to the pod workers.
#pragma once

#include <vector>

#include "api/chunked_pods.h"
#include "api/pod.h"

namespace nodeagent::agent {

struct PodLifecycleEvent;

class SyncHandler {
 public:
  virtual ~SyncHandler() = default;
  virtual void handlePodAdditions(const api::ChunkedPods& pods) = 0;
  virtual void handlePodUpdates(const api::ChunkedPods& pods) = 0;
  virtual void handlePodRemoves(const api::ChunkedPods& pods) = 0;
  virtual void handlePodReconcile(const api::ChunkedPods& pods) = 0;
  virtual void handlePodSyncs(const std::vector<api::PodPtr>& pods) = 0;
  // A container started, died or vanished.
  virtual void handlePlegEvent(const PodLifecycleEvent& event) = 0;
  // The pods whose periodic sync is due, or that passed their activeDeadlineSeconds.
  virtual std::vector<api::PodPtr> podsToSync() = 0;
  // Housekeeping; only called once every configured source is ready.
  virtual void handlePodCleanups() = 0;
};

}  // namespace nodeagent::agent
