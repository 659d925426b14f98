// Probe and lifecycle-hook actions (kubelet's pkg/probe/{exec,http,tcp} and
// lifecycle.HandlerRunner): one exec, httpGet or tcpSocket action run against a container.
// ProbeHandler is the interface the prober and syncPod call (unit tests give a fake);
// RealProbeHandler runs exec through the runtime (`nodeagent-shim exec`, in the container's
// env, working dir and credentials) and httpGet/tcpSocket with asynchronous sockets.
//
// Threading: the coroutines run on the caller's executor, which must be a strand (the prober's
// worker strand or a pod strand): a timeout timer and the socket share it. Nothing blocks: sockets
// are asynchronous, exec waits on a pidfd. Every action ends within about its timeout.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/runtime.h"
#include "api/pod.h"
#include "base/asio.h"
#include "base/clock.h"

namespace nodeagent::agent {

enum class ProbeType { kLiveness, kReadiness, kStartup };
// "Liveness", "Readiness", "Startup" (kubelet's probeType.String() in events).
std::string_view probeTypeName(ProbeType type);

// probe.Result and its output. kWarning counts as a success (a redirect to another host that was
// not followed); kUnknown is an error running the probe (bad port, exec could not start), which
// the prober ignores rather than counting as a failure.
struct ProbeOutcome {
  enum class Kind { kSuccess, kWarning, kFailure, kUnknown };
  Kind kind = Kind::kUnknown;
  std::string output;
};

// One action against one container.
struct ProbeTarget {
  api::Handler handler;
  base::Duration timeout{};
  runtime::ContainerId container_id;
  // The default host of httpGet/tcpSocket (the pod IP; the host's for the process runtime).
  std::string pod_ip;
  // The container's ports, for ports given by name.
  std::vector<api::ContainerPort> ports;
};

// Why a lifecycle hook failed: kubelet's handler error and the output it reports with it.
struct HookFailure {
  std::string error;
  std::string output;
};

class ProbeHandler {
 public:
  virtual ~ProbeHandler() = default;
  // A probe: exec succeeds on exit code 0, httpGet on 200 <= code < 400 (redirects followed on
  // the same host only), tcpSocket when it connects.
  virtual asio::awaitable<ProbeOutcome> probe(ProbeTarget target) = 0;
  // A lifecycle hook (postStart): nullopt on success. Unlike a probe, an httpGet hook fails only
  // when the request fails, whatever the status code (kubelet v1.18).
  virtual asio::awaitable<std::optional<HookFailure>> runHook(ProbeTarget target) = 0;
};

class RealProbeHandler final : public ProbeHandler {
 public:
  RealProbeHandler(runtime::Runtime& runtime, base::Clock& clock)
      : runtime_(runtime), clock_(clock) {}
  asio::awaitable<ProbeOutcome> probe(ProbeTarget target) override;
  asio::awaitable<std::optional<HookFailure>> runHook(ProbeTarget target) override;

 private:
  runtime::Runtime& runtime_;
  base::Clock& clock_;
};

// kubelet's format.Pod: "name_namespace(uid)".
std::string formatPod(const api::Pod& pod);

// kubelet's lifecycle hook failure message ("Exec lifecycle hook ([cmd]) for Container \"c\" in
// Pod \"p_ns(uid)\" failed - error: ..., message: \"...\"").
std::string hookFailureMessage(const api::Handler& handler, const std::string& container,
                               const api::Pod& pod, const HookFailure& failure);

}  // namespace nodeagent::agent
