#include "agent/runtime/cri/cri_client.h"

#include <grpc/support/time.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "agent/runtime/cri/api.grpc.pb.h"
#include "agent/runtime/cri/cri_convert.h"

namespace nodeagent::runtime::cri {

namespace {

// kubelet's maxMsgSize for CRI responses (ListContainers on a busy node is large).
constexpr int kMaxMessageBytes = 16 * 1024 * 1024;

// What a pull may take beyond the request timeout: kubelet gives pulls no deadline (a large image
// on a slow registry takes long); one hour keeps a hung pull from holding its thread for ever.
constexpr std::chrono::milliseconds kPullAllowance = std::chrono::hours(1);

// The CRI API version nodeagent speaks, sent in VersionRequest as kubelet does.
constexpr const char* kCriApiVersion = "v1";

namespace v1 = ::runtime::v1;
using std::chrono::milliseconds;

std::shared_ptr<grpc::Channel> makeChannel(const CriEndpoint& endpoint) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // A local socket: never through an HTTP proxy from the environment.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  return grpc::CreateCustomChannel(endpoint.uri, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

struct CriClient::Impl {
  CriClientOptions options;
  CriEndpoint endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<::runtime::v1::RuntimeService::Stub> runtime;
  std::unique_ptr<::runtime::v1::ImageService::Stub> image;

  base::Status failure(std::string_view method, const grpc::Status& status,
                       std::chrono::milliseconds timeout) const {
    CallFailure failure{
        method, static_cast<int>(status.error_code()), status.error_message(), timeout, {}};
    // gRPC reports every connection failure as UNAVAILABLE; a plain connect() tells them apart.
    if (failure.grpc_code == kGrpcUnavailable)
      failure.probe = probeUnixSocket(endpoint.socket_path);
    return criCallError(endpoint, failure);
  }

  // One unary call: `rpc(context)` with the request timeout plus `extra` (the part of the call
  // the runtime spends waiting on purpose: a grace period, an exec's timeout) as its deadline.
  template <typename Rpc>
  base::Status call(std::string_view method, Rpc&& rpc,
                    std::chrono::milliseconds extra = std::chrono::milliseconds::zero()) const {
    grpc::ClientContext context;
    const auto timeout = options.request_timeout + extra;
    // A relative deadline on gRPC's monotonic clock (no wall-clock read here).
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    context.set_deadline(
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(millis, GPR_TIMESPAN)));
    grpc::Status status = rpc(context);
    if (!status.ok()) return failure(method, status, timeout);
    return base::okStatus();
  }
};

const RuntimeCondition* RuntimeStatus::find(const std::string& type) const {
  for (const auto& condition : conditions) {
    if (condition.type == type) return &condition;
  }
  return nullptr;
}

base::StatusOr<std::unique_ptr<CriClient>> CriClient::create(CriClientOptions options) {
  auto endpoint = parseCriEndpoint(options.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  if (options.request_timeout <= std::chrono::milliseconds::zero()) {
    return base::invalidArgumentError("CRI runtime at " + endpoint->uri +
                                      ": the request timeout must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->endpoint = *std::move(endpoint);
  impl->channel = makeChannel(impl->endpoint);
  impl->runtime = ::runtime::v1::RuntimeService::NewStub(impl->channel);
  impl->image = ::runtime::v1::ImageService::NewStub(impl->channel);
  return std::unique_ptr<CriClient>(new CriClient(std::move(impl)));
}

CriClient::CriClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CriClient::~CriClient() = default;

const CriEndpoint& CriClient::endpoint() const { return impl_->endpoint; }

base::StatusOr<RuntimeVersion> CriClient::version() {
  ::runtime::v1::VersionRequest request;
  request.set_version(kCriApiVersion);
  ::runtime::v1::VersionResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/Version", [&](auto& context) {
    return impl_->runtime->Version(&context, request, &response);
  });
  if (!status.ok()) return status;
  RuntimeVersion version{response.version(), response.runtime_name(), response.runtime_version(),
                         response.runtime_api_version()};
  if (auto check = checkRuntimeVersion(impl_->endpoint, version); !check.ok()) return check;
  return version;
}

base::StatusOr<RuntimeStatus> CriClient::status(bool verbose) {
  ::runtime::v1::StatusRequest request;
  request.set_verbose(verbose);
  ::runtime::v1::StatusResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/Status", [&](auto& context) {
    return impl_->runtime->Status(&context, request, &response);
  });
  if (!status.ok()) return status;
  RuntimeStatus result;
  for (const auto& c : response.status().conditions()) {
    result.conditions.push_back({c.type(), c.status(), c.reason(), c.message()});
  }
  result.info.insert(response.info().begin(), response.info().end());
  return result;
}

