// kubelet's generatePodSandboxConfig and its helpers: see pod_lifecycle_sandbox.h.
#include "agent/pod_lifecycle_sandbox.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agent/runtime/security_context.h"
#include "agent/runtime/spec_extras.h"

namespace nodeagent::agent {
namespace {

// kubelet's maxResolvConfLength.
constexpr size_t kMaxResolvConfBytes = 10 * 1024 * 1024;
constexpr size_t kMaxHostnameLength = 63;

// The pod's spec as JSON, for the fields the typed pod does not model (null when unreadable).
nlohmann::json rawSpec(const api::Pod& pod) {
  if (!pod.raw || pod.raw->spec().empty()) return nlohmann::json();
  auto spec = nlohmann::json::parse(pod.raw->spec(), nullptr, false);
  return spec.is_object() ? spec : nlohmann::json();
}

std::string stringField(const nlohmann::json& spec, const char* key) {
  if (!spec.is_object()) return "";
  auto it = spec.find(key);
  return it != spec.end() && it->is_string() ? it->get<std::string>() : "";
}

std::vector<std::string> stringList(const nlohmann::json& object, const char* key) {
  std::vector<std::string> out;
  if (!object.is_object()) return out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_array()) return out;
  for (const auto& item : *it) {
    if (item.is_string()) out.push_back(item.get<std::string>());
  }
  return out;
}

// IsDNS1123Label: at most 63 of [a-z0-9-], starting and ending with a letter or digit.
bool isDns1123Label(std::string_view s) {
  if (s.empty() || s.size() > kMaxHostnameLength) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(s.front()) || !alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return alnum(c) || c == '-'; });
}

base::Status checkLabel(const char* what, const std::string& value) {
  if (value.empty() || isDns1123Label(value)) return base::okStatus();
  return base::invalidArgumentError(
      std::string("pod ") + what + " \"" + value +
      "\" is not a valid DNS label: a lowercase RFC 1123 label must consist of at most 63 lower "
      "case alphanumeric characters or '-', and must start and end with an alphanumeric "
      "character");
}

std::vector<std::string> omitDuplicates(const std::vector<std::string>& in) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& s : in) {
    if (seen.insert(s).second) out.push_back(s);
  }
  return out;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// kubelet's mergeDNSOptions: the pod's options replace the node's of the same name (sorted here:
// kubelet's map order is random).
std::vector<std::string> mergeDnsOptions(const std::vector<std::string>& existing,
                                         const nlohmann::json& pod_options) {
  std::map<std::string, std::string> merged;
  for (const auto& op : existing) {
    auto colon = op.find(':');
    merged[op.substr(0, colon)] = colon == std::string::npos ? "" : op.substr(colon + 1);
  }
  if (pod_options.is_array()) {
    for (const auto& op : pod_options) {
      const std::string name = stringField(op, "name");
      if (!name.empty()) merged[name] = stringField(op, "value");
    }
  }
  std::vector<std::string> out;
  for (const auto& [name, value] : merged) out.push_back(value.empty() ? name : name + ":" + value);
  return out;
}

enum class DnsType { kCluster, kHost, kNone };

// kubelet's getPodDNSType; an empty policy is the default, ClusterFirst.
DnsType podDnsType(const api::Pod& pod) {
  const auto& policy = pod.spec->dns_policy;
  if (policy == "None") return DnsType::kNone;
  if (policy == "ClusterFirstWithHostNet") return DnsType::kCluster;
  if (policy == "Default" || pod.spec->host_network) return DnsType::kHost;
  return DnsType::kCluster;  // ClusterFirst, and kubelet's fallback for an invalid policy
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) out += (out.empty() ? "" : " ") + word;
  return out;
}

std::string podDescription(const api::Pod& pod) {
  return pod.metadata.name + "_" + pod.metadata.namespace_ + "(" + pod.metadata.uid + ")";
}

