// The node lease (kubelet's nodelease controller): keeps kube-node-lease/<node> renewed, the
// cheap heartbeat the node lifecycle controller watches. Every `renew_interval` (10 s = 1/4 of
// leaseDurationSeconds 40) it PUTs the last lease it saw with a new renewTime (optimistic: the
// resourceVersion makes a concurrent writer's update a Conflict, answered by a GET and one more
// PUT); a missing lease is created. Failures retry with backoff (100 ms doubling to 7 s), so the
// lease catches up as soon as the apiserver is back. The lease is owned by the Node once its UID is
// known.
//
// Threading: start/stop/renewals are safe from any thread; the work runs on the controller's
// strand. Create with std::make_shared; the RestClient and Clock must outlive it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "api/rest_client.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::agent {

inline constexpr char kNodeLeaseNamespace[] = "kube-node-lease";

struct NodeLeaseOptions {
  std::string node_name;
  int lease_duration_seconds = 40;
  base::Duration renew_interval = std::chrono::seconds(10);
  base::Duration backoff_initial = std::chrono::milliseconds(100);
  base::Duration backoff_max = std::chrono::seconds(7);
  // The Node's UID ("" while unknown). Any thread.
  std::function<std::string()> node_uid;
};

class NodeLeaseController : public std::enable_shared_from_this<NodeLeaseController> {
 public:
  NodeLeaseController(asio::any_io_executor executor, base::Clock& clock, api::RestClient& client,
                      NodeLeaseOptions options);
  ~NodeLeaseController();

  void start();
  void stop();
  // Successful renewals (creations included). Any thread.
  uint64_t renewals() const { return renewals_.load(); }

 private:
  asio::awaitable<void> renew();
  void schedule(base::Duration d);

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  api::AsyncRestClient async_;
  NodeLeaseOptions options_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> renewals_{0};

  // Strand only.
  base::TimerPtr timer_;
  base::Duration backoff_{0};
  std::shared_ptr<nlohmann::json> lease_;  // the last lease the apiserver answered
};

}  // namespace nodeagent::agent