base::Status CriClient::updateRuntimeConfig(const std::string& pod_cidrs) {
  v1::UpdateRuntimeConfigRequest request;
  request.mutable_runtime_config()->mutable_network_config()->set_pod_cidr(pod_cidrs);
  v1::UpdateRuntimeConfigResponse response;
  return impl_->call("runtime.v1.RuntimeService/UpdateRuntimeConfig", [&](auto& context) {
    return impl_->runtime->UpdateRuntimeConfig(&context, request, &response);
  });
}

base::StatusOr<std::optional<ImageInfo>> CriClient::imageStatus(const std::string& image) {
  ::runtime::v1::ImageStatusRequest request;
  request.mutable_image()->set_image(image);
  ::runtime::v1::ImageStatusResponse response;
  auto status = impl_->call("runtime.v1.ImageService/ImageStatus", [&](auto& context) {
    return impl_->image->ImageStatus(&context, request, &response);
  });
  if (!status.ok()) return status;
  if (!response.has_image() || response.image().id().empty()) return std::optional<ImageInfo>();
  ImageInfo info = fromProto(response.image());
  return std::optional<ImageInfo>(std::move(info));
}

// ---- Pod sandboxes ----

base::StatusOr<std::string> CriClient::runPodSandbox(const PodSandboxConfig& config) {
  v1::RunPodSandboxRequest request;
  toProto(config, request.mutable_config());
  v1::RunPodSandboxResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/RunPodSandbox", [&](auto& context) {
    return impl_->runtime->RunPodSandbox(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response.pod_sandbox_id();
}

base::Status CriClient::stopPodSandbox(const std::string& sandbox_id) {
  v1::StopPodSandboxRequest request;
  request.set_pod_sandbox_id(sandbox_id);
  v1::StopPodSandboxResponse response;
  return impl_->call("runtime.v1.RuntimeService/StopPodSandbox", [&](auto& context) {
    return impl_->runtime->StopPodSandbox(&context, request, &response);
  });
}

base::Status CriClient::removePodSandbox(const std::string& sandbox_id) {
  v1::RemovePodSandboxRequest request;
  request.set_pod_sandbox_id(sandbox_id);
  v1::RemovePodSandboxResponse response;
  return impl_->call("runtime.v1.RuntimeService/RemovePodSandbox", [&](auto& context) {
    return impl_->runtime->RemovePodSandbox(&context, request, &response);
  });
}

base::StatusOr<PodSandboxStatus> CriClient::podSandboxStatus(const std::string& sandbox_id) {
  v1::PodSandboxStatusRequest request;
  request.set_pod_sandbox_id(sandbox_id);
  v1::PodSandboxStatusResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/PodSandboxStatus", [&](auto& context) {
    return impl_->runtime->PodSandboxStatus(&context, request, &response);
  });
  if (!status.ok()) return status;
  return fromProto(response.status());
}

base::StatusOr<std::vector<PodSandbox>> CriClient::listPodSandbox(const PodSandboxFilter& filter) {
  v1::ListPodSandboxRequest request;
  toProto(filter, request.mutable_filter());
  v1::ListPodSandboxResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/ListPodSandbox", [&](auto& context) {
    return impl_->runtime->ListPodSandbox(&context, request, &response);
  });
  if (!status.ok()) return status;
  std::vector<PodSandbox> sandboxes;
  for (const auto& item : response.items()) sandboxes.push_back(fromProto(item));
  return sandboxes;
}

