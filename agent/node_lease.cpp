#include "agent/node_lease.h"

#include <nlohmann/json.hpp>

#include "api/async_rest_client.h"

#include "api/api_errors.h"
#include "api/time.h"
#include "base/log.h"
#include "base/printable.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("lease")

}  // namespace

NodeLeaseController::NodeLeaseController(asio::any_io_executor executor, base::Clock& clock,
                                         api::AsyncRestClient api, NodeLeaseOptions options)
    : strand_(asio::make_strand(executor)),
      clock_(clock),
      async_(std::move(api)),
      options_(std::move(options)) {}

NodeLeaseController::~NodeLeaseController() = default;

void NodeLeaseController::start() {
  asio::post(strand_, [self = shared_from_this()] {
    self->timer_ = self->clock_.makeTimer(self->strand_);
    self->schedule(base::Duration(0));
  });
}

void NodeLeaseController::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    if (self->timer_) self->timer_->cancel();
  });
}

void NodeLeaseController::recreate() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->stopped_ || !self->timer_) return;
    self->recreate_ = true;
    // A running sync ends by scheduling the next one, which then starts over.
    if (!self->busy_) self->schedule(base::Duration(0));
  });
}

void NodeLeaseController::schedule(base::Duration d) {
  busy_ = false;
  if (stopped_) return;
  if (recreate_) {
    recreate_ = false;
    lease_.reset();
    lost_ = true;
    d = base::Duration(0);
  }
  timer_->asyncWaitFor(d, [self = shared_from_this()] {
    if (self->stopped_) return;
    self->busy_ = true;
    asio::co_spawn(
        self->strand_,
        [](std::shared_ptr<NodeLeaseController> s) -> asio::awaitable<void> {
          try {
            co_await s->sync();
          } catch (const std::exception& e) {
            log()->error("Lease renewal failed err={}", e.what());
          }
          // kubelet's wait.Until: the next sync is one interval after this one ended.
          s->schedule(s->options_.renew_interval);
        }(self),
        asio::detached);
  });
}

asio::awaitable<void> NodeLeaseController::waitFor(base::Duration d) {
  // stop() cancels timer_, which drops the handler and with it this coroutine.
  auto initiate = [this, d](auto handler) {
    auto shared = std::make_shared<decltype(handler)>(std::move(handler));
    timer_->asyncWaitFor(d, [shared]() mutable { (*shared)(); });
  };
  co_await asio::async_initiate<decltype(asio::use_awaitable), void()>(initiate,
                                                                       asio::use_awaitable);
}

