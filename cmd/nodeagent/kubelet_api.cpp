#include "cmd/nodeagent/kubelet_api.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "agent/certificate/pki.h"
#include "base/duration.h"

namespace nodeagent::cmd {
namespace {

std::string firstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string seconds(base::Duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(d).count()) + "s";
}

nlohmann::json authJson(const DaemonFlags& f, const agent::AuthOptions& auth) {
  return {
      {"authentication",
       {{"x509", {{"clientCAFile", f.client_ca_file}}},
        {"webhook", {{"enabled", auth.token_webhook}, {"cacheTTL", seconds(auth.token_cache_ttl)}}},
        {"anonymous", {{"enabled", auth.anonymous}}}}},
      {"authorization",
       {{"mode", auth.authorize_webhook ? "Webhook" : "AlwaysAllow"},
        {"webhook",
         {{"cacheAuthorizedTTL", seconds(auth.authorized_ttl)},
          {"cacheUnauthorizedTTL", seconds(auth.unauthorized_ttl)}}}}}};
}

agent::AuthOptions authOptions(const DaemonConfig& config) {
  const DaemonFlags& f = config.flags;
  agent::AuthOptions auth;
  auth.anonymous = f.anonymous_auth;
  auth.token_webhook = f.authentication_token_webhook;
  auth.token_cache_ttl = f.authentication_token_webhook_cache_ttl;
  auth.authorize_webhook = f.authorization_mode.empty() ? config.kubeconfig.has_value()
                                                        : f.authorization_mode == "Webhook";
  auth.authorized_ttl = f.authorization_webhook_cache_authorized_ttl;
  auth.unauthorized_ttl = f.authorization_webhook_cache_unauthorized_ttl;
  auth.node_name = config.node_name;
  return auth;
}

}  // namespace

base::StatusOr<agent::KubeletServerOptions> kubeletServerOptions(const DaemonConfig& config) {
  const DaemonFlags& f = config.flags;
  agent::KubeletServerOptions o;
  o.http.address = f.address.empty() ? "0.0.0.0" : f.address;
  o.http.port = static_cast<int>(f.port);
  agent::HttpTlsServerOptions tls{f.tls_cert_file, f.tls_private_key_file, f.client_ca_file};
  if (tls.cert_file.empty()) {
    const std::filesystem::path dir = certDirectory(f);
    std::vector<std::string> ips{config.node_ip};
    if (config.node_ip != "127.0.0.1") ips.push_back("127.0.0.1");
    auto paths = certificate::ensureSelfSignedServing(dir, config.node_name, ips, {"localhost"});
    if (!paths.ok()) return paths.status().withContext("cannot make the kubelet API certificate");
    tls.cert_file = paths->cert_file.string();
    tls.key_file = paths->key_file.string();
  }
  o.http.tls = std::move(tls);
  o.auth = authOptions(config);
  return o;
}

std::string configzJson(const DaemonConfig& config) {
  const DaemonFlags& f = config.flags;
  nlohmann::json c{
      {"kind", "KubeletConfiguration"},
      {"apiVersion", "kubelet.config.k8s.io/v1beta1"},
      {"staticPodPath", f.pod_manifest_path},
      {"staticPodURL", f.manifest_url},
      {"syncFrequency", seconds(f.sync_frequency)},
      {"fileCheckFrequency", seconds(f.file_check_frequency)},
      {"httpCheckFrequency", seconds(f.http_check_frequency)},
      {"address", f.address.empty() ? "0.0.0.0" : f.address},
      {"port", f.port},
      {"readOnlyPort", f.read_only_port},
      {"healthzPort", f.healthz_port},
      {"tlsCertFile", f.tls_cert_file},
      {"tlsPrivateKeyFile", f.tls_private_key_file},
      {"nodeStatusUpdateFrequency", seconds(f.node_status_update_frequency)},
      {"maxPods", f.max_pods},
      {"podPidsLimit", f.pod_max_pids},
      {"cgroupRoot", f.cgroup_root},
      {"cgroupsPerQOS", f.cgroups_per_qos},
      {"cgroupDriver", f.cgroup_driver},
      {"configMapAndSecretChangeDetectionStrategy",
       f.config_map_and_secret_change_detection_strategy},
      {"containerLogMaxSize", f.container_log_max_size},
      {"containerLogMaxFiles", f.container_log_max_files},
      {"kubeAPIQPS", f.kube_api_qps},
      {"kubeAPIBurst", f.kube_api_burst},
      {"evictionPressureTransitionPeriod", seconds(f.eviction_pressure_transition_period)},
      {"evictionMaxPodGracePeriod", f.eviction_max_pod_grace_period},
      {"imageGCHighThresholdPercent", f.image_gc_high_threshold},
      {"imageGCLowThresholdPercent", f.image_gc_low_threshold},
      {"imageMinimumGCAge", seconds(f.minimum_image_ttl_duration)},
      {"imageMaximumGCAge", seconds(f.image_maximum_gc_age)},
      {"nodeStatusMaxImages", f.node_status_max_images},
      {"enforceNodeAllocatable", f.enforce_node_allocatable.empty()
                                     ? nlohmann::json::array()
                                     : nlohmann::json::array({f.enforce_node_allocatable})},
  };
  c.update(authJson(f, authOptions(config)));
  return nlohmann::json{{"kubeletconfig", c}}.dump();
}

std::string machineSpecJson(const DaemonConfig& config) {
  nlohmann::json spec{
      {"num_cores", (config.capacity.cpu_milli + 999) / 1000},
      {"memory_capacity", config.capacity.memory_bytes},
      {"machine_id", firstLine("/etc/machine-id")},
      {"system_uuid", firstLine("/sys/class/dmi/id/product_uuid")},
      {"boot_id", firstLine("/proc/sys/kernel/random/boot_id")},
  };
  return spec.dump();
}

}  // namespace nodeagent::cmd
