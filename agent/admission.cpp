#include "agent/admission.h"

#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

namespace nodeagent::agent {
namespace {

using HostPort = std::tuple<std::string, std::string, int32_t>;  // ip, protocol, port

std::vector<HostPort> hostPorts(const api::Pod& pod) {
  std::vector<HostPort> out;
  for (const auto& c : pod.spec->containers) {
    for (const auto& p : c.ports) {
      if (p.host_port <= 0) continue;
      out.emplace_back(p.host_ip.empty() ? "0.0.0.0" : p.host_ip,
                       p.protocol.empty() ? "TCP" : p.protocol, p.host_port);
    }
  }
  return out;
}

bool portsConflict(const HostPort& a, const HostPort& b) {
  if (std::get<1>(a) != std::get<1>(b) || std::get<2>(a) != std::get<2>(b)) return false;
  const auto& ip_a = std::get<0>(a);
  const auto& ip_b = std::get<0>(b);
  return ip_a == ip_b || ip_a == "0.0.0.0" || ip_b == "0.0.0.0";
}

AdmitResult insufficient(const std::string& resource, int64_t requested, int64_t used,
                         int64_t capacity) {
  AdmitResult r;
  r.admit = false;
  r.reason = "OutOf" + resource;
  r.message = "Node didn't have enough resource: " + resource +
              ", requested: " + std::to_string(requested) + ", used: " + std::to_string(used) +
              ", capacity: " + std::to_string(capacity);
  return r;
}

}  // namespace

AdmitResult canAdmitPod(const api::Pod& pod, const std::vector<api::PodPtr>& active_pods,
                        const NodeAllocatable& node) {
  if (!pod.spec->node_name.empty() && pod.spec->node_name != node.node_name) {
    return {false, "HostName",
            "Predicate HostName failed: the pod is bound to node \"" + pod.spec->node_name +
                "\", not \"" + node.node_name + "\""};
  }
  // Resource fit, in the scheduler's order: pods, then cpu, then memory.
  const auto pod_count = static_cast<int64_t>(active_pods.size());
  if (pod_count + 1 > node.pods) return insufficient("pods", 1, pod_count, node.pods);

  auto wanted = podRequests(pod);
  PodRequests used;
  // Only a pod that requests cpu or memory needs the sum (a best-effort pod always fits): this
  // keeps admitting a large batch of best-effort static pods linear.
  const bool needs_sum =
      wanted.cpu_milli > 0 || wanted.memory_bytes > 0 || wanted.ephemeral_storage_bytes > 0;
  for (size_t i = 0; needs_sum && i < active_pods.size(); ++i) {
    auto r = podRequests(*active_pods[i]);
    used.cpu_milli += r.cpu_milli;
    used.memory_bytes += r.memory_bytes;
    used.ephemeral_storage_bytes += r.ephemeral_storage_bytes;
  }
  if (wanted.cpu_milli > 0 && used.cpu_milli + wanted.cpu_milli > node.cpu_milli) {
    return insufficient("cpu", wanted.cpu_milli, used.cpu_milli, node.cpu_milli);
  }
  if (wanted.memory_bytes > 0 && used.memory_bytes + wanted.memory_bytes > node.memory_bytes) {
    return insufficient("memory", wanted.memory_bytes, used.memory_bytes, node.memory_bytes);
  }
  if (node.ephemeral_storage_bytes > 0 && wanted.ephemeral_storage_bytes > 0 &&
      used.ephemeral_storage_bytes + wanted.ephemeral_storage_bytes >
          node.ephemeral_storage_bytes) {
    return insufficient("ephemeral-storage", wanted.ephemeral_storage_bytes,
                        used.ephemeral_storage_bytes, node.ephemeral_storage_bytes);
  }

  auto wanted_ports = hostPorts(pod);
  if (!wanted_ports.empty()) {
    for (const auto& other : active_pods) {
      for (const auto& used_port : hostPorts(*other)) {
        for (const auto& want : wanted_ports) {
          if (portsConflict(want, used_port)) {
            return {false, "PodFitsHostPorts",
                    "Predicate PodFitsHostPorts failed: host port " + std::get<1>(want) + "/" +
                        std::to_string(std::get<2>(want)) + " is already used by pod " +
                        api::podRef(*other)};
          }
        }
      }
    }
  }
  return {};
}

base::StatusOr<NodeCapacity> readHostCapacity(const std::string& proc_root,
                                              const std::string& root_dir) {
  NodeCapacity cap;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (proc_root == "/proc" && sched_getaffinity(0, sizeof(set), &set) == 0) {
    cap.cpu_milli = static_cast<int64_t>(CPU_COUNT(&set)) * 1000;
  } else {
    cap.cpu_milli = static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN)) * 1000;
  }
  std::ifstream meminfo(proc_root + "/meminfo");
  if (!meminfo) return base::unavailableError("cannot read " + proc_root + "/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream ss(line);
    std::string key;
    int64_t kib = 0;
    ss >> key >> kib;
    if (key == "MemTotal:") {
      cap.memory_bytes = kib * 1024;
      break;
    }
  }
  if (cap.memory_bytes == 0) {
    return base::unavailableError("no MemTotal in " + proc_root + "/meminfo");
  }
  std::ifstream pid_max(proc_root + "/sys/kernel/pid_max");
  if (!(pid_max >> cap.pid_max)) cap.pid_max = 0;
  if (!root_dir.empty()) {
    struct statvfs fs {};
    if (::statvfs(root_dir.c_str(), &fs) == 0) {
      // cadvisor's filesystem capacity: every block of the filesystem.
      cap.ephemeral_storage_bytes =
          static_cast<int64_t>(fs.f_blocks) * static_cast<int64_t>(fs.f_frsize);
    }
  }
  return cap;
}

