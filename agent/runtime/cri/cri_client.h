// CriClient: nodeagent's connection to a CRI v1 container runtime (containerd, CRI-O) over gRPC
// on a Unix socket: runtime.v1.RuntimeService and runtime.v1.ImageService.
//
// This header names no gRPC or protobuf type: gRPC and the generated code stay in cri_client.cpp
// and the nodeagent_cri_proto library, so that including the client costs nothing to build.
//
// Threading: every call is a blocking unary gRPC call bounded by the request timeout
// (--runtime-request-timeout, kubelet's default 2m). Callers run them on the blocking pool
// (base::runBlocking), never on a strand or an io_context thread. A CriClient may be used from
// several threads at once (the gRPC channel and stubs are thread-safe).
//
// Errors: every failed call is a base::Status that names the endpoint and the method and says what
// went wrong (cri_endpoint.h): no socket, nothing listening, not a gRPC server, not a CRI v1
// runtime (UNIMPLEMENTED), no answer within the timeout; other runtime errors keep gRPC's code and
// message; an id the runtime does not know is NotFound (containerd says so).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/runtime/cri/cri_endpoint.h"
#include "agent/runtime/cri/cri_types.h"
#include "base/status.h"

namespace nodeagent::runtime::cri {

struct CriClientOptions {
  // --container-runtime-endpoint: "unix:///run/containerd/containerd.sock".
  std::string endpoint;
  // --runtime-request-timeout: the deadline of each call.
  std::chrono::milliseconds request_timeout = kDefaultRuntimeRequestTimeout;
};

// VersionResponse. A CRI v1 runtime answers runtime_api_version "v1".
struct RuntimeVersion {
  std::string version;              // the CRI API version the runtime speaks ("0.1.0")
  std::string runtime_name;         // "containerd"
  std::string runtime_version;      // "1.6.20~ds1"
  std::string runtime_api_version;  // "v1"
};

// One condition of StatusResponse: type "RuntimeReady" or "NetworkReady" (kubelet's names).
struct RuntimeCondition {
  std::string type;
  bool status = false;
  std::string reason;
  std::string message;
};

inline constexpr const char* kRuntimeReady = "RuntimeReady";
inline constexpr const char* kNetworkReady = "NetworkReady";

struct RuntimeStatus {
  std::vector<RuntimeCondition> conditions;
  // A verbose Status's info (containerd: "config", its CRI plugin's configuration as JSON).
  std::map<std::string, std::string> info;

  // The condition of `type`, or nullptr when the runtime did not report it.
  const RuntimeCondition* find(const std::string& type) const;
};

// An image as ImageStatus and ListImages describe it.
struct ImageInfo {
  std::string id;  // "sha256:<config digest>"
  std::vector<std::string> repo_tags;
  std::vector<std::string> repo_digests;
  uint64_t size = 0;
  std::optional<int64_t> uid;  // the image's User when it is a number ("1000")
  std::string username;        // the image's User when it is a name
  bool pinned = false;         // the runtime asks that it never be garbage collected
};

// ImageFsInfo's first image filesystem: where the images are and what they use of it.
struct ImageFsUsage {
  std::string mountpoint;
  uint64_t used_bytes = 0;
  uint64_t inodes_used = 0;
};

class CriClient {
 public:
  // Parses the endpoint and sets up the channel; connects lazily (on the first call), so a
  // runtime that is not up yet is not an error here. InvalidArgument for a bad endpoint.
  static base::StatusOr<std::unique_ptr<CriClient>> create(CriClientOptions options);
  ~CriClient();
  CriClient(const CriClient&) = delete;
  CriClient& operator=(const CriClient&) = delete;

  const CriEndpoint& endpoint() const;

  // RuntimeService.Version (blocking). kubelet calls it at start to check the runtime speaks CRI
  // v1; a runtime_api_version other than "v1" is a FailedPrecondition error naming the endpoint.
  base::StatusOr<RuntimeVersion> version();

  // RuntimeService.Status (blocking): the RuntimeReady and NetworkReady conditions that feed
  // the node's Ready condition; `verbose` also asks for the runtime's info (RuntimeStatus::info).
  base::StatusOr<RuntimeStatus> status(bool verbose = false);

  // RuntimeService.UpdateRuntimeConfig (blocking): the node's pod CIDRs, comma-joined (kubelet's
  // UpdatePodCIDR). containerd writes its CNI config from its conf_template with them when it has
  // a template and no network config yet, and ignores them otherwise.
  base::Status updateRuntimeConfig(const std::string& pod_cidrs);

