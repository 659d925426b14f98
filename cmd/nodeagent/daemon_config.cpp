#include "cmd/nodeagent/daemon_config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "agent/cm/cgroup_manager.h"
#include "agent/node_labels.h"
#include "agent/node_status.h"
#include "agent/pod_network.h"
#include "agent/runtime/apparmor.h"
#include "agent/runtime/cri/cri_endpoint.h"
#include "api/quantity.h"
#include "base/log.h"
#include "base/strings.h"
#include "cmd/nodeagent/config_file.h"
#include "cmd/nodeagent/flags.h"
#include "config/apiserver_source.h"
#include "config/http_source.h"

namespace nodeagent::cmd {
namespace {

NODEAGENT_LOGGER("nodeagent")

// The kubelet API's flags (port, TLS, authentication, authorization).
void registerServingFlags(FlagSet& fs, DaemonFlags& f) {
  fs.addInt("port", &f.port, "kubelet API HTTPS port (0 disables)");
  fs.addString("tls-cert-file", &f.tls_cert_file,
               "kubelet API certificate, PEM (default: self-signed under --cert-dir)");
  fs.addString("tls-private-key-file", &f.tls_private_key_file, "kubelet API private key, PEM");
  fs.addString("cert-dir", &f.cert_dir,
               "where the self-signed kubelet API certificate and the client certificates of "
               "--bootstrap-kubeconfig and --rotate-certificates are kept (default "
               "<root-dir>/pki)");
  fs.addString("client-ca-file", &f.client_ca_file,
               "CA bundle that kubelet API client certificates are verified against");
  fs.addBool("anonymous-auth", &f.anonymous_auth,
             "let unauthenticated kubelet API requests through as system:anonymous");
  fs.addBool("authentication-token-webhook", &f.authentication_token_webhook,
             "check bearer tokens with a TokenReview against the apiserver");
  fs.addDuration("authentication-token-webhook-cache-ttl",
                 &f.authentication_token_webhook_cache_ttl,
                 "how long TokenReview answers are cached");
  fs.addString("authorization-mode", &f.authorization_mode,
               "kubelet API authorization: Webhook (SubjectAccessReview) or AlwaysAllow (default "
               "Webhook with --kubeconfig, else AlwaysAllow)");
  fs.addDuration("authorization-webhook-cache-authorized-ttl",
                 &f.authorization_webhook_cache_authorized_ttl,
                 "how long allowing SubjectAccessReview answers are cached");
  fs.addDuration("authorization-webhook-cache-unauthorized-ttl",
                 &f.authorization_webhook_cache_unauthorized_ttl,
                 "how long denying SubjectAccessReview answers are cached");
}

// How the agent reaches and authenticates to the apiserver, and what its Node is made with.
void registerApiserverFlags(FlagSet& fs, DaemonFlags& f) {
  fs.addString("kubeconfig", &f.kubeconfig,
               "kubeconfig of the apiserver (enables the api source); with "
               "--bootstrap-kubeconfig, written by the TLS bootstrap when missing or expired");
  fs.addString("bootstrap-kubeconfig", &f.bootstrap_kubeconfig,
               "kubeconfig with a bootstrap token: asks the apiserver for the node's client "
               "certificate (a CertificateSigningRequest) and writes --kubeconfig");
  fs.addBool("rotate-certificates", &f.rotate_certificates,
             "request a new client certificate from the apiserver when 70-90% of the current "
             "one's lifetime has passed");
  fs.addString("node-labels", &f.node_labels,
               "labels of the Node object, k=v,k2=v2 (with --kubeconfig)");
  fs.addString("register-with-taints", &f.register_with_taints,
               "taints the Node is created with, key=value:Effect,key:Effect (with --kubeconfig)");
}

// The container runtime's flags.
void registerRuntimeFlags(FlagSet& fs, DaemonFlags& f) {
  fs.addString("runtime", &f.runtime,
               "container runtime: process (host processes), cri (a CRI runtime such as "
               "containerd, at --container-runtime-endpoint) or fake");
  fs.addString("container-runtime", &f.container_runtime,
               "kubelet's flag: remote is --runtime=cri");
  fs.addString("container-runtime-endpoint", &f.container_runtime_endpoint,
               "the CRI runtime's socket, unix:///path");
  fs.addDuration("runtime-request-timeout", &f.runtime_request_timeout,
                 "deadline of each CRI call (a stop or exec also gets its own timeout)");
  fs.addString("resolv-conf", &f.resolv_conf,
               "resolver configuration that pods with dnsPolicy Default get (\"\": none)");
  fs.addString("cluster-dns", &f.cluster_dns,
               "the cluster's DNS server IPs, comma-separated (dnsPolicy ClusterFirst)");
  fs.addString("cluster-domain", &f.cluster_domain,
               "the cluster's domain, searched by ClusterFirst pods (e.g. cluster.local)");
  fs.addString("pod-cidr", &f.pod_cidr,
               "the node's pod CIDRs, comma-separated (one IPv4, one IPv6), handed to the CRI "
               "runtime and to the CNI config of --cni-conf-dir; the Node's spec.podCIDRs, once "
               "the apiserver assigns them, take their place");
  fs.addString("cni-conf-dir", &f.cni_conf_dir,
               "write a CNI config (bridge, host-local addresses from the pod CIDRs, portmap for "
               "hostPort) here as 10-nodeagent.conflist; the CRI runtime must load its network "
               "config from this directory (\"\": write none)");
  fs.addString("cni-bridge", &f.cni_bridge, "the bridge of --cni-conf-dir's config");
  fs.addBool("cni-masquerade", &f.cni_masquerade,
             "--cni-conf-dir's config masquerades pod traffic that leaves the pod CIDRs");
  fs.addDuration("pleg-relist-period", &f.pleg_relist_period,
                 "PLEG relist period (with --runtime=cri 1s unless given: a CRI runtime "
                 "reports no container events)");
}

void registerFlags(FlagSet& fs, DaemonFlags& f) {
  fs.addString("config", &f.config, "KubeletConfiguration YAML file (flags override it)");
  fs.addString("pod-manifest-path", &f.pod_manifest_path, "static pod manifest directory or file");
  fs.addString("manifest-url", &f.manifest_url, "URL serving static pod manifests");
  fs.addStringList("manifest-url-header", &f.manifest_url_header,
                   "HTTP header for --manifest-url, Key:Value (repeatable)");
  registerApiserverFlags(fs, f);
  fs.addString("hostname-override", &f.hostname_override, "node name (default: the host name)");
  fs.addString("node-ip", &f.node_ip, "the node's IP (default: the first non-loopback IPv4)");
  fs.addString("root-dir", &f.root_dir, "state directory");
  fs.addString("pod-log-dir", &f.pod_log_dir, "container log directory");
  registerRuntimeFlags(fs, f);
  fs.addString("address", &f.address,
               "address of the kubelet API (default 0.0.0.0) and, when given, of the read-only "
               "and healthz ports (default 127.0.0.1)");
  registerServingFlags(fs, f);
  fs.addDuration("node-status-update-frequency", &f.node_status_update_frequency,
                 "how often the node status is computed and posted when changed");
  fs.addString("system-reserved", &f.system_reserved,
               "resources kept from pods for the system, e.g. cpu=500m,memory=1Gi,pid=1000");
  fs.addString("kube-reserved", &f.kube_reserved,
               "resources kept from pods for the node's daemons, e.g. cpu=100m,memory=256Mi");
  fs.addString("enforce-node-allocatable", &f.enforce_node_allocatable,
               "what the kubepods cgroup's limits enforce: pods, or none (\"\")");
  fs.addString("cgroup-root", &f.cgroup_root, "the parent cgroup of kubepods");
  fs.addBool("cgroups-per-qos", &f.cgroups_per_qos,
             "make the kubepods, QoS and pod cgroups (off: containers go under --cgroup-root)");
  fs.addString("cgroup-driver", &f.cgroup_driver, "how cgroups are made: cgroupfs");
  fs.addString("config-map-and-secret-change-detection-strategy",
               &f.config_map_and_secret_change_detection_strategy,
               "how pods' ConfigMaps and Secrets are kept current: Watch (a watch per object "
               "in use), Cache (re-read after a minute) or Get (read at every sync)");
  fs.addInt("pod-max-pids", &f.pod_max_pids, "processes a pod may have (-1: unlimited)");
  fs.addString("eviction-hard", &f.eviction_hard,
               "signal<threshold list that evicts pods at once, e.g. memory.available<100Mi");
  fs.addString("eviction-soft", &f.eviction_soft,
               "signal<threshold list that evicts pods after its grace period");
  fs.addString("eviction-soft-grace-period", &f.eviction_soft_grace_period,
               "signal=duration list: how long a soft threshold must hold before evicting");
  fs.addString("eviction-minimum-reclaim", &f.eviction_minimum_reclaim,
               "signal=quantity list: how much below the threshold eviction reclaims");
  fs.addDuration("eviction-pressure-transition-period", &f.eviction_pressure_transition_period,
                 "how long a pressure condition stays after its threshold is no longer met");
  fs.addInt("eviction-max-pod-grace-period", &f.eviction_max_pod_grace_period,
            "grace period of a pod evicted for a soft threshold, seconds, whatever the pod's own");
  fs.addString("container-log-max-size", &f.container_log_max_size,
               "rotate a container log at this size");
  fs.addInt("container-log-max-files", &f.container_log_max_files, "log files kept per container");
  fs.addInt("image-gc-high-threshold", &f.image_gc_high_threshold,
            "image filesystem usage percent at which unused images are removed (100: never)");
  fs.addInt("image-gc-low-threshold", &f.image_gc_low_threshold,
            "image filesystem usage percent that image garbage collection frees down to");
  fs.addDuration("minimum-image-ttl-duration", &f.minimum_image_ttl_duration,
                 "how long an unused image is kept at least after it was first seen");
  fs.addDuration("image-maximum-gc-age", &f.image_maximum_gc_age,
                 "remove an image unused for longer than this whatever the disk usage "
                 "(kubelet's imageMaximumGCAge; 0 disables)");
  fs.addInt("node-status-max-images", &f.node_status_max_images,
            "images listed in the Node's status.images, largest first (-1: all)");
  fs.addInt("read-only-port", &f.read_only_port, "read-only HTTP port (0 disables)");
  fs.addInt("healthz-port", &f.healthz_port, "healthz HTTP port (0 disables)");
  fs.addInt("max-pods", &f.max_pods, "pods this node admits");
  fs.addInt("v", &f.verbosity, "log verbosity");
  fs.addString("logging-format", &f.logging_format, "log format: text or json (kubelet's flag)");
  fs.addDouble("kube-api-qps", &f.kube_api_qps, "apiserver requests per second");
  fs.addInt("kube-api-burst", &f.kube_api_burst, "apiserver request burst");
  fs.addDuration("file-check-frequency", &f.file_check_frequency,
                 "manifest directory relist period");
  fs.addDuration("http-check-frequency", &f.http_check_frequency, "manifest URL poll period");
  fs.addDuration("sync-frequency", &f.sync_frequency, "periodic pod resync");
  fs.addDuration("crashloop-backoff-initial", &f.crashloop_backoff_initial,
                 "first restart backoff");
  fs.addDuration("crashloop-backoff-max", &f.crashloop_backoff_max, "restart backoff cap");
  fs.addString(
      "lock-file", &f.lock_file,
      "a second lock file to hold besides <root-dir>/nodeagent.lock (kubelet's --lock-file)");
  fs.addBool("exit-on-lock-contention", &f.exit_on_lock_contention,
             "wait for the lock instead of failing, and exit (containers keep running) when "
             "another agent asks for it, as kubelet does for upgrades");
  fs.addBool("allow-no-sources", &f.allow_no_sources,
             "start even with no pod source (no manifest path, URL or kubeconfig); such an agent "
             "stops every container it finds under its root dir");
  fs.addBool("allow-root-api-pods", &f.allow_root_api_pods,
             "let pods from the apiserver run as root, privileged or with added capabilities");
  fs.addString("allowed-unsafe-sysctls", &f.allowed_unsafe_sysctls,
               "comma-separated unsafe sysctls or prefixes ending in '*' (kernel.msg*) a pod may "
               "set besides kubelet's safe ones; each must be namespaced (kernel.shm*, "
               "kernel.msg*, kernel.sem, fs.mqueue.*, net.*)");
  fs.addBool("seccomp-default", &f.seccomp_default,
             "give a container that names no seccompProfile the runtime's default profile "
             "(RuntimeDefault) instead of none; needs --runtime=cri");
  fs.addBool("help", &f.help, "show this help");
  fs.addShorthand('v', "v");
  fs.addShorthand('h', "help");
}

std::string detectNodeIp() {
  ifaddrs* addrs = nullptr;
  if (getifaddrs(&addrs) != 0) return "127.0.0.1";
  std::string found;
  for (auto* a = addrs; a != nullptr && found.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) != 0 || (a->ifa_flags & IFF_UP) == 0) continue;
    char buf[INET_ADDRSTRLEN] = {};
    auto* in = reinterpret_cast<sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) != nullptr) found = buf;
  }
  freeifaddrs(addrs);
  return found.empty() ? "127.0.0.1" : found;
}

