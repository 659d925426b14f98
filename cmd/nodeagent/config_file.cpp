#include "cmd/nodeagent/config_file.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "api/yaml.h"
#include "config/static_pod.h"

namespace nodeagent::cmd {
namespace {

enum class Kind { kString, kInt, kNumber, kBool, kDuration, kQuantity };

struct Key {
  const char* flag;
  Kind kind;
};

// The KubeletConfiguration keys nodeagent implements, and the flag each one sets.
const std::map<std::string, Key, std::less<>>& supportedKeys() {
  static const std::map<std::string, Key, std::less<>> keys = {
      {"staticPodPath", {"pod-manifest-path", Kind::kString}},
      {"staticPodURL", {"manifest-url", Kind::kString}},
      {"syncFrequency", {"sync-frequency", Kind::kDuration}},
      {"fileCheckFrequency", {"file-check-frequency", Kind::kDuration}},
      {"httpCheckFrequency", {"http-check-frequency", Kind::kDuration}},
      {"nodeStatusUpdateFrequency", {"node-status-update-frequency", Kind::kDuration}},
      {"maxPods", {"max-pods", Kind::kInt}},
      {"readOnlyPort", {"read-only-port", Kind::kInt}},
      {"healthzPort", {"healthz-port", Kind::kInt}},
      {"address", {"address", Kind::kString}},
      {"port", {"port", Kind::kInt}},
      {"tlsCertFile", {"tls-cert-file", Kind::kString}},
      {"tlsPrivateKeyFile", {"tls-private-key-file", Kind::kString}},
      {"podLogsDir", {"pod-log-dir", Kind::kString}},
      {"containerLogMaxSize", {"container-log-max-size", Kind::kQuantity}},
      {"containerLogMaxFiles", {"container-log-max-files", Kind::kInt}},
      {"kubeAPIQPS", {"kube-api-qps", Kind::kNumber}},
      {"containerRuntimeEndpoint", {"container-runtime-endpoint", Kind::kString}},
      {"resolvConf", {"resolv-conf", Kind::kString}},
      {"clusterDomain", {"cluster-domain", Kind::kString}},
      {"podCIDR", {"pod-cidr", Kind::kString}},
      {"runtimeRequestTimeout", {"runtime-request-timeout", Kind::kDuration}},
      {"kubeAPIBurst", {"kube-api-burst", Kind::kInt}},
      // nodeagent's own (not a kubelet field): see README, "Pod security context".
      {"allowRootAPIPods", {"allow-root-api-pods", Kind::kBool}},
      {"seccompDefault", {"seccomp-default", Kind::kBool}},
      {"cgroupRoot", {"cgroup-root", Kind::kString}},
      {"cgroupsPerQOS", {"cgroups-per-qos", Kind::kBool}},
      {"cgroupDriver", {"cgroup-driver", Kind::kString}},
      {"configMapAndSecretChangeDetectionStrategy",
       {"config-map-and-secret-change-detection-strategy", Kind::kString}},
      {"podPidsLimit", {"pod-max-pids", Kind::kInt}},
      {"evictionPressureTransitionPeriod",
       {"eviction-pressure-transition-period", Kind::kDuration}},
      {"evictionMaxPodGracePeriod", {"eviction-max-pod-grace-period", Kind::kInt}},
      {"imageGCHighThresholdPercent", {"image-gc-high-threshold", Kind::kInt}},
      {"imageGCLowThresholdPercent", {"image-gc-low-threshold", Kind::kInt}},
      {"imageMinimumGCAge", {"minimum-image-ttl-duration", Kind::kDuration}},
      // kubelet has the field only; nodeagent's flag for it is its own.
      {"imageMaximumGCAge", {"image-maximum-gc-age", Kind::kDuration}},
      {"nodeStatusMaxImages", {"node-status-max-images", Kind::kInt}},
  };
  return keys;
}

// KubeletConfiguration (v1beta1) fields nodeagent does not implement: accepted with a warning, so
// a kubelet's configuration file can be reused, unlike a key no kubelet knows.
const std::set<std::string, std::less<>>& kubeletOnlyKeys() {
  static const std::set<std::string, std::less<>> keys = {
      "containerLogMaxWorkers",
      "containerLogMonitorInterval",
      "contentType",
      "cpuCFSQuota",
      "cpuCFSQuotaPeriod",
      "cpuManagerPolicy",
      "cpuManagerPolicyOptions",
      "cpuManagerReconcilePeriod",
      "crashLoopBackOff",
      "enableContentionProfiling",
      "enableControllerAttachDetach",
      "enableDebugFlagsHandler",
      "enableDebuggingHandlers",
      "enableProfilingHandler",
      "enableServer",
      "enableSystemLogHandler",
      "enableSystemLogQuery",
      "eventBurst",
      "eventRecordQPS",
      "failCgroupV1",
      "failSwapOn",
      "featureGates",
      "hairpinMode",
      "healthzBindAddress",
      "imageServiceEndpoint",
      "iptablesDropBit",
      "iptablesMasqueradeBit",
      "kernelMemcgNotification",
      "kubeReservedCgroup",
      "kubeletCgroups",
      "localStorageCapacityIsolation",
      "logging",
      "makeIPTablesUtilChains",
      "maxOpenFiles",
      "maxParallelImagePulls",
      "memoryManagerPolicy",
      "memorySwap",
      "memoryThrottlingFactor",
      "mergeDefaultEvictionSettings",
      "nodeLeaseDurationSeconds",
      "nodeStatusReportFrequency",
      "oomScoreAdj",
      "podsPerCore",
      "protectKernelDefaults",
      "providerID",
      "qosReserved",
      "registerNode",
      "registerWithTaints",
      "registryBurst",
      "registryPullQPS",
      "reservedMemory",
      "reservedSystemCPUs",
      "rotateCertificates",
      "serializeImagePulls",
      "serverTLSBootstrap",
      "showHiddenMetricsForVersion",
      "shutdownGracePeriod",
      "shutdownGracePeriodByPodPriority",
      "shutdownGracePeriodCriticalPods",
      "singleProcessOOMKill",
      "streamingConnectionIdleTimeout",
      "systemCgroups",
      "systemReservedCgroup",
      "tlsCipherSuites",
      "tlsMinVersion",
      "topologyManagerPolicy",
      "topologyManagerPolicyOptions",
      "topologyManagerScope",
      "tracing",
      "userNamespaces",
      "volumePluginDir",
      "volumeStatsAggPeriod",
  };
  return keys;
}

constexpr std::string_view kApiVersion = "kubelet.config.k8s.io/v1beta1";

std::string typeName(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_object()) return "a mapping";
  if (v.is_array()) return "a list";
  return "null";
}

}  // namespace

