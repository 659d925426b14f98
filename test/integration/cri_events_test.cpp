// CriRuntime's container events from containerd's own event stream (containerd_events.h), with
// no PLEG and no relist: a container's start and exit reach the handler with its pod's UID, its ID
// and name, and its exit is in ContainerStatus by then; a sandbox's pause container and an exec's
// process give none; the stream comes back after containerd restarts; a runtime that is not
// containerd gives none and says so once.
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/runtime/cri/containerd_events.h"
#include "agent/runtime/cri/cri_runtime.h"
#include "test/integration/other_grpc_server.h"
#include "test/support/cri_runtime_fixture.h"
#include "test/support/log_capture.h"
#include "test/support/pod_builder.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
using namespace std::chrono_literals;

namespace {

// The handler's events, from the stream's thread.
class EventLog {
 public:
  ContainerEventHandler handler() {
    return [this](const ContainerEvent& e) {
      std::lock_guard lock(mu_);
      events_.push_back(e);
    };
  }
  std::vector<ContainerEvent> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  // Waits (up to `deadline`) until there are `n` events.
  bool waitFor(size_t n, std::chrono::milliseconds deadline = 10s) const {
    return testing::eventually([&] { return events().size() >= n; }, deadline);
  }

 private:
  mutable std::mutex mu_;
  std::vector<ContainerEvent> events_;
};

// A host-network busybox pod whose container exits 3 once /tmp/go exists in it.
api::PodPtr waitingPod(const std::string& uid) {
  return testing::PodBuilder()
      .name("events-" + uid)
      .ns("default")
      .uid(uid)
      .hostNetwork()
      .terminationGracePeriodSeconds(1)
      .container("main", {"sh", "-c", "until [ -e /tmp/go ]; do sleep 0.02; done; exit 3"},
                 "nodeagent.test/busybox:1")
      .build();
}

PodSandboxConfig sandboxConfig(testing::CriRuntimeFixture& f, const api::Pod& pod) {
  PodSandboxConfig config;
  config.uid = pod.metadata.uid;
  config.name = pod.metadata.name;
  config.namespace_ = pod.metadata.namespace_;
  config.log_directory =
      f.runtime->podLogsDirectory(pod.metadata.namespace_, pod.metadata.name, pod.metadata.uid);
  config.host_network = true;
  return config;
}

std::string runSandbox(testing::CriRuntimeFixture& f, const api::Pod& pod) {
  auto id = f.run(f.runtime->runPodSandbox(sandboxConfig(f, pod)));
  INFO(id.status().message());
  REQUIRE(id.ok());
  return *id;
}

ContainerId startMain(testing::CriRuntimeFixture& f, const api::PodPtr& pod,
                      const std::string& sandbox_id) {
  StartContainerOptions options;
  options.sandbox_id = sandbox_id;
  options.sandbox_config = std::make_shared<const PodSandboxConfig>(sandboxConfig(f, *pod));
  options.image = pod->spec->containers[0].image;
  auto id = f.run(f.runtime->startContainer(pod, pod->spec->containers[0], 0, options));
  INFO(id.status().message());
  REQUIRE(id.ok());
  return *id;
}

void expectEvent(const ContainerEvent& e, ContainerEvent::Type type, const std::string& uid,
                 const ContainerId& id) {
  CHECK(e.type == type);
  CHECK(e.pod_uid == uid);
  CHECK(e.container_id == id);
  CHECK(e.container_name == "main");
}

}  // namespace