// A usage error: printed with the usage text, exit code 2.
struct UsageError {
  std::string message;
};

// The pods' network flags (agent/pod_network.h).
std::optional<UsageError> checkPodNetworkFlags(const DaemonFlags& f) {
  if (!f.pod_cidr.empty()) {
    if (auto cidrs = agent::parsePodCidrs(f.pod_cidr); !cidrs.ok()) {
      return UsageError{"--pod-cidr: " + cidrs.status().message()};
    }
  }
  if (f.cni_conf_dir.empty()) return std::nullopt;
  if (f.runtime != "cri") {
    return UsageError{
        "--cni-conf-dir needs --runtime=cri: the process runtime runs every pod in the node's "
        "network"};
  }
  const auto& b = f.cni_bridge;
  if (b.empty() || b.size() > 15 || b == "." || b == ".." ||
      b.find_first_of("/: \t\n") != std::string::npos) {
    return UsageError{"--cni-bridge: \"" + b +
                      "\" is not an interface name (1 to 15 characters, no '/', ':' or blanks)"};
  }
  return std::nullopt;
}

// The kubelet API's flags.
std::optional<UsageError> checkServingFlags(const DaemonFlags& f) {
  if (f.port < 0 || f.port > 65535) {
    return UsageError{"--port: " + std::to_string(f.port) + " is not a port (0 disables)"};
  }
  if (f.tls_cert_file.empty() != f.tls_private_key_file.empty()) {
    return UsageError{"--tls-cert-file and --tls-private-key-file go together"};
  }
  if (!f.authorization_mode.empty() && f.authorization_mode != "Webhook" &&
      f.authorization_mode != "AlwaysAllow") {
    return UsageError{"--authorization-mode: \"" + f.authorization_mode +
                      "\" is not Webhook or AlwaysAllow"};
  }
  if (f.kubeconfig.empty() &&
      (f.authorization_mode == "Webhook" || f.authentication_token_webhook)) {
    return UsageError{
        "--authorization-mode=Webhook and --authentication-token-webhook ask the apiserver: "
        "they need --kubeconfig"};
  }
  return std::nullopt;
}