// ---- Containers ----

base::StatusOr<std::string> CriClient::createContainer(const std::string& sandbox_id,
                                                       const ContainerConfig& config,
                                                       const PodSandboxConfig& sandbox_config) {
  v1::CreateContainerRequest request;
  request.set_pod_sandbox_id(sandbox_id);
  toProto(config, request.mutable_config());
  toProto(sandbox_config, request.mutable_sandbox_config());
  v1::CreateContainerResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/CreateContainer", [&](auto& context) {
    return impl_->runtime->CreateContainer(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response.container_id();
}

base::Status CriClient::startContainer(const std::string& container_id) {
  v1::StartContainerRequest request;
  request.set_container_id(container_id);
  v1::StartContainerResponse response;
  return impl_->call("runtime.v1.RuntimeService/StartContainer", [&](auto& context) {
    return impl_->runtime->StartContainer(&context, request, &response);
  });
}

base::Status CriClient::stopContainer(const std::string& container_id,
                                      std::chrono::seconds timeout) {
  v1::StopContainerRequest request;
  request.set_container_id(container_id);
  request.set_timeout(timeout.count());
  v1::StopContainerResponse response;
  return impl_->call(
      "runtime.v1.RuntimeService/StopContainer",
      [&](auto& context) { return impl_->runtime->StopContainer(&context, request, &response); },
      std::max(milliseconds(timeout), milliseconds::zero()));
}

base::Status CriClient::removeContainer(const std::string& container_id) {
  v1::RemoveContainerRequest request;
  request.set_container_id(container_id);
  v1::RemoveContainerResponse response;
  return impl_->call("runtime.v1.RuntimeService/RemoveContainer", [&](auto& context) {
    return impl_->runtime->RemoveContainer(&context, request, &response);
  });
}

base::StatusOr<std::vector<Container>> CriClient::listContainers(const ContainerFilter& filter) {
  v1::ListContainersRequest request;
  toProto(filter, request.mutable_filter());
  v1::ListContainersResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/ListContainers", [&](auto& context) {
    return impl_->runtime->ListContainers(&context, request, &response);
  });
  if (!status.ok()) return status;
  std::vector<Container> containers;
  for (const auto& item : response.containers()) containers.push_back(fromProto(item));
  return containers;
}

base::StatusOr<ContainerStatus> CriClient::containerStatus(const std::string& container_id) {
  v1::ContainerStatusRequest request;
  request.set_container_id(container_id);
  v1::ContainerStatusResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/ContainerStatus", [&](auto& context) {
    return impl_->runtime->ContainerStatus(&context, request, &response);
  });
  if (!status.ok()) return status;
  return fromProto(response.status());
}

base::Status CriClient::reopenContainerLog(const std::string& container_id) {
  v1::ReopenContainerLogRequest request;
  request.set_container_id(container_id);
  v1::ReopenContainerLogResponse response;
  return impl_->call("runtime.v1.RuntimeService/ReopenContainerLog", [&](auto& context) {
    return impl_->runtime->ReopenContainerLog(&context, request, &response);
  });
}

base::StatusOr<ExecSyncResult> CriClient::execSync(const std::string& container_id,
                                                   const std::vector<std::string>& cmd,
                                                   std::chrono::seconds timeout) {
  v1::ExecSyncRequest request;
  request.set_container_id(container_id);
  request.mutable_cmd()->Add(cmd.begin(), cmd.end());
  request.set_timeout(timeout.count());
  v1::ExecSyncResponse response;
  auto status = impl_->call(
      "runtime.v1.RuntimeService/ExecSync",
      [&](auto& context) { return impl_->runtime->ExecSync(&context, request, &response); },
      std::max(milliseconds(timeout), milliseconds::zero()));
  if (!status.ok()) return status;
  return ExecSyncResult{response.stdout(), response.stderr(), response.exit_code()};
}

// ---- Streaming ----

