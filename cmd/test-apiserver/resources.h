// The resource types the test apiserver serves (namespaces, pods, nodes, events, configmaps,
// secrets, serviceaccounts, leases; besides them the kubelet subresources, serviceaccounts/token
// and the token and access reviews, listed in discovery) and the discovery documents kubectl
// reads (/api, /api/v1, /apis, /apis/<group>[/<version>], /version), all in the legacy
// plain-JSON form so kubectl's aggregated discovery falls back to them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nodeagent::testapiserver {

struct ResourceInfo {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  bool namespaced = false;
  std::vector<std::string> short_names;
  std::vector<std::string> subresources;  // "status"
  // Field selector labels accepted besides metadata.name and metadata.namespace.
  std::vector<std::string> field_labels;

  // "v1" or "coordination.k8s.io/v1".
  std::string apiVersion() const;
  std::string listKind() const { return kind + "List"; }
  bool hasSubresource(std::string_view sub) const;
  bool supportsField(std::string_view field) const;
};

const std::vector<ResourceInfo>& allResources();
// By plural name (each plural is unique across the served groups); nullptr when unknown.
const ResourceInfo* findResource(std::string_view plural);
// By group and plural; nullptr when unknown.
const ResourceInfo* findResource(std::string_view group, std::string_view plural);

// `server_address` is "host:port" for /api's serverAddressByClientCIDRs.
nlohmann::json apiVersionsDocument(const std::string& server_address);
nlohmann::json apiGroupListDocument();
// nullptr-like (a null json) when the group is not served.
nlohmann::json apiGroupDocument(std::string_view group);
// A null json when the group/version is not served.
nlohmann::json apiResourceListDocument(std::string_view group, std::string_view version);
nlohmann::json versionDocument();

}  // namespace nodeagent::testapiserver
