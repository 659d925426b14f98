// kubelet's --node-labels rules (cmd/kubelet/app/options ValidateKubeletFlags with
// k8s.io/kubelet's IsKubeletLabel): a node may set labels of the kubernetes.io and k8s.io
// namespaces only from a fixed list or under the kubelet.kubernetes.io and node.kubernetes.io
// (sub)domains, because NodeRestriction admission would refuse the others (node-role.kubernetes.io,
// *.node-restriction.kubernetes.io, ...). And --register-with-taints, the taints the Node is
// created with. Pure functions: any thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "api/objects.h"
#include "base/status.h"

namespace nodeagent::agent {

// kubelet's KubeletLabels(): the kubernetes.io labels a node may set itself, sorted.
const std::vector<std::string>& kubeletLabels();
// kubelet's KubeletLabelNamespaces(): the domains (and their subdomains) a node may label in.
const std::vector<std::string>& kubeletLabelNamespaces();
// Whether a node may set `key` itself (IsKubeletLabel).
bool isKubeletLabel(const std::string& key);

// Checks --node-labels as kubelet does before starting: InvalidArgument worded as kubelet's
// "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [...]" (with the
// allowed prefixes and set) or "invalid node labels: ..." for malformed keys and values.
base::Status validateNodeLabels(const std::map<std::string, std::string>& labels);

// Parses --register-with-taints as kubelet does (taints.ParseTaints): comma-separated
// `key=value:Effect` or `key:Effect`, Effect one of NoSchedule, PreferNoSchedule, NoExecute, the
// key a qualified name and the value a label value; no key and effect twice. InvalidArgument
// naming the bad entry.
base::StatusOr<std::vector<api::Taint>> parseRegisterWithTaints(const std::string& text);

}  // namespace nodeagent::agent
