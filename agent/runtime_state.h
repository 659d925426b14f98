// kubelet's runtimeState and updateRuntimeUp (pkg/kubelet/runtime.go, kubelet.go): every
// `period` (5 s) the runtime's Status is asked; its RuntimeReady and NetworkReady conditions,
// and how long ago the runtime last answered ready, become the errors that make the Node
// NotReady (KubeletNotReady, with kubelet's messages):
//   - "container runtime status check may not have completed yet" until the first ready answer;
//   - "container runtime is down" when no ready answer came for `sync_threshold` (30 s);
//   - "Container runtime not ready: RuntimeReady=false reason:R message:M";
//   - "runtime network not ready: NetworkReady=false reason:R message:M", which also keeps pods
//     that are not hostNetwork from starting ("network is not ready: ...").
// A runtime inside the agent (process, fake) answers ready at once.
//
// Threading: start/stop and the error queries from any thread; the checks run on the state's own
// strand and wait for the runtime without blocking it. Create with std::make_shared; the clock
// and the runtime must outlive it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agent/runtime/runtime.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::agent {

struct RuntimeStateOptions {
  base::Duration period = std::chrono::seconds(5);
  // kubelet's maxWaitForContainerRuntime.
  base::Duration sync_threshold = std::chrono::seconds(30);
  // Called on the state's strand whenever the errors changed (the Node's Ready condition
  // follows). Optional.
  std::function<void()> on_change;
};

// kubelet's RuntimeCondition.String(): "RuntimeReady=false reason:R message:M"; for a condition
// the runtime did not report, "<type> not reported" (kubelet prints <nil>).
std::string describeCondition(std::string_view type, const runtime::RuntimeCondition* condition);

class RuntimeState : public std::enable_shared_from_this<RuntimeState> {
 public:
  RuntimeState(asio::any_io_executor executor, base::Clock& clock, runtime::Runtime& runtime,
               RuntimeStateOptions options = {});

  // Asks the runtime now, then every period.
  void start();
  void stop();

  // kubelet's runtimeErrors and networkErrors: "" when there is none. Any thread.
  std::string runtimeErrors() const;
  std::string networkErrors() const;

  // One check (start() runs them; tests call it directly).
  asio::awaitable<void> update();

 private:
  // One check now, then the next one a period after it ends. On the strand.
  void check();
  // Records one answer; true when the errors changed.
  bool record(const base::StatusOr<runtime::RuntimeStatus>& status);

  asio::strand<asio::any_io_executor> strand_;
  base::Clock& clock_;
  runtime::Runtime& runtime_;
  RuntimeStateOptions options_;
  base::TimerPtr timer_;
  std::atomic<bool> stopped_{false};

  mutable std::mutex mu_;
  std::optional<base::MonotonicTime> last_sync_;  // the last ready answer
  std::string runtime_error_;
  std::string network_error_;
  std::string last_reported_;  // runtimeErrors() + networkErrors() as last reported to on_change
};

}  // namespace nodeagent::agent
