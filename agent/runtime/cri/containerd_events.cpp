#include "agent/runtime/cri/containerd_events.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "agent/runtime/cri/containerd_events.grpc.pb.h"
#include "agent/runtime/cri/cri_endpoint.h"
#include "base/log.h"
#include "base/printable.h"

namespace nodeagent::runtime::cri {
namespace {

NODEAGENT_LOGGER("runtime")

namespace events = ::containerd::services::events::v1;

constexpr const char* kTaskStartTopic = "/tasks/start";
constexpr const char* kTaskExitTopic = "/tasks/exit";
// containerd reads the namespace of a call from this gRPC metadata key.
constexpr const char* kNamespaceMetadata = "containerd-namespace";

// containerd's filters: one of them must match; the conditions of one are joined by ','.
std::vector<std::string> subscribeFilters(const std::string& ns) {
  std::vector<std::string> out;
  for (const char* topic : {kTaskStartTopic, kTaskExitTopic}) {
    out.push_back("namespace==\"" + ns + "\",topic==\"" + topic + "\"");
  }
  return out;
}

base::SystemTime toSystemTime(const events::Timestamp& t) {
  if (t.seconds() <= 0 && t.nanos() <= 0) return base::SystemTime{};
  return base::SystemTime(std::chrono::duration_cast<base::SystemTime::duration>(
      std::chrono::seconds(t.seconds()) + std::chrono::nanoseconds(t.nanos())));
}

// The envelope's task event, or nullopt for another topic or namespace or bytes that do not parse.
std::optional<TaskEvent> decode(const events::Envelope& envelope, const std::string& ns) {
  if (envelope.namespace_() != ns) return std::nullopt;
  TaskEvent out;
  if (envelope.topic() == kTaskStartTopic) {
    events::TaskStart start;
    if (!start.ParseFromString(envelope.event().value())) return std::nullopt;
    out.type = TaskEvent::Type::kStart;
    out.container_id = start.container_id();
    out.pid = start.pid();
  } else if (envelope.topic() == kTaskExitTopic) {
    events::TaskExit exit;
    if (!exit.ParseFromString(envelope.event().value())) return std::nullopt;
    out.type = TaskEvent::Type::kExit;
    out.container_id = exit.container_id();
    out.process_id = exit.id();
    out.pid = exit.pid();
    out.exit_status = exit.exit_status();
    out.exited_at = toSystemTime(exit.exited_at());
  } else {
    return std::nullopt;
  }
  if (out.container_id.empty()) return std::nullopt;
  return out;
}

std::shared_ptr<grpc::Channel> makeEventsChannel(const CriEndpoint& endpoint,
                                                 base::Duration max_backoff) {
  grpc::ChannelArguments args;
  // A local socket: never through an HTTP proxy from the environment.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // The channel's own reconnection backoff would otherwise grow to two minutes while containerd
  // is down; keep it within the stream's.
  const auto max_ms = std::chrono::duration_cast<std::chrono::milliseconds>(max_backoff).count();
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(max_ms));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::min<int64_t>(max_ms, 100)));
  return grpc::CreateCustomChannel(endpoint.uri, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

bool waitUnlessStopped(std::stop_token stop, base::Duration d) {
  if (stop.stop_requested()) return false;
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  cv.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

struct ContainerdEvents::Impl {
  ContainerdEventsOptions options;
  CriEndpoint endpoint;
  Handler handler;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<events::Events::Stub> stub;

  // One subscription, until the stream ends or `stop`; its final status. `received` tells whether
  // any event came.
  grpc::Status subscribeOnce(std::stop_token stop, bool& received) {
    grpc::ClientContext context;
    context.AddMetadata(kNamespaceMetadata, options.containerd_namespace);
    // Cancelling the context ends a Read() blocked in another thread; it also holds when stop was
    // requested before the call started.
    std::stop_callback cancel(stop, [&context] { context.TryCancel(); });
    events::SubscribeRequest request;
    for (auto& f : subscribeFilters(options.containerd_namespace)) request.add_filters(f);
    auto reader = stub->Subscribe(&context, request);
    events::Envelope envelope;
    while (reader->Read(&envelope)) {
      received = true;
      if (auto event = decode(envelope, options.containerd_namespace)) handler(*event, stop);
    }
    return reader->Finish();
  }

  void run(std::stop_token stop) {
    base::Duration backoff = options.initial_backoff;
    bool reported = false;  // the current outage was logged
    bool unimplemented_logged = false;
    while (!stop.stop_requested()) {
      bool received = false;
      const grpc::Status status = subscribeOnce(stop, received);
      if (stop.stop_requested()) break;
      if (received) {
        backoff = options.initial_backoff;
        reported = false;
      }
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        if (!unimplemented_logged) {
          log()->info(
              "Container events are not available from the runtime; the PLEG relists only "
              "endpoint={} err={}",
              endpoint.uri, base::goQuote(status.error_message()));
          unimplemented_logged = true;
        }
        backoff = options.max_backoff;
      } else if (!reported) {
        log()->warn("containerd event stream ended, subscribing again endpoint={} code={} err={}",
                    endpoint.uri, static_cast<int>(status.error_code()),
                    base::goQuote(status.error_message()));
        reported = true;
      } else {
        log()->debug("containerd event stream still down endpoint={} code={}", endpoint.uri,
                     static_cast<int>(status.error_code()));
      }
      if (!waitUnlessStopped(stop, backoff)) break;
      backoff = std::min(backoff * 2, options.max_backoff);
    }
  }
};

base::StatusOr<std::unique_ptr<ContainerdEvents>> ContainerdEvents::start(
    ContainerdEventsOptions options, Handler handler) {
  auto endpoint = parseCriEndpoint(options.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->endpoint = *std::move(endpoint);
  impl->handler = std::move(handler);
  impl->channel = makeEventsChannel(impl->endpoint, impl->options.max_backoff);
  impl->stub = events::Events::NewStub(impl->channel);
  return std::unique_ptr<ContainerdEvents>(new ContainerdEvents(std::move(impl)));
}

ContainerdEvents::ContainerdEvents(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)),
      thread_([impl = impl_.get()](std::stop_token stop) { impl->run(std::move(stop)); }) {}

ContainerdEvents::~ContainerdEvents() { stop(); }

void ContainerdEvents::stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  thread_.join();
}

}  // namespace nodeagent::runtime::cri