TEST_CASE("cri events: a container's start and exit reach the handler, not a pause or exec exit",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  EventLog log;  // outlives the runtime, whose event thread calls into it until it stops
  testing::CriRuntimeFixture f;
  f.runtime->setEventHandler(log.handler());
  REQUIRE(f.runtime->recover().ok());  // the runtime's name, for the events' container IDs

  // The sandbox's start (its pause container) gives no event; the container's does. (The stream
  // subscribes in the background: milliseconds, while a sandbox takes a hundred or more.)
  const auto pod = waitingPod("uid-events-1");
  const std::string sandbox_id = runSandbox(f, *pod);
  const ContainerId id = startMain(f, pod, sandbox_id);
  REQUIRE(log.waitFor(1));
  REQUIRE(log.events().size() == 1);
  expectEvent(log.events()[0], ContainerEvent::Type::kStarted, pod->metadata.uid, id);
  CHECK(id.type == "containerd");

  // A second sandbox starts and stops (its pause container's task starts and exits), then an exec
  // in the container exits, then the container itself: one event, in that order on one stream.
  const auto other = waitingPod("uid-events-2");
  const std::string other_sandbox = runSandbox(f, *other);
  REQUIRE(f.run(f.runtime->stopPodSandbox(other_sandbox)).ok());
  auto touched = f.run(f.runtime->execInContainer(id, {"touch", "/tmp/go"}, 10s));
  REQUIRE(touched.ok());
  CHECK(touched->exit_code == 0);
  REQUIRE(log.waitFor(2));
  const auto events = log.events();
  REQUIRE(events.size() == 2);
  expectEvent(events[1], ContainerEvent::Type::kDied, pod->metadata.uid, id);

  // By the time the event came, ContainerStatus had the exit (the PLEG's sync reads it next).
  auto status = f.run(f.runtime->getPodStatus(pod->metadata.uid, pod->metadata.name, "default"));
  REQUIRE(status.ok());
  const auto* main_status = status->findContainerStatusByName("main");
  REQUIRE(main_status != nullptr);
  CHECK(main_status->id == id);
  CHECK(main_status->state == ContainerState::kExited);
  CHECK(main_status->exit_code == 3);

  // Stopping the pod's sandbox (its pause container exits) gives nothing either: a new container
  // in a third sandbox is the next event.
  REQUIRE(f.run(f.runtime->stopPodSandbox(sandbox_id)).ok());
  const auto third = waitingPod("uid-events-3");
  const ContainerId third_id = startMain(f, third, runSandbox(f, *third));
  REQUIRE(log.waitFor(3));
  CHECK(log.events().size() == 3);
  expectEvent(log.events()[2], ContainerEvent::Type::kStarted, third->metadata.uid, third_id);
}

TEST_CASE("cri events: the stream is subscribed again after containerd restarts",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  EventLog log;  // outlives the runtime, whose event thread calls into it until it stops
  testing::CriRuntimeFixture f;
  f.runtime->setEventHandler(log.handler());
  REQUIRE(f.runtime->recover().ok());
  const auto pod = waitingPod("uid-events-restart");
  const ContainerId id = startMain(f, pod, runSandbox(f, *pod));
  REQUIRE(log.waitFor(1));

  f.containerd.restart();
  // The exit after the restart arrives on the new subscription. The client's calls may fail for a
  // moment while its channel reconnects.
  REQUIRE(testing::eventually(
      [&] {
        return f.run(f.runtime->execInContainer(id, {"touch", "/tmp/go"}, 10s)).ok();
      },
      20s));
  // A containerd that restarts under the load of a full parallel run can take many seconds to
  // serve its event service again: the waits allow for it (the stream resubscribes every 2 s at
  // most).
  if (!log.waitFor(2, 20s)) {
    // The exit came before the new subscription (an exit the stream misses is the relist's): a
    // new container's start must still arrive.
    const auto again = waitingPod("uid-events-restart-2");
    startMain(f, again, runSandbox(f, *again));
    REQUIRE(log.waitFor(2, 30s));
  }
  CHECK(log.events().size() == 2);
}

TEST_CASE("cri events: a runtime without containerd's event service gives none and says so once",
          "[integration][cri]") {
  testing::TempDir dir("nodeagent-cri");
  const std::string endpoint = "unix://" + (dir / "grpc.sock").string();
  // A gRPC server of another API: containerd's Events service is UNIMPLEMENTED there.
  testing::OtherGrpcServer server(endpoint);

  testing::LogCapture capture("runtime");
  int calls = 0;
  cri::ContainerdEventsOptions options;
  options.endpoint = endpoint;
  options.max_backoff = 50ms;  // several subscriptions within the test
  auto events = cri::ContainerdEvents::start(
      options, [&calls](const cri::TaskEvent&, std::stop_token) { ++calls; });
  REQUIRE(events.ok());
  CHECK(testing::eventually(
      [&] { return !capture.lines("Container events are not available").empty(); }, 10s));
  std::this_thread::sleep_for(300ms);  // a few more attempts at the longest backoff
  (*events)->stop();                   // returns at once: the wait is interruptible
  server.shutdown();
  CHECK(calls == 0);
  CHECK(capture.lines("Container events are not available").size() == 1);
  CHECK(capture.lines("event stream ended").empty());
}