base::StatusOr<ReservedResources> parseReservedResources(std::string_view flag,
                                                         const std::string& text) {
  ReservedResources r;
  const std::string f(flag);
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      return base::invalidArgumentError(f + ": \"" + item +
                                        "\" is not of the form resource=quantity");
    }
    auto name = item.substr(0, eq);
    auto q = api::Quantity::parse(item.substr(eq + 1));
    if (!q.ok()) return q.status().withContext(f + ": " + name);
    if (q->nanoValue() < 0) {
      return base::invalidArgumentError(f + ": resource quantity for \"" + name +
                                        "\" cannot be negative: " + q->toString());
    }
    if (name == "cpu") {
      r.cpu_milli = q->milliValue();
    } else if (name == "memory") {
      r.memory_bytes = q->value();
    } else if (name == "ephemeral-storage") {
      r.ephemeral_storage_bytes = q->value();
    } else if (name == "pid") {
      r.pids = q->value();
    } else {
      return base::invalidArgumentError(f + ": unknown resource \"" + name + "\"");
    }
  }
  return r;
}

namespace {

struct ParsedReservations {
  ReservedResources system;
  ReservedResources kube;
};

base::StatusOr<ParsedReservations> parseReservations(const AllocatableConfig& config) {
  auto system = parseReservedResources("--system-reserved", config.system_reserved);
  if (!system.ok()) return system.status();
  auto kube = parseReservedResources("--kube-reserved", config.kube_reserved);
  if (!kube.ok()) return kube.status();
  return ParsedReservations{*system, *kube};
}

int64_t nonNegative(int64_t v) { return std::max<int64_t>(0, v); }

}  // namespace

base::StatusOr<ReservedResources> nodeAllocatableReservation(const NodeCapacity& capacity,
                                                             const AllocatableConfig& config) {
  auto parsed = parseReservations(config);
  if (!parsed.ok()) return parsed.status();
  ReservedResources r;
  r.cpu_milli = parsed->system.cpu_milli + parsed->kube.cpu_milli;
  r.memory_bytes = parsed->system.memory_bytes + parsed->kube.memory_bytes;
  r.ephemeral_storage_bytes =
      parsed->system.ephemeral_storage_bytes + parsed->kube.ephemeral_storage_bytes;
  r.pids = parsed->system.pids + parsed->kube.pids;
  // hardEvictionReservation: only memory.available and nodefs.available reserve anything.
  for (const auto& t : config.hard_eviction_thresholds) {
    if (t.signal == eviction::Signal::kMemoryAvailable) {
      r.memory_bytes += eviction::thresholdQuantity(t.value, capacity.memory_bytes);
    } else if (t.signal == eviction::Signal::kNodeFsAvailable) {
      r.ephemeral_storage_bytes +=
          eviction::thresholdQuantity(t.value, capacity.ephemeral_storage_bytes);
    }
  }
  // kubelet iterates the capacity's resources: one it does not know reserves nothing.
  if (capacity.ephemeral_storage_bytes == 0) r.ephemeral_storage_bytes = 0;
  if (capacity.pid_max == 0) r.pids = 0;
  return r;
}

