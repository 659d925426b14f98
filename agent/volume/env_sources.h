// kubelet's makeEnvironmentVariables for the variables whose values live in the apiserver:
// envFrom (configMapRef and secretRef, with their prefix) and env valueFrom configMapKeyRef and
// secretKeyRef. The runtime then builds the environment as before: envFrom's variables first (as
// StartContainerOptions::extra_env), then env in order, where the resolved values stand as plain
// values that $(VAR) expansion leaves as they are.
//
// Threading: reads through the ApiObjectSource, which blocks; call on the blocking pool.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "agent/volume/api_objects.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

struct ContainerEnvSources {
  // The container with its configMapKeyRef/secretKeyRef variables turned into plain values (an
  // optional one whose object or key is missing is left out, as kubelet leaves it unset).
  api::Container container;
  // envFrom's variables, in order.
  std::vector<std::pair<std::string, std::string>> env_from;
  // kubelet's InvalidEnvironmentVariableNames event messages: envFrom keys that are not valid
  // variable names, skipped.
  std::vector<std::string> skipped_keys;
};

// Whether the container may have variables from ConfigMaps or Secrets (a keyRef in its env, or
// envFrom somewhere in the pod). Cheap.
bool needsEnvSources(const api::Pod& pod, const api::Container& container);

// The container's variables from ConfigMaps and Secrets, read for `pod`. Errors as kubelet's
// ("configmap \"app\" not found", "couldn't find key k in ConfigMap ns/app"), InvalidArgument
// (the container's start fails with CreateContainerConfigError).
base::StatusOr<ContainerEnvSources> resolveEnvSources(const api::Pod& pod,
                                                      const api::Container& container,
                                                      ApiObjectSource* objects);

}  // namespace nodeagent::agent
