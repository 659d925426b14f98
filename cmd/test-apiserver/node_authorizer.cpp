#include "cmd/test-apiserver/node_authorizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/pod_references.h"
#include "cmd/test-apiserver/selectors.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

constexpr char kNodeLeaseNamespace[] = "kube-node-lease";

// An RBAC PolicyRule of the Node authorizer's static rules (bootstrappolicy.NodeRules).
struct NodeRule {
  const char* group;
  std::vector<std::string> resources;  // "resource" or "resource/subresource"
  std::vector<std::string> verbs;
};

const std::vector<NodeRule>& nodeRules() {
  static const std::vector<NodeRule> rules = {
      {"authentication.k8s.io", {"tokenreviews"}, {"create"}},
      {"authorization.k8s.io", {"subjectaccessreviews", "localsubjectaccessreviews"}, {"create"}},
      {"", {"services"}, {"get", "list", "watch"}},
      {"", {"events"}, {"create", "update", "patch"}},
      {"", {"endpoints"}, {"get"}},
      {"certificates.k8s.io", {"certificatesigningrequests"}, {"create", "get", "list", "watch"}},
      // kubeadm's binding of the selfnodeclient role to system:nodes (see the header).
      {"certificates.k8s.io", {"certificatesigningrequests/selfnodeclient"}, {"create"}},
      {"storage.k8s.io", {"csidrivers"}, {"get", "list", "watch"}},
      {"node.k8s.io", {"runtimeclasses"}, {"get", "list", "watch"}},
  };
  return rules;
}