int configKeyLine(std::string_view text, std::string_view key) {
  int best_line = 0;
  size_t best_indent = std::string_view::npos;
  int line_no = 0;
  int fallback = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    ++line_no;
    size_t indent = line.find_first_not_of(" \t");
    if (indent != std::string_view::npos) {
      std::string_view rest = line.substr(indent);
      for (std::string_view quote : {"", "\"", "'"}) {
        const std::string spelled = std::string(quote) + std::string(key) + std::string(quote);
        if (!rest.starts_with(spelled)) continue;
        std::string_view after = rest.substr(spelled.size());
        size_t colon = after.find_first_not_of(" \t");
        if (colon != std::string_view::npos && after[colon] == ':' && indent < best_indent) {
          best_indent = indent;
          best_line = line_no;
        }
      }
      if (fallback == 0 && line.find("\"" + std::string(key) + "\"") != std::string_view::npos) {
        fallback = line_no;
      }
    }
    pos = end + 1;
  }
  return best_line != 0 ? best_line : fallback;
}

namespace {

// The configuration file's text, for errors that point at a key's line.
struct ConfigText {
  const std::string& path;
  const std::string& bytes;

  // "<path>:<line>: " for the line that sets `key` ("<path>: " when not found).
  std::string at(std::string_view key) const {
    const int line = configKeyLine(bytes, key);
    return path + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": ";
  }
  base::Status fail(std::string_view key, const std::string& message) const {
    return base::invalidArgumentError(at(key) + std::string(key) + ": " + message);
  }
};

// kind and apiVersion, when given, name a v1beta1 KubeletConfiguration.
base::Status checkKindAndVersion(const ConfigText& text, const nlohmann::json& doc) {
  if (auto it = doc.find("kind"); it != doc.end() && *it != "KubeletConfiguration") {
    return text.fail("kind", "expected KubeletConfiguration, got " + it->dump());
  }
  if (auto it = doc.find("apiVersion"); it != doc.end() && *it != kApiVersion) {
    return text.fail("apiVersion", "expected " + std::string(kApiVersion) + ", got " + it->dump());
  }
  return base::okStatus();
}

// staticPodURLHeader: map[string][]string, as kubelet's; each value one --manifest-url-header.
base::Status applyUrlHeaders(FlagSet& fs, const ConfigText& text, const std::string& key,
                             const nlohmann::json& value) {
  if (!value.is_object())
    return text.fail(key, "expected a mapping of header names to lists, got " + typeName(value));
  if (fs.isSet("manifest-url-header")) return base::okStatus();
  for (const auto& [header, values] : value.items()) {
    if (!values.is_array()) {
      return text.fail(key, header + ": expected a list of strings, got " + typeName(values));
    }
    for (const auto& v : values) {
      if (!v.is_string())
        return text.fail(key,
                         header + ": expected a list of strings, got " + typeName(v) + " in it");
      RETURN_IF_ERROR(fs.setValue("manifest-url-header", header + ":" + v.get<std::string>())
                          .withContext(text.at(key) + key));
    }
  }
  return base::okStatus();
}

// The map[string]string keys, each as one list flag: `name<sep>value,...`.
struct MapKey {
  const char* flag;
  const char* separator;
};
const std::map<std::string, MapKey, std::less<>>& mapKeys() {
  static const std::map<std::string, MapKey, std::less<>> keys = {
      {"systemReserved", {"system-reserved", "="}},
      {"kubeReserved", {"kube-reserved", "="}},
      {"evictionHard", {"eviction-hard", "<"}},
      {"evictionSoft", {"eviction-soft", "<"}},
      {"evictionSoftGracePeriod", {"eviction-soft-grace-period", "="}},
      {"evictionMinimumReclaim", {"eviction-minimum-reclaim", "="}},
  };
  return keys;
}

base::Status applyMapKey(FlagSet& fs, const ConfigText& text, const std::string& key,
                         const nlohmann::json& value, const MapKey& spec) {
  if (!value.is_object())
    return text.fail(key, "expected a mapping of names to strings, got " + typeName(value));
  if (fs.isSet(spec.flag)) return base::okStatus();
  std::string joined;
  for (const auto& [name, v] : value.items()) {
    if (!v.is_string()) return text.fail(key, name + ": expected a string, got " + typeName(v));
    joined += (joined.empty() ? "" : ",") + name + spec.separator + v.get<std::string>();
  }
  return fs.setValue(spec.flag, joined).withContext(text.at(key) + key);
}

// enforceNodeAllocatable: a list of strings, as one --enforce-node-allocatable.
base::Status applyEnforceNodeAllocatable(FlagSet& fs, const ConfigText& text,
                                         const std::string& key, const nlohmann::json& value) {
  if (!value.is_array())
    return text.fail(key, "expected a list of strings, got " + typeName(value));
  if (fs.isSet("enforce-node-allocatable")) return base::okStatus();
  std::string joined;
  for (const auto& v : value) {
    if (!v.is_string()) return text.fail(key, "expected a list of strings, got " + typeName(v));
    const auto entry = v.get<std::string>();
    if (entry != "pods" && entry != "none") {
      return text.fail(key, "\"" + entry +
                                "\" is not supported: nodeagent enforces pods only "
                                "(system-reserved and kube-reserved need cgroups of their own)");
    }
    joined += (joined.empty() ? "" : ",") + entry;
  }
  return fs.setValue("enforce-node-allocatable", joined).withContext(text.at(key) + key);
}

// The list-of-strings keys, each as one comma-separated flag.
const std::map<std::string, const char*, std::less<>>& listKeys() {
  static const std::map<std::string, const char*, std::less<>> keys = {
      {"clusterDNS", "cluster-dns"},
      {"allowedUnsafeSysctls", "allowed-unsafe-sysctls"},
  };
  return keys;
}

base::Status applyListKey(FlagSet& fs, const ConfigText& text, const std::string& key,
                          const nlohmann::json& value, const char* flag) {
  if (!value.is_array())
    return text.fail(key, "expected a list of strings, got " + typeName(value));
  if (fs.isSet(flag)) return base::okStatus();
  std::string joined;
  for (const auto& v : value) {
    if (!v.is_string()) return text.fail(key, "expected a list of strings, got " + typeName(v));
    joined += (joined.empty() ? "" : ",") + v.get<std::string>();
  }
  return fs.setValue(flag, joined).withContext(text.at(key) + key);
}

// authentication and authorization: mappings whose leaves (dotted paths below the key) are
// flags.
const std::map<std::string, std::map<std::string, Key, std::less<>>, std::less<>>& nestedKeys() {
  static const std::map<std::string, std::map<std::string, Key, std::less<>>, std::less<>> keys = {
      {"authentication",
       {{"anonymous.enabled", {"anonymous-auth", Kind::kBool}},
        {"webhook.enabled", {"authentication-token-webhook", Kind::kBool}},
        {"webhook.cacheTTL", {"authentication-token-webhook-cache-ttl", Kind::kDuration}},
        {"x509.clientCAFile", {"client-ca-file", Kind::kString}}}},
      {"authorization",
       {{"mode", {"authorization-mode", Kind::kString}},
        {"webhook.cacheAuthorizedTTL",
         {"authorization-webhook-cache-authorized-ttl", Kind::kDuration}},
        {"webhook.cacheUnauthorizedTTL",
         {"authorization-webhook-cache-unauthorized-ttl", Kind::kDuration}}}},
  };
  return keys;
}

base::StatusOr<std::string> flagValueText(const ConfigText& text, const std::string& key,
                                          const nlohmann::json& value, Kind kind);

// The leaves of a nested key, each applied as its flag unless the flag was given.
base::Status applyNested(FlagSet& fs, const ConfigText& text, const std::string& path,
                         const nlohmann::json& value,
                         const std::map<std::string, Key, std::less<>>& leaves,
                         const std::string& prefix = "") {
  if (!value.is_object()) return text.fail(path, "expected a mapping, got " + typeName(value));
  for (const auto& [name, v] : value.items()) {
    const std::string leaf = prefix.empty() ? name : prefix + "." + name;
    const std::string where = path + "." + name;
    if (auto it = leaves.find(leaf); it != leaves.end()) {
      ASSIGN_OR_RETURN(std::string flag_text, flagValueText(text, name, v, it->second.kind));
      if (fs.isSet(it->second.flag)) continue;
      RETURN_IF_ERROR(fs.setValue(it->second.flag, flag_text).withContext(text.at(name) + where));
      continue;
    }
    const bool inner = std::any_of(leaves.begin(), leaves.end(), [&](const auto& entry) {
      return entry.first.rfind(leaf + ".", 0) == 0;
    });
    if (!inner) return text.fail(name, "unknown field " + where + " (is it misspelled?)");
    RETURN_IF_ERROR(applyNested(fs, text, where, v, leaves, leaf));
  }
  return base::okStatus();
}

// A scalar key's value as the text of its flag, checked against the key's kind.
base::StatusOr<std::string> flagValueText(const ConfigText& text, const std::string& key,
                                          const nlohmann::json& value, Kind kind) {
  switch (kind) {
    case Kind::kString:
    case Kind::kDuration:
    case Kind::kQuantity:
      if (!value.is_string()) return text.fail(key, "expected a string, got " + typeName(value));
      return value.get<std::string>();
    case Kind::kInt:
      if (!value.is_number_integer())
        return text.fail(key, "expected an integer, got " + typeName(value));
      return std::to_string(value.get<int64_t>());
    case Kind::kNumber:
      if (!value.is_number()) return text.fail(key, "expected a number, got " + typeName(value));
      return value.is_number_integer() ? std::to_string(value.get<int64_t>())
                                       : std::to_string(value.get<double>());
    case Kind::kBool:
      if (!value.is_boolean())
        return text.fail(key, "expected true or false, got " + typeName(value));
      return std::string(value.get<bool>() ? "true" : "false");
  }
  return std::string();
}

}  // namespace

