// The volume preparer (kubelet's volume manager, for the volume types a node without plugins
// serves): makes each volume of a pod ready on the node (emptyDir, hostPath, and the configMap,
// secret, downwardAPI and projected volumes whose files the agent writes, updated on every sync
// of the pod), and resolves a container's volumeMounts against them for the runtime.
//
// Threading: prepare() does file I/O (directories, ownership) and may read ConfigMaps and Secrets
// from the apiserver: call it on the blocking pool. mountsFor() is pure. Thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "agent/pod_directories.h"
#include "agent/runtime/runtime.h"
#include "agent/volume/api_objects.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

class VolumePreparer {
 public:
  // `allow_root_api_pods`: whether pods from the apiserver may have the agent (root) create a
  // hostPath (types DirectoryOrCreate and FileOrCreate); static pods always may.
  // `objects`: where configMap and secret volumes read from; null without an apiserver.
  // `node`: what a downwardAPI resourceFieldRef of a limit the container does not set reads as.
  VolumePreparer(PodDirectories& dirs, bool allow_root_api_pods,
                 std::shared_ptr<ApiObjectSource> objects = nullptr,
                 runtime::NodeAllocatableResources node = {})
      : dirs_(dirs),
        allow_root_api_pods_(allow_root_api_pods),
        objects_(std::move(objects)),
        node_(node) {}

  // Every volume of the pod, ready: emptyDir under the pod's directory (0777, or group fsGroup
  // and setgid with one), hostPath checked against its type (and created for the *OrCreate
  // types), configMap/secret/downwardAPI/projected written (atomic_writer.h) under
  // volumes/kubernetes.io~<plugin>/<name>. An error names the volume; one of those written by the
  // agent is Unavailable ("MountVolume.SetUp failed for volume ..." as kubelet's event: a later
  // sync may succeed); other volume types are Unimplemented. Blocking.
  base::StatusOr<std::vector<runtime::PodVolume>> prepare(const api::Pod& pod) const;

  // The container's volumeMounts with their volumes' paths (subPath appended), read-only for the
  // volumes the agent writes (isApiDataVolume); an error names a mount whose volume the pod does
  // not have.
  static base::StatusOr<std::vector<runtime::Mount>> mountsFor(
      const api::Pod& pod, const api::Container& container,
      const std::vector<runtime::PodVolume>& volumes);

  // Where ConfigMaps and Secrets are read from (volumes and env); null without an apiserver.
  ApiObjectSource* objects() const { return objects_.get(); }

  // The pod-level names that become path components: the pod's namespace, name and UID (its
  // directory, its log directory) and its volumes' names (emptyDir directories). InvalidArgument
  // naming the bad one.
  static base::Status checkPodPathNames(const api::Pod& pod);

 private:
  base::StatusOr<std::filesystem::path> emptyDir(const api::Pod& pod, const api::Volume& v) const;
  base::StatusOr<std::filesystem::path> hostPath(const api::Pod& pod, const api::Volume& v) const;
  // A configMap, secret, downwardAPI or projected volume; `spec` is the pod's spec as JSON.
  base::StatusOr<std::filesystem::path> apiData(const api::Pod& pod, const api::Volume& v,
                                                const nlohmann::json& spec) const;

  PodDirectories& dirs_;
  bool allow_root_api_pods_;
  std::shared_ptr<ApiObjectSource> objects_;
  runtime::NodeAllocatableResources node_;
};

}  // namespace nodeagent::agent
