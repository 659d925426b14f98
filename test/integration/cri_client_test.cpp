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
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "agent/runtime/cri/api.grpc.pb.h"
#include "agent/runtime/cri/cri_runtime_config.h"
#include "agent/runtime/spec_extras.h"
#include "test/integration/other_grpc_server.h"
#include "test/support/containerd.h"
#include "test/support/pod_builder.h"
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

namespace {

// A CRI runtime service that answers RunPodSandbox and CreateContainer with an ID and keeps the
// last request of each, as it arrived on the wire.
class RecordingRuntimeService final : public ::runtime::v1::RuntimeService::Service {
 public:
  grpc::Status RunPodSandbox(grpc::ServerContext* /*context*/,
                             const ::runtime::v1::RunPodSandboxRequest* request,
                             ::runtime::v1::RunPodSandboxResponse* response) override {
    std::lock_guard lock(mu_);
    sandbox_ = *request;
    response->set_pod_sandbox_id("sandbox-1");
    return grpc::Status::OK;
  }
  grpc::Status CreateContainer(grpc::ServerContext* /*context*/,
                               const ::runtime::v1::CreateContainerRequest* request,
                               ::runtime::v1::CreateContainerResponse* response) override {
    std::lock_guard lock(mu_);
    container_ = *request;
    response->set_container_id("container-1");
    return grpc::Status::OK;
  }
  ::runtime::v1::RunPodSandboxRequest sandbox() {
    std::lock_guard lock(mu_);
    return sandbox_;
  }
  ::runtime::v1::CreateContainerRequest container() {
    std::lock_guard lock(mu_);
    return container_;
  }

 private:
  std::mutex mu_;
  ::runtime::v1::RunPodSandboxRequest sandbox_;
  ::runtime::v1::CreateContainerRequest container_;
};

}  // namespace

TEST_CASE(
    "cri client: the pod's SELinux options go to RunPodSandbox and a container's effective ones "
    "to CreateContainer, as CRI's selinux_options",
    "[integration][cri]") {
  TempDir dir("nodeagent-cri");
  const std::string endpoint = "unix://" + (dir / "grpc.sock").string();
  RecordingRuntimeService service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  builder.AddListeningPort(endpoint, grpc::InsecureServerCredentials());
  auto server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  auto client = makeClient(endpoint);

  auto pod = testing::PodBuilder()
                 .name("labelled")
                 .uid("uid-labelled")
                 .container("main", {"sleep", "60"})
                 .container("side", {"sleep", "60"})
                 .edit([](nlohmann::json& j) {
                   j["spec"]["securityContext"]["seLinuxOptions"] = {{"user", "system_u"},
                                                                     {"role", "system_r"},
                                                                     {"type", "spc_t"},
                                                                     {"level", "s0:c1,c2"}};
                   j["spec"]["containers"][1]["securityContext"]["seLinuxOptions"] = {
                       {"type", "container_t"}, {"level", "s0:c3"}};
                 })
                 .build();
  nodeagent::runtime::PodSandboxConfig sandbox_config;
  sandbox_config.name = "labelled";
  sandbox_config.uid = "uid-labelled";
  sandbox_config.namespace_ = "default";
  sandbox_config.selinux_options = nodeagent::runtime::seLinuxOptionsFor(*pod, "");
  const auto cri_sandbox = nodeagent::runtime::toCriSandbox(sandbox_config);
  REQUIRE(client->runPodSandbox(cri_sandbox).ok());
  const auto sent = service.sandbox().config().linux().security_context();
  REQUIRE(sent.has_selinux_options());
  CHECK(sent.selinux_options().user() == "system_u");
  CHECK(sent.selinux_options().role() == "system_r");
  CHECK(sent.selinux_options().type() == "spc_t");
  CHECK(sent.selinux_options().level() == "s0:c1,c2");

  nodeagent::runtime::StartContainerOptions options;
  const nodeagent::runtime::DefaultUser root{0, "", "the image's user is root"};
  for (const auto& [index, type, level] :
       {std::tuple{0, "spc_t", "s0:c1,c2"}, std::tuple{1, "container_t", "s0:c3"}}) {
    auto config = nodeagent::runtime::containerConfig(*pod, pod->spec->containers[index], 0,
                                                      options, "sha256:feed", root);
    REQUIRE(config.ok());
    REQUIRE(client->createContainer("sandbox-1", *config, cri_sandbox).ok());
    const auto request = service.container();
    const auto& selinux = request.config().linux().security_context().selinux_options();
    INFO("container " << pod->spec->containers[index].name);
    CHECK(selinux.type() == type);
    CHECK(selinux.level() == level);
    // The container's own options replace the pod's whole (kubelet's effective context).
    CHECK(selinux.user() == (index == 0 ? "system_u" : ""));
    CHECK(request.sandbox_config().linux().security_context().selinux_options().type() == "spc_t");
  }

  SECTION("a pod without them sends none") {
    nodeagent::runtime::PodSandboxConfig plain = sandbox_config;
    plain.selinux_options.reset();
    REQUIRE(client->runPodSandbox(nodeagent::runtime::toCriSandbox(plain)).ok());
    CHECK_FALSE(service.sandbox().config().linux().security_context().has_selinux_options());
  }
  server->Shutdown();
}
