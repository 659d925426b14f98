// killContainer's grace arithmetic (kubelet's killContainer): the period before the preStop hook,
// what the hook's time leaves for SIGTERM, the minimum and the override.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>

#include "agent/runtime/runtime.h"

using namespace nodeagent;
using namespace nodeagent::runtime;
using namespace std::chrono_literals;

namespace {

api::Pod podWithGrace(std::optional<int64_t> spec_grace) {
  api::Pod pod;
  pod.metadata.name = "web";
  pod.metadata.namespace_ = "default";
  pod.metadata.uid = "uid-web";
  pod.spec->termination_grace_period_seconds = spec_grace;
  api::Container c;
  c.name = "main";
  c.command = {"sleep", "1000"};
  pod.spec->containers.push_back(c);
  return pod;
}

}  // namespace

TEST_CASE("kill grace: the preStop hook's whole seconds come off the grace period",
          "[unit][runtime]") {
  CHECK(graceAfterPreStopSeconds(30, base::Duration::zero(), {}, kMinimumGracePeriodSeconds) == 30);
  CHECK(graceAfterPreStopSeconds(30, 7s, {}, kMinimumGracePeriodSeconds) == 23);
  // Truncated to whole seconds, as kubelet's int64(time.Since(start).Seconds()).
  CHECK(graceAfterPreStopSeconds(30, 7900ms, {}, kMinimumGracePeriodSeconds) == 23);
  CHECK(graceAfterPreStopSeconds(30, 999ms, {}, kMinimumGracePeriodSeconds) == 30);
}

TEST_CASE("kill grace: at least the minimum is left after a long hook", "[unit][runtime]") {
  CHECK(graceAfterPreStopSeconds(10, 9s, {}, kMinimumGracePeriodSeconds) == 2);
  CHECK(graceAfterPreStopSeconds(10, 10s, {}, kMinimumGracePeriodSeconds) == 2);
  CHECK(graceAfterPreStopSeconds(10, 15s, {}, kMinimumGracePeriodSeconds) == 2);
  // A grace period below the minimum is raised even without a hook.
  CHECK(graceAfterPreStopSeconds(1, base::Duration::zero(), {}, kMinimumGracePeriodSeconds) == 2);
  // The minimum is the caller's (ProcessRuntimeOptions::minimum_grace_seconds).
  CHECK(graceAfterPreStopSeconds(10, 9s, {}, 0) == 1);
  CHECK(graceAfterPreStopSeconds(10, 9s, {}, 5) == 5);
  CHECK(graceAfterPreStopSeconds(10, 3s, {}, 5) == 7);
}

TEST_CASE("kill grace: an override replaces what the hook and the minimum leave",
          "[unit][runtime]") {
  CHECK(graceAfterPreStopSeconds(30, 4s, KillOptions::graceOverride(10), 2) == 10);
  // Below the minimum and longer than what the hook left: the override still wins.
  CHECK(graceAfterPreStopSeconds(30, 4s, KillOptions::graceOverride(1), 2) == 1);
  CHECK(graceAfterPreStopSeconds(5, 4s, KillOptions::graceOverride(20), 2) == 20);
  CHECK(graceAfterPreStopSeconds(30, base::Duration::zero(), KillOptions::graceOverride(0), 2) ==
        0);
  CHECK(graceAfterPreStopSeconds(30, base::Duration::zero(), KillOptions::graceOverride(-3), 2) ==
        0);
  // An unset override leaves the arithmetic alone.
  CHECK(graceAfterPreStopSeconds(30, 4s, KillOptions::graceOverride(std::nullopt), 2) == 26);
}

TEST_CASE("kill grace: a failed probe's grace period bounds the hook and what follows it",
          "[unit][runtime]") {
  api::Pod pod = podWithGrace(30);
  const KillOptions options = KillOptions::probeGrace(10);
  const int64_t hook_grace = killGracePeriodSeconds(pod, options.probe_grace);
  CHECK(hook_grace == 10);
  CHECK(graceAfterPreStopSeconds(hook_grace, 4s, options, kMinimumGracePeriodSeconds) == 6);
  CHECK(graceAfterPreStopSeconds(hook_grace, 9s, options, kMinimumGracePeriodSeconds) == 2);
  // Without a probe's grace, the pod's.
  CHECK(graceAfterPreStopSeconds(killGracePeriodSeconds(pod, std::nullopt), 4s, {},
                                 kMinimumGracePeriodSeconds) == 26);
}

TEST_CASE("kill grace: a pod being deleted uses its deletion grace, not the probe's",
          "[unit][runtime]") {
  api::Pod pod = podWithGrace(30);
  pod.metadata.deletion_grace_period_seconds = 8;
  const KillOptions options = KillOptions::probeGrace(20);
  const int64_t hook_grace = killGracePeriodSeconds(pod, options.probe_grace);
  CHECK(hook_grace == 8);
  CHECK(graceAfterPreStopSeconds(hook_grace, 3s, options, kMinimumGracePeriodSeconds) == 5);
  pod.metadata.deletion_grace_period_seconds = 0;
  CHECK(killGracePeriodSeconds(pod, options.probe_grace) == 0);
  CHECK(graceAfterPreStopSeconds(0, base::Duration::zero(), options, kMinimumGracePeriodSeconds) ==
        2);
}
