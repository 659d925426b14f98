#include "cmd/test-apiserver/resources.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace nodeagent::testapiserver {

using nlohmann::json;

std::string ResourceInfo::apiVersion() const {
  return group.empty() ? version : group + "/" + version;
}

bool ResourceInfo::hasSubresource(std::string_view sub) const {
  return std::find(subresources.begin(), subresources.end(), sub) != subresources.end();
}

bool ResourceInfo::supportsField(std::string_view field) const {
  if (field == "metadata.name") return true;
  if (field == "metadata.namespace") return namespaced;
  return std::find(field_labels.begin(), field_labels.end(), field) != field_labels.end();
}

const std::vector<ResourceInfo>& allResources() {
  static const std::vector<ResourceInfo> kResources = {
      {"",
       "v1",
       "namespaces",
       "namespace",
       "Namespace",
       false,
       {"ns"},
       {"status"},
       {"status.phase"}},
      {"",
       "v1",
       "pods",
       "pod",
       "Pod",
       true,
       {"po"},
       {"status"},
       {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"}},
      {"", "v1", "nodes", "node", "Node", false, {"no"}, {"status"}, {"spec.unschedulable"}},
      {"",
       "v1",
       "events",
       "event",
       "Event",
       true,
       {"ev"},
       {},
       {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"}},
      {"", "v1", "configmaps", "configmap", "ConfigMap", true, {"cm"}, {}, {}},
      {"", "v1", "secrets", "secret", "Secret", true, {}, {}, {"type"}},
      {"", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, {"sa"}, {}, {}},
      {"coordination.k8s.io", "v1", "leases", "lease", "Lease", true, {}, {}, {}},
      {"certificates.k8s.io",
       "v1",
       "certificatesigningrequests",
       "certificatesigningrequest",
       "CertificateSigningRequest",
       false,
       {"csr"},
       {"status", "approval"},
       {"spec.signerName"}},
  };
  return kResources;
}

const ResourceInfo* findResource(std::string_view plural) {
  for (const auto& r : allResources()) {
    if (r.plural == plural) return &r;
  }
  return nullptr;
}

const ResourceInfo* findResource(std::string_view group, std::string_view plural) {
  for (const auto& r : allResources()) {
    if (r.group == group && r.plural == plural) return &r;
  }
  return nullptr;
}

json apiVersionsDocument(const std::string& server_address) {
  return {{"kind", "APIVersions"},
          {"versions", {"v1"}},
          {"serverAddressByClientCIDRs",
           {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", server_address}}}}};
}

namespace {

// What is served besides the stored resources: the kubelet subresources kube-apiserver
// proxies, serviceaccounts/token and the two review kinds, which are only ever created
// (kubelet_location.h, service_account_token.h, authz.h).
struct ConnectResource {
  std::string group;
  std::string name;
  std::string kind;
  bool namespaced;
  std::vector<std::string> verbs;
  // The group of `kind` when it is not `group` (discovery then names its group and version).
  std::string kind_group = "";
};

const std::vector<ConnectResource>& connectResources() {
  static const std::vector<ConnectResource> kResources = {
      {"", "pods/attach", "PodAttachOptions", true, {"create", "get"}},
      {"", "pods/exec", "PodExecOptions", true, {"create", "get"}},
      {"", "pods/log", "Pod", true, {"get"}},
      {"", "pods/portforward", "PodPortForwardOptions", true, {"create", "get"}},
      {"",
       "nodes/proxy",
       "NodeProxyOptions",
       false,
       {"create", "delete", "get", "patch", "update"}},
      {"", "serviceaccounts/token", "TokenRequest", true, {"create"}, "authentication.k8s.io"},
      {"authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview", false, {"create"}},
      {"authentication.k8s.io", "tokenreviews", "TokenReview", false, {"create"}},
      {"authorization.k8s.io",
       "selfsubjectaccessreviews",
       "SelfSubjectAccessReview",
       false,
       {"create"}},
      {"authorization.k8s.io",
       "selfsubjectrulesreviews",
       "SelfSubjectRulesReview",
       false,
       {"create"}},
      {"authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview", false, {"create"}},
  };
  return kResources;
}

// The stored resources' groups first, then the reviews'.
std::vector<std::string> servedGroups() {
  std::vector<std::string> groups;
  auto add = [&groups](const std::string& group) {
    if (!group.empty() && std::find(groups.begin(), groups.end(), group) == groups.end()) {
      groups.push_back(group);
    }
  };
  for (const auto& r : allResources()) add(r.group);
  for (const auto& r : connectResources()) add(r.group);
  return groups;
}

json groupJson(const std::string& group) {
  json gv = {{"groupVersion", group + "/v1"}, {"version", "v1"}};
  return {{"name", group}, {"versions", {gv}}, {"preferredVersion", gv}};
}

}  // namespace

json apiGroupListDocument() {
  json groups = json::array();
  for (const auto& g : servedGroups()) groups.push_back(groupJson(g));
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

json apiGroupDocument(std::string_view group) {
  for (const auto& g : servedGroups()) {
    if (g == group) {
      json doc = groupJson(g);
      doc["kind"] = "APIGroup";
      doc["apiVersion"] = "v1";
      return doc;
    }
  }
  return json();
}

json apiResourceListDocument(std::string_view group, std::string_view version) {
  if (version != "v1") return json();
  json resources = json::array();
  for (const auto& r : allResources()) {
    if (r.group != group) continue;
    json verbs = {"create", "delete", "get", "list", "patch", "update", "watch"};
    if (r.namespaced) verbs.push_back("deletecollection");
    json entry = {{"name", r.plural},
                  {"singularName", r.singular},
                  {"namespaced", r.namespaced},
                  {"kind", r.kind},
                  {"verbs", verbs}};
    if (!r.short_names.empty()) entry["shortNames"] = r.short_names;
    if (r.plural == "pods") entry["categories"] = {"all"};
    resources.push_back(entry);
    for (const auto& sub : r.subresources) {
      resources.push_back({{"name", r.plural + "/" + sub},
                           {"singularName", ""},
                           {"namespaced", r.namespaced},
                           {"kind", r.kind},
                           {"verbs", {"get", "patch", "update"}}});
    }
  }
  for (const auto& r : connectResources()) {
    if (r.group != group) continue;
    json entry = {{"name", r.name},
                  {"singularName", ""},
                  {"namespaced", r.namespaced},
                  {"kind", r.kind},
                  {"verbs", r.verbs}};
    if (!r.kind_group.empty()) {
      entry["group"] = r.kind_group;
      entry["version"] = "v1";
    }
    resources.push_back(std::move(entry));
  }
  if (resources.empty()) return json();
  std::string gv =
      group.empty() ? std::string(version) : std::string(group) + "/" + std::string(version);
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", gv},
          {"resources", resources}};
}

json versionDocument() {
  return {{"major", "1"},
          {"minor", "32"},
          {"gitVersion", "v1.32.0-nodeagent-test"},
          {"gitCommit", "0000000000000000000000000000000000000000"},
          {"gitTreeState", "clean"},
          {"buildDate", "2024-12-11T00:00:00Z"},
          {"goVersion", "go1.23.3"},
          {"compiler", "gc"},
          {"platform", "linux/amd64"}};
}

}  // namespace nodeagent::testapiserver