// kubelet's formDNSSearchFitsLimits.
std::vector<std::string> searchFitsLimits(std::vector<std::string> search,
                                          std::vector<SandboxWarning>* warnings) {
  bool exceeded = false;
  if (search.size() > kMaxDnsSearchPaths) {
    search.resize(kMaxDnsSearchPaths);
    exceeded = true;
  }
  while (!search.empty() && join(search).size() > kMaxDnsSearchListChars) {
    search.pop_back();
    exceeded = true;
  }
  if (exceeded && warnings != nullptr) {
    warnings->push_back({"DNSConfigForming",
                         "Search Line limits were exceeded, some search paths have been omitted, "
                         "the applied search line is: " +
                             join(search)});
  }
  return search;
}

std::vector<std::string> nameserversFitLimits(std::vector<std::string> servers,
                                              std::vector<SandboxWarning>* warnings) {
  if (servers.size() <= kMaxDnsNameservers) return servers;
  servers.resize(kMaxDnsNameservers);
  if (warnings != nullptr) {
    warnings->push_back({"DNSConfigForming",
                         "Nameserver limits were exceeded, some nameservers have been omitted, "
                         "the applied nameserver line is: " +
                             join(servers)});
  }
  return servers;
}

}  // namespace

base::StatusOr<DnsConfig> parseResolvConf(std::string_view content) {
  if (content.size() > kMaxResolvConfBytes) content = content.substr(0, kMaxResolvConfBytes);
  DnsConfig out;
  std::istringstream lines{std::string(content)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string word; words >> word;) fields.push_back(word);
    if (fields.empty() || fields[0].starts_with("#")) continue;
    if (fields[0] == "nameserver") {
      if (fields.size() < 2) return base::invalidArgumentError("nameserver list is empty");
      out.servers.push_back(fields[1]);
    } else if (fields[0] == "search") {
      out.searches.assign(fields.begin() + 1, fields.end());
    } else if (fields[0] == "options") {
      out.options.assign(fields.begin() + 1, fields.end());
    }
  }
  return out;
}

namespace {

base::StatusOr<std::string> generatePodHostname(const api::Pod& pod,
                                                const runtime::SpecExtras& extras) {
  RETURN_IF_ERROR(checkLabel("Hostname", extras.hostname));
  RETURN_IF_ERROR(checkLabel("Subdomain", extras.subdomain));
  std::string out = runtime::podHostname(extras, pod.metadata.name);
  if (out.empty()) {
    return base::invalidArgumentError("hostname for pod \"" + pod.metadata.name +
                                      "\" was invalid: \"" + extras.hostname + "\"");
  }
  return out;
}

}  // namespace

base::StatusOr<std::string> generatePodHostname(const api::Pod& pod) {
  return generatePodHostname(pod, runtime::specExtras(pod));
}

DnsConfig podDnsConfig(const api::Pod& pod, const PodDnsOptions& options,
                       const std::optional<DnsConfig>& host, const std::string& node_ip,
                       std::vector<SandboxWarning>* warnings) {
  DnsConfig dns = host.value_or(DnsConfig{});
  const DnsType type = podDnsType(pod);
  if (type == DnsType::kNone) {
    dns = DnsConfig{};
  } else if (type == DnsType::kCluster && !options.cluster_dns.empty()) {
    dns.servers = options.cluster_dns;
    if (!options.cluster_domain.empty()) {
      const auto& domain = options.cluster_domain;
      dns.searches = omitDuplicates(concat(
          {pod.metadata.namespace_ + ".svc." + domain, "svc." + domain, domain}, dns.searches));
    }
    dns.options = {"ndots:5"};
  } else {
    if (type == DnsType::kCluster && warnings != nullptr) {
      warnings->push_back(
          {"MissingClusterDNS", "pod: \"" + podDescription(pod) +
                                    "\". kubelet does not have ClusterDNS IP configured and "
                                    "cannot create Pod using \"ClusterFirst\" policy. Falling "
                                    "back to \"Default\" policy."});
    }
    if (!host) {  // --resolv-conf="": the local resolver
      dns.servers = {node_ip.find(':') != std::string::npos ? "::1" : "127.0.0.1"};
      dns.searches = {"."};
    }
  }
  const auto spec = rawSpec(pod);
  if (spec.is_object() && spec.contains("dnsConfig") && spec["dnsConfig"].is_object()) {
    const auto& pod_dns = spec["dnsConfig"];
    dns.servers = omitDuplicates(concat(dns.servers, stringList(pod_dns, "nameservers")));
    dns.searches = omitDuplicates(concat(dns.searches, stringList(pod_dns, "searches")));
    dns.options = mergeDnsOptions(dns.options, pod_dns.value("options", nlohmann::json()));
  }
  dns.servers = nameserversFitLimits(std::move(dns.servers), warnings);
  dns.searches = searchFitsLimits(std::move(dns.searches), warnings);
  return dns;
}

