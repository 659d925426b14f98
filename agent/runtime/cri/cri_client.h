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
// message.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/runtime/cri/cri_endpoint.h"
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
  // the node's Ready condition.
  base::StatusOr<RuntimeStatus> status();

  // ImageService.ImageStatus (blocking): the image `image` names (a reference such as
  // "nodeagent.test/busybox:1", or an image ID), or nullopt when the runtime does not have it.
  base::StatusOr<std::optional<ImageInfo>> imageStatus(const std::string& image);

 private:
  struct Impl;
  explicit CriClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// FailedPrecondition naming the endpoint when `version` is not a CRI v1 answer. Pure.
base::Status checkRuntimeVersion(const CriEndpoint& endpoint, const RuntimeVersion& version);

}  // namespace nodeagent::runtime::cri
