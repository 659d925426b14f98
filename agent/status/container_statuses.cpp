#include "agent/status/container_statuses.h"

#include <algorithm>

namespace nodeagent::agent {

api::Timestamp toApiTime(base::SystemTime t) {
  return std::chrono::time_point_cast<std::chrono::nanoseconds>(t);
}

namespace {

std::optional<api::Timestamp> optionalTime(base::SystemTime t) {
  if (t == base::SystemTime{}) return std::nullopt;
  return toApiTime(t);
}

api::ContainerStatus convertContainerStatus(const runtime::ContainerStatus& cs) {
  api::ContainerStatus status;
  status.name = cs.name;
  status.restart_count = cs.restart_count;
  status.image = cs.image;
  status.image_id = cs.image_id;
  status.container_id = cs.id.toString();
  switch (cs.state) {
    case runtime::ContainerState::kRunning:
      status.state.running = api::ContainerStateRunning{optionalTime(cs.started_at)};
      break;
    case runtime::ContainerState::kCreated:
      // A created container not yet started counts as exited, as kubelet treats it.
    case runtime::ContainerState::kExited: {
      api::ContainerStateTerminated t;
      t.exit_code = cs.exit_code;
      t.signal = cs.signal;
      t.reason = cs.reason;
      t.message = cs.message;
      t.started_at = optionalTime(cs.started_at);
      t.finished_at = optionalTime(cs.finished_at);
      t.container_id = status.container_id;
      status.state.terminated = t;
      break;
    }
    default:
      status.state.waiting = api::ContainerStateWaiting{};
  }
  return status;
}

using StatusesByName = std::map<std::string, api::ContainerStatus>;

// Every container Waiting (PodInitializing or ContainerCreating), with the restart count and last
// state of its previous status; a previous terminated status is kept whole.
StatusesByName defaultStatuses(const std::vector<api::Container>& containers,
                               const std::vector<api::ContainerStatus>& previous,
                               bool has_init_containers) {
  StatusesByName statuses;
  api::ContainerState default_state;
  default_state.waiting =
      api::ContainerStateWaiting{has_init_containers ? "PodInitializing" : "ContainerCreating", ""};
  for (const auto& container : containers) {
    auto old = std::find_if(previous.begin(), previous.end(), [&](const api::ContainerStatus& s) {
      return s.name == container.name;
    });
    auto& status = statuses[container.name];
    if (old != previous.end() && old->state.terminated) {
      status = *old;  // a terminated status is final until the runtime says otherwise
      continue;
    }
    status.name = container.name;
    status.image = container.image;
    status.state = default_state;
    if (old != previous.end()) {
      status.restart_count = old->restart_count;
      status.last_state = old->last_state;
    }
  }
  return statuses;
}

// The runtime's statuses are newest first: the newest is the state, the next the last state.
void applyRuntimeStatuses(StatusesByName& statuses, const runtime::PodStatus& pod_status) {
  std::map<std::string, int> seen;
  for (const auto& cs : pod_status.container_statuses) {
    auto it = statuses.find(cs.name);
    if (it == statuses.end()) continue;
    int& count = seen[cs.name];
    if (count >= 2) continue;
    auto converted = convertContainerStatus(cs);
    if (count == 0) {
      it->second = std::move(converted);
    } else {
      it->second.last_state = converted.state;
    }
    ++count;
  }
}

// Containers that will be restarted and whose last start failed are Waiting with the reason.
void applyStartFailures(StatusesByName& statuses, const api::Pod& pod,
                        const runtime::PodStatus& pod_status,
                        const std::vector<api::Container>& containers, bool is_init_container,
                        const StartFailures& failures) {
  for (const auto& container : containers) {
    const auto* cs = pod_status.findContainerStatusByName(container.name);
    if (is_init_container && cs != nullptr && cs->state == runtime::ContainerState::kExited &&
        cs->exit_code == 0) {
      continue;
    }
    if (!runtime::shouldContainerBeRestarted(container, pod, pod_status)) continue;
    auto failure = failures.find(container.name);
    if (failure == failures.end()) continue;
    auto& status = statuses[container.name];
    if (status.state.terminated) status.last_state = status.state;
    status.state = api::ContainerState{};
    status.state.waiting =
        api::ContainerStateWaiting{failure->second.reason, failure->second.message};
  }
}

// Readiness without probes: running app containers and successfully finished init containers.
void setReadinessWithoutProbes(StatusesByName& statuses, bool is_init_container) {
  for (auto& [name, status] : statuses) {
    if (is_init_container) {
      status.ready = status.state.terminated && status.state.terminated->exit_code == 0;
    } else {
      status.ready = status.state.running.has_value();
      status.started = status.state.running.has_value();
    }
  }
}

// Init containers in the spec's order, app containers sorted by name.
std::vector<api::ContainerStatus> orderedStatuses(StatusesByName& statuses,
                                                  const std::vector<api::Container>& containers,
                                                  bool is_init_container) {
  std::vector<api::ContainerStatus> out;
  out.reserve(statuses.size());
  if (is_init_container) {
    for (const auto& container : containers) out.push_back(std::move(statuses[container.name]));
  } else {
    for (auto& [name, status] : statuses) out.push_back(std::move(status));  // sorted by name
  }
  return out;
}

}  // namespace

std::vector<api::ContainerStatus> convertToAPIContainerStatuses(
    const api::Pod& pod, const runtime::PodStatus& pod_status,
    const std::vector<api::ContainerStatus>& previous,
    const std::vector<api::Container>& containers, bool has_init_containers, bool is_init_container,
    const StartFailures& failures) {
  auto statuses = defaultStatuses(containers, previous, has_init_containers);
  applyRuntimeStatuses(statuses, pod_status);
  applyStartFailures(statuses, pod, pod_status, containers, is_init_container, failures);
  setReadinessWithoutProbes(statuses, is_init_container);
  return orderedStatuses(statuses, containers, is_init_container);
}

}  // namespace nodeagent::agent
