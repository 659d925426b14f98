#include "cmd/test-apiserver/node_restriction.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/pod_references.h"
#include "cmd/test-apiserver/util.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

constexpr char kMirrorAnnotation[] = "kubernetes.io/config.mirror";
constexpr char kNodeLeaseNamespace[] = "kube-node-lease";

const json& member(const json* obj, const char* key) {
  static const json kNull;
  if (obj == nullptr || !obj->is_object()) return kNull;
  auto it = obj->find(key);
  return it == obj->end() ? kNull : *it;
}

std::string q(const std::string& s) { return "\"" + s + "\""; }

// admission.NewForbidden: `<resource>[.<group>] "<name>" is forbidden: <why>`, the name being the
// request's, else the object's name or generateName, else "Unknown".
base::Status forbidden(const AdmissionAttributes& a, const std::string& why) {
  std::string name = a.name;
  if (name.empty()) {
    const json& meta = member(a.object, "metadata");
    name = stringAt(meta, "name");
    if (name.empty()) name = stringAt(meta, "generateName");
    if (name.empty()) name = "Unknown";
  }
  const std::string resource = a.group.empty() ? a.resource : a.resource + "." + a.group;
  return base::permissionDeniedError(resource + " " + q(name) + " is forbidden: " + why);
}

std::string labelNamespace(const std::string& key) {
  const auto slash = key.find('/');
  return slash == std::string::npos ? "" : key.substr(0, slash);
}

bool inDomain(const std::string& ns, const std::string& domain) {
  return ns == domain || ns.ends_with("." + domain);
}

bool isKubeletLabel(const std::string& key) {
  static const std::set<std::string> kKubeletLabels = {
      "kubernetes.io/hostname",
      "topology.kubernetes.io/zone",
      "topology.kubernetes.io/region",
      "failure-domain.beta.kubernetes.io/zone",
      "failure-domain.beta.kubernetes.io/region",
      "beta.kubernetes.io/instance-type",
      "node.kubernetes.io/instance-type",
      "kubernetes.io/os",
      "kubernetes.io/arch",
      "beta.kubernetes.io/os",
      "beta.kubernetes.io/arch",
  };
  const std::string ns = labelNamespace(key);
  return kKubeletLabels.contains(key) || inDomain(ns, "kubelet.kubernetes.io") ||
         inDomain(ns, "node.kubernetes.io");
}

