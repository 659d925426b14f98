// What the store does to a pod as kube-apiserver does: its defaulting on create (restartPolicy,
// terminationGracePeriodSeconds, dnsPolicy, schedulerName, the containers' terminationMessage*,
// imagePullPolicy and port protocols; a fresh Pending status) and the part of ValidatePod that
// decides what a node turns into paths.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "cmd/test-apiserver/resources.h"

namespace nodeagent::testapiserver {

// Minimal pod defaulting, as kube-apiserver's defaulters do on create.
void defaultPod(nlohmann::json& pod);

// Container, init container and volume names are DNS-1123 labels, unique (containers and init
// containers share one space), and every container has an image: 422 Invalid as kube-apiserver
// words it otherwise.
base::Status validatePod(const ResourceInfo& res, const nlohmann::json& pod);

}  // namespace nodeagent::testapiserver
