// MirrorClient: creates and deletes the mirror pods that make static pods visible in the apiserver
// (kubelet's pkg/kubelet/pod/mirror_client.go). The pod manager holds one; syncPod calls it for
// static pods and housekeeping calls it for orphaned mirrors.
//
// Both calls are coroutines so that an apiserver that is slow or down never blocks a thread or a
// pod strand (k/k #139502: a hanging mirror DELETE delayed an etcd restart by 30 s).
// Implementations run their HTTP request off the io_context threads (blocking pool) and resume the
// caller on its own executor; they bound every request with a timeout. Callers must treat mirror
// failures as non-fatal (kubelet never fails a sync because of a mirror pod).
#pragma once

#include <optional>
#include <string>

#include "api/pod.h"
#include "base/asio.h"
#include "base/status.h"

namespace nodeagent::podmanager {

class MirrorClient {
 public:
  virtual ~MirrorClient() = default;

  // Creates the mirror of static pod `pod`: a copy annotated with config.mirror = config.hash and
  // owned by the Node. OK when the mirror was created, or already exists with the same hash.
  // Any thread / any executor; resumes on the caller's executor.
  virtual asio::awaitable<base::Status> createMirrorPod(api::PodPtr pod) = 0;

  // Deletes the mirror pod named `full_name` ("name_namespace") with grace period 0; with `uid`,
  // only the object with that UID (a precondition, so a newer mirror is never deleted).
  // Returns true when an object was deleted; false when there was nothing to delete (NotFound,
  // Conflict, no apiserver). An error means the request could not be made (bad full name) or
  // failed in a way worth reporting. Any thread / any executor; resumes on the caller's executor.
  virtual asio::awaitable<base::StatusOr<bool>> deleteMirrorPod(std::string full_name,
                                                                std::optional<std::string> uid) = 0;

  // False for a client that makes no mirror pods (no apiserver): a static pod then never has one
  // and never waits for one.
  virtual bool makesMirrorPods() const { return true; }
};

// The mirror client of an agent without an apiserver: creates nothing, deletes nothing.
class NoopMirrorClient final : public MirrorClient {
 public:
  asio::awaitable<base::Status> createMirrorPod(api::PodPtr pod) override;
  asio::awaitable<base::StatusOr<bool>> deleteMirrorPod(std::string full_name,
                                                        std::optional<std::string> uid) override;
  bool makesMirrorPods() const override { return false; }
};

}  // namespace nodeagent::podmanager
