#include "agent/server/kubelet_server.h"
#include "agent/server/stream_proxy.h"

#include <nlohmann/json.hpp>

#include "agent/logs/container_logs.h"
#include "agent/server/kubelet_port_forward.h"
#include "agent/server/kubelet_remote_command.h"
#include "agent/server/kubelet_request.h"
#include "agent/server/pod_port.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

// How often a followed log checks that its container runs and its client is still there.
constexpr base::Duration kFollowCheckPeriod = std::chrono::seconds(1);

std::optional<UserInfo> certificateUser(const HttpRequest& request) {
  if (!request.peer) return std::nullopt;
  return UserInfo{request.peer->common_name, "", request.peer->organizations};
}

bool specHasContainer(const api::Pod& pod, std::string_view name) {
  return runtime::findSpecContainer(pod, name) != nullptr;
}

}  // namespace

struct KubeletServer::Impl {
  Impl(asio::any_io_executor executor, base::Clock& c, const AgentView& a, runtime::Runtime& r,
       const api::AsyncRestClient* client, KubeletServerOptions o)
      : clock(c),
        agent(a),
        runtime(r),
        options(std::move(o)),
        auth(options.auth, client, c),
        server(std::move(executor), c, options.http,
               HttpCoroutineHandler(
                   [this](std::shared_ptr<HttpCall> call) { return handle(std::move(call)); })) {}

  asio::awaitable<void> handle(std::shared_ptr<HttpCall> call);
  // Authentication and authorization; false when the call was answered (401, 403).
  asio::awaitable<bool> admit(HttpCall& call);
  asio::awaitable<void> route(std::shared_ptr<HttpCall> call);
  asio::awaitable<void> containerLogs(std::shared_ptr<HttpCall> call);
  asio::awaitable<void> remoteCommand(std::shared_ptr<HttpCall> call, bool attach);
  asio::awaitable<void> portForward(std::shared_ptr<HttpCall> call);
  // Hands the call over to the runtime's streaming server at `url`, or answers its error.
  asio::awaitable<void> proxyOrRefuse(std::shared_ptr<HttpCall> call,
                                      base::StatusOr<std::string> url);
  asio::awaitable<HttpResponse> runningPods();

  // The pod `ns`/`name` and its container `container`, or the answer that says why not.
  struct Target {
    AgentView::PodWithStatus pod;
    std::optional<HttpResponse> refusal;
  };
  Target findTarget(const std::string& ns, const std::string& name, const std::string& container);
  // The runtime's status of the container `id` of the pod (its log path, whether it runs).
  asio::awaitable<std::optional<runtime::ContainerStatus>> containerStatus(const api::Pod& pod,
                                                                           std::string id);

  base::Clock& clock;
  const AgentView& agent;
  runtime::Runtime& runtime;
  KubeletServerOptions options;
  KubeletAuth auth;
  HttpServer server;
};

asio::awaitable<void> KubeletServer::Impl::handle(std::shared_ptr<HttpCall> call) {
  auto admitted = admit(*call);
  const bool admit_ok = co_await std::move(admitted);
  if (!admit_ok) co_return;
  auto routed = route(call);
  co_await std::move(routed);
}