base::StatusOr<std::string> CriClient::exec(const std::string& container_id,
                                            const std::vector<std::string>& cmd,
                                            const StreamRequest& streams) {
  v1::ExecRequest request;
  request.set_container_id(container_id);
  request.mutable_cmd()->Add(cmd.begin(), cmd.end());
  request.set_tty(streams.tty);
  request.set_stdin(streams.stdin_stream);
  request.set_stdout(streams.stdout_stream);
  request.set_stderr(streams.stderr_stream);
  v1::ExecResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/Exec", [&](auto& context) {
    return impl_->runtime->Exec(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response.url();
}

base::StatusOr<std::string> CriClient::attach(const std::string& container_id,
                                              const StreamRequest& streams) {
  v1::AttachRequest request;
  request.set_container_id(container_id);
  request.set_tty(streams.tty);
  request.set_stdin(streams.stdin_stream);
  request.set_stdout(streams.stdout_stream);
  request.set_stderr(streams.stderr_stream);
  v1::AttachResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/Attach", [&](auto& context) {
    return impl_->runtime->Attach(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response.url();
}

base::StatusOr<std::string> CriClient::portForward(const std::string& sandbox_id,
                                                   const std::vector<int32_t>& ports) {
  v1::PortForwardRequest request;
  request.set_pod_sandbox_id(sandbox_id);
  request.mutable_port()->Add(ports.begin(), ports.end());
  v1::PortForwardResponse response;
  auto status = impl_->call("runtime.v1.RuntimeService/PortForward", [&](auto& context) {
    return impl_->runtime->PortForward(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response.url();
}

// ---- Images ----

base::StatusOr<std::string> CriClient::pullImage(const std::string& image,
                                                 const std::optional<AuthConfig>& auth) {
  v1::PullImageRequest request;
  request.mutable_image()->set_image(image);
  if (auth) toProto(*auth, request.mutable_auth());
  v1::PullImageResponse response;
  auto status = impl_->call(
      "runtime.v1.ImageService/PullImage",
      [&](auto& context) { return impl_->image->PullImage(&context, request, &response); },
      kPullAllowance);
  if (!status.ok()) return status;
  return response.image_ref();
}

base::StatusOr<std::vector<ImageInfo>> CriClient::listImages() {
  v1::ListImagesRequest request;
  v1::ListImagesResponse response;
  auto status = impl_->call("runtime.v1.ImageService/ListImages", [&](auto& context) {
    return impl_->image->ListImages(&context, request, &response);
  });
  if (!status.ok()) return status;
  std::vector<ImageInfo> images;
  for (const auto& item : response.images()) images.push_back(fromProto(item));
  return images;
}

base::Status CriClient::removeImage(const std::string& image) {
  v1::RemoveImageRequest request;
  request.mutable_image()->set_image(image);
  v1::RemoveImageResponse response;
  return impl_->call("runtime.v1.ImageService/RemoveImage", [&](auto& context) {
    return impl_->image->RemoveImage(&context, request, &response);
  });
}

base::StatusOr<ImageFsUsage> CriClient::imageFsInfo() {
  v1::ImageFsInfoRequest request;
  v1::ImageFsInfoResponse response;
  auto status = impl_->call("runtime.v1.ImageService/ImageFsInfo", [&](auto& context) {
    return impl_->image->ImageFsInfo(&context, request, &response);
  });
  if (!status.ok()) return status;
  if (response.image_filesystems().empty()) {
    return base::notFoundError("CRI runtime at " + impl_->endpoint.uri +
                               ": ImageFsInfo reports no image filesystem");
  }
  const auto& fs = response.image_filesystems(0);
  return ImageFsUsage{fs.fs_id().mountpoint(), fs.used_bytes().value(), fs.inodes_used().value()};
}

base::Status checkRuntimeVersion(const CriEndpoint& endpoint, const RuntimeVersion& version) {
  if (version.runtime_api_version == kCriApiVersion) return base::okStatus();
  return base::failedPreconditionError(
      "CRI runtime at " + endpoint.uri + ": runtime " + version.runtime_name + " " +
      version.runtime_version + " answers runtime API version \"" + version.runtime_api_version +
      "\", nodeagent speaks \"" + kCriApiVersion + "\"");
}

}  // namespace nodeagent::runtime::cri