std::vector<PortMapping> makePortMappings(const api::Pod& pod) {
  std::vector<PortMapping> out;
  for (const auto& c : pod.spec->containers) {
    std::set<std::string> names;
    for (const auto& p : c.ports) {
      const std::string protocol = p.protocol.empty() ? "TCP" : p.protocol;
      const std::string name = p.name.empty() ? c.name + "-" + protocol + "-" + p.host_ip + ":" +
                                                    std::to_string(p.container_port)
                                              : c.name + "-" + p.name;
      if (!names.insert(name).second) continue;  // kubelet: "Port name conflicted"
      out.push_back({protocol, p.container_port, p.host_port, p.host_ip});
    }
  }
  return out;
}

base::StatusOr<GeneratedSandboxConfig> generatePodSandboxConfig(const api::Pod& pod,
                                                                const SandboxInputs& inputs) {
  GeneratedSandboxConfig out;
  auto& config = out.config;
  config.uid = pod.metadata.uid;
  config.name = pod.metadata.name;
  config.namespace_ = pod.metadata.namespace_;
  config.attempt = inputs.attempt;
  config.log_directory = inputs.log_directory;
  config.labels = pod.metadata.labels.toMap();
  config.annotations = pod.metadata.annotations.toMap();
  if (inputs.with_dns) {
    std::optional<DnsConfig> host;
    if (inputs.host_resolv_conf) {
      auto parsed = parseResolvConf(*inputs.host_resolv_conf);
      if (!parsed.ok()) {
        return base::invalidArgumentError(inputs.dns.resolv_conf.string() + ": " +
                                          parsed.status().message());
      }
      host = *std::move(parsed);
    }
    config.dns_config = podDnsConfig(pod, inputs.dns, host, inputs.node_ip, &out.warnings);
  }
  const auto extras = runtime::specExtras(pod);
  if (!pod.spec->host_network) {
    auto hostname = generatePodHostname(pod, extras);
    if (!hostname.ok()) return hostname.status();
    config.hostname = *std::move(hostname);
  }
  config.port_mappings = makePortMappings(pod);
  config.cgroup_parent = inputs.cgroup_parent;
  config.host_network = pod.spec->host_network;
  config.host_pid = pod.spec->host_pid;
  config.host_ipc = pod.spec->host_ipc;
  config.share_process_namespace = extras.share_process_namespace;
  config.privileged = runtime::hasPrivilegedContainer(pod);
  // kubelet's generatePodSandboxLinuxConfig.
  if (const auto& sc = pod.spec->security_context) {
    config.run_as_user = sc->run_as_user;
    config.run_as_group = sc->run_as_group;
    if (sc->fs_group) config.supplemental_groups.push_back(*sc->fs_group);
    config.supplemental_groups.insert(config.supplemental_groups.end(),
                                      sc->supplemental_groups.begin(),
                                      sc->supplemental_groups.end());
  }
  for (const auto& sysctl : extras.sysctls) {
    config.sysctls[runtime::sysctlDotted(sysctl.name)] = sysctl.value;
  }
  auto seccomp =
      runtime::seccompProfileFor(extras, "", inputs.seccomp_default, inputs.seccomp_profile_root);
  if (!seccomp.ok()) return seccomp.status();
  config.seccomp = *std::move(seccomp);
  config.selinux_options = runtime::seLinuxOptionsFor(extras, "");
  return out;
}

base::StatusOr<std::optional<std::string>> readResolvConf(const std::filesystem::path& path) {
  if (path.empty()) return std::optional<std::string>();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    std::string message = "open " + path.string() + ": " + std::strerror(err);
    return err == ENOENT ? base::notFoundError(message) : base::unknownError(message);
  }
  std::ostringstream content;
  content << in.rdbuf();
  return std::optional<std::string>(content.str());
}

}  // namespace nodeagent::agent
