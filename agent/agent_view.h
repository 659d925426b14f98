// What the read-only server reads of the agent: the desired pods with their live statuses, the
// pipeline's health and its metrics. A narrow interface, so that the server depends on nothing
// else of the agent. Every method is safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "api/pod.h"

namespace nodeagent::agent {

class AgentView {
 public:
  virtual ~AgentView() = default;

  // A way to get a pod's live status, copied only when asked for.
  using StatusFetch = std::function<std::optional<api::PodStatus>()>;
  using PodVisitor = std::function<void(const api::Pod&, std::optional<uint64_t> stamp,
                                        const StatusFetch& status)>;
  // Calls `fn` with each desired pod, in UID order, the stamp of its live status (nullopt before
  // the first sync) and a way to get that status.
  virtual void visitPodsWithStatus(const PodVisitor& fn) const = 0;
  // Changes whenever what visitPodsWithStatus visits may change (a pod or a status).
  virtual uint64_t podsWithStatusVersion() const = 0;
  // Health of the pipeline (PLEG relisting); `why` says what is wrong.
  virtual bool healthy(std::string* why) const = 0;
  // The Prometheus text of the agent's metrics.
  virtual std::string metricsText() const = 0;

  // The desired pod `ns`/`name` (kubelet's GetPodByName) and its live status (nullopt before
  // its first sync); a null pod when there is none.
  struct PodWithStatus {
    api::PodPtr pod;
    std::optional<api::PodStatus> status;
  };
  virtual PodWithStatus podByName(std::string_view ns, std::string_view name) const = 0;
};

}  // namespace nodeagent::agent
