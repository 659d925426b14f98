#include "agent/sysctl_allowlist.h"

#include <sys/utsname.h>

#include <cstdio>
#include <utility>

#include "agent/runtime/spec_extras.h"
#include "base/printable.h"

namespace nodeagent::agent {
namespace {

constexpr size_t kSysctlMaxLength = 253;

bool segmentChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// kubelet's IsValidSysctlPattern: segments of [a-z0-9]([-_a-z0-9]*[a-z0-9])? separated by '.' or
// '/', optionally ending in '*' (which may follow a separator or part of a segment).
bool validPattern(std::string_view pattern) {
  if (pattern.empty() || pattern.size() > kSysctlMaxLength) return false;
  std::string_view body = pattern;
  const bool wildcard = body.back() == '*';
  if (wildcard) body.remove_suffix(1);
  if (body.empty()) return wildcard;
  size_t start = 0;
  while (start <= body.size()) {
    size_t end = body.find_first_of("./", start);
    const bool last = end == std::string_view::npos;
    if (last) end = body.size();
    const std::string_view segment = body.substr(start, end - start);
    if (segment.empty()) return last && wildcard && start > 0;  // "net.*"
    if (!segmentChar(segment.front())) return false;
    if (!segmentChar(segment.back()) && !(last && wildcard)) return false;
    for (char c : segment) {
      if (!segmentChar(c) && c != '-' && c != '_') return false;
    }
    if (last) break;
    start = end + 1;
  }
  return true;
}

struct SafeSysctl {
  const char* name;
  int major;  // the kernel from which it is per network namespace (0: any)
  int minor;
};

// kubelet's safeSysctls.
constexpr SafeSysctl kSafeSysctls[] = {
    {"kernel.shm_rmid_forced", 0, 0},
    {"net.ipv4.ip_local_port_range", 0, 0},
    {"net.ipv4.tcp_syncookies", 0, 0},
    {"net.ipv4.ping_group_range", 0, 0},
    {"net.ipv4.ip_unprivileged_port_start", 0, 0},
    {"net.ipv4.ip_local_reserved_ports", 3, 16},
    {"net.ipv4.tcp_keepalive_time", 4, 5},
    {"net.ipv4.tcp_fin_timeout", 4, 6},
    {"net.ipv4.tcp_keepalive_intvl", 4, 5},
    {"net.ipv4.tcp_keepalive_probes", 4, 5},
    {"net.ipv4.tcp_rmem", 4, 15},
    {"net.ipv4.tcp_wmem", 4, 15},
};

}  // namespace

std::string_view sysctlNamespace(std::string_view name) {
  if (name == "kernel.sem") return "ipc";
  for (std::string_view prefix : {"kernel.shm", "kernel.msg", "fs.mqueue."}) {
    if (name.starts_with(prefix)) return "ipc";
  }
  if (name.starts_with("net.")) return "net";
  return "";
}

std::vector<std::string> safeSysctls(std::string_view kernel_release) {
  int major = 0;
  int minor = 0;
  const std::string release(kernel_release);
  const bool known = std::sscanf(release.c_str(), "%d.%d", &major, &minor) == 2;
  std::vector<std::string> out;
  for (const auto& s : kSafeSysctls) {
    const bool available =
        s.major == 0 || (known && (major > s.major || (major == s.major && minor >= s.minor)));
    if (available) out.emplace_back(s.name);
  }
  return out;
}

std::string runningKernelRelease() {
  utsname u{};
  return ::uname(&u) == 0 ? std::string(u.release) : std::string();
}

base::StatusOr<SysctlAllowlist> SysctlAllowlist::create(const std::vector<std::string>& patterns) {
  SysctlAllowlist out;
  for (const auto& pattern : patterns) {
    if (!validPattern(pattern)) {
      return base::invalidArgumentError(
          "sysctl " + base::goQuote(pattern) +
          " must have at most 253 characters and be names of lower case letters, digits, '-' and "
          "'_' separated by '.' or '/', optionally ending in '*'");
    }
    const std::string dotted = runtime::sysctlDotted(pattern);
    const bool wildcard = dotted.back() == '*';
    const std::string key = wildcard ? dotted.substr(0, dotted.size() - 1) : dotted;
    const auto ns = sysctlNamespace(key);
    if (ns.empty()) {
      return base::invalidArgumentError((wildcard ? "the sysctls " : "the sysctl ") +
                                        base::goQuote(dotted) + (wildcard ? " are" : " is") +
                                        " not known to be namespaced");
    }
    (wildcard ? out.prefixes_ : out.names_)[key] = ns;
  }
  return out;
}

std::string SysctlAllowlist::check(std::string_view name, bool host_network, bool host_ipc) const {
  const std::string dotted = runtime::sysctlDotted(name);
  auto refuse = [&](std::string_view ns) -> std::string {
    if ((ns == "ipc" && host_ipc) || (ns == "net" && host_network)) {
      return base::goQuote(dotted) + " not allowed with host " + std::string(ns) + " enabled";
    }
    return "";
  };
  if (auto it = names_.find(dotted); it != names_.end()) return refuse(it->second);
  for (const auto& [prefix, ns] : prefixes_) {
    if (dotted.starts_with(prefix)) return refuse(ns);
  }
  return base::goQuote(dotted) + " not allowlisted";
}

cm::AdmitResult SysctlAllowlist::admit(const api::Pod& pod, bool node_namespaces) const {
  cm::AdmitResult result;
  const auto sysctls = runtime::podSysctls(pod);
  if (sysctls.empty()) return result;
  const bool host_network = node_namespaces || pod.spec->host_network;
  const bool host_ipc = node_namespaces || pod.spec->host_ipc;
  for (const auto& sysctl : sysctls) {
    std::string why = check(sysctl.name, host_network, host_ipc);
    if (why.empty()) continue;
    result.admit = false;
    result.reason = std::string(kSysctlForbiddenReason);
    result.message = "forbidden sysctl: " + why;
    if (node_namespaces && why.find(" not allowed with host ") != std::string::npos) {
      result.message += " (the process runtime runs every pod in the node's namespaces)";
    }
    return result;
  }
  return result;
}

}  // namespace nodeagent::agent
