// kube-apiserver's NodeRestriction admission plugin (plugin/pkg/admission/noderestriction): what
// a node (user system:node:<name> in system:nodes, node_authorizer.h's nodeIdentity) may write,
// whatever the authorizer allowed. Refusals are kube-apiserver's 403 Forbidden texts,
// `<resource> "<name>" is forbidden: <why>`:
//
//   nodes            create, update, delete of its own Node only; on create no configSource and no
//                    label outside kubelet's set; on update (status too) no new configSource, no
//                    change of taints, no label change outside kubelet's set
//   pods             create of mirror pods only (annotation kubernetes.io/config.mirror), bound to
//                    itself, with one controller owner reference to its own Node (apiVersion v1,
//                    its name and UID, no blockOwnerDeletion), referring to no service account,
//                    secret, config map, cluster trust bundle or persistent volume claim; delete
//                    of pods bound to it; no other write
//   pods/status      update of pods bound to it, without changing their labels or resource claim
//                    statuses
//   pods/eviction    of pods bound to it
//   leases           in kube-node-lease, of its own name
//   serviceaccounts/token  bound to a pod (v1 Pod, name and UID) that is bound to it
//   persistentvolumeclaims  the status subresource only
//
// Kubelet's labels (k8s.io/api's KubeletLabels): kubernetes.io/hostname, kubernetes.io/arch,
// kubernetes.io/os, beta.kubernetes.io/arch, beta.kubernetes.io/os,
// beta.kubernetes.io/instance-type, node.kubernetes.io/instance-type,
// topology.kubernetes.io/region and /zone, failure-domain.beta.kubernetes.io/region and /zone, and
// any under kubelet.kubernetes.io/ or node.kubernetes.io/ (or a subdomain of them). Other labels
// under kubernetes.io/ or k8s.io/ (node-role.kubernetes.io/... included) and any under
// node-restriction.kubernetes.io/ are refused; labels outside those domains are free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "cmd/test-apiserver/admission.h"

namespace nodeagent::testapiserver {

// NodeRestriction's decision on a write by user `user`, node `node` ("" when the user names
// none). `own_node` is the node's Node object as stored (nullptr when there is none), whose UID a
// mirror pod's owner reference must carry. For an eviction `a.old_object` is the pod evicted.
// PermissionDenied with kube-apiserver's message, NotFound when an object it needs is missing.
base::Status admitNodeRestriction(const std::string& user, const std::string& node,
                                  const AdmissionAttributes& a, const nlohmann::json* own_node);

// The same for a TokenRequest (serviceaccounts/<name>/token create) in namespace `ns`;
// `bound_pod` is the pod its spec.boundObjectRef names, as stored (nullptr when missing).
base::Status admitNodeTokenRequest(const std::string& node, const std::string& ns,
                                   const std::string& service_account,
                                   const nlohmann::json& token_request,
                                   const nlohmann::json* bound_pod);

// The label keys of a change from `old_labels` to `labels` (objects or null) that a node may not
// make, sorted.
std::vector<std::string> forbiddenNodeLabels(const nlohmann::json& labels,
                                             const nlohmann::json& old_labels);

}  // namespace nodeagent::testapiserver