// --bootstrap-kubeconfig and --rotate-certificates.
std::optional<UsageError> checkClientCertificateFlags(const DaemonFlags& f) {
  if (!f.bootstrap_kubeconfig.empty() && f.kubeconfig.empty()) {
    return UsageError{
        "--bootstrap-kubeconfig needs --kubeconfig: the path the bootstrapped kubeconfig is "
        "written to"};
  }
  if (f.rotate_certificates && f.kubeconfig.empty()) {
    return UsageError{"--rotate-certificates needs --kubeconfig"};
  }
  return std::nullopt;
}

// kubelet's --container-runtime: "remote" (a CRI runtime) is --runtime=cri; kubelet's other value,
// docker, has no counterpart.
std::optional<UsageError> applyContainerRuntime(DaemonFlags& f, bool runtime_set) {
  if (f.container_runtime.empty()) return std::nullopt;
  if (f.container_runtime != "remote") {
    return UsageError{"--container-runtime: \"" + f.container_runtime +
                      "\" is not supported (remote: a CRI runtime such as containerd, at "
                      "--container-runtime-endpoint)"};
  }
  if (runtime_set && f.runtime != "cri") {
    return UsageError{"--container-runtime=remote and --runtime=" + f.runtime +
                      " disagree: give one of them"};
  }
  f.runtime = "cri";
  return std::nullopt;
}

