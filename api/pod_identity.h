// A pod known only by its identity (UID, name, namespace): what the agent has of a pod no source
// wants any more but a worker or the runtime still holds. Built by the codec, as every pod is.
#pragma once

#include <string>

#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::api {

base::StatusOr<PodPtr> podWithIdentity(const std::string& uid, const std::string& name,
                                       const std::string& namespace_);

}  // namespace nodeagent::api
