// RuntimeState on the fake clock: the runtime's Status conditions become kubelet's runtime and
// network errors, a runtime that stops answering becomes "down" after the threshold, and a
// change is reported once.
#include <catch2/catch.hpp>

#include "agent/runtime/fake_runtime.h"
#include "agent/runtime/instrumented_runtime.h"
#include "agent/runtime_state.h"
#include "test/support/fake_clock.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

// A runtime whose Status answers what the test says.
class ScriptedStatusRuntime : public runtime::InstrumentedRuntime {
 public:
  explicit ScriptedStatusRuntime(runtime::Runtime& inner) : InstrumentedRuntime(inner) {}
  asio::awaitable<base::StatusOr<runtime::RuntimeStatus>> status() override {
    ++calls;
    co_return answer;
  }
  base::StatusOr<runtime::RuntimeStatus> answer = runtime::RuntimeStatus{};
  int calls = 0;
};

runtime::RuntimeStatus conditions(bool runtime_ready, bool network_ready) {
  runtime::RuntimeStatus s;
  s.conditions.push_back({"RuntimeReady", runtime_ready, runtime_ready ? "" : "Broken", "m1"});
  s.conditions.push_back({"NetworkReady", network_ready,
                          network_ready ? "" : "NetworkPluginNotReady",
                          network_ready ? "" : "cni config load failed"});
  return s;
}

struct Harness {
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  runtime::FakeRuntime fake{ioc.get_executor(), clock};
  ScriptedStatusRuntime runtime{fake};
  int changes = 0;
  std::shared_ptr<agent::RuntimeState> state;

  Harness() {
    agent::RuntimeStateOptions o;
    o.on_change = [this] { ++changes; };
    state = std::make_shared<agent::RuntimeState>(ioc.get_executor(), clock, runtime, o);
  }
  ~Harness() {
    state->stop();
    drain();
  }
  void drain() {
    for (int i = 0; i < 50; ++i) {
      if (ioc.poll() == 0) break;
    }
  }
  void advance(base::Duration d) {
    for (auto step = 1s; d > base::Duration::zero(); d -= step) {
      clock.advance(std::min<base::Duration>(step, d));
      drain();
    }
  }
};

}  // namespace

TEST_CASE("RuntimeState: not ready until the runtime first answered, then ready") {
  Harness h;
  h.runtime.answer = conditions(true, true);
  CHECK(h.state->runtimeErrors() == "container runtime status check may not have completed yet");
  h.state->start();
  h.drain();
  CHECK(h.runtime.calls == 1);
  CHECK(h.state->runtimeErrors().empty());
  CHECK(h.state->networkErrors().empty());
  CHECK(h.changes == 1);
  h.advance(5s);
  CHECK(h.runtime.calls == 2);
  CHECK(h.changes == 1);  // nothing changed: not reported again
}

TEST_CASE("RuntimeState: conditions that are false become kubelet's errors") {
  Harness h;
  h.runtime.answer = conditions(true, false);
  h.state->start();
  h.drain();
  CHECK(h.state->runtimeErrors().empty());
  CHECK(h.state->networkErrors() ==
        "runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
        "message:cni config load failed");

  h.runtime.answer = conditions(false, true);
  h.advance(5s);
  CHECK(h.state->networkErrors().empty());
  CHECK(h.state->runtimeErrors() ==
        "Container runtime not ready: RuntimeReady=false reason:Broken message:m1");
  CHECK(h.changes == 2);

  runtime::RuntimeStatus none;  // a runtime that reports no conditions at all
  h.runtime.answer = none;
  h.advance(5s);
  CHECK(h.state->runtimeErrors() == "Container runtime not ready: RuntimeReady not reported");
  CHECK(h.state->networkErrors() == "runtime network not ready: NetworkReady not reported");
}

TEST_CASE("RuntimeState: a runtime that stops answering is down after 30 s") {
  Harness h;
  h.runtime.answer = conditions(true, true);
  h.state->start();
  h.drain();
  REQUIRE(h.state->runtimeErrors().empty());
  h.runtime.answer = base::unavailableError("connect: no such file or directory");
  h.advance(25s);
  CHECK(h.state->runtimeErrors().empty());  // within kubelet's 30 s
  h.advance(5s);
  CHECK(h.state->runtimeErrors() == "container runtime is down");
  CHECK(h.changes == 2);
  h.runtime.answer = conditions(true, true);
  h.advance(5s);
  CHECK(h.state->runtimeErrors().empty());
  CHECK(h.changes == 3);
}

TEST_CASE("RuntimeState: the default Status of a runtime inside the agent is ready") {
  asio::io_context ioc;
  testing::FakeClock clock;
  runtime::FakeRuntime fake{ioc.get_executor(), clock};
  auto state = std::make_shared<agent::RuntimeState>(ioc.get_executor(), clock, fake);
  state->start();
  ioc.poll();
  ioc.restart();
  ioc.poll();
  CHECK(state->runtimeErrors().empty());
  CHECK(state->networkErrors().empty());
  state->stop();
  ioc.restart();
  ioc.poll();
}