// The checks of the flags alone (no file or host lookups).
std::optional<UsageError> checkFlags(const DaemonFlags& f) {
  if (f.logging_format != "text" && f.logging_format != "json") {
    return UsageError{"--logging-format: \"" + f.logging_format + "\" is not text or json"};
  }
  // An agent without a pod source wants no pods at all: every container it adopts from its root
  // dir is an orphan and is stopped. That is almost always a mistake (a typo in a flag or in the
  // config file), so it takes an explicit flag.
  if (f.pod_manifest_path.empty() && f.manifest_url.empty() && f.kubeconfig.empty() &&
      !f.allow_no_sources) {
    return UsageError{
        "no pod source: give --pod-manifest-path, --manifest-url or --kubeconfig (or "
        "staticPodPath / staticPodURL in --config); an agent without one stops every container "
        "under its --root-dir, so it starts only with --allow-no-sources"};
  }
  if (f.runtime != "process" && f.runtime != "cri" && f.runtime != "fake") {
    return UsageError{"--runtime: \"" + f.runtime + "\" is not process, cri or fake"};
  }
  if (f.seccomp_default && f.runtime == "process") {
    return UsageError{
        "--seccomp-default needs --runtime=cri: the process runtime does not filter a host "
        "process's system calls, so every container would be refused"};
  }
  for (const auto& ip : base::splitCommaList(f.cluster_dns)) {
    in6_addr addr{};
    if (::inet_pton(AF_INET, ip.c_str(), &addr) != 1 &&
        ::inet_pton(AF_INET6, ip.c_str(), &addr) != 1) {
      return UsageError{"--cluster-dns: \"" + ip + "\" is not an IP address"};
    }
  }
  if (f.runtime == "cri") {
    if (auto endpoint = runtime::cri::parseCriEndpoint(f.container_runtime_endpoint);
        !endpoint.ok()) {
      return UsageError{"--container-runtime-endpoint: " + endpoint.status().message()};
    }
    if (f.runtime_request_timeout <= base::Duration::zero()) {
      return UsageError{"--runtime-request-timeout must be positive"};
    }
  }
  if (auto bad = checkPodNetworkFlags(f)) return bad;
  if (f.max_pods <= 0) return UsageError{"--max-pods must be positive"};
  if (auto bad = checkServingFlags(f)) return bad;
  if (auto bad = checkClientCertificateFlags(f)) return bad;
  if (f.node_status_max_images < -1) {
    return UsageError{"--node-status-max-images must be -1 (no limit) or more: " +
                      std::to_string(f.node_status_max_images)};
  }
  if (f.eviction_max_pod_grace_period < 0) {
    return UsageError{"--eviction-max-pod-grace-period must not be negative: " +
                      std::to_string(f.eviction_max_pod_grace_period)};
  }
  if (const auto& s = f.config_map_and_secret_change_detection_strategy;
      s != "Cache" && s != "Get" && s != "Watch") {
    return UsageError{"--config-map-and-secret-change-detection-strategy: \"" + s +
                      "\" is not one of Cache, Get, Watch"};
  }
  if (f.cgroup_driver != "cgroupfs") {
    return UsageError{"--cgroup-driver: \"" + f.cgroup_driver +
                      "\" is not supported (cgroupfs; under systemd give the unit Delegate=yes)"};
  }
  const auto cgroup_root = cm::parseCgroupPath(f.cgroup_root);
  if (f.cgroup_root.empty() || f.cgroup_root.front() != '/' ||
      std::any_of(cgroup_root.begin(), cgroup_root.end(),
                  [](const std::string& c) { return c == "." || c == ".."; })) {
    return UsageError{"--cgroup-root: \"" + f.cgroup_root +
                      "\" is not an absolute cgroup path without . or .. components"};
  }
  if (f.pod_max_pids < -1) {
    return UsageError{"--pod-max-pids must be positive, or 0 or -1 (unlimited)"};
  }
  if (f.enforce_node_allocatable != "pods" && !f.enforce_node_allocatable.empty() &&
      f.enforce_node_allocatable != "none") {
    return UsageError{"--enforce-node-allocatable: \"" + f.enforce_node_allocatable +
                      "\" is not supported (pods, or none; system-reserved and kube-reserved "
                      "need cgroups of their own that nodeagent does not make)"};
  }
  return std::nullopt;
}

