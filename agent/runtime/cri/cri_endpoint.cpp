#include "agent/runtime/cri/cri_endpoint.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/duration.h"

namespace nodeagent::runtime::cri {

namespace {

constexpr std::string_view kUnixScheme = "unix://";

std::string socketDescription(const CriEndpoint& endpoint, const SocketProbe& probe) {
  const std::string& path = endpoint.socket_path;
  switch (probe.state) {
    case SocketState::kMissing:
      return "no socket at " + path + " (is the container runtime running?)";
    case SocketState::kNotSocket:
      return path + " is not a socket";
    case SocketState::kRefused:
      return "connection refused on " + path + " (the socket exists but nothing listens on it)";
    case SocketState::kNoPermission:
      return "permission denied on " + path;
    case SocketState::kAccepting:
      return "the socket " + path + " accepted a connection but did not answer as a gRPC server";
    case SocketState::kOther:
      break;
  }
  return "cannot connect to " + path + ": " + std::strerror(probe.error);
}

}  // namespace

base::StatusOr<CriEndpoint> parseCriEndpoint(std::string_view text) {
  std::string path;
  if (text.starts_with(kUnixScheme)) {
    path = std::string(text.substr(kUnixScheme.size()));
  } else if (text.starts_with("/")) {
    path = std::string(text);  // kubelet still accepts a bare path (deprecated there)
  } else {
    return base::invalidArgumentError("container runtime endpoint \"" + std::string(text) +
                                      "\": only unix:///<absolute path> is supported");
  }
  if (!path.starts_with("/")) {
    return base::invalidArgumentError("container runtime endpoint \"" + std::string(text) +
                                      "\": the socket path must be absolute (unix:///path)");
  }
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return base::invalidArgumentError("container runtime endpoint \"" + std::string(text) +
                                      "\": the socket path is longer than a Unix socket allows (" +
                                      std::to_string(sizeof(sockaddr_un::sun_path) - 1) + ")");
  }
  return CriEndpoint{std::string(kUnixScheme) + path, path};
}

SocketProbe probeUnixSocket(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) return {SocketState::kMissing, err};
    if (err == EACCES) return {SocketState::kNoPermission, err};
    return {SocketState::kOther, err};
  }
  if (!S_ISSOCK(st.st_mode)) return {SocketState::kNotSocket, ENOTSOCK};
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {SocketState::kOther, errno};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  int err = rc == 0 ? 0 : errno;
  ::close(fd);
  if (rc == 0) return {SocketState::kAccepting, 0};
  if (err == ECONNREFUSED) return {SocketState::kRefused, err};
  if (err == ENOENT) return {SocketState::kMissing, err};
  if (err == EACCES || err == EPERM) return {SocketState::kNoPermission, err};
  return {SocketState::kOther, err};
}

base::Status criCallError(const CriEndpoint& endpoint, const CallFailure& failure) {
  std::string what;
  switch (failure.grpc_code) {
    case kGrpcUnavailable:
      what = socketDescription(endpoint, failure.probe);
      break;
    case kGrpcUnimplemented:
      what =
          "the runtime does not serve this method: not a CRI v1 runtime (containerd 1.6 and "
          "later serve runtime.v1)";
      break;
    case kGrpcDeadlineExceeded:
      what = "no answer within " +
             base::formatDuration(std::chrono::duration_cast<base::Duration>(failure.timeout)) +
             " (--runtime-request-timeout)";
      break;
    default:
      break;
  }
  std::string message =
      "CRI runtime at " + endpoint.uri + ": " + std::string(failure.method) + ": ";
  if (what.empty()) {
    message += failure.grpc_message;
  } else {
    message += what;
    if (!failure.grpc_message.empty()) message += " (gRPC: " + failure.grpc_message + ")";
  }
  auto code = static_cast<base::StatusCode>(failure.grpc_code);
  if (failure.grpc_code <= 0 || failure.grpc_code > 16) code = base::StatusCode::kUnknown;
  return base::Status(code, std::move(message));
}

}  // namespace nodeagent::runtime::cri
