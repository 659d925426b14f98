// The apiserver-backed MirrorClient (kubelet's pkg/kubelet/pod/mirror_client.go): makes every
// static pod visible in the apiserver as a mirror pod, a copy of the static pod annotated with
// kubernetes.io/config.mirror = its config hash and owned by this node's Node object.
//
// A static pod may be the apiserver itself (or etcd), so mirror calls must never hold up a pod's
// sync: each call is bounded by `call_timeout` (the caller resumes with DeadlineExceeded while the
// request finishes in the background), and when too many calls are already stuck the next ones
// fail at once instead of queueing behind them (and taking every thread of the shared API pool
// from the node's lease and statuses).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "api/async_rest_client.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"
#include "podmanager/mirror_client.h"

namespace nodeagent::agent {

struct ApiMirrorClientOptions {
  std::string node_name;
  // The registered Node's UID (for the owner reference); "" until the node is registered, while
  // createMirrorPod makes no request and answers FailedPrecondition (NodeRestriction refuses a
  // mirror pod its Node does not own; the wait is logged once). Unset: the client GETs the Node
  // itself. Any thread.
  std::function<std::string()> node_uid;
  base::Duration call_timeout = std::chrono::seconds(5);
  // Calls still running (possibly past their timeout) beyond which new calls fail at once; less
  // than the shared API pool's threads, so that stuck mirror calls cannot hold all of them.
  int max_in_flight = 2;
};

class ApiMirrorClient final : public podmanager::MirrorClient {
 public:
  // `clock` must outlive the mirror client.
  ApiMirrorClient(api::AsyncRestClient api, base::Clock& clock, ApiMirrorClientOptions options);
  ~ApiMirrorClient() override;

  asio::awaitable<base::Status> createMirrorPod(api::PodPtr pod) override;
  asio::awaitable<base::StatusOr<bool>> deleteMirrorPod(std::string full_name,
                                                        std::optional<std::string> uid) override;

  uint64_t created() const { return created_.load(); }
  uint64_t deleted() const { return deleted_.load(); }

 private:
  api::AsyncRestClient async_;
  base::Clock& clock_;
  ApiMirrorClientOptions options_;
  std::shared_ptr<std::atomic<int>> in_flight_;
  std::atomic<uint64_t> created_{0};
  std::atomic<uint64_t> deleted_{0};
  std::atomic<bool> waiting_for_node_{false};  // the wait for the Node's registration was logged
};

// The body of a mirror pod's POST: the static pod without uid/resourceVersion/creationTimestamp/
// status, with the config.mirror annotation and the Node owner reference.
nlohmann::json buildMirrorPod(const api::Pod& pod, const std::string& node_name,
                              const std::string& node_uid);

}  // namespace nodeagent::agent