// The eviction thresholds, node allocatable and the kubepods cgroup's limits.
std::optional<UsageError> deriveResources(DaemonConfig& c) {
  const auto& f = c.flags;
  eviction::ThresholdFlags tf;
  tf.eviction_hard = f.eviction_hard;
  tf.eviction_soft = f.eviction_soft;
  tf.eviction_soft_grace_period = f.eviction_soft_grace_period;
  tf.eviction_minimum_reclaim = f.eviction_minimum_reclaim;
  tf.enforce_pods_allocatable = f.enforce_node_allocatable == "pods";
  c.image_gc_policy = {f.image_gc_high_threshold, f.image_gc_low_threshold,
                       f.minimum_image_ttl_duration, f.image_maximum_gc_age};
  if (auto policy = agent::images::validateImageGcPolicy(c.image_gc_policy); !policy.ok()) {
    return UsageError{policy.message()};
  }
  // A CRI runtime's images are on its image filesystem; the process runtime has none.
  tf.has_image_fs = f.runtime == "cri";
  auto thresholds = eviction::parseThresholdConfig(tf);
  if (!thresholds.ok()) return UsageError{thresholds.status().message()};
  c.eviction_thresholds = std::move(*thresholds);
  const agent::AllocatableConfig ac{f.system_reserved, f.kube_reserved,
                                    eviction::hardThresholds(c.eviction_thresholds)};
  auto allocatable = agent::computeAllocatable(c.capacity, ac, f.max_pods, c.node_name);
  if (!allocatable.ok()) return UsageError{allocatable.status().message()};
  c.allocatable = std::move(*allocatable);
  auto kubepods = agent::kubepodsResourceConfig(c.capacity, ac);
  if (!kubepods.ok()) return UsageError{kubepods.status().message()};
  c.kubepods_limits = *kubepods;
  return std::nullopt;
}