base::StatusOr<ConfigFileResult> applyConfigFile(FlagSet& fs, const std::string& path) {
  auto bytes = config::readManifestFile(path, api::kMaxConfigLength);
  if (!bytes.ok()) return base::notFoundError("--config: " + bytes.status().message());
  const ConfigText text{path, *bytes};
  auto json = api::yamlToJson(*bytes);
  if (!json.ok()) return json.status().withContext(path);
  if (!json->is_object()) {
    return base::invalidArgumentError(path + ": expected a KubeletConfiguration mapping, got " +
                                      typeName(*json));
  }
  RETURN_IF_ERROR(checkKindAndVersion(text, *json));

  ConfigFileResult result;
  for (const auto& [key, value] : json->items()) {
    if (key == "kind" || key == "apiVersion") continue;
    if (key == "staticPodURLHeader") {
      RETURN_IF_ERROR(applyUrlHeaders(fs, text, key, value));
      continue;
    }
    if (auto map_key = mapKeys().find(key); map_key != mapKeys().end()) {
      RETURN_IF_ERROR(applyMapKey(fs, text, key, value, map_key->second));
      continue;
    }
    if (auto nested = nestedKeys().find(key); nested != nestedKeys().end()) {
      RETURN_IF_ERROR(applyNested(fs, text, key, value, nested->second));
      continue;
    }
    if (key == "enforceNodeAllocatable") {
      RETURN_IF_ERROR(applyEnforceNodeAllocatable(fs, text, key, value));
      continue;
    }
    if (auto list_key = listKeys().find(key); list_key != listKeys().end()) {
      RETURN_IF_ERROR(applyListKey(fs, text, key, value, list_key->second));
      continue;
    }
    // kubeadm writes cgroupDriver: systemd; nodeagent has the cgroupfs driver only, so a kubelet's
    // file still works (with a warning) instead of stopping the agent.
    if (key == "cgroupDriver" && value.is_string() && value.get<std::string>() != "cgroupfs") {
      result.ignored_keys.push_back(key + ": " + value.get<std::string>() +
                                    " (nodeagent uses the cgroupfs driver)");
      continue;
    }
    auto it = supportedKeys().find(key);
    if (it == supportedKeys().end()) {
      if (kubeletOnlyKeys().count(key) > 0) {
        result.ignored_keys.push_back(key);
        continue;
      }
      return text.fail(key, "unknown field (not a KubeletConfiguration field; is it misspelled?)");
    }
    const Key& spec = it->second;
    ASSIGN_OR_RETURN(std::string flag_text, flagValueText(text, key, value, spec.kind));
    if (fs.isSet(spec.flag)) continue;
    RETURN_IF_ERROR(fs.setValue(spec.flag, flag_text).withContext(text.at(key) + key));
  }
  return result;
}

}  // namespace nodeagent::cmd
