// kube-apiserver's Node authorizer (plugin/pkg/auth/authorizer/node, with
// AuthorizeNodeWithSelectors on, as from v1.32): what a kubelet, user system:node:<name> in group
// system:nodes, may do. It allows or has no opinion (with kube-apiserver's reason), never denies:
//
//   nodes                 create, update, patch (NodeRestriction admission keeps a node to its
//   own);
//                         get, list, watch of its own only (a list or watch names it with the
//                         field selector metadata.name=<node>)
//   nodes/status          update, patch (NodeRestriction: its own)
//   pods                  get of a pod bound to it; list and watch with the field selector
//                         spec.nodeName=<node> (or of one pod bound to it); create and delete
//                         (NodeRestriction: mirror pods bound to it)
//   pods/status           update, patch (NodeRestriction: pods bound to it)
//   pods/eviction         create (NodeRestriction: pods bound to it)
//   secrets, configmaps   get, list, watch of one object (by name, or metadata.name=) that a pod
//                         bound to it refers to
//   persistentvolumeclaims  get of one a pod bound to it uses; /status update and patch
//   serviceaccounts       create of the token subresource (and get) of its pods' service account
//   leases                get, create, update, patch, delete in kube-node-lease, of its own name
//                         (create: NodeRestriction checks the name)
//   static rules          create tokenreviews, subjectaccessreviews, localsubjectaccessreviews;
//                         get/list/watch services; create/update/patch events in any namespace;
//                         get endpoints and persistentvolumes; create/get/list/watch
//                         certificatesigningrequests; get/list/watch csidrivers and
//                         runtimeclasses; get volumeattachments
//
// Besides, create of certificatesigningrequests/selfnodeclient, which kubeadm grants the
// system:nodes group (its ClusterRoleBinding of the
// system:certificates.k8s.io:certificatesigningrequests:selfnodeclient role): without RBAC here,
// the Node authorizer stands for it, so a node's renewal is auto-approved (csr.h).
//
// "Bound to it" is kube-apiserver's graph, computed from the pods in the store at each request: a
// pod with spec.nodeName=<node>, and the secrets, config maps, claims and service account it
// refers to (pod_references.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cmd/test-apiserver/authz.h"

namespace nodeagent::testapiserver {

// A node's user name is kNodeUserPrefix + its name, in the group kNodesGroup.
inline constexpr std::string_view kNodeUserPrefix = "system:node:";
inline constexpr std::string_view kNodesGroup = "system:nodes";

// kube-apiserver's NodeIdentifier: the node name of a user system:node:<name> in the group
// system:nodes ("" for system:node: itself), nullopt for anyone else.
std::optional<std::string> nodeIdentity(const std::string& user,
                                        const std::vector<std::string>& groups);

// The pods bound to node `node` in namespace `ns` (every namespace when ""): the node graph's
// edges. Called on the request's thread; must not hold a lock the caller holds.
using PodsOnNode = std::function<std::vector<std::shared_ptr<const nlohmann::json>>(
    const std::string& node, const std::string& ns)>;

// The Node authorizer's decision: allowed, or no opinion with kube-apiserver's reason (empty for
// a request from another user or one its rules do not cover).
AccessDecision authorizeNode(const AccessRequest& request, const PodsOnNode& pods_on_node);

}  // namespace nodeagent::testapiserver