bool has(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

bool nodeRulesAllow(const AccessRequest& r) {
  if (!r.resource_request) return false;
  const std::string resource =
      r.subresource.empty() ? r.resource : r.resource + "/" + r.subresource;
  return std::any_of(nodeRules().begin(), nodeRules().end(), [&](const NodeRule& rule) {
    return rule.group == r.api_group && has(rule.resources, resource) && has(rule.verbs, r.verb);
  });
}

AccessDecision allow() { return {true, ""}; }
AccessDecision noOpinion(std::string reason = "") { return {false, std::move(reason)}; }

// The kinds of object the graph leads from to a node.
enum class Vertex { kPod, kSecret, kConfigMap, kClaim, kServiceAccount, kOther };

bool refersTo(const json& pod, Vertex type, const std::string& name) {
  if (type == Vertex::kPod) return stringAt(pod["metadata"], "name") == name;
  const PodReferences refs = podReferences(pod);
  switch (type) {
    case Vertex::kSecret:
      return refs.secrets.contains(name);
    case Vertex::kConfigMap:
      return refs.config_maps.contains(name);
    case Vertex::kClaim:
      return refs.claims.contains(name);
    case Vertex::kServiceAccount:
      return refs.service_account == name;
    default:
      return false;
  }
}

// kube-apiserver's authorize(): a path in the graph from the named object to the node.
AccessDecision authorizeRelated(const std::string& node, Vertex type, const AccessRequest& r,
                                const PodsOnNode& pods_on_node) {
  if (r.name.empty()) return noOpinion("No Object name found");
  if (type != Vertex::kOther && pods_on_node) {
    for (const auto& pod : pods_on_node(node, r.ns)) {
      if (pod && refersTo(*pod, type, r.name)) return allow();
    }
  }
  return noOpinion("no relationship found between node '" + node + "' and this object");
}

AccessDecision authorizeGet(const std::string& node, Vertex type, const AccessRequest& r,
                            const PodsOnNode& pods) {
  if (r.verb != "get") return noOpinion("can only get individual resources of this type");
  if (!r.subresource.empty()) return noOpinion("cannot get subresource");
  return authorizeRelated(node, type, r, pods);
}

AccessDecision authorizeReadNamespaced(const std::string& node, Vertex type, const AccessRequest& r,
                                       const PodsOnNode& pods) {
  if (r.verb != "get" && r.verb != "list" && r.verb != "watch") {
    return noOpinion("can only read resources of this type");
  }
  if (!r.subresource.empty()) return noOpinion("cannot read subresource");
  if (r.ns.empty()) return noOpinion("can only read namespaced object of this type");
  return authorizeRelated(node, type, r, pods);
}

AccessDecision authorizeClaim(const std::string& node, const AccessRequest& r,
                              const PodsOnNode& pods) {
  if (r.subresource != "status") return authorizeGet(node, Vertex::kClaim, r, pods);
  if (r.verb != "update" && r.verb != "patch") {
    return noOpinion("can only get/update/patch this type");
  }
  return authorizeRelated(node, Vertex::kClaim, r, pods);
}

AccessDecision authorizeServiceAccount(const std::string& node, const AccessRequest& r,
                                       const PodsOnNode& pods) {
  // A kubelet reads its pods' service accounts for image credential providers (kube-apiserver
  // v1.34's KubeletServiceAccountTokenForCredentialProviders).
  if (r.verb == "get" && r.subresource.empty()) {
    return authorizeRelated(node, Vertex::kServiceAccount, r, pods);
  }
  if (r.verb != "create" || r.name.empty()) {
    return noOpinion("can only create tokens for individual service accounts");
  }
  if (r.subresource != "token") {
    return noOpinion("can only create token subresource of serviceaccount");
  }
  return authorizeRelated(node, Vertex::kServiceAccount, r, pods);
}

AccessDecision authorizeLease(const std::string& node, const AccessRequest& r) {
  if (!has({"get", "create", "update", "patch", "delete"}, r.verb)) {
    return noOpinion("can only get, create, update, patch, or delete a node lease");
  }
  if (r.ns != kNodeLeaseNamespace) {
    return noOpinion(std::string("can only access leases in the \"") + kNodeLeaseNamespace +
                     "\" system namespace");
  }
  // The name of a lease being created is in its body: NodeRestriction checks it.
  if (r.verb != "create" && r.name != node) {
    return noOpinion("can only access node lease with the same name as the requesting node");
  }
  return allow();
}

AccessDecision authorizeNodeObject(const std::string& node, const AccessRequest& r) {
  if (r.subresource.empty()) {
    if (has({"create", "update", "patch"}, r.verb)) return allow();
    if (has({"get", "list", "watch"}, r.verb)) {
      if (r.name == node) return allow();
      if (r.name.empty()) {
        return noOpinion("node '" + node + "' cannot read all nodes, only its own Node object");
      }
      return noOpinion("node '" + node + "' cannot read '" + r.name +
                       "', only its own Node object");
    }
  } else if (r.subresource == "status" && (r.verb == "update" || r.verb == "patch")) {
    return allow();
  }
  return noOpinion();
}

// Whether the request's field selector requires spec.nodeName=<node>.
bool selectsNode(const AccessRequest& r, const std::string& node) {
  auto selector = FieldSelector::parse(r.field_selector);
  if (!selector.ok()) return false;
  const auto& terms = selector->terms();
  return std::any_of(terms.begin(), terms.end(), [&](const FieldSelector::Term& t) {
    return t.field == "spec.nodeName" && !t.negated && t.value == node;
  });
}

AccessDecision authorizePod(const std::string& node, const AccessRequest& r,
                            const PodsOnNode& pods) {
  const std::string& verb = r.verb;
  if (r.subresource.empty()) {
    if (verb == "get") return authorizeGet(node, Vertex::kPod, r, pods);
    if (verb == "list" || verb == "watch") {
      if (selectsNode(r, node)) return allow();
      if (!r.name.empty()) return authorizeRelated(node, Vertex::kPod, r, pods);
      return noOpinion("can only list/watch pods with spec.nodeName field selector");
    }
    if (verb == "create" || verb == "delete") return allow();
  } else if (r.subresource == "status") {
    if (verb == "update" || verb == "patch") return allow();
  } else if (r.subresource == "eviction" && verb == "create") {
    return allow();
  }
  return noOpinion();
}

// The resources the Node authorizer decides itself rather than by its static rules; nullopt for
// the others.
std::optional<AccessDecision> authorizeSubdivided(const std::string& node, const AccessRequest& r,
                                                  const PodsOnNode& pods) {
  const std::string& g = r.api_group;
  const std::string& res = r.resource;
  if (g.empty()) {
    if (res == "secrets") return authorizeReadNamespaced(node, Vertex::kSecret, r, pods);
    if (res == "configmaps") return authorizeReadNamespaced(node, Vertex::kConfigMap, r, pods);
    if (res == "persistentvolumeclaims") return authorizeClaim(node, r, pods);
    if (res == "persistentvolumes") return authorizeGet(node, Vertex::kOther, r, pods);
    if (res == "serviceaccounts") return authorizeServiceAccount(node, r, pods);
    if (res == "nodes") return authorizeNodeObject(node, r);
    if (res == "pods") return authorizePod(node, r, pods);
  }
  if (g == "coordination.k8s.io" && res == "leases") return authorizeLease(node, r);
  if (g == "storage.k8s.io" && res == "volumeattachments") {
    return authorizeGet(node, Vertex::kOther, r, pods);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> nodeIdentity(const std::string& user,
                                        const std::vector<std::string>& groups) {
  if (!user.starts_with(kNodeUserPrefix) || !has(groups, std::string(kNodesGroup))) {
    return std::nullopt;
  }
  return user.substr(kNodeUserPrefix.size());
}

AccessDecision authorizeNode(const AccessRequest& request, const PodsOnNode& pods_on_node) {
  const std::optional<std::string> node = nodeIdentity(request.user, request.groups);
  if (!node) return noOpinion();
  if (node->empty()) return noOpinion("unknown node for user \"" + request.user + "\"");
  if (request.resource_request) {
    if (auto decision = authorizeSubdivided(*node, request, pods_on_node)) return *decision;
  }
  return nodeRulesAllow(request) ? allow() : noOpinion();
}

}  // namespace nodeagent::testapiserver
