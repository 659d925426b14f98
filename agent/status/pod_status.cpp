#include "agent/status/pod_status.h"

namespace nodeagent::agent {

namespace {

// How many init containers are still to run to completion, and how many failed.
struct InitContainerCounts {
  int pending = 0;
  int failed = 0;
};

InitContainerCounts countInitContainers(const api::PodSpec& spec,
                                        const std::vector<api::ContainerStatus>& init_statuses) {
  InitContainerCounts n;
  for (const auto& container : spec.init_containers) {
    const auto* status = findContainerStatus(init_statuses, container.name);
    if (status == nullptr) {
      ++n.pending;
      continue;
    }
    const auto& state = status->state;
    if (state.running) {
      ++n.pending;
    } else if (state.terminated) {
      if (state.terminated->exit_code != 0) ++n.failed;
    } else if (state.waiting) {
      if (status->last_state.terminated) {
        if (status->last_state.terminated->exit_code != 0) ++n.failed;
      } else {
        ++n.pending;
      }
    } else {
      ++n.pending;
    }
  }
  return n;
}

// The app containers by state, as kubelet's getPhase counts them: a waiting container that ran
// before counts as stopped; `succeeded` are the stopped ones that exited 0.
struct ContainerCounts {
  int unknown = 0;
  int running = 0;
  int waiting = 0;
  int stopped = 0;
  int succeeded = 0;
};

ContainerCounts countContainers(const api::PodSpec& spec,
                                const std::vector<api::ContainerStatus>& statuses) {
  ContainerCounts n;
  for (const auto& container : spec.containers) {
    const auto* status = findContainerStatus(statuses, container.name);
    if (status == nullptr) {
      ++n.unknown;
      continue;
    }
    const auto& state = status->state;
    if (state.running) {
      ++n.running;
    } else if (state.terminated) {
      ++n.stopped;
      if (state.terminated->exit_code == 0) ++n.succeeded;
    } else if (state.waiting) {
      if (status->last_state.terminated) {
        ++n.stopped;
      } else {
        ++n.waiting;
      }
    } else {
      ++n.unknown;
    }
  }
  return n;
}

}  // namespace

std::string getPhase(const api::PodSpec& spec,
                     const std::vector<api::ContainerStatus>& init_statuses,
                     const std::vector<api::ContainerStatus>& statuses) {
  const InitContainerCounts init = countInitContainers(spec, init_statuses);
  const ContainerCounts n = countContainers(spec, statuses);
  if (init.failed > 0 && spec.restart_policy == "Never") return std::string(api::kPhaseFailed);
  if (init.pending > 0 || n.waiting > 0) return std::string(api::kPhasePending);
  if (n.running > 0 && n.unknown == 0) return std::string(api::kPhaseRunning);
  if (n.running == 0 && n.stopped > 0 && n.unknown == 0) {
    if (spec.restart_policy == "Always") return std::string(api::kPhaseRunning);
    if (n.stopped == n.succeeded) return std::string(api::kPhaseSucceeded);
    if (spec.restart_policy == "Never") return std::string(api::kPhaseFailed);
    return std::string(api::kPhaseRunning);  // OnFailure: the failed ones restart
  }
  return std::string(api::kPhasePending);
}

namespace {

api::PodCondition condition(std::string_view type, std::string_view status,
                            std::string_view reason = {}, std::string message = {}) {
  api::PodCondition c;
  c.type = type;
  c.status = status;
  c.reason = reason;
  c.message = std::move(message);
  return c;
}

// Sorts the containers of `containers` into unknown (no status) and unready lists.
void classify(const std::vector<api::Container>& containers,
              const std::vector<api::ContainerStatus>& statuses, std::vector<std::string>& unknown,
              std::vector<std::string>& unready) {
  for (const auto& container : containers) {
    const auto* status = findContainerStatus(statuses, container.name);
    if (status == nullptr) {
      unknown.push_back(container.name);
    } else if (!status->ready) {
      unready.push_back(container.name);
    }
  }
}

std::string joinMessages(const std::vector<std::string>& unknown, std::string_view unknown_prefix,
                         const std::vector<std::string>& unready) {
  std::string message;
  if (!unknown.empty()) message = std::string(unknown_prefix) + goStringList(unknown);
  if (!unready.empty()) {
    if (!message.empty()) message += ", ";
    message += "containers with unready status: " + goStringList(unready);
  }
  return message;
}

}  // namespace

api::PodCondition generateContainersReadyCondition(
    const api::PodSpec& spec, const std::vector<api::ContainerStatus>& statuses,
    bool statuses_known, std::string_view phase) {
  if (!statuses_known) {
    return condition(api::kConditionContainersReady, "False", api::kReasonUnknownContainerStatuses);
  }
  std::vector<std::string> unknown;
  std::vector<std::string> unready;
  classify(spec.containers, statuses, unknown, unready);
  if (phase == api::kPhaseSucceeded && unknown.empty()) {
    return condition(api::kConditionContainersReady, "False", api::kReasonPodCompleted);
  }
  auto message = joinMessages(unknown, "containers with unknown status: ", unready);
  if (!message.empty()) {
    return condition(api::kConditionContainersReady, "False", api::kReasonContainersNotReady,
                     message);
  }
  return condition(api::kConditionContainersReady, "True");
}

api::PodCondition generatePodReadyCondition(const api::PodSpec& spec,
                                            const std::vector<api::PodCondition>& conditions,
                                            const std::vector<api::ContainerStatus>& statuses,
                                            bool statuses_known, std::string_view phase) {
  auto containers_ready = generateContainersReadyCondition(spec, statuses, statuses_known, phase);
  if (containers_ready.status != "True") {
    return condition(api::kConditionReady, containers_ready.status, containers_ready.reason,
                     containers_ready.message);
  }
  std::string message;
  for (const auto& gate : spec.readiness_gates) {
    const auto* c = findCondition(conditions, gate);
    std::string part;
    if (c == nullptr) {
      part = "corresponding condition of pod readiness gate \"" + gate + "\" does not exist.";
    } else if (c->status != "True") {
      part = "the status of pod readiness gate \"" + gate + "\" is not \"True\", but " + c->status;
    } else {
      continue;
    }
    if (!message.empty()) message += ", ";
    message += part;
  }
  if (!message.empty()) {
    return condition(api::kConditionReady, "False", api::kReasonReadinessGatesNotReady, message);
  }
  return condition(api::kConditionReady, "True");
}

api::PodCondition generatePodInitializedCondition(
    const api::PodSpec& spec, const std::vector<api::ContainerStatus>& init_statuses,
    bool statuses_known, std::string_view phase) {
  if (!statuses_known && !spec.init_containers.empty()) {
    return condition(api::kConditionInitialized, "False", api::kReasonUnknownContainerStatuses);
  }
  std::vector<std::string> unknown;
  std::vector<std::string> unready;
  classify(spec.init_containers, init_statuses, unknown, unready);
  if (phase == api::kPhaseSucceeded && unknown.empty()) {
    return condition(api::kConditionInitialized, "True", api::kReasonPodCompleted);
  }
  auto message = joinMessages(unknown, "containers with incomplete status: ", unready);
  if (!message.empty()) {
    return condition(api::kConditionInitialized, "False", api::kReasonContainersNotInitialized,
                     message);
  }
  return condition(api::kConditionInitialized, "True");
}

bool podConditionByKubelet(std::string_view type) {
  return type == api::kConditionPodScheduled || type == api::kConditionReady ||
         type == api::kConditionInitialized || type == "Unschedulable" ||
         type == api::kConditionContainersReady;
}

bool notRunning(const std::vector<api::ContainerStatus>& statuses) {
  for (const auto& s : statuses) {
    if (!s.state.terminated && !s.state.waiting) return false;
  }
  return true;
}

const api::ContainerStatus* findContainerStatus(const std::vector<api::ContainerStatus>& statuses,
                                                std::string_view name) {
  for (const auto& s : statuses) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const api::PodCondition* findCondition(const std::vector<api::PodCondition>& conditions,
                                       std::string_view type) {
  for (const auto& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

std::string goStringList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ' ';
    out += items[i];
  }
  out += ']';
  return out;
}

}  // namespace nodeagent::agent
