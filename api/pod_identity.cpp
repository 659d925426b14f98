#include "api/pod_identity.h"

#include <nlohmann/json.hpp>

#include "api/pod_json.h"

namespace nodeagent::api {

base::StatusOr<PodPtr> podWithIdentity(const std::string& uid, const std::string& name,
                                       const std::string& namespace_) {
  nlohmann::json metadata = {{"uid", uid}};
  if (!name.empty()) metadata["name"] = name;
  if (!namespace_.empty()) metadata["namespace"] = namespace_;
  return decodePodPtr({{"metadata", std::move(metadata)}});
}

}  // namespace nodeagent::api