nlohmann::json NodeLeaseController::newLease(const nlohmann::json* from,
                                             const std::string& node_uid) const {
  const std::string& name = options_.node_name;
  nlohmann::json lease = from ? *from : nlohmann::json::object();
  if (!from) {
    lease["apiVersion"] = "coordination.k8s.io/v1";
    lease["kind"] = "Lease";
    lease["metadata"]["name"] = name;
    lease["metadata"]["namespace"] = kNodeLeaseNamespace;
    lease["spec"]["holderIdentity"] = name;
    lease["spec"]["leaseDurationSeconds"] = options_.lease_duration_seconds;
  }
  // Like later kubelets' setNodeOwnerFunc: a lease without an owner gets the Node once known.
  const auto& meta = lease["metadata"];
  const bool owned = meta.contains("ownerReferences") && meta["ownerReferences"].is_array() &&
                     !meta["ownerReferences"].empty();
  if (!owned && !node_uid.empty()) {
    lease["metadata"]["ownerReferences"] = nlohmann::json::array(
        {{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", name}, {"uid", node_uid}}});
  }
  lease["spec"]["renewTime"] =
      api::formatMicroTime(api::Timestamp(clock_.wallNow().time_since_epoch()));
  return lease;
}

asio::awaitable<void> NodeLeaseController::sync() {
  if (lease_) {
    // Optimistic: assume nobody else changed the lease since our last write, saving a GET.
    auto s = co_await retryUpdateLease(lease_);
    if (s.ok() || stopped_) co_return;
    log()->info("Failed to update the lease using the latest lease, ensuring it node={} err={}",
                options_.node_name, base::goQuote(s.toString()));
  }
  Ensured ensured = co_await backoffEnsureLease();
  if (stopped_) co_return;
  lease_ = ensured.lease;
  if (ensured.created) {
    lost_ = false;
    renewals_.fetch_add(1);
    co_return;
  }
  if (!ensured.lease) co_return;
  auto s = co_await retryUpdateLease(ensured.lease);
  if (!s.ok() && !stopped_) {
    log()->error(
        "Failed to renew the node lease node={} err={} retry_in_ms={}", options_.node_name,
        base::goQuote(s.toString()),
        std::chrono::duration_cast<std::chrono::milliseconds>(options_.renew_interval).count());
  }
}

asio::awaitable<base::Status> NodeLeaseController::retryUpdateLease(JsonPtr from) {
  const std::string path = api::leasePath(kNodeLeaseNamespace, options_.node_name);
  for (int i = 0; i < options_.max_update_retries; ++i) {
    const std::string uid = options_.node_uid ? options_.node_uid() : "";
    auto lease = std::make_shared<const nlohmann::json>(newLease(from.get(), uid));
    auto call = [path, lease](api::RestClient& c) { return c.updateJson(path, *lease); };
    auto r = co_await api::runOnPool(async_, call);
    if (stopped_) co_return base::cancelledError("lease controller stopped");
    if (r.ok()) {
      lease_ = std::make_shared<const nlohmann::json>(std::move(*r));
      renewals_.fetch_add(1);
      co_return base::okStatus();
    }
    log()->warn("Failed to update the node lease node={} attempt={} err={}", options_.node_name,
                i + 1, base::goQuote(r.status().toString()));
    if (api::isNotFound(r.status())) {
      // We created it, so the apiserver lost its state (or someone deleted the lease).
      lost_ = true;
      if (options_.on_state_lost) {
        options_.on_state_lost("Lease " + std::string(kNodeLeaseNamespace) + "/" +
                               options_.node_name + " not found");
      }
      co_return base::notFoundError("the node lease is gone");
    }
    if (api::isConflict(r.status())) {
      // Someone else wrote the lease: continue from its current version.
      from = (co_await backoffEnsureLease()).lease;
      if (stopped_) co_return base::cancelledError("lease controller stopped");
      continue;
    }
    if (i > 0 && options_.on_repeated_failure) options_.on_repeated_failure();
  }
  co_return base::unavailableError("failed " + std::to_string(options_.max_update_retries) +
                                   " attempts to update the node lease");
}

asio::awaitable<NodeLeaseController::Ensured> NodeLeaseController::backoffEnsureLease() {
  base::Duration sleep = options_.backoff_initial;
  for (;;) {
    auto ensured = co_await ensureLease();
    if (stopped_) co_return Ensured{};
    if (ensured.ok()) co_return std::move(*ensured);
    sleep = std::min(sleep * 2, options_.backoff_max);
    log()->warn("Failed to ensure the node lease exists node={} err={} retry_in_ms={}",
                options_.node_name, base::goQuote(ensured.status().toString()),
                std::chrono::duration_cast<std::chrono::milliseconds>(sleep).count());
    co_await waitFor(sleep);
    if (stopped_) co_return Ensured{};
  }
}

asio::awaitable<base::StatusOr<NodeLeaseController::Ensured>> NodeLeaseController::ensureLease() {
  const std::string name = options_.node_name;
  auto get = [name](api::RestClient& c) {
    return c.getJson(api::leasePath(kNodeLeaseNamespace, name));
  };
  auto got = co_await api::runOnPool(async_, get);
  if (got.ok()) co_return Ensured{std::make_shared<const nlohmann::json>(std::move(*got)), false};
  if (!api::isNotFound(got.status())) co_return got.status();

  // The lease is created with its owner reference or not at all (kubelet): without the Node's
  // UID, it is created on a later sync.
  std::string uid = options_.node_uid ? options_.node_uid() : "";
  if (uid.empty()) {
    auto get_node = [name](api::RestClient& c) { return c.getJson(api::nodePath(name)); };
    auto node = co_await api::runOnPool(async_, get_node);
    if (node.ok() && node->contains("metadata") && (*node)["metadata"].contains("uid") &&
        (*node)["metadata"]["uid"].is_string()) {
      uid = (*node)["metadata"]["uid"].get<std::string>();
    }
    if (uid.empty()) {
      const std::string why = node.ok() ? std::string("no uid") : node.status().toString();
      // After a loss the Node is being registered again: retry with the backoff until it is.
      if (lost_) co_return base::unavailableError("the Node is not registered yet: " + why);
      log()->warn("Cannot read the Node to own its lease, creating it later node={} err={}", name,
                  base::goQuote(why));
      co_return Ensured{};
    }
  }
  auto lease = std::make_shared<const nlohmann::json>(newLease(nullptr, uid));
  auto create = [lease](api::RestClient& c) {
    return c.createJson(api::leasesPath(kNodeLeaseNamespace), *lease);
  };
  auto created = co_await api::runOnPool(async_, create);
  if (!created.ok()) co_return created.status();
  co_return Ensured{std::make_shared<const nlohmann::json>(std::move(*created)), true};
}

}  // namespace nodeagent::agent
