// The authorization attributes of a request to the test apiserver, as kube-apiserver's
// RequestInfoFactory derives them: a resource request under /api/v1 or /apis/<group>/<version>
// (namespace, resource, name, subresource and the verb: get, list, watch, create, update, patch,
// delete, deletecollection), or a non-resource request (the path, the method as the verb).
#pragma once

#include <string>

#include "cmd/test-apiserver/authz.h"

namespace nodeagent::testapiserver {

// `watch_param`: the query's watch=true (turns list into watch); `field_selector`: the query's
// fieldSelector, kept for the authorizers, whose metadata.name=<name> names the object of a list
// or watch (as kube-apiserver's RequestInfoFactory). The user is left empty.
AccessRequest requestAttributes(const std::string& method, const std::string& path,
                                bool watch_param, const std::string& field_selector = "");

// What every user may do whatever the mode, as kube-apiserver's default RBAC roles grant to all
// (system:discovery, system:public-info-viewer, system:basic-user): read the discovery, version,
// OpenAPI and health paths, and ask about themselves (the three self reviews).
bool alwaysAllowed(const AccessRequest& request);

}  // namespace nodeagent::testapiserver