// The root dir, or the nearest directory above it that exists (it is made later): the node
// filesystem whose size is the node's ephemeral-storage.
std::string existingRootDir(const std::string& root_dir) {
  std::filesystem::path p = std::filesystem::absolute(root_dir);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) {
    p = p.parent_path();
  }
  return p.string();
}

// What follows from the flags: node identity, allocatable, labels, headers, the kubeconfig.
std::optional<UsageError> derive(DaemonConfig& c) {
  const auto& f = c.flags;
  c.cluster_dns = base::splitCommaList(f.cluster_dns);
  {
    auto patterns = agent::safeSysctls(agent::runningKernelRelease());
    for (auto& p : base::splitCommaList(f.allowed_unsafe_sysctls)) patterns.push_back(std::move(p));
    auto sysctls = agent::SysctlAllowlist::create(patterns);
    if (!sysctls.ok()) return UsageError{"--allowed-unsafe-sysctls: " + sysctls.status().message()};
    c.sysctls = *std::move(sysctls);
    c.apparmor_enabled = runtime::appArmorEnabled();
  }
  auto log_size = api::Quantity::parse(f.container_log_max_size);
  if (!log_size.ok() || log_size->value() <= 0) {
    return UsageError{"--container-log-max-size: \"" + f.container_log_max_size +
                      "\" is not a positive quantity"};
  }
  c.log_max_size = log_size->value();
  c.node_name = config::resolveNodeName(f.hostname_override);
  c.node_ip = f.node_ip.empty() ? detectNodeIp() : f.node_ip;
  if (auto bad = deriveResources(c)) return bad;
  if (!f.manifest_url.empty()) {
    if (auto url = config::parseHttpUrl(f.manifest_url); !url.ok()) {
      return UsageError{url.status().message()};
    }
    auto headers = config::parseManifestUrlHeaders(f.manifest_url_header);
    if (!headers.ok()) return UsageError{headers.status().message()};
    c.manifest_url_headers = std::move(*headers);
  }
  auto labels = agent::parseNodeLabels(f.node_labels);
  if (!labels.ok()) return UsageError{labels.status().message()};
  if (auto st = agent::validateNodeLabels(*labels); !st.ok()) {
    return UsageError{"failed to validate kubelet flags: " + st.message()};
  }
  c.node_labels = std::move(*labels);
  auto taints = agent::parseRegisterWithTaints(f.register_with_taints);
  if (!taints.ok()) return UsageError{taints.status().message()};
  c.register_with_taints = std::move(*taints);
  if (!f.bootstrap_kubeconfig.empty()) {
    // Checked now so that a typo fails at once; --kubeconfig is read after the bootstrap.
    if (auto rc = api::loadKubeconfig(f.bootstrap_kubeconfig); !rc.ok()) {
      return UsageError{"--bootstrap-kubeconfig: " + rc.status().message()};
    }
  } else if (!f.kubeconfig.empty()) {
    auto rc = api::loadKubeconfig(f.kubeconfig);
    if (!rc.ok()) return UsageError{"--kubeconfig: " + rc.status().message()};
    c.kubeconfig = std::move(*rc);
  }
  return std::nullopt;
}