  // ImageService.ImageStatus (blocking): the image `image` names (a reference such as
  // "nodeagent.test/busybox:1", or an image ID), or nullopt when the runtime does not have it.
  base::StatusOr<std::optional<ImageInfo>> imageStatus(const std::string& image);

  // ---- Pod sandboxes (all blocking) ----

  // RunPodSandbox: creates and starts the sandbox (its pause container, its namespaces) and
  // returns its id. The runtime handler is the runtime's default.
  base::StatusOr<std::string> runPodSandbox(const PodSandboxConfig& config);
  // StopPodSandbox: stops every container of the sandbox and the sandbox itself (idempotent).
  base::Status stopPodSandbox(const std::string& sandbox_id);
  // RemovePodSandbox: removes a stopped sandbox and its containers (idempotent).
  base::Status removePodSandbox(const std::string& sandbox_id);
  base::StatusOr<PodSandboxStatus> podSandboxStatus(const std::string& sandbox_id);
  base::StatusOr<std::vector<PodSandbox>> listPodSandbox(const PodSandboxFilter& filter = {});

  // ---- Containers (all blocking) ----

  // CreateContainer in the sandbox `sandbox_id`, which `sandbox_config` created (the runtime
  // reads the log directory and namespaces from it). Returns the container's id.
  base::StatusOr<std::string> createContainer(const std::string& sandbox_id,
                                              const ContainerConfig& config,
                                              const PodSandboxConfig& sandbox_config);
  base::Status startContainer(const std::string& container_id);
  // StopContainer: SIGTERM (or the image's StopSignal), SIGKILL after `timeout` (the grace
  // period). The call lasts up to the grace period, so the request deadline is extended by it.
  base::Status stopContainer(const std::string& container_id, std::chrono::seconds timeout);
  base::Status removeContainer(const std::string& container_id);
  base::StatusOr<std::vector<Container>> listContainers(const ContainerFilter& filter = {});
  base::StatusOr<ContainerStatus> containerStatus(const std::string& container_id);
  // ReopenContainerLog: the runtime reopens the container's log file (after a rotation moved it).
  base::Status reopenContainerLog(const std::string& container_id);

  // ExecSync: runs `cmd` in the container and waits for it, up to `timeout` (zero: no limit of
  // its own, the request deadline still applies; a positive one extends the deadline by it).
  // A command that runs and exits non-zero is a result, not an error.
  base::StatusOr<ExecSyncResult> execSync(const std::string& container_id,
                                          const std::vector<std::string>& cmd,
                                          std::chrono::seconds timeout);

  // ---- Streaming (all blocking) ----

  // Exec, Attach and PortForward: the URL on the runtime's streaming server that serves the
  // session (kubelet proxies the client's upgraded connection to it). Which streams the session
  // has is fixed here, as the client asked for them.
  struct StreamRequest {
    bool tty = false;
    bool stdin_stream = false;
    bool stdout_stream = true;
    bool stderr_stream = true;
  };
  base::StatusOr<std::string> exec(const std::string& container_id,
                                   const std::vector<std::string>& cmd,
                                   const StreamRequest& streams);
  base::StatusOr<std::string> attach(const std::string& container_id, const StreamRequest& streams);
  base::StatusOr<std::string> portForward(const std::string& sandbox_id,
                                          const std::vector<int32_t>& ports);

  // ---- Images (all blocking) ----

  // PullImage: returns the image's ref (its id). `auth` carries registry credentials (never
  // logged). kubelet pulls without a deadline; here a pull may take the request timeout plus an
  // hour.
  base::StatusOr<std::string> pullImage(const std::string& image,
                                        const std::optional<AuthConfig>& auth = std::nullopt);
  // ListImages: every image the runtime holds (CRI's filter is not offered: containerd 1.6
  // ignores it; imageStatus finds one image).
  base::StatusOr<std::vector<ImageInfo>> listImages();
  // RemoveImage: `image` (a reference or an ID) no longer held; OK when it was not.
  base::Status removeImage(const std::string& image);
  // ImageFsInfo: the first image filesystem the runtime reports; NotFound when it reports none.
  base::StatusOr<ImageFsUsage> imageFsInfo();

 private:
  struct Impl;
  explicit CriClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// FailedPrecondition naming the endpoint when `version` is not a CRI v1 answer. Pure.
base::Status checkRuntimeVersion(const CriEndpoint& endpoint, const RuntimeVersion& version);

}  // namespace nodeagent::runtime::cri
