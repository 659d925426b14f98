// TestApiServer::Impl: what the Node authorizer and NodeRestriction admission read from the
// store. The graph is the pods bound to the node, listed at each request; NodeRestriction reads
// the requesting node's Node before the store's lock is taken (its check runs under it).
#include "cmd/test-apiserver/node_authorizer.h"
#include "cmd/test-apiserver/node_restriction.h"
#include "cmd/test-apiserver/test_api_server_impl.h"

namespace nodeagent::testapiserver {

std::vector<std::shared_ptr<const json>> TestApiServer::Impl::podsOnNode(
    const std::string& node, const std::string& ns) const {
  ListOptions options;
  // A node name that needs escaping in a selector cannot be a node's name.
  options.field_selector = "spec.nodeName=" + node;
  std::vector<std::shared_ptr<const json>> pods;
  auto listed = store_.list("pods", ns, options);
  if (!listed.ok()) return pods;
  for (const StoredObject& item : listed->items) pods.push_back(item.object);
  return pods;
}

AdmissionCheck TestApiServer::Impl::nodeAdmission(const httplib::Request& req) {
  if (!options_.node_restriction) return {};
  ReviewUser user = requestUser(req);
  std::optional<std::string> node = nodeIdentity(user.username, user.groups);
  if (!node) return {};
  // A mirror pod's owner reference must carry the node's UID.
  std::optional<json> own_node;
  if (req.method == "POST" && !node->empty()) {
    if (auto stored = store_.get("nodes", "", *node); stored.ok()) own_node = std::move(*stored);
  }
  return [user = std::move(user.username), node = std::move(*node),
          own_node = std::move(own_node)](const AdmissionAttributes& a) {
    return admitNodeRestriction(user, node, a, own_node ? &*own_node : nullptr);
  };
}

base::Status TestApiServer::Impl::admitTokenRequest(const httplib::Request& req,
                                                    const std::string& ns, const std::string& name,
                                                    const json& token_request) {
  if (!options_.node_restriction) return base::okStatus();
  const ReviewUser user = requestUser(req);
  const std::optional<std::string> node = nodeIdentity(user.username, user.groups);
  if (!node) return base::okStatus();
  std::optional<json> pod;
  const json* spec = token_request.contains("spec") ? &token_request["spec"] : nullptr;
  if (spec != nullptr && spec->is_object() && spec->contains("boundObjectRef") &&
      (*spec)["boundObjectRef"].is_object()) {
    const std::string pod_name = stringAt((*spec)["boundObjectRef"], "name");
    if (auto stored = store_.get("pods", ns, pod_name); stored.ok()) pod = std::move(*stored);
  }
  return admitNodeTokenRequest(*node, ns, name, token_request, pod ? &*pod : nullptr);
}

}  // namespace nodeagent::testapiserver
