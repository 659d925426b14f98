// Defaulting of pod manifests, applied to the pod's JSON before it is decoded so that the pod's
// raw JSON (what mirror pods and content hashes see) carries the defaults:
//  - Kubernetes API defaulting (core/v1 SetDefaults_Pod and friends), as kube-apiserver applies
//    it to every pod it stores;
//  - kubelet's static-pod defaults (config/common.go applyDefaults), with nodeagent's own UID:
//    a versioned hash of the canonical API-defaulted manifest + node name + source, so the UID is
//    stable across nodeagent versions, unique per node and source, and unchanged by formatting.
//
// Pure functions of their arguments: any thread. None of them throws on malformed input: a field
// of the wrong type is left alone for the decoder to report.
#pragma once

#include <array>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "config/static_pod.h"

namespace nodeagent::config {

// The volume sources of core/v1, in the order kube-apiserver checks them (validateVolumeSource);
// a volume naming none of them is defaulted to an emptyDir.
inline constexpr std::array<std::string_view, 29> kVolumeSourceKeys = {
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "quobyte",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "scaleIO",
    "csi",
    "ephemeral",
};

// The volume sources set in `volume` (present and not null), as bits: bit i is
// kVolumeSourceKeys[i]. Reads the volume's own members, not one lookup per known source.
uint32_t volumeSourcesIn(const nlohmann::json& volume);

// The prefix of the UID hash input. Changing it (or the input layout) changes the UID of every
// static pod, which restarts them all: bump the version only on purpose.
inline constexpr std::string_view kStaticPodUidHashPrefix = "nodeagent/static-pod-uid/v1\n";
inline constexpr std::string_view kConfigHashAnnotation = "kubernetes.io/config.hash";

// Removes object members whose value is null, recursively (Kubernetes treats `x: null` as absent).
void stripNulls(nlohmann::json& value);

// Kubernetes API defaulting of a v1 Pod object, in place.
void applyApiDefaults(nlohmann::json& pod);

// SetDefaults_Container's pull policy: "Always" for a ":latest" or untagged image,
// "IfNotPresent" otherwise (including digests and references that do not parse).
std::string defaultImagePullPolicy(std::string_view image);

// The UID given to a static pod without metadata.uid: 32 lower-case hex digits of
// hash128(kStaticPodUidHashPrefix + canonicalJson(pod) + "\nhost:" + node + "\nsource:" + source),
// where `pod` is the API-defaulted manifest before the static-pod defaults.
std::string staticPodUid(const nlohmann::json& api_defaulted_pod, std::string_view node_name,
                         std::string_view source);

// kubelet's generatePodName: "<name>-<lower-cased node name>".
std::string generatePodName(std::string_view name, std::string_view node_name);

// kubelet's applyDefaults, in kubelet's order: UID (kept when given), name suffix, namespace
// "default", spec.nodeName, the config.hash annotation (= UID, even when the UID was given), the
// NoExecute toleration for file pods only, status.phase Pending. The node name is lower-cased.
void applyStaticPodDefaults(nlohmann::json& pod, const ManifestSource& source);

}  // namespace nodeagent::config
