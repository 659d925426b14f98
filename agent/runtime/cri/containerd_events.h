// ContainerdEvents: containerd's own event stream, for the CRI runtime's container events.
//
// containerd 1.6 does not implement CRI's GetContainerEvents, but serves its event service on the
// same socket (containerd.services.events.v1.Events/Subscribe, containerd_events.proto). This
// subscribes to the task starts and exits of one containerd namespace (the CRI plugin's, "k8s.io")
// on a thread of its own and hands each to a handler, which the CRI runtime maps to its containers
// (cri_runtime.h). Events are a fast path only: the agent's relist stays the source of truth, so
// an event lost while the stream is down costs latency, never correctness.
//
// The stream is kept up: when it ends (containerd restarted, the socket is not there yet) it is
// subscribed again after a backoff (100 ms doubling to 2 s, back to 100 ms once events flow); the
// first failure of an outage is logged at warn. A runtime that is not containerd answers
// UNIMPLEMENTED: that is logged once at info ("events are not available"), and the subscription is
// retried only at the longest backoff.
//
// Threading: the handler runs on the stream's thread, one event at a time, in containerd's order;
// it may block briefly (it is given the stream's stop token for interruptible waits). stop() (or
// the destructor) cancels the stream and joins the thread; never call it from the handler.
//
// This header names no gRPC or protobuf type.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>

#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::runtime::cri {

// A task event of the namespace: its init process started (/tasks/start), or one of its processes
// exited (/tasks/exit).
struct TaskEvent {
  enum class Type { kStart, kExit };
  Type type = Type::kStart;
  // containerd's container ID: a CRI container's ID, or a sandbox's (its pause container).
  std::string container_id;
  // kExit: the process that exited: the container's ID for the task's init process, an exec's ID
  // for an exec. Empty for kStart.
  std::string process_id;
  uint32_t pid = 0;
  uint32_t exit_status = 0;    // kExit
  base::SystemTime exited_at;  // kExit

  // Whether the event is about the task's init process (the container itself), not an exec.
  bool initProcess() const { return process_id.empty() || process_id == container_id; }
};

struct ContainerdEventsOptions {
  // --container-runtime-endpoint: "unix:///run/containerd/containerd.sock".
  std::string endpoint;
  // The containerd namespace to follow: the CRI plugin's.
  std::string containerd_namespace = "k8s.io";
  base::Duration initial_backoff = std::chrono::milliseconds(100);
  base::Duration max_backoff = std::chrono::seconds(2);
};

class ContainerdEvents {
 public:
  using Handler = std::function<void(const TaskEvent&, std::stop_token)>;

  // Starts the stream's thread (the first subscription is made there). InvalidArgument for a bad
  // endpoint.
  static base::StatusOr<std::unique_ptr<ContainerdEvents>> start(ContainerdEventsOptions options,
                                                                 Handler handler);
  ~ContainerdEvents();
  ContainerdEvents(const ContainerdEvents&) = delete;
  ContainerdEvents& operator=(const ContainerdEvents&) = delete;

  // Cancels the stream and joins its thread. Idempotent; any thread but the handler's.
  void stop();

 private:
  struct Impl;
  explicit ContainerdEvents(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::jthread thread_;
};

// Waits `d` unless `stop` is requested first; false when it was. For the stream's thread and its
// handler.
bool waitUnlessStopped(std::stop_token stop, base::Duration d);

}  // namespace nodeagent::runtime::cri
