// CriRuntime's streaming calls (the URLs of exec, attach and port-forward sessions on the
// runtime's streaming server) and the log reopening that rotation asks for.
#include "agent/runtime/cri/cri_runtime.h"
#include "base/blocking.h"

namespace nodeagent::runtime {
namespace {

cri::CriClient::StreamRequest streamRequest(const StreamOptions& options) {
  cri::CriClient::StreamRequest r;
  r.tty = options.tty;
  r.stdin_stream = options.stdin;
  r.stdout_stream = options.stdout;
  r.stderr_stream = options.stderr;
  return r;
}

}  // namespace

asio::awaitable<base::StatusOr<std::string>> CriRuntime::execUrl(ContainerId id,
                                                                 std::vector<std::string> command,
                                                                 StreamOptions options) {
  CO_RETURN_IF_ERROR(checkStreamOptions(options));
  if (command.empty()) co_return base::invalidArgumentError("exec needs a command");
  auto client = client_;
  auto ask = [client, id = std::move(id.id), command = std::move(command), options] {
    return client->exec(id, command, streamRequest(options));
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(ask));
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<std::string>> CriRuntime::attachUrl(ContainerId id,
                                                                   StreamOptions options) {
  CO_RETURN_IF_ERROR(checkStreamOptions(options));
  auto client = client_;
  auto ask = [client, id = std::move(id.id), options] {
    return client->attach(id, streamRequest(options));
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(ask));
  co_return co_await std::move(task);
}

asio::awaitable<base::StatusOr<std::string>> CriRuntime::portForwardUrl(
    std::string uid, std::vector<int32_t> ports) {
  auto client = client_;
  auto ask = [client, uid = std::move(uid),
              ports = std::move(ports)]() -> base::StatusOr<std::string> {
    cri::PodSandboxFilter filter;
    filter.label_selector = {{kPodUidLabel, uid}};
    filter.state = cri::PodSandboxState::kReady;
    auto sandboxes = client->listPodSandbox(filter);
    if (!sandboxes.ok()) return sandboxes.status();
    if (sandboxes->empty()) {
      return base::notFoundError("pod " + uid + " has no ready sandbox to forward ports into");
    }
    return client->portForward(sandboxes->front().id, ports);
  };
  auto task = base::runBlocking(options_.blocking_executor, std::move(ask));
  co_return co_await std::move(task);
}

asio::awaitable<base::Status> CriRuntime::reopenContainerLog(ContainerId id) {
  auto client = client_;
  auto reopen = [client, id = std::move(id.id)] { return client->reopenContainerLog(id); };
  auto task = base::runBlocking(options_.blocking_executor, std::move(reopen));
  co_return co_await std::move(task);
}

}  // namespace nodeagent::runtime