base::StatusOr<NodeAllocatable> computeAllocatable(const NodeCapacity& capacity,
                                                   const AllocatableConfig& config,
                                                   int64_t max_pods, std::string node_name) {
  auto reserved = nodeAllocatableReservation(capacity, config);
  if (!reserved.ok()) return reserved.status();
  // validateNodeAllocatable.
  auto check = [&](const char* resource, int64_t cap, int64_t res) -> base::Status {
    if (cap - res >= 0) return base::okStatus();
    return base::invalidArgumentError(
        std::string("invalid Node Allocatable configuration (--system-reserved, --kube-reserved, "
                    "--eviction-hard). Resource \"") +
        resource + "\" has an allocatable of " + std::to_string(cap - res) + ", capacity of " +
        std::to_string(cap));
  };
  for (auto s : {check("cpu", capacity.cpu_milli, reserved->cpu_milli),
                 check("memory", capacity.memory_bytes, reserved->memory_bytes),
                 check("ephemeral-storage", capacity.ephemeral_storage_bytes,
                       reserved->ephemeral_storage_bytes)}) {
    if (!s.ok()) return s;
  }
  NodeAllocatable alloc;
  alloc.node_name = std::move(node_name);
  alloc.cpu_milli = nonNegative(capacity.cpu_milli - reserved->cpu_milli);
  alloc.memory_bytes = nonNegative(capacity.memory_bytes - reserved->memory_bytes);
  alloc.ephemeral_storage_bytes =
      nonNegative(capacity.ephemeral_storage_bytes - reserved->ephemeral_storage_bytes);
  alloc.pods = max_pods;
  return alloc;
}

base::StatusOr<NodeCapacity> nodeAllocatableAbsolute(const NodeCapacity& capacity,
                                                     const AllocatableConfig& config) {
  auto parsed = parseReservations(config);
  if (!parsed.ok()) return parsed.status();
  const auto& s = parsed->system;
  const auto& k = parsed->kube;
  NodeCapacity out;
  out.cpu_milli = nonNegative(capacity.cpu_milli - s.cpu_milli - k.cpu_milli);
  out.memory_bytes = nonNegative(capacity.memory_bytes - s.memory_bytes - k.memory_bytes);
  out.ephemeral_storage_bytes =
      capacity.ephemeral_storage_bytes == 0
          ? 0
          : nonNegative(capacity.ephemeral_storage_bytes - s.ephemeral_storage_bytes -
                        k.ephemeral_storage_bytes);
  out.pid_max = capacity.pid_max == 0 ? 0 : nonNegative(capacity.pid_max - s.pids - k.pids);
  return out;
}

base::StatusOr<cm::ResourceConfig> kubepodsResourceConfig(const NodeCapacity& capacity,
                                                          const AllocatableConfig& config) {
  auto parsed = parseReservations(config);
  if (!parsed.ok()) return parsed.status();
  auto absolute = nodeAllocatableAbsolute(capacity, config);
  if (!absolute.ok()) return absolute.status();
  cm::ResourceConfig rc;
  rc.memory_limit = absolute->memory_bytes;
  rc.cpu_shares = static_cast<uint64_t>(cm::milliCpuToShares(absolute->cpu_milli));
  if (parsed->system.pids + parsed->kube.pids > 0 && capacity.pid_max > 0) {
    rc.pids_limit = absolute->pid_max;
  }
  return rc;
}

}  // namespace nodeagent::agent