bool forbiddenLabel(const std::string& key) {
  const std::string ns = labelNamespace(key);
  if (inDomain(ns, "node-restriction.kubernetes.io")) return true;
  const bool kubernetes = inDomain(ns, "kubernetes.io") || inDomain(ns, "k8s.io");
  return kubernetes && !isKubeletLabel(key);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Semantic equality as kube-apiserver's apiequality: a missing, null or empty list is one value.
bool sameList(const json& a, const json& b) {
  const bool a_empty = a.is_null() || (a.is_array() && a.empty());
  const bool b_empty = b.is_null() || (b.is_array() && b.empty());
  return (a_empty && b_empty) || a == b;
}

base::Status admitMirrorPodOwner(const std::string& node, const AdmissionAttributes& a,
                                 const json& owners, const json* own_node) {
  if (owners.is_array() && owners.size() > 1) {
    return forbidden(
        a, "node " + q(node) + " can only create pods with a single owner reference set to itself");
  }
  if (!owners.is_array() || owners.empty()) {
    return forbidden(
        a, "node " + q(node) + " can only create pods with an owner reference set to itself");
  }
  const json& owner = owners[0];
  if (stringAt(owner, "apiVersion") != "v1" || stringAt(owner, "kind") != "Node" ||
      stringAt(owner, "name") != node) {
    return forbidden(
        a, "node " + q(node) + " can only create pods with an owner reference set to itself");
  }
  if (!member(&owner, "controller").is_boolean() || !owner["controller"].get<bool>()) {
    return forbidden(a,
                     "node " + q(node) +
                         " can only create pods with a controller owner reference set to itself");
  }
  const json& block = member(&owner, "blockOwnerDeletion");
  if (block.is_boolean() && block.get<bool>()) {
    return forbidden(a,
                     "node " + q(node) + " must not set blockOwnerDeletion on an owner reference");
  }
  // kube-apiserver's node lister's NotFound (the singular resource).
  if (own_node == nullptr) return base::notFoundError("node " + q(node) + " not found");
  const std::string node_uid = stringAt(member(own_node, "metadata"), "uid");
  if (stringAt(owner, "uid") != node_uid) {
    return forbidden(a, "node " + node + " UID mismatch: expected " + stringAt(owner, "uid") +
                            " got " + node_uid);
  }
  return base::okStatus();
}

// What a mirror pod may not refer to: service accounts, secrets, config maps, cluster trust
// bundles, persistent volume claims (ephemeral volumes are no claims here).
base::Status admitMirrorPodReferences(const std::string& node, const AdmissionAttributes& a) {
  const PodReferences refs = podReferences(*a.object);
  const std::string prefix = "node " + q(node) + " can not create pods that reference ";
  if (!refs.service_account.empty()) return forbidden(a, prefix + "a service account");
  if (!refs.secrets.empty()) return forbidden(a, prefix + "secrets");
  if (!refs.config_maps.empty()) return forbidden(a, prefix + "configmaps");
  if (refs.cluster_trust_bundles) return forbidden(a, prefix + "clustertrustbundles");
  const json& volumes = member(&member(a.object, "spec"), "volumes");
  if (volumes.is_array()) {
    for (const json& v : volumes) {
      if (member(&v, "persistentVolumeClaim").is_object()) {
        return forbidden(a, prefix + "persistentvolumeclaims");
      }
    }
  }
  return base::okStatus();
}

base::Status admitPodCreate(const std::string& node, const AdmissionAttributes& a,
                            const json* own_node) {
  const json& meta = member(a.object, "metadata");
  if (!member(&member(&meta, "annotations"), kMirrorAnnotation).is_string()) {
    return forbidden(a, std::string("pod does not have ") + q(kMirrorAnnotation) +
                            " annotation, node " + q(node) + " can only create mirror pods");
  }
  if (stringAt(member(a.object, "spec"), "nodeName") != node) {
    return forbidden(a,
                     "node " + q(node) + " can only create pods with spec.nodeName set to itself");
  }
  RETURN_IF_ERROR(admitMirrorPodOwner(node, a, member(&meta, "ownerReferences"), own_node));
  return admitMirrorPodReferences(node, a);
}

// metadata.labels, {} when missing (labels.Equals: nil and empty are equal).
json labelsOf(const json* obj) {
  const json& labels = member(&member(obj, "metadata"), "labels");
  return labels.is_null() ? json::object() : labels;
}

std::string boundNode(const json* pod) { return stringAt(member(pod, "spec"), "nodeName"); }

base::Status admitPod(const std::string& node, const AdmissionAttributes& a, const json* own_node) {
  const std::string op = admissionOperationName(a.operation);
  if (a.subresource.empty()) {
    if (a.operation == AdmissionOperation::kCreate) return admitPodCreate(node, a, own_node);
    if (a.operation == AdmissionOperation::kDelete) {
      if (boundNode(a.old_object) == node) return base::okStatus();
      return forbidden(
          a, "node " + q(node) + " can only delete pods with spec.nodeName set to itself");
    }
    return forbidden(a, "unexpected operation " + q(op) + ", node " + q(node) +
                            " can only create and delete mirror pods");
  }
  if (a.subresource == "status") {
    if (a.operation != AdmissionOperation::kUpdate) {
      return forbidden(a, "unexpected operation " + q(op));
    }
    if (boundNode(a.old_object) != node) {
      return forbidden(a,
                       "node " + q(node) +
                           " can only update pod status for pods with spec.nodeName set to itself");
    }
    if (labelsOf(a.object) != labelsOf(a.old_object)) {
      return forbidden(a, "node " + q(node) + " cannot update labels through pod status");
    }
    if (!sameList(member(&member(a.object, "status"), "resourceClaimStatuses"),
                  member(&member(a.old_object, "status"), "resourceClaimStatuses"))) {
      return forbidden(a, "node " + q(node) + " cannot update resource claim statues");
    }
    return base::okStatus();
  }
  if (a.subresource == "eviction") {
    if (a.operation != AdmissionOperation::kCreate)
      return forbidden(a, "unexpected operation " + op);
    if (a.old_object == nullptr) return base::notFoundError("pod " + q(a.name) + " not found");
    if (boundNode(a.old_object) == node) return base::okStatus();
    return forbidden(a, "node " + node + " can only evict pods with spec.nodeName set to itself");
  }
  return forbidden(a, "unexpected pod subresource " + q(a.subresource) +
                          ", only 'status' and 'eviction' are allowed");
}

base::Status admitNode(const std::string& node, const AdmissionAttributes& a) {
  if (a.name != node) {
    return forbidden(a, "node " + q(node) + " is not allowed to modify node " + q(a.name));
  }
  const json& spec = member(a.object, "spec");
  const json& labels = member(&member(a.object, "metadata"), "labels");
  if (a.operation == AdmissionOperation::kCreate) {
    if (!member(&spec, "configSource").is_null()) {
      return forbidden(
          a, "node " + q(node) + " is not allowed to create pods with a non-nil configSource");
    }
    const auto labels_forbidden = forbiddenNodeLabels(labels, json());
    if (!labels_forbidden.empty()) {
      return forbidden(a, "node " + q(node) + " is not allowed to set the following labels: " +
                              joined(labels_forbidden));
    }
  }
  if (a.operation != AdmissionOperation::kUpdate) return base::okStatus();
  const json& old_spec = member(a.old_object, "spec");
  const json& source = member(&spec, "configSource");
  if (!source.is_null() && source != member(&old_spec, "configSource")) {
    return forbidden(a, "node " + q(node) +
                            " is not allowed to update configSource to a new non-nil configSource");
  }
  if (!sameList(member(&spec, "taints"), member(&old_spec, "taints"))) {
    return forbidden(a, "node " + q(node) + " is not allowed to modify taints");
  }
  const auto labels_forbidden =
      forbiddenNodeLabels(labels, member(&member(a.old_object, "metadata"), "labels"));
  if (!labels_forbidden.empty()) {
    return forbidden(a, "is not allowed to modify labels: " + joined(labels_forbidden));
  }
  return base::okStatus();
}

base::Status admitLease(const std::string& node, const AdmissionAttributes& a) {
  if (a.ns != kNodeLeaseNamespace) {
    return forbidden(a, std::string("can only access leases in the ") + q(kNodeLeaseNamespace) +
                            " system namespace");
  }
  const std::string name = a.operation == AdmissionOperation::kCreate
                               ? stringAt(member(a.object, "metadata"), "name")
                               : a.name;
  if (name != node) {
    return forbidden(a, "can only access node lease with the same name as the requesting node");
  }
  return base::okStatus();
}

}  // namespace

