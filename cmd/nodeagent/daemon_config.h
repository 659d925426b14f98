// The daemon's configuration: its flags (kubelet's names), the KubeletConfiguration file they
// override, and what is derived from them before anything starts (node name and IP, allocatable,
// the apiserver's REST config). Loading only reads: nothing is created, bound or started.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/admission.h"
#include "agent/cm/resources.h"
#include "agent/eviction/thresholds.h"
#include "agent/images/image_gc_policy.h"
#include "agent/sysctl_allowlist.h"
#include "api/kubeconfig.h"
#include "api/objects.h"
#include "base/clock.h"

namespace nodeagent::cmd {

struct DaemonFlags {
  std::string config;
  std::string pod_manifest_path;
  std::string manifest_url;
  std::vector<std::string> manifest_url_header;
  std::string kubeconfig;
  // TLS bootstrap: the bootstrap token's kubeconfig, used when --kubeconfig is missing or its
  // client certificate has expired (agent/certificate/bootstrap.h).
  std::string bootstrap_kubeconfig;
  // Client certificate rotation (agent/certificate/certificate_manager.h); kubelet's default.
  bool rotate_certificates = false;
  std::string hostname_override;
  std::string node_ip;
  std::string root_dir = "/var/lib/nodeagent";
  std::string pod_log_dir = "/var/log/pods";
  std::string runtime = "process";
  // kubelet's: "remote" selects the CRI runtime (--runtime=cri).
  std::string container_runtime;
  std::string container_runtime_endpoint = "unix:///run/containerd/containerd.sock";
  base::Duration runtime_request_timeout = std::chrono::minutes(2);
  // Pods' DNS (CRI runtime): the node's resolver configuration and the cluster's DNS.
  std::string resolv_conf = "/etc/resolv.conf";
  std::string cluster_dns;  // comma-separated IPs
  std::string cluster_domain;
  // Pods' networks (CRI runtime, agent/pod_network.h): the node's pod CIDRs without an apiserver
  // that assigns them, and the CNI config the agent writes.
  std::string pod_cidr;      // comma-separated, one IPv4 and/or one IPv6 CIDR
  std::string cni_conf_dir;  // empty: the agent writes no CNI config
  std::string cni_bridge = "cbr0";
  bool cni_masquerade = true;
  // The kubelet API's address (0.0.0.0 when unset) and, when set, the read-only and healthz
  // ports' (127.0.0.1 when unset: they are not authenticated).
  std::string address;
  int64_t port = 10250;
  std::string tls_cert_file;
  std::string tls_private_key_file;
  std::string cert_dir;  // "": <root-dir>/pki
  std::string client_ca_file;
  bool anonymous_auth = false;
  bool authentication_token_webhook = false;
  base::Duration authentication_token_webhook_cache_ttl = std::chrono::minutes(2);
  std::string authorization_mode;  // "": Webhook with --kubeconfig, else AlwaysAllow
  base::Duration authorization_webhook_cache_authorized_ttl = std::chrono::minutes(5);
  base::Duration authorization_webhook_cache_unauthorized_ttl = std::chrono::seconds(30);
  std::string system_reserved;
  std::string kube_reserved;
  std::string enforce_node_allocatable = "pods";
  std::string cgroup_root = "/";
  bool cgroups_per_qos = true;
  std::string cgroup_driver = "cgroupfs";
  // How ConfigMaps and Secrets of pods are kept fresh: Cache (read again after a minute) or Get
  // (read on every sync); kubelet's Watch is served as Cache.
  std::string config_map_and_secret_change_detection_strategy = "Watch";
  int64_t pod_max_pids = -1;
  std::string eviction_hard =
      "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%";
  std::string eviction_soft;
  std::string eviction_soft_grace_period;
  std::string eviction_minimum_reclaim;
  base::Duration eviction_pressure_transition_period = std::chrono::minutes(5);
  int64_t eviction_max_pod_grace_period = 0;
  std::string node_labels;
  std::string register_with_taints;
  std::string container_log_max_size = "10Mi";
  int64_t container_log_max_files = 5;
  // Image garbage collection (a runtime that runs images): percents of the image filesystem.
  int64_t image_gc_high_threshold = 85;
  int64_t image_gc_low_threshold = 80;
  base::Duration minimum_image_ttl_duration = std::chrono::minutes(2);
  base::Duration image_maximum_gc_age = base::Duration::zero();  // 0: off
  int64_t node_status_max_images = 50;                           // -1: no limit
  int64_t read_only_port = 10255;
  int64_t healthz_port = 10248;
  int64_t max_pods = 110;
  int64_t verbosity = 0;
  std::string logging_format = "text";
  double kube_api_qps = 50;
  int64_t kube_api_burst = 100;
  base::Duration file_check_frequency = std::chrono::seconds(20);
  base::Duration http_check_frequency = std::chrono::seconds(20);
  base::Duration sync_frequency = std::chrono::minutes(1);
  base::Duration pleg_relist_period = std::chrono::seconds(10);
  base::Duration crashloop_backoff_initial = std::chrono::seconds(10);
  base::Duration crashloop_backoff_max = std::chrono::seconds(300);
  base::Duration node_status_update_frequency = std::chrono::seconds(10);
  std::string lock_file;
  bool exit_on_lock_contention = false;
  bool allow_no_sources = false;
  bool allow_root_api_pods = false;
  std::string allowed_unsafe_sysctls;  // comma-separated names or prefixes ending in '*'
  bool seccomp_default = false;
  bool help = false;
};

// The flags and what follows from them.
struct DaemonConfig {
  DaemonFlags flags;
  // --node-status-update-frequency was given (it then also sets the report frequency).
  bool node_status_frequency_set = false;
  // --pleg-relist-period was given (else the CRI runtime, which reports no events, relists every
  // second as kubelet).
  bool pleg_relist_period_set = false;
  std::vector<std::string> ignored_config_keys;  // KubeletConfiguration fields not implemented
  std::string node_name;
  std::string node_ip;
  int64_t log_max_size = 0;
  agent::NodeCapacity capacity;
  agent::NodeAllocatable allocatable;
  // The kubepods cgroup's limits (capacity minus what is reserved) with
  // --enforce-node-allocatable=pods.
  cm::ResourceConfig kubepods_limits;
  // --eviction-hard and --eviction-soft, parsed.
  std::vector<eviction::Threshold> eviction_thresholds;
  // --image-gc-high-threshold, --image-gc-low-threshold and --minimum-image-ttl-duration.
  agent::images::ImageGcPolicy image_gc_policy;
  std::map<std::string, std::string> node_labels;
  std::vector<api::Taint> register_with_taints;  // parsed
  std::vector<std::string> cluster_dns;          // --cluster-dns, split
  // kubelet's safe sysctls and --allowed-unsafe-sysctls.
  agent::SysctlAllowlist sysctls;
  // The kernel enforces AppArmor (read at start, as kubelet's validateHost).
  bool apparmor_enabled = false;
  std::vector<std::pair<std::string, std::string>> manifest_url_headers;
  // With --kubeconfig; with --bootstrap-kubeconfig only once the bootstrap wrote it.
  std::optional<api::RestConfig> kubeconfig;
};

// --cert-dir, or <root-dir>/pki: the kubelet API's self-signed certificate and the client
// certificates of the TLS bootstrap and rotation.
std::filesystem::path certDirectory(const DaemonFlags& flags);

// What loading the configuration ends with: a configuration, or an exit code (0 after --help,
// 2 for a usage error, 1 for a failure) with its message already printed.
struct LoadedConfig {
  std::optional<DaemonConfig> config;
  int exit_code = 0;
};

LoadedConfig loadDaemonConfig(int argc, char** argv);

}  // namespace nodeagent::cmd