asio::awaitable<bool> KubeletServer::Impl::admit(HttpCall& call) {
  const HttpRequest& request = call.request();
  auto authenticate =
      auth.authenticate(certificateUser(request), std::string(request.header("Authorization")));
  AuthnResult who = co_await std::move(authenticate);
  if (request.peer_rejected) {
    // kubelet's authenticators fail on a certificate that does not verify, anonymous or not.
    who = AuthnResult{std::nullopt, "the client certificate does not verify"};
  }
  if (!who.user) {
    log()->debug("Unauthorized kubelet API request path={} err={}", request.path, who.error);
    HttpResponse answer{401, "application/json", unauthorizedBody(), nullptr};
    auto respond = call.respond(std::move(answer));
    co_await std::move(respond);
    co_return false;
  }
  RequestAttributes attributes =
      requestAttributes(*who.user, request.method, request.path, options.auth.node_name);
  auto authorize = auth.authorize(attributes);
  AuthzResult verdict = co_await std::move(authorize);
  if (!verdict.allowed) {
    log()->debug("Forbidden kubelet API request path={} user={} reason={} err={}", request.path,
                 attributes.user.name, verdict.reason, verdict.error);
    HttpResponse answer =
        verdict.error.empty()
            ? HttpResponse{403, "application/json", forbiddenBody(attributes, verdict.reason),
                           nullptr}
            : HttpResponse{500, "application/json", authorizationErrorBody(attributes), nullptr};
    auto respond = call.respond(std::move(answer));
    co_await std::move(respond);
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> KubeletServer::Impl::route(std::shared_ptr<HttpCall> call) {
  const std::string& path = call->request().path;
  auto starts = [&](std::string_view prefix) { return path.rfind(prefix, 0) == 0; };
  HttpResponse answer;
  // kubelet's routes take only these methods (anything else is a 405 there): the authorizer's
  // verb follows the method, so a handler reached with another method would let a user allowed
  // only to update, patch or delete nodes/proxy read logs, exec, attach or forward ports.
  const std::string& method = call->request().method;
  const bool streams = starts("/exec/") || starts("/attach/") || starts("/portForward/");
  const bool logs = starts("/containerLogs/");
  const bool allowed =
      method == "GET" || (streams && method == "POST") || (!streams && !logs && method == "HEAD");
  if (!allowed) {
    auto respond = call->respond(statusResponse(405,
                                                "the server does not allow this method on "
                                                "the requested resource"));
    co_await std::move(respond);
    co_return;
  }
  if (starts("/containerLogs/")) {
    auto task = containerLogs(call);
    co_await std::move(task);
    co_return;
  }
  if (starts("/exec/") || starts("/attach/")) {
    auto task = remoteCommand(call, starts("/attach/"));
    co_await std::move(task);
    co_return;
  }
  if (starts("/portForward/")) {
    auto task = portForward(call);
    co_await std::move(task);
    co_return;
  }
  if (path == "/runningpods" || path == "/runningpods/") {
    auto task = runningPods();
    answer = co_await std::move(task);
  } else if (path == "/configz" && options.configz_json) {
    answer = HttpResponse{200, "application/json", options.configz_json(), nullptr};
  } else if ((path == "/spec" || path == "/spec/") && options.spec_json) {
    answer = HttpResponse{200, "application/json", options.spec_json(), nullptr};
  } else if (options.read_only) {
    answer = options.read_only(call->request());
  } else {
    answer = statusResponse(404, "the server could not find the requested resource");
  }
  auto respond = call->respond(std::move(answer));
  co_await std::move(respond);
}

KubeletServer::Impl::Target KubeletServer::Impl::findTarget(const std::string& ns,
                                                            const std::string& name,
                                                            const std::string& container) {
  Target t;
  t.pod = agent.podByName(ns, name);
  if (!t.pod.pod) {
    t.refusal = statusResponse(404, "pod \"" + name + "\" does not exist");
  } else if (!specHasContainer(*t.pod.pod, container)) {
    t.refusal =
        statusResponse(404, "container \"" + container + "\" not found in pod \"" + name + "\"");
  }
  return t;
}

asio::awaitable<std::optional<runtime::ContainerStatus>> KubeletServer::Impl::containerStatus(
    const api::Pod& pod, std::string id) {
  auto fetch = runtime.getPodStatus(pod.metadata.uid, pod.metadata.name, pod.metadata.namespace_);
  auto status = co_await std::move(fetch);
  if (!status.ok()) co_return std::nullopt;
  for (const auto& c : status->container_statuses) {
    if (c.id.toString() == id || c.id.id == id) co_return c;
  }
  co_return std::nullopt;
}

asio::awaitable<void> KubeletServer::Impl::containerLogs(std::shared_ptr<HttpCall> call) {
  const HttpRequest& request = call->request();
  const auto parts = pathSegments(request.path, "/containerLogs/");
  std::optional<HttpResponse> refusal;
  if (!parts || parts->size() != 3) {
    refusal = statusResponse(400, "the path must be /containerLogs/{namespace}/{pod}/{container}");
  }
  auto options_or = logs::parseLogOptions(request.query, clock.wallNow());
  if (!refusal && !options_or.ok()) {
    refusal = statusResponse(logs::containerLogsHttpStatus(options_or.status()),
                             options_or.status().message());
  }
  Target target;
  if (!refusal) {
    target = findTarget((*parts)[0], (*parts)[1], (*parts)[2]);
    refusal = target.refusal;
  }
  base::StatusOr<std::string> id = base::notFoundError("no status");
  if (!refusal) {
    id = logs::validateContainerLogStatus((*parts)[1], target.pod.status.value_or(api::PodStatus{}),
                                          (*parts)[2], options_or->previous);
    if (!id.ok()) {
      refusal = statusResponse(logs::containerLogsHttpStatus(id.status()), id.status().message());
    }
  }
  std::optional<runtime::ContainerStatus> container;
  if (!refusal) {
    auto fetch = containerStatus(*target.pod.pod, *id);
    container = co_await std::move(fetch);
    if (!container || container->log_path.empty()) {
      refusal = statusResponse(400, "container \"" + (*parts)[2] + "\" in pod \"" + (*parts)[1] +
                                        "\" has no log on this node");
    }
  }
  if (refusal) {
    auto respond = call->respond(std::move(*refusal));
    co_await std::move(respond);
    co_return;
  }
  auto begin = call->beginStream(200, "text/plain");
  const bool streaming = co_await std::move(begin);
  if (!streaming) co_return;
  logs::LogSink sink = [call](std::string_view data) { return call->writeStream(data); };
  logs::StillRunning running = [this, call, pod = target.pod.pod,
                                id = *id]() -> asio::awaitable<bool> {
    if (call->closed()) co_return false;
    auto fetch = containerStatus(*pod, id);
    auto status = co_await std::move(fetch);
    co_return status && status->state == runtime::ContainerState::kRunning;
  };
  auto read = logs::readLogs(container->log_path, *options_or, std::move(sink), std::move(running),
                             options.file_pool, clock, kFollowCheckPeriod);
  base::Status done = co_await std::move(read);
  if (!done.ok()) log()->warn("Reading container logs failed err={}", done.toString());
}

asio::awaitable<void> KubeletServer::Impl::remoteCommand(std::shared_ptr<HttpCall> call,
                                                         bool attach) {
  const HttpRequest& request = call->request();
  const auto parts = pathSegments(request.path, attach ? "/attach/" : "/exec/");
  std::optional<HttpResponse> refusal;
  // kubelet also serves /exec/{namespace}/{pod}/{uid}/{container}.
  if (!parts || (parts->size() != 3 && parts->size() != 4)) {
    refusal = statusResponse(400, std::string("the path must be /") + (attach ? "attach" : "exec") +
                                      "/{namespace}/{pod}/{container}");
  }
  auto streams = remoteCommandOptions(request);
  if (!refusal && !streams.ok()) refusal = statusResponse(400, streams.status().message());
  std::vector<std::string> command;
  for (auto& [name, value] : parseQuery(request.query)) {
    if (name == "command") command.push_back(std::move(value));
  }
  if (!refusal && !attach && command.empty()) {
    refusal = statusResponse(400, "you must specify a command");
  }
  Target target;
  if (!refusal) {
    target = findTarget((*parts)[0], (*parts)[1], parts->back());
    refusal = target.refusal;
  }
  std::optional<runtime::ContainerId> id;
  if (!refusal) {
    auto fetch = runtime.getPodStatus(target.pod.pod->metadata.uid, (*parts)[1], (*parts)[0]);
    auto status = co_await std::move(fetch);
    const runtime::ContainerStatus* c =
        status.ok() ? status->findContainerStatusByName(parts->back()) : nullptr;
    if (c == nullptr || c->state != runtime::ContainerState::kRunning) {
      refusal = statusResponse(404, "container not found (\"" + parts->back() + "\")");
    } else {
      id = c->id;
    }
  }
  if (refusal) {
    auto respond = call->respond(std::move(*refusal));
    co_await std::move(respond);
    co_return;
  }
  if (runtime.streamsThroughUrls()) {
    base::StatusOr<std::string> url = std::string();
    if (attach) {
      auto asking = runtime.attachUrl(*id, *streams);
      url = co_await std::move(asking);
    } else {
      auto asking = runtime.execUrl(*id, std::move(command), *streams);
      url = co_await std::move(asking);
    }
    auto task = proxyOrRefuse(call, std::move(url));
    co_await std::move(task);
    co_return;
  }
  auto task = serveRemoteCommand(call, clock, runtime, *id, std::move(command), *streams);
  co_await std::move(task);
}

asio::awaitable<void> KubeletServer::Impl::proxyOrRefuse(std::shared_ptr<HttpCall> call,
                                                         base::StatusOr<std::string> url) {
  if (!url.ok()) {
    log()->warn("The runtime refused a streaming session path={} err={}", call->request().path,
                url.status().toString());
    const int code = url.status().code() == base::StatusCode::kNotFound ? 404 : 500;
    auto respond = call->respond(statusResponse(code, url.status().message()));
    co_await std::move(respond);
    co_return;
  }
  auto task = proxyStream(std::move(call), *std::move(url));
  co_await std::move(task);
}

asio::awaitable<void> KubeletServer::Impl::portForward(std::shared_ptr<HttpCall> call) {
  // /portForward/{namespace}/{pod}, or with the pod's UID after it (kubelet's two routes).
  const auto parts = pathSegments(call->request().path, "/portForward/");
  std::optional<HttpResponse> refusal;
  AgentView::PodWithStatus pod;
  if (!parts || (parts->size() != 2 && parts->size() != 3)) {
    refusal = statusResponse(400, "the path must be /portForward/{namespace}/{pod}[/{uid}]");
  } else {
    pod = agent.podByName((*parts)[0], (*parts)[1]);
    if (!pod.pod) {
      refusal = statusResponse(404, "pod does not exist");
    } else if (parts->size() == 3 && (*parts)[2] != pod.pod->metadata.uid) {
      refusal = statusResponse(404, "pod not found");
    }
  }
  if (refusal) {
    auto respond = call->respond(std::move(*refusal));
    co_await std::move(respond);
    co_return;
  }
  if (runtime.streamsThroughUrls()) {
    // The ports the client named in the query (a WebSocket client names them there).
    std::vector<int32_t> ports;
    for (const auto& [name, value] : parseQuery(call->request().query)) {
      if (name != "port") continue;
      if (auto port = parsePodPort(value)) ports.push_back(*port);
    }
    auto asking = runtime.portForwardUrl(pod.pod->metadata.uid, std::move(ports));
    auto url = co_await std::move(asking);
    auto task = proxyOrRefuse(call, std::move(url));
    co_await std::move(task);
    co_return;
  }
  auto task = servePortForward(call, clock, PodPortTarget::of(*pod.pod));
  co_await std::move(task);
}

asio::awaitable<HttpResponse> KubeletServer::Impl::runningPods() {
  auto fetch = runtime.getPods(/*all=*/false);
  auto pods = co_await std::move(fetch);
  if (!pods.ok()) co_return statusResponse(500, pods.status().message());
  nlohmann::json items = nlohmann::json::array();
  for (const auto& pod : *pods) {
    nlohmann::json containers = nlohmann::json::array();
    for (const auto& c : pod.containers) {
      containers.push_back(
          {{"name", c.name}, {"image", c.image}, {"resources", nlohmann::json::object()}});
    }
    items.push_back({{"metadata",
                      {{"name", pod.name},
                       {"namespace", pod.namespace_},
                       {"uid", pod.uid},
                       {"creationTimestamp", nullptr}}},
                     {"spec", {{"containers", containers}}},
                     {"status", nlohmann::json::object()}});
  }
  nlohmann::json list{{"kind", "PodList"},
                      {"apiVersion", "v1"},
                      {"metadata", nlohmann::json::object()},
                      {"items", items}};
  co_return HttpResponse{200, "application/json", list.dump(), nullptr};
}

KubeletServer::KubeletServer(asio::any_io_executor executor, base::Clock& clock,
                             const AgentView& agent, runtime::Runtime& runtime,
                             const api::AsyncRestClient* client, KubeletServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(executor), clock, agent, runtime, client,
                                   std::move(options))) {}

KubeletServer::~KubeletServer() { stop(); }

base::Status KubeletServer::start() { return impl_->server.start(); }

void KubeletServer::stop() { impl_->server.stop(); }

int KubeletServer::port() const { return impl_->server.port(); }

size_t KubeletServer::activeCalls() const { return impl_->server.activeCalls(); }

}  // namespace nodeagent::agent
