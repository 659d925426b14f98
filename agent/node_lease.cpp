#include "agent/node_lease.h"

#include <nlohmann/json.hpp>

#include "agent/api_mirror_client.h"

#include "api/api_errors.h"
#include "api/time.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

std::shared_ptr<spdlog::logger> log() {
  static auto l = base::logger("lease");
  return l;
}

}  // namespace

NodeLeaseController::NodeLeaseController(asio::any_io_executor executor, base::Clock& clock,
                                         api::RestClient& client, NodeLeaseOptions options)
    : strand_(asio::make_strand(executor)),
      clock_(clock),
      async_(client, 1),
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

void NodeLeaseController::schedule(base::Duration d) {
  if (stopped_) return;
  timer_->asyncWaitFor(d, [self = shared_from_this()] {
    if (self->stopped_) return;
    asio::co_spawn(
        self->strand_,
        [](std::shared_ptr<NodeLeaseController> s) -> asio::awaitable<void> {
          try {
            co_await s->renew();
          } catch (const std::exception& e) {
            log()->error("Lease renewal failed err={}", e.what());
            s->schedule(s->options_.renew_interval);
          }
        }(self),
        asio::detached);
  });
}

asio::awaitable<void> NodeLeaseController::renew() {
  const std::string name = options_.node_name;
  const std::string uid = options_.node_uid ? options_.node_uid() : "";
  const std::string renew_time =
      api::formatMicroTime(api::Timestamp(clock_.wallNow().time_since_epoch()));
  const int duration = options_.lease_duration_seconds;
  auto apply = [name, uid, renew_time, duration](nlohmann::json& lease) {
    lease["apiVersion"] = "coordination.k8s.io/v1";
    lease["kind"] = "Lease";
    lease["metadata"]["name"] = name;
    lease["metadata"]["namespace"] = kNodeLeaseNamespace;
    if (!uid.empty()) {
      lease["metadata"]["ownerReferences"] = nlohmann::json::array(
          {{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", name}, {"uid", uid}}});
    }
    lease["spec"]["holderIdentity"] = name;
    lease["spec"]["leaseDurationSeconds"] = duration;
    lease["spec"]["renewTime"] = renew_time;
  };
  std::shared_ptr<nlohmann::json> last = lease_;
  auto call = [name, last, apply](api::RestClient& c)
                                   -> base::StatusOr<nlohmann::json> {
    const std::string path = api::leasePath(kNodeLeaseNamespace, name);
    if (last) {
      nlohmann::json lease = *last;
      apply(lease);
      auto updated = c.updateJson(path, lease);
      if (updated.ok() || (!api::isConflict(updated.status()) && !api::isNotFound(updated.status()))) {
        return updated;
      }
    }
    auto got = c.getJson(path);
    if (got.ok()) {
      nlohmann::json lease = *got;
      apply(lease);
      return c.updateJson(path, lease);
    }
    if (!api::isNotFound(got.status())) return got;
    nlohmann::json lease = nlohmann::json::object();
    apply(lease);
    return c.createJson(api::leasesPath(kNodeLeaseNamespace), lease);
  };
  auto r = co_await runOnPool(async_, call);
  if (stopped_) co_return;
  if (!r.ok()) {
    backoff_ = backoff_.count() == 0 ? options_.backoff_initial
                                     : std::min(backoff_ * 2, options_.backoff_max);
    log()->warn("Failed to renew the node lease node={} err={} retry_in_ms={}", name,
                r.status().toString(),
                std::chrono::duration_cast<std::chrono::milliseconds>(backoff_).count());
    schedule(std::min(backoff_, options_.renew_interval));
    co_return;
  }
  backoff_ = base::Duration(0);
  lease_ = std::make_shared<nlohmann::json>(std::move(*r));
  renewals_.fetch_add(1);
  schedule(options_.renew_interval);
}

}  // namespace nodeagent::agent
