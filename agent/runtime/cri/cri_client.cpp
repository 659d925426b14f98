#include "agent/runtime/cri/cri_client.h"

#include <grpcpp/grpcpp.h>

#include "agent/runtime/cri/api.grpc.pb.h"

namespace nodeagent::runtime::cri {

namespace {

// kubelet's maxMsgSize for CRI responses (ListContainers on a busy node is large).
constexpr int kMaxMessageBytes = 16 * 1024 * 1024;

// The CRI API version nodeagent speaks, sent in VersionRequest as kubelet does.
constexpr const char* kCriApiVersion = "v1";

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

  void prepare(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() + options.request_timeout);
  }

  base::Status failure(std::string_view method, const grpc::Status& status) const {
    CallFailure failure{method,
                        static_cast<int>(status.error_code()),
                        status.error_message(),
                        options.request_timeout,
                        {}};
    // gRPC reports every connection failure as UNAVAILABLE; a plain connect() tells them apart.
    if (failure.grpc_code == kGrpcUnavailable)
      failure.probe = probeUnixSocket(endpoint.socket_path);
    return criCallError(endpoint, failure);
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
  grpc::ClientContext context;
  impl_->prepare(context);
  ::runtime::v1::VersionRequest request;
  request.set_version(kCriApiVersion);
  ::runtime::v1::VersionResponse response;
  grpc::Status status = impl_->runtime->Version(&context, request, &response);
  if (!status.ok()) return impl_->failure("runtime.v1.RuntimeService/Version", status);
  RuntimeVersion version{response.version(), response.runtime_name(), response.runtime_version(),
                         response.runtime_api_version()};
  if (auto check = checkRuntimeVersion(impl_->endpoint, version); !check.ok()) return check;
  return version;
}

base::StatusOr<RuntimeStatus> CriClient::status() {
  grpc::ClientContext context;
  impl_->prepare(context);
  ::runtime::v1::StatusRequest request;
  ::runtime::v1::StatusResponse response;
  grpc::Status status = impl_->runtime->Status(&context, request, &response);
  if (!status.ok()) return impl_->failure("runtime.v1.RuntimeService/Status", status);
  RuntimeStatus result;
  for (const auto& c : response.status().conditions()) {
    result.conditions.push_back({c.type(), c.status(), c.reason(), c.message()});
  }
  return result;
}

base::StatusOr<std::optional<ImageInfo>> CriClient::imageStatus(const std::string& image) {
  grpc::ClientContext context;
  impl_->prepare(context);
  ::runtime::v1::ImageStatusRequest request;
  request.mutable_image()->set_image(image);
  ::runtime::v1::ImageStatusResponse response;
  grpc::Status status = impl_->image->ImageStatus(&context, request, &response);
  if (!status.ok()) return impl_->failure("runtime.v1.ImageService/ImageStatus", status);
  if (!response.has_image() || response.image().id().empty()) return std::optional<ImageInfo>();
  const auto& found = response.image();
  ImageInfo info{found.id(),
                 {found.repo_tags().begin(), found.repo_tags().end()},
                 {found.repo_digests().begin(), found.repo_digests().end()},
                 found.size(),
                 std::nullopt,
                 found.username()};
  if (found.has_uid()) info.uid = found.uid().value();
  return std::optional<ImageInfo>(std::move(info));
}

base::Status checkRuntimeVersion(const CriEndpoint& endpoint, const RuntimeVersion& version) {
  if (version.runtime_api_version == kCriApiVersion) return base::okStatus();
  return base::failedPreconditionError(
      "CRI runtime at " + endpoint.uri + ": runtime " + version.runtime_name + " " +
      version.runtime_version + " answers runtime API version \"" + version.runtime_api_version +
      "\", nodeagent speaks \"" + kCriApiVersion + "\"");
}

}  // namespace nodeagent::runtime::cri
