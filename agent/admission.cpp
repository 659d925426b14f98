#include "agent/admission.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

namespace nodeagent::agent {
namespace {

int64_t requestMilli(const api::Container& c, const std::string& resource) {
  auto it = c.resources.requests.find(resource);
  if (it != c.resources.requests.end()) return it->second.milliValue();
  // A limit without a request defaults the request to the limit (API defaulting).
  auto lim = c.resources.limits.find(resource);
  return lim == c.resources.limits.end() ? 0 : lim->second.milliValue();
}

int64_t requestValue(const api::Container& c, const std::string& resource) {
  auto it = c.resources.requests.find(resource);
  if (it != c.resources.requests.end()) return it->second.value();
  auto lim = c.resources.limits.find(resource);
  return lim == c.resources.limits.end() ? 0 : lim->second.value();
}

using HostPort = std::tuple<std::string, std::string, int32_t>;  // ip, protocol, port

std::vector<HostPort> hostPorts(const api::Pod& pod) {
  std::vector<HostPort> out;
  for (const auto& c : pod.spec.containers) {
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

PodRequests podRequests(const api::Pod& pod) {
  PodRequests r;
  for (const auto& c : pod.spec.containers) {
    r.cpu_milli += requestMilli(c, "cpu");
    r.memory_bytes += requestValue(c, "memory");
  }
  for (const auto& c : pod.spec.init_containers) {
    r.cpu_milli = std::max(r.cpu_milli, requestMilli(c, "cpu"));
    r.memory_bytes = std::max(r.memory_bytes, requestValue(c, "memory"));
  }
  return r;
}

AdmitResult canAdmitPod(const api::Pod& pod, const std::vector<api::PodPtr>& active_pods,
                        const NodeAllocatable& node) {
  if (!pod.spec.node_name.empty() && pod.spec.node_name != node.node_name) {
    return {false, "HostName",
            "Predicate HostName failed: the pod is bound to node \"" + pod.spec.node_name +
                "\", not \"" + node.node_name + "\""};
  }
  // Resource fit, in the scheduler's order: pods, then cpu, then memory.
  const auto pod_count = static_cast<int64_t>(active_pods.size());
  if (pod_count + 1 > node.pods) return insufficient("pods", 1, pod_count, node.pods);

  auto wanted = podRequests(pod);
  PodRequests used;
  // Only a pod that requests cpu or memory needs the sum (a best-effort pod always fits): this
  // keeps admitting a large batch of best-effort static pods linear.
  const bool needs_sum = wanted.cpu_milli > 0 || wanted.memory_bytes > 0;
  for (size_t i = 0; needs_sum && i < active_pods.size(); ++i) {
    auto r = podRequests(*active_pods[i]);
    used.cpu_milli += r.cpu_milli;
    used.memory_bytes += r.memory_bytes;
  }
  if (wanted.cpu_milli > 0 && used.cpu_milli + wanted.cpu_milli > node.cpu_milli) {
    return insufficient("cpu", wanted.cpu_milli, used.cpu_milli, node.cpu_milli);
  }
  if (wanted.memory_bytes > 0 && used.memory_bytes + wanted.memory_bytes > node.memory_bytes) {
    return insufficient("memory", wanted.memory_bytes, used.memory_bytes, node.memory_bytes);
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

base::StatusOr<NodeCapacity> readHostCapacity(const std::string& proc_root) {
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
  return cap;
}

base::StatusOr<NodeAllocatable> computeAllocatable(const NodeCapacity& capacity,
                                                   const std::string& system_reserved,
                                                   int64_t max_pods, std::string node_name) {
  NodeAllocatable alloc;
  alloc.node_name = std::move(node_name);
  alloc.cpu_milli = capacity.cpu_milli;
  alloc.memory_bytes = capacity.memory_bytes;
  alloc.pods = max_pods;
  std::stringstream ss(system_reserved);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      return base::invalidArgumentError("--system-reserved: \"" + item +
                                        "\" is not of the form resource=quantity");
    }
    auto name = item.substr(0, eq);
    auto q = api::Quantity::parse(item.substr(eq + 1));
    if (!q.ok()) return q.status().withContext("--system-reserved: " + name);
    if (name == "cpu") {
      alloc.cpu_milli = std::max<int64_t>(0, alloc.cpu_milli - q->milliValue());
    } else if (name == "memory") {
      alloc.memory_bytes = std::max<int64_t>(0, alloc.memory_bytes - q->value());
    } else if (name != "ephemeral-storage" && name != "pid") {
      return base::invalidArgumentError("--system-reserved: unknown resource \"" + name + "\"");
    }
  }
  return alloc;
}

}  // namespace nodeagent::agent
