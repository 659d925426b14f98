// What an admission check sees of a write, as kube-apiserver's admission.Attributes: the
// operation, the resource and subresource, the object's namespace and name, the object to store
// and the stored one. The store runs the check after it has built the object (defaults applied,
// patch applied) and before it stores it, under its lock: a check must not call the store.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

enum class AdmissionOperation { kCreate, kUpdate, kDelete };

struct AdmissionAttributes {
  AdmissionOperation operation = AdmissionOperation::kCreate;
  std::string group;  // "" for the core group
  std::string resource;
  std::string subresource;
  std::string ns;
  std::string name;
  const nlohmann::json* object = nullptr;  // create and update: the object as it would be stored
  const nlohmann::json* old_object = nullptr;  // update and delete: the stored object
};

// An error refuses the write with it (PermissionDenied: 403 Forbidden); OK lets it through. An
// empty check admits everything.
using AdmissionCheck = std::function<base::Status(const AdmissionAttributes&)>;

// "CREATE", "UPDATE", "DELETE", as kube-apiserver names them in its messages.
const char* admissionOperationName(AdmissionOperation operation);

}  // namespace nodeagent::testapiserver
