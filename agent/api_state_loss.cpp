#include "agent/api_state_loss.h"

#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

}  // namespace

ApiStateLoss::ApiStateLoss(base::Clock& clock, base::Duration quiet_period)
    : clock_(clock), quiet_period_(quiet_period) {}

void ApiStateLoss::subscribe(Listener listener) { listeners_.push_back(std::move(listener)); }

bool ApiStateLoss::report(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    const auto now = clock_.now();
    if (last_ && now - *last_ < quiet_period_) {
      log()->info("Apiserver state loss already being recovered from reason=\"{}\"", reason);
      return false;
    }
    last_ = now;
  }
  losses_.fetch_add(1);
  log()->warn(
      "Apiserver lost its state, re-creating the Node, lease, mirror pods and statuses "
      "reason=\"{}\"",
      reason);
  for (const auto& l : listeners_) l(reason);
  return true;
}

}  // namespace nodeagent::agent
