#include "agent/node_labels.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "config/field_validation.h"

namespace nodeagent::agent {
namespace {

// The part of a label key before '/' ("" without one).
std::string_view labelNamespace(std::string_view key) {
  const size_t slash = key.find('/');
  return slash == std::string_view::npos ? std::string_view() : key.substr(0, slash);
}

bool inDomain(std::string_view ns, std::string_view domain) {
  return ns == domain || (ns.size() > domain.size() && ns.ends_with(domain) &&
                          ns[ns.size() - domain.size() - 1] == '.');
}

bool isKubernetesLabel(std::string_view key) {
  const std::string_view ns = labelNamespace(key);
  return inDomain(ns, "kubernetes.io") || inDomain(ns, "k8s.io");
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

}  // namespace

const std::vector<std::string>& kubeletLabels() {
  static const std::vector<std::string> kLabels = {
      "beta.kubernetes.io/arch",
      "beta.kubernetes.io/instance-type",
      "beta.kubernetes.io/os",
      "failure-domain.beta.kubernetes.io/region",
      "failure-domain.beta.kubernetes.io/zone",
      "kubernetes.io/arch",
      "kubernetes.io/hostname",
      "kubernetes.io/os",
      "node.kubernetes.io/instance-type",
      "topology.kubernetes.io/region",
      "topology.kubernetes.io/zone",
  };
  return kLabels;
}

const std::vector<std::string>& kubeletLabelNamespaces() {
  static const std::vector<std::string> kNamespaces = {"kubelet.kubernetes.io",
                                                       "node.kubernetes.io"};
  return kNamespaces;
}

bool isKubeletLabel(const std::string& key) {
  const auto& labels = kubeletLabels();
  if (std::find(labels.begin(), labels.end(), key) != labels.end()) return true;
  const std::string_view ns = labelNamespace(key);
  const auto& namespaces = kubeletLabelNamespaces();
  return std::any_of(namespaces.begin(), namespaces.end(),
                     [&](const std::string& domain) { return inDomain(ns, domain); });
}

base::Status validateNodeLabels(const std::map<std::string, std::string>& labels) {
  std::set<std::string> unknown;
  std::vector<std::string> invalid;
  for (const auto& [key, value] : labels) {
    if (isKubernetesLabel(key) && !isKubeletLabel(key)) unknown.insert(key);
    if (auto errs = config::validation::isQualifiedName(key); !errs.empty()) {
      invalid.push_back("'" + key + "' - " + join(errs, ", "));
    }
    if (auto errs = config::validation::isValidLabelValue(value); !errs.empty()) {
      invalid.push_back("'" + value + "' - " + join(errs, ", "));
    }
  }
  if (!unknown.empty()) {
    return base::invalidArgumentError(
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [" +
        join({unknown.begin(), unknown.end()}, " ") +
        "]\n--node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix (" +
        join(kubeletLabelNamespaces(), ", ") + ") or be in the specifically allowed set (" +
        join(kubeletLabels(), ", ") + ")");
  }
  if (!invalid.empty()) {
    return base::invalidArgumentError("invalid node labels: " + join(invalid, "; "));
  }
  return base::okStatus();
}

base::StatusOr<std::vector<api::Taint>> parseRegisterWithTaints(const std::string& text) {
  std::vector<api::Taint> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string spec = text.substr(start, end - start);
    start = end + 1;
    if (spec.empty()) continue;
    auto bad = [&](const std::string& why) {
      return base::invalidArgumentError("--register-with-taints: invalid taint spec: " + spec +
                                        ", " + why);
    };
    const size_t colon = spec.rfind(':');
    if (colon == std::string::npos) return bad("no effect (key=value:Effect)");
    api::Taint taint;
    taint.effect = spec.substr(colon + 1);
    const std::string key_value = spec.substr(0, colon);
    const size_t eq = key_value.find('=');
    taint.key = key_value.substr(0, eq);
    if (eq != std::string::npos) taint.value = key_value.substr(eq + 1);
    if (taint.effect != "NoSchedule" && taint.effect != "PreferNoSchedule" &&
        taint.effect != "NoExecute") {
      return bad("unsupported effect: \"" + taint.effect + "\"");
    }
    if (auto errs = config::validation::isQualifiedName(taint.key); !errs.empty()) {
      return bad(join(errs, "; "));
    }
    if (auto errs = config::validation::isValidLabelValue(taint.value); !errs.empty()) {
      return bad(join(errs, "; "));
    }
    for (const auto& t : out) {
      if (t.key == taint.key && t.effect == taint.effect) return bad("duplicated taint");
    }
    out.push_back(std::move(taint));
  }
  return out;
}

}  // namespace nodeagent::agent
