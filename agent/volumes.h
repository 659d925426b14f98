// The volume preparer (kubelet's volume manager, for the volume types a node without plugins
// serves): makes each emptyDir and hostPath volume of a pod ready on the node, and resolves a
// container's volumeMounts against them for the runtime.
//
// Threading: prepare() does file I/O (directories, ownership): call it on the blocking pool.
// mountsFor() is pure. Thread-safe.
#pragma once

#include <vector>

#include "agent/pod_directories.h"
#include "agent/runtime/runtime.h"
#include "api/pod.h"
#include "base/status.h"

namespace nodeagent::agent {

class VolumePreparer {
 public:
  // `allow_root_api_pods`: whether pods from the apiserver may have the agent (root) create a
  // hostPath (types DirectoryOrCreate and FileOrCreate); static pods always may.
  VolumePreparer(PodDirectories& dirs, bool allow_root_api_pods)
      : dirs_(dirs), allow_root_api_pods_(allow_root_api_pods) {}

  // Every volume of the pod, ready: emptyDir under the pod's directory (0777, or group fsGroup
  // and setgid with one), hostPath checked against its type (and created for the *OrCreate
  // types). An error names the volume; other volume types are Unimplemented. Blocking.
  base::StatusOr<std::vector<runtime::PodVolume>> prepare(const api::Pod& pod) const;

  // The container's volumeMounts with their volumes' paths (subPath appended); an error names a
  // mount whose volume the pod does not have.
  static base::StatusOr<std::vector<runtime::Mount>> mountsFor(
      const api::Container& container, const std::vector<runtime::PodVolume>& volumes);

  // The pod-level names that become path components: the pod's namespace, name and UID (its
  // directory, its log directory) and its volumes' names (emptyDir directories). InvalidArgument
  // naming the bad one.
  static base::Status checkPodPathNames(const api::Pod& pod);

 private:
  base::StatusOr<std::filesystem::path> emptyDir(const api::Pod& pod, const api::Volume& v) const;
  base::StatusOr<std::filesystem::path> hostPath(const api::Pod& pod, const api::Volume& v) const;

  PodDirectories& dirs_;
  bool allow_root_api_pods_;
};

}  // namespace nodeagent::agent
