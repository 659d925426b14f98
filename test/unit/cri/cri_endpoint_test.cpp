#include "agent/runtime/cri/cri_endpoint.h"

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "agent/runtime/cri/cri_client.h"

using namespace nodeagent;
using namespace nodeagent::runtime::cri;

namespace {

const CriEndpoint kEndpoint{"unix:///run/containerd/containerd.sock",
                            "/run/containerd/containerd.sock"};

base::Status unavailable(SocketState state, int error) {
  return criCallError(kEndpoint, {"runtime.v1.RuntimeService/Version",
                                  kGrpcUnavailable,
                                  "failed to connect to all addresses",
                                  std::chrono::seconds(120),
                                  {state, error}});
}

}  // namespace

TEST_CASE("cri endpoint: unix:// URIs and bare absolute paths name a socket", "[unit][cri]") {
  auto uri = parseCriEndpoint("unix:///run/containerd/containerd.sock");
  REQUIRE(uri.ok());
  CHECK(uri->uri == "unix:///run/containerd/containerd.sock");
  CHECK(uri->socket_path == "/run/containerd/containerd.sock");

  auto bare = parseCriEndpoint("/var/run/crio/crio.sock");
  REQUIRE(bare.ok());
  CHECK(bare->uri == "unix:///var/run/crio/crio.sock");
  CHECK(bare->socket_path == "/var/run/crio/crio.sock");
}

TEST_CASE("cri endpoint: other schemes, relative and over-long paths are refused, quoted",
          "[unit][cri]") {
  auto tcp = parseCriEndpoint("tcp://127.0.0.1:1234");
  CHECK(tcp.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(tcp.status().message().find("\"tcp://127.0.0.1:1234\"") != std::string::npos);

  auto relative = parseCriEndpoint("unix://run/containerd.sock");
  CHECK(relative.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(relative.status().message().find("absolute") != std::string::npos);

  CHECK(!parseCriEndpoint("containerd.sock").ok());
  CHECK(!parseCriEndpoint("").ok());

  auto long_path = parseCriEndpoint("unix:///" + std::string(120, 'a'));
  CHECK(long_path.status().code() == base::StatusCode::kInvalidArgument);
  CHECK(long_path.status().message().find("longer than a Unix socket allows (107)") !=
        std::string::npos);
}

TEST_CASE("cri errors: an unreachable runtime says why, naming the endpoint and the method",
          "[unit][cri]") {
  const std::string prefix =
      "CRI runtime at unix:///run/containerd/containerd.sock: runtime.v1.RuntimeService/Version: ";
  const std::string grpc = " (gRPC: failed to connect to all addresses)";
  auto missing = unavailable(SocketState::kMissing, ENOENT);
  CHECK(missing.code() == base::StatusCode::kUnavailable);
  CHECK(missing.message() == prefix +
                                 "no socket at /run/containerd/containerd.sock (is the "
                                 "container runtime running?)" +
                                 grpc);
  CHECK(unavailable(SocketState::kRefused, ECONNREFUSED).message() ==
        prefix +
            "connection refused on /run/containerd/containerd.sock (the socket exists but nothing "
            "listens on it)" +
            grpc);
  CHECK(unavailable(SocketState::kNotSocket, ENOTSOCK).message() ==
        prefix + "/run/containerd/containerd.sock is not a socket" + grpc);
  CHECK(unavailable(SocketState::kNoPermission, EACCES).message() ==
        prefix + "permission denied on /run/containerd/containerd.sock" + grpc);
  CHECK(unavailable(SocketState::kAccepting, 0).message() ==
        prefix +
            "the socket /run/containerd/containerd.sock accepted a connection but did not "
            "answer as a gRPC server" +
            grpc);
  CHECK(unavailable(SocketState::kOther, ELOOP).message() ==
        prefix + "cannot connect to /run/containerd/containerd.sock: " + std::strerror(ELOOP) +
            grpc);
}

TEST_CASE(
    "cri errors: UNIMPLEMENTED is not a CRI v1 runtime and DEADLINE_EXCEEDED names the timeout",
    "[unit][cri]") {
  auto unimplemented = criCallError(
      kEndpoint, {"runtime.v1.RuntimeService/Version", kGrpcUnimplemented, "", {}, {}});
  CHECK(unimplemented.code() == base::StatusCode::kUnimplemented);
  CHECK(unimplemented.message().find("not a CRI v1 runtime") != std::string::npos);
  CHECK(unimplemented.message().find("unix:///run/containerd/containerd.sock") !=
        std::string::npos);

  auto late = criCallError(kEndpoint, {"runtime.v1.RuntimeService/Status",
                                       kGrpcDeadlineExceeded,
                                       "Deadline Exceeded",
                                       std::chrono::seconds(120),
                                       {}});
  CHECK(late.code() == base::StatusCode::kDeadlineExceeded);
  CHECK(late.message() ==
        "CRI runtime at unix:///run/containerd/containerd.sock: runtime.v1.RuntimeService/Status: "
        "no answer within 2m0s (--runtime-request-timeout) (gRPC: Deadline Exceeded)");
}

TEST_CASE("cri errors: other codes keep gRPC's code and message", "[unit][cri]") {
  auto not_found = criCallError(kEndpoint, {"runtime.v1.RuntimeService/ContainerStatus",
                                            5,
                                            "container \"abc\" not found",
                                            std::chrono::seconds(1),
                                            {}});
  CHECK(not_found.code() == base::StatusCode::kNotFound);
  CHECK(not_found.message() ==
        "CRI runtime at unix:///run/containerd/containerd.sock: "
        "runtime.v1.RuntimeService/ContainerStatus: container \"abc\" not found");
  auto odd = criCallError(kEndpoint, {"m", 99, "what", {}, {}});
  CHECK(odd.code() == base::StatusCode::kUnknown);
}

TEST_CASE("cri version: only a runtime that answers runtime API v1 is accepted", "[unit][cri]") {
  CHECK(checkRuntimeVersion(kEndpoint, {"0.1.0", "containerd", "1.6.20", "v1"}).ok());
  auto old = checkRuntimeVersion(kEndpoint, {"0.1.0", "containerd", "1.4.13", "v1alpha2"});
  CHECK(old.code() == base::StatusCode::kFailedPrecondition);
  CHECK(old.message() ==
        "CRI runtime at unix:///run/containerd/containerd.sock: runtime containerd 1.4.13 "
        "answers runtime API version \"v1alpha2\", nodeagent speaks \"v1\"");
}

TEST_CASE("cri status: conditions are found by type", "[unit][cri]") {
  RuntimeStatus status{{{"RuntimeReady", true, "", ""},
                        {"NetworkReady", false, "NetworkPluginNotReady", "cni not initialized"}},
                       {}};
  REQUIRE(status.find(kRuntimeReady) != nullptr);
  CHECK(status.find(kRuntimeReady)->status);
  REQUIRE(status.find(kNetworkReady) != nullptr);
  CHECK(status.find(kNetworkReady)->reason == "NetworkPluginNotReady");
  CHECK(status.find("DiskReady") == nullptr);
}
