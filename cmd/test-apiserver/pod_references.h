// The API objects a pod refers to, as kube-apiserver's Node authorizer graph and NodeRestriction
// admission find them (podutil.VisitPodSecretNames and VisitPodConfigmapNames over every
// container, init and ephemeral ones included; the volumes; the service account).
#pragma once

#include <set>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace nodeagent::testapiserver {

struct PodReferences {
  // imagePullSecrets, envFrom and env secret references, secret volumes, projected secret
  // sources and the secret references of the azureFile, cephfs, cinder, flexVolume, iscsi, rbd,
  // scaleIO, storageos and csi volume sources.
  std::set<std::string> secrets;
  // envFrom and env config map references, configMap volumes and projected configMap sources.
  std::set<std::string> config_maps;
  // persistentVolumeClaim volumes and the claims of ephemeral volumes (<pod>-<volume>).
  std::set<std::string> claims;
  std::string service_account;         // spec.serviceAccountName, "" when unset
  bool cluster_trust_bundles = false;  // a projected clusterTrustBundle source
};

PodReferences podReferences(const nlohmann::json& pod);

}  // namespace nodeagent::testapiserver
