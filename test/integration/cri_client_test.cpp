// CriClient against a containerd of the test's own (test/support/containerd.h), and against
// sockets that are not a CRI runtime: the errors an operator sees for a wrong
// --container-runtime-endpoint.
#include "agent/runtime/cri/cri_client.h"

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/runtime/cri/api.grpc.pb.h"
#include "test/integration/other_grpc_server.h"
#include "test/support/containerd.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace nodeagent::runtime::cri;
using nodeagent::testing::TempDir;

namespace {

std::unique_ptr<CriClient> makeClient(
    const std::string& endpoint, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto client = CriClient::create({endpoint, timeout});
  REQUIRE(client.ok());
  return *std::move(client);
}

int bindUnixSocket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// A Unix socket server that is not gRPC: to every connection it answers `reply` (an HTTP/1.1
// error, say) and closes it; or, with an empty `reply`, reads and never answers.
class PlainSocketServer {
 public:
  PlainSocketServer(const std::string& path, std::string reply) : reply_(std::move(reply)) {
    fd_ = bindUnixSocket(path);
    REQUIRE(::listen(fd_, 16) == 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~PlainSocketServer() {
    ::shutdown(fd_, SHUT_RDWR);  // wakes accept()
    thread_.join();
    for (int fd : held_) ::close(fd);
    ::close(fd_);
  }

 private:
  void serve() {
    for (;;) {
      int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) return;
      if (reply_.empty()) {
        held_.push_back(conn);  // silent: the client waits for its deadline
        continue;
      }
      [[maybe_unused]] auto n = ::send(conn, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      ::close(conn);
    }
  }

  std::string reply_;
  int fd_ = -1;
  std::vector<int> held_;
  std::thread thread_;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("cri client: the test's containerd answers Version as a CRI v1 runtime",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  auto client = makeClient(containerd.endpoint());
  auto version = client->version();
  INFO(containerd.logTail());
  REQUIRE(version.ok());
  CHECK(version->runtime_name == "containerd");
  CHECK(version->runtime_api_version == "v1");
  CHECK(version->version == "0.1.0");
  CHECK(contains(version->runtime_version, "1.6"));
}

TEST_CASE("cri client: Status of containerd without CNI is RuntimeReady but not NetworkReady",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerdOptions options;
  options.cni = false;
  testing::TestContainerd containerd(options);
  auto client = makeClient(containerd.endpoint());
  auto status = client->status();
  INFO(containerd.logTail());
  REQUIRE(status.ok());
  const RuntimeCondition* runtime_ready = status->find(kRuntimeReady);
  REQUIRE(runtime_ready != nullptr);
  CHECK(runtime_ready->status);
  // No CNI config in the test's containerd: its network is not ready, and it says why.
  const RuntimeCondition* network_ready = status->find(kNetworkReady);
  REQUIRE(network_ready != nullptr);
  CHECK_FALSE(network_ready->status);
  CHECK(network_ready->reason == "NetworkPluginNotReady");
  CHECK(contains(network_ready->message, "cni"));
}

TEST_CASE("cri client: Status of containerd with the test's CNI bridge is NetworkReady",
          "[integration][cri]") {
  testing::skipUnlessCniCanRun();
  testing::TestContainerd containerd;
  auto client = makeClient(containerd.endpoint());
  // containerd loads the CNI config when it starts.
  const RuntimeCondition* network_ready = nullptr;
  base::StatusOr<RuntimeStatus> status = base::unknownError("not asked");
  CHECK(testing::eventually(
      [&] {
        status = client->status();
        network_ready = status.ok() ? status->find(kNetworkReady) : nullptr;
        return network_ready != nullptr && network_ready->status;
      },
      std::chrono::seconds(10)));
  INFO(containerd.logTail());
  CHECK(containerd.podSubnet().starts_with("10.20"));
  CHECK(containerd.podSubnet().ends_with(".0/24"));
  CHECK(containerd.bridgeName().size() <= 15);
}

TEST_CASE("cri client: ImageStatus shows the busybox test image imported into containerd",
          "[integration][cri]") {
  testing::skipUnlessContainerdCanRun();
  testing::TestContainerd containerd;
  auto client = makeClient(containerd.endpoint());
  auto before = client->imageStatus("nodeagent.test/busybox:1");
  REQUIRE(before.ok());
  CHECK_FALSE(before->has_value());

  containerd.importTestImages();
  auto image = client->imageStatus("nodeagent.test/busybox:1");
  INFO(containerd.logTail());
  REQUIRE(image.ok());
  REQUIRE(image->has_value());
  const ImageInfo& busybox = **image;
  CHECK(busybox.id.starts_with("sha256:"));
  CHECK(busybox.repo_tags == std::vector<std::string>{"nodeagent.test/busybox:1"});
  CHECK(busybox.size > 500 * 1024);      // busybox itself, compressed
  CHECK_FALSE(busybox.uid.has_value());  // no User: root by default

  auto nonroot = client->imageStatus("nodeagent.test/busybox-nonroot:1");
  REQUIRE(nonroot.ok());
  REQUIRE(nonroot->has_value());
  CHECK((*nonroot)->uid == std::optional<int64_t>(1000));
  CHECK((*nonroot)->id != busybox.id);  // the config differs
  auto by_id = client->imageStatus(busybox.id);
  REQUIRE(by_id.ok());
  REQUIRE(by_id->has_value());
  CHECK((*by_id)->repo_tags == busybox.repo_tags);
}

TEST_CASE("cri client: no socket at the endpoint is UNAVAILABLE and names the endpoint",
          "[integration][cri]") {
  TempDir dir("nodeagent-cri");
  const std::string endpoint = "unix://" + (dir / "missing.sock").string();
  auto client = makeClient(endpoint);
  auto version = client->version();
  REQUIRE_FALSE(version.ok());
  CHECK(version.status().code() == base::StatusCode::kUnavailable);
  CHECK(contains(version.status().message(), "CRI runtime at " + endpoint +
                                                 ": runtime.v1.RuntimeService/Version: no "
                                                 "socket at " +
                                                 (dir / "missing.sock").string()));
  auto status = client->status();
  CHECK(contains(status.status().message(), "runtime.v1.RuntimeService/Status: no socket at"));
}

TEST_CASE("cri client: a socket nobody listens on is a refused connection", "[integration][cri]") {
  TempDir dir("nodeagent-cri");
  const std::string path = (dir / "dead.sock").string();
  int fd = bindUnixSocket(path);  // bound, never listening: what a runtime that died leaves
  auto version = makeClient("unix://" + path)->version();
  ::close(fd);
  REQUIRE_FALSE(version.ok());
  CHECK(version.status().code() == base::StatusCode::kUnavailable);
  CHECK(contains(version.status().message(), "CRI runtime at unix://" + path));
  CHECK(contains(version.status().message(), "connection refused on " + path));
}

TEST_CASE("cri client: a socket server that is not gRPC is named as such", "[integration][cri]") {
  TempDir dir("nodeagent-cri");
  const std::string path = (dir / "http.sock").string();
  PlainSocketServer server(path, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  auto version = makeClient("unix://" + path)->version();
  REQUIRE_FALSE(version.ok());
  INFO(version.status().message());
  CHECK(version.status().code() == base::StatusCode::kUnavailable);
  CHECK(contains(version.status().message(), "CRI runtime at unix://" + path));
  CHECK(contains(version.status().message(), "accepted a connection but did not answer as a gRPC"));
}

TEST_CASE("cri client: a server that never answers fails at the request timeout",
          "[integration][cri]") {
  TempDir dir("nodeagent-cri");
  const std::string path = (dir / "silent.sock").string();
  PlainSocketServer server(path, "");
  auto version = makeClient("unix://" + path, std::chrono::milliseconds(500))->version();
  REQUIRE_FALSE(version.ok());
  INFO(version.status().message());
  CHECK(version.status().code() == base::StatusCode::kDeadlineExceeded);
  CHECK(contains(version.status().message(), "no answer within 500ms (--runtime-request-timeout)"));
}

TEST_CASE("cri client: a gRPC server without the CRI v1 runtime service is UNIMPLEMENTED",
          "[integration][cri]") {
  TempDir dir("nodeagent-cri");
  const std::string endpoint = "unix://" + (dir / "grpc.sock").string();
  // A gRPC server of another API: it serves some service (every method UNIMPLEMENTED), not
  // runtime.v1.RuntimeService.
  testing::OtherGrpcServer server(endpoint);
  auto version = makeClient(endpoint)->version();
  server.shutdown();
  REQUIRE_FALSE(version.ok());
  INFO(version.status().message());
  CHECK(version.status().code() == base::StatusCode::kUnimplemented);
  CHECK(contains(version.status().message(), "CRI runtime at " + endpoint));
  CHECK(contains(version.status().message(), "not a CRI v1 runtime"));
}

TEST_CASE("cri client: a bad endpoint or timeout is refused when the client is made",
          "[integration][cri]") {
  CHECK(CriClient::create({"tcp://127.0.0.1:10010", std::chrono::seconds(1)}).status().code() ==
        base::StatusCode::kInvalidArgument);
  CHECK(CriClient::create({"unix:///tmp/x.sock", std::chrono::milliseconds(0)}).status().code() ==
        base::StatusCode::kInvalidArgument);
}
