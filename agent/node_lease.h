// The node lease (kubelet's nodelease controller): keeps kube-node-lease/<node> renewed, the
// cheap heartbeat the node lifecycle controller watches. Every `renew_interval` (10 s = 1/4 of
// leaseDurationSeconds 40, counted from the end of the previous sync) it PUTs the last lease it
// saw with a new renewTime (optimistic: no GET while nothing else writes the lease). A failed PUT
// is retried at once, up to `max_update_retries` (5) times; a Conflict first re-reads the lease.
// When the retries are used up, or there was no lease yet, it "ensures" the lease: GET, or create
// it (with the Node as owner) when missing, retrying every error with a backoff of 200 ms doubling
// to 7 s until it succeeds, then renews once more. A second and later failed PUT in a row calls
// `on_repeated_failure` (kubelet closes its connections there).
//
// A renewal answered 404 means the apiserver lost its state (we created that lease): the
// controller reports it (`on_state_lost`) and ensures the lease at once. After a loss (reported
// here or told through recreate()) the lease is re-created as soon as the Node is registered
// again, retrying with the backoff meanwhile, so that it never carries the lost Node's UID.
//
// Threading: start/stop/recreate/renewals are safe from any thread; the work runs on the
// controller's strand. Create with std::make_shared; the RestClient, API pool and Clock must
// outlive it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "api/async_rest_client.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::agent {

inline constexpr char kNodeLeaseNamespace[] = "kube-node-lease";

struct NodeLeaseOptions {
  std::string node_name;
  int lease_duration_seconds = 40;
  base::Duration renew_interval = std::chrono::seconds(10);
  // Immediate PUT attempts per renewal before falling back to ensuring the lease.
  int max_update_retries = 5;
  // Ensure-lease backoff: the first wait is twice this (kubelet doubles before sleeping).
  base::Duration backoff_initial = std::chrono::milliseconds(100);
  base::Duration backoff_max = std::chrono::seconds(7);
  // The Node's UID ("" while unknown: the controller GETs the Node before creating the lease, and
  // does not create it without its owner). Any thread.
  std::function<std::string()> node_uid;
  // Called on the strand when a renewal fails again after a failed attempt. Optional.
  std::function<void()> on_repeated_failure;
  // Called on the strand when the lease we renewed is gone from the apiserver. Optional.
  std::function<void(const std::string& reason)> on_state_lost;
};

class NodeLeaseController : public std::enable_shared_from_this<NodeLeaseController> {
 public:
  NodeLeaseController(asio::any_io_executor executor, base::Clock& clock, api::AsyncRestClient api,
                      NodeLeaseOptions options);
  ~NodeLeaseController();

  void start();
  void stop();
  // Forgets the lease and ensures it again as soon as the sync in flight (if any) is done: the
  // apiserver lost its state. Any thread.
  void recreate();
  // Successful renewals (creations included). Any thread.
  uint64_t renewals() const { return renewals_.load(); }

 private:
  using JsonPtr = std::shared_ptr<const nlohmann::json>;
  struct Ensured {
    JsonPtr lease;  // null: not created this time (the Node is not readable yet)
    bool created = false;
  };
  asio::awaitable<void> sync();
  asio::awaitable<base::Status> retryUpdateLease(JsonPtr from);
  asio::awaitable<Ensured> backoffEnsureLease();
  asio::awaitable<base::StatusOr<Ensured>> ensureLease();
  asio::awaitable<void> waitFor(base::Duration d);
  // The lease to send: a copy of `from` (or a new lease) with a new renewTime and the Node owner.
  nlohmann::json newLease(const nlohmann::json* from, const std::string& node_uid) const;
  void schedule(base::Duration d);

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  api::AsyncRestClient async_;
  NodeLeaseOptions options_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> renewals_{0};

  // Strand only.
  base::TimerPtr timer_;   // the renew interval, or a backoff wait within a sync
  JsonPtr lease_;          // the last lease the apiserver answered
  bool busy_ = false;      // a sync is running
  bool recreate_ = false;  // forget lease_ and sync once the running sync is done
  bool lost_ = false;      // after a loss: wait (with backoff) for the Node rather than a sync
};

}  // namespace nodeagent::agent
