// Where a CRI runtime listens, and what a failed call to it means for an operator.
//
// kubelet's `--container-runtime-endpoint` is a URI: nodeagent accepts `unix:///abs/path.sock`
// (and, as kubelet still does, a bare absolute path). A CRI call that fails is turned into a
// base::Status that names the endpoint and says what went wrong in terms an operator can act on:
// no socket, nothing listening, not a gRPC or not a CRI v1 server, no answer in time.
//
// Pure code (no gRPC): the client passes the call's gRPC code and message in, plus what a plain
// connect() to the socket found, so every message here is unit-tested without a runtime.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "base/status.h"

namespace nodeagent::runtime::cri {

// kubelet's default --runtime-request-timeout.
inline constexpr std::chrono::milliseconds kDefaultRuntimeRequestTimeout = std::chrono::minutes(2);

struct CriEndpoint {
  std::string uri;          // "unix:///run/containerd/containerd.sock", as given (normalised)
  std::string socket_path;  // "/run/containerd/containerd.sock"
};

// InvalidArgument (quoting `text`) for another scheme (tcp://, npipe://), a relative path, or a
// path longer than a Unix socket address holds.
base::StatusOr<CriEndpoint> parseCriEndpoint(std::string_view text);

// What a plain connect() to the socket found, to tell apart the reasons gRPC reports as one
// UNAVAILABLE.
enum class SocketState {
  kAccepting,     // something accepted a connection
  kMissing,       // ENOENT: no such file
  kNotSocket,     // the path is not a socket (ENOTSOCK/ECONNREFUSED on a non-socket file)
  kRefused,       // ECONNREFUSED: a socket file nobody listens on (a runtime that died)
  kNoPermission,  // EACCES/EPERM
  kOther,         // any other errno (in `SocketProbe::error`)
};

struct SocketProbe {
  SocketState state = SocketState::kOther;
  int error = 0;  // errno of the connect(), 0 when it succeeded
};

// Connects to `path` once and closes at once (blocking, microseconds). Any thread.
SocketProbe probeUnixSocket(const std::string& path);

// gRPC status codes used below (grpc::StatusCode's values, which are the canonical codes).
inline constexpr int kGrpcDeadlineExceeded = 4;
inline constexpr int kGrpcUnimplemented = 12;
inline constexpr int kGrpcUnavailable = 14;

struct CallFailure {
  std::string_view method;  // "runtime.v1.RuntimeService/Version"
  int grpc_code = 0;
  std::string grpc_message;
  std::chrono::milliseconds timeout{0};  // the call's deadline, for DEADLINE_EXCEEDED
  SocketProbe probe;                     // consulted for UNAVAILABLE only
};

// The Status for a failed call: "CRI runtime at <uri>: <method>: <what happened>", with the code
// mapped from gRPC's (base::StatusCode uses the same numbers).
base::Status criCallError(const CriEndpoint& endpoint, const CallFailure& failure);

}  // namespace nodeagent::runtime::cri