LoadedConfig usageError(const std::string& message, const FlagSet& fs) {
  std::fprintf(stderr, "nodeagent: %s\nusage: nodeagent [flags]\n%s", message.c_str(),
               fs.usage().c_str());
  return LoadedConfig{std::nullopt, 2};
}

}  // namespace

std::filesystem::path certDirectory(const DaemonFlags& flags) {
  return flags.cert_dir.empty() ? std::filesystem::path(flags.root_dir) / "pki"
                                : std::filesystem::path(flags.cert_dir);
}

LoadedConfig loadDaemonConfig(int argc, char** argv) {
  DaemonConfig c;
  FlagSet fs;
  registerFlags(fs, c.flags);
  if (auto s = fs.parse(argc, argv); !s.ok()) return usageError(s.message(), fs);
  if (c.flags.help) {
    std::printf("usage: nodeagent [flags]\n%s", fs.usage().c_str());
    return LoadedConfig{std::nullopt, 0};
  }
  if (!c.flags.config.empty()) {
    auto applied = applyConfigFile(fs, c.flags.config);
    if (!applied.ok()) return usageError(applied.status().message(), fs);
    c.ignored_config_keys = std::move(applied->ignored_keys);
  }
  c.node_status_frequency_set = fs.isSet("node-status-update-frequency");
  c.pleg_relist_period_set = fs.isSet("pleg-relist-period");
  if (auto bad = applyContainerRuntime(c.flags, fs.isSet("runtime"))) {
    return usageError(bad->message, fs);
  }
  if (auto bad = checkFlags(c.flags)) return usageError(bad->message, fs);
  base::initLogging({.verbosity = static_cast<int>(c.flags.verbosity),
                     .format = c.flags.logging_format == "json" ? base::LogFormat::kJson
                                                                : base::LogFormat::kText});
  auto capacity = agent::readHostCapacity("/proc", existingRootDir(c.flags.root_dir));
  if (!capacity.ok()) {
    log()->error("Cannot read the host's capacity err={}", capacity.status().toString());
    return LoadedConfig{std::nullopt, 1};
  }
  c.capacity = *capacity;
  if (auto bad = derive(c)) return usageError(bad->message, fs);
  return LoadedConfig{std::move(c), 0};
}

}  // namespace nodeagent::cmd