std::vector<std::string> forbiddenNodeLabels(const json& labels, const json& old_labels) {
  std::set<std::string> modified;
  const auto differing = [&modified](const json& from, const json& to) {
    if (!from.is_object()) return;
    for (const auto& [key, value] : from.items()) {
      if (!to.is_object() || !to.contains(key) || to[key] != value) modified.insert(key);
    }
  };
  differing(labels, old_labels);
  differing(old_labels, labels);
  std::vector<std::string> out;
  for (const std::string& key : modified) {
    if (forbiddenLabel(key)) out.push_back(key);
  }
  return out;
}

base::Status admitNodeRestriction(const std::string& user, const std::string& node,
                                  const AdmissionAttributes& a, const json* own_node) {
  if (node.empty()) return forbidden(a, "could not determine node from user " + q(user));
  if (!a.group.empty() && !(a.group == "coordination.k8s.io" && a.resource == "leases")) {
    return base::okStatus();
  }
  if (a.resource == "pods") return admitPod(node, a, own_node);
  if (a.resource == "nodes") return admitNode(node, a);
  if (a.resource == "leases") return admitLease(node, a);
  if (a.resource == "persistentvolumeclaims" && a.subresource != "status") {
    return forbidden(a, "may only update PVC status");
  }
  return base::okStatus();
}

base::Status admitNodeTokenRequest(const std::string& node, const std::string& ns,
                                   const std::string& service_account, const json& token_request,
                                   const json* bound_pod) {
  AdmissionAttributes a;
  a.resource = "serviceaccounts";
  a.subresource = "token";
  a.ns = ns;
  a.name = service_account;
  const json& ref = member(&member(&token_request, "spec"), "boundObjectRef");
  if (!ref.is_object() || stringAt(ref, "apiVersion") != "v1" || stringAt(ref, "kind") != "Pod" ||
      stringAt(ref, "name").empty()) {
    return forbidden(a, "node requested token not bound to a pod");
  }
  if (stringAt(ref, "uid").empty()) {
    return forbidden(a, "node requested token with a pod binding without a uid");
  }
  if (bound_pod == nullptr)
    return base::notFoundError("pod " + q(stringAt(ref, "name")) + " not found");
  if (stringAt(ref, "uid") != stringAt(member(bound_pod, "metadata"), "uid")) {
    return forbidden(a, "the UID in the bound object reference (" + stringAt(ref, "uid") +
                            ") does not match the UID in record. The object might have been "
                            "deleted and then recreated");
  }
  if (boundNode(bound_pod) != node) {
    return forbidden(a, "node requested token bound to a pod scheduled on a different node");
  }
  return base::okStatus();
}

}  // namespace nodeagent::testapiserver
