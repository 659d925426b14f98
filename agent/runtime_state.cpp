#include "agent/runtime_state.h"

#include "base/log.h"
#include "base/printable.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("agent")

std::string joinErrors(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + ", " + b;
}

}  // namespace

std::string describeCondition(std::string_view type, const runtime::RuntimeCondition* c) {
  if (c == nullptr) return std::string(type) + " not reported";
  return c->type + "=" + (c->status ? "true" : "false") + " reason:" + c->reason +
         " message:" + c->message;
}

RuntimeState::RuntimeState(asio::any_io_executor executor, base::Clock& clock,
                           runtime::Runtime& runtime, RuntimeStateOptions options)
    : strand_(asio::make_strand(std::move(executor))),
      clock_(clock),
      runtime_(runtime),
      options_(std::move(options)),
      last_reported_(runtimeErrors()) {}

void RuntimeState::start() {
  asio::post(strand_, [self = shared_from_this()] {
    if (self->stopped_) return;
    self->timer_ = self->clock_.makeTimer(self->strand_);
    self->check();
  });
}

void RuntimeState::stop() {
  stopped_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    if (self->timer_) self->timer_->cancel();
  });
}

void RuntimeState::check() {
  asio::co_spawn(
      strand_,
      [](std::shared_ptr<RuntimeState> s) -> asio::awaitable<void> {
        co_await s->update();
        if (!s->stopped_ && s->timer_) {
          s->timer_->asyncWaitFor(s->options_.period, [s] { s->check(); });
        }
      }(shared_from_this()),
      asio::detached);
}

asio::awaitable<void> RuntimeState::update() {
  auto ask = runtime_.status();
  auto status = co_await std::move(ask);
  co_await asio::post(strand_, asio::use_awaitable);
  if (record(status) && options_.on_change) options_.on_change();
}

bool RuntimeState::record(const base::StatusOr<runtime::RuntimeStatus>& status) {
  {
    std::lock_guard lock(mu_);
    if (!status.ok()) {
      // The last conditions stay; without ready answers the runtime becomes "down".
      runtime_error_.clear();
    } else {
      const auto* network = status->find(runtime::kNetworkReadyCondition);
      network_error_.clear();
      if (network == nullptr || !network->status) {
        network_error_ = "runtime network not ready: " +
                         describeCondition(runtime::kNetworkReadyCondition, network);
      }
      const auto* ready = status->find(runtime::kRuntimeReadyCondition);
      runtime_error_.clear();
      if (ready == nullptr || !ready->status) {
        runtime_error_ = "Container runtime not ready: " +
                         describeCondition(runtime::kRuntimeReadyCondition, ready);
      } else {
        last_sync_ = clock_.now();
      }
    }
  }
  const auto now = joinErrors(runtimeErrors(), networkErrors());
  std::lock_guard lock(mu_);
  if (now == last_reported_) return false;
  last_reported_ = now;
  if (!status.ok()) {
    log()->error("Container runtime status check failed err={}", status.status().toString());
  }
  if (now.empty()) {
    log()->info("Container runtime and its network are ready");
  } else {
    log()->warn("Container runtime not ready errors={}", base::goQuote(now));
  }
  return true;
}

std::string RuntimeState::runtimeErrors() const {
  std::lock_guard lock(mu_);
  std::string errors;
  if (!last_sync_) {
    errors = "container runtime status check may not have completed yet";
  } else if (clock_.now() - *last_sync_ >= options_.sync_threshold) {
    errors = "container runtime is down";
  }
  return joinErrors(errors, runtime_error_);
}

std::string RuntimeState::networkErrors() const {
  std::lock_guard lock(mu_);
  return network_error_;
}

}  // namespace nodeagent::agent
