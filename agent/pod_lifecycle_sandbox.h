// kubelet's generatePodSandboxConfig (kuberuntime_sandbox.go) with what the kubelet gives it:
// the pod's hostname (GeneratePodHostNameAndDomain), its DNS config (the DNS configurer's
// GetPodDNS for its dnsPolicy and dnsConfig, from the node's resolv.conf), its port mappings
// (MakePortMappings), its namespaces (namespacesForPod), whether a container is privileged
// (HasPrivilegedContainer) and the pod's cgroup. The result is the runtime::PodSandboxConfig
// PodLifecycle gives runPodSandbox.
//
// Pure functions of the pod and the resolv.conf text (the caller reads the file), so unit tests
// cover kubelet's rules without a runtime. Fields nodeagent's typed pod does not model
// (spec.hostname, spec.subdomain, spec.dnsConfig, spec.shareProcessNamespace) are read from the
// pod's raw JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/runtime.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

using DnsConfig = runtime::PodSandboxConfig::DnsConfig;
using PortMapping = runtime::PodSandboxConfig::PortMapping;

// kubelet's DNS settings for pods (--resolv-conf, --cluster-dns, --cluster-domain).
struct PodDnsOptions {
  // The node's resolver configuration, the base of the Default policy (and of ClusterFirst
  // without cluster DNS). "" means none: kubelet's --resolv-conf="" (nameserver 127.0.0.1,
  // search ".").
  std::filesystem::path resolv_conf = "/etc/resolv.conf";
  // The cluster's DNS servers (ClusterFirst); nodeagent has no cluster DNS yet, so ClusterFirst
  // falls back to Default with a MissingClusterDNS warning, as kubelet without --cluster-dns.
  std::vector<std::string> cluster_dns;
  std::string cluster_domain;
};

// kubelet's validation limits (MaxDNSNameservers, MaxDNSSearchPaths, MaxDNSSearchListChars).
inline constexpr size_t kMaxDnsNameservers = 3;
inline constexpr size_t kMaxDnsSearchPaths = 6;
inline constexpr size_t kMaxDnsSearchListChars = 256;

// A Warning event generatePodSandboxConfig asks to record on the pod (kubelet's
// MissingClusterDNS and DNSConfigForming).
struct SandboxWarning {
  std::string reason;
  std::string message;
};

// kubelet's parseResolvConf: every `nameserver` line adds a server, the last `search` and
// `options` lines win, `#` comments are skipped. InvalidArgument for a nameserver line without
// an address.
base::StatusOr<DnsConfig> parseResolvConf(std::string_view content);

// kubelet's GeneratePodHostNameAndDomain, hostname part: spec.hostname, else the pod's name,
// cut to 63 characters without a trailing '-' or '.'. InvalidArgument when spec.hostname or
// spec.subdomain is not a DNS label (the subdomain is otherwise not used: nodeagent manages no
// /etc/hosts).
base::StatusOr<std::string> generatePodHostname(const api::Pod& pod);

// kubelet's GetPodDNS: `host` is the parsed node resolv.conf (nullopt when options.resolv_conf is
// ""). `node_ip` picks 127.0.0.1 or ::1 for an empty resolv_conf. Warnings go to `warnings`.
DnsConfig podDnsConfig(const api::Pod& pod, const PodDnsOptions& options,
                       const std::optional<DnsConfig>& host, const std::string& node_ip,
                       std::vector<SandboxWarning>* warnings);

// kubelet's MakePortMappings for every app container: one per declared port, named ports
// repeated in a container skipped.
std::vector<PortMapping> makePortMappings(const api::Pod& pod);

// What generatePodSandboxConfig needs beyond the pod.
struct SandboxInputs {
  uint32_t attempt = 0;
  std::filesystem::path log_directory;
  std::string cgroup_parent;
  std::string node_ip;
  PodDnsOptions dns;
  // Whether to make a DNS config at all (a runtime whose containers have a root filesystem of
  // their own); `host_resolv_conf` is then the text of dns.resolv_conf (nullopt when it is "").
  bool with_dns = false;
  std::optional<std::string> host_resolv_conf;
  // For the sandbox's seccomp profile (runtime::seccompProfileFor).
  bool seccomp_default = false;
  std::filesystem::path seccomp_profile_root;
};

struct GeneratedSandboxConfig {
  runtime::PodSandboxConfig config;
  std::vector<SandboxWarning> warnings;
};

// kubelet's generatePodSandboxConfig. InvalidArgument for a bad hostname or subdomain, an
// unreadable resolv.conf text or a Localhost seccomp profile without a file.
base::StatusOr<GeneratedSandboxConfig> generatePodSandboxConfig(const api::Pod& pod,
                                                                const SandboxInputs& inputs);

// Reads the resolv.conf a pod's DNS config starts from (blocking): nullopt for an empty path,
// NotFound/Unknown naming the file when it cannot be read.
base::StatusOr<std::optional<std::string>> readResolvConf(const std::filesystem::path& path);

}  // namespace nodeagent::agent
