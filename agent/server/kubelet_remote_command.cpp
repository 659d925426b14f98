#include "agent/server/kubelet_remote_command.h"

#include <nlohmann/json.hpp>

#include "agent/server/kubelet_request.h"
#include "base/log.h"

namespace nodeagent::agent {
namespace {

NODEAGENT_LOGGER("server")

constexpr std::string_view kV5 = "v5.channel.k8s.io";
constexpr std::string_view kV4 = "v4.channel.k8s.io";
constexpr std::string_view kV1 = "channel.k8s.io";

constexpr unsigned char kStdin = 0;
constexpr unsigned char kStdout = 1;
constexpr unsigned char kStderr = 2;
constexpr unsigned char kError = 3;
constexpr unsigned char kResize = 4;
constexpr unsigned char kClose = 255;

std::string frame(unsigned char channel, std::string_view data) {
  std::string out;
  out.reserve(data.size() + 1);
  out.push_back(static_cast<char>(channel));
  out.append(data);
  return out;
}

std::string joinCommand(const std::vector<std::string>& command) {
  std::string out = "[";
  for (size_t i = 0; i < command.size(); ++i) out += (i ? " " : "") + command[i];
  return out + "]";
}

// One session's shared state: the session and the socket, held by both pumps.
struct Pumps {
  runtime::StreamSessionPtr session;
  std::unique_ptr<WebSocket> socket;
  bool v5 = false;
};

void resize(runtime::StreamSession& session, std::string_view data) {
  const auto size = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!size.is_object()) return;
  const auto width = size.value("Width", 0);
  const auto height = size.value("Height", 0);
  if (width <= 0 || height <= 0 || width > 0xffff || height > 0xffff) return;
  session.resize({static_cast<uint16_t>(width), static_cast<uint16_t>(height)});
}

// The client's messages: stdin, resizes, v5's close of stdin. Ends when the socket does (the
// client went away, or the server closed it after the exit): the session is then cancelled.
asio::awaitable<void> pumpInput(std::shared_ptr<Pumps> p) {
  while (true) {
    auto message = co_await p->socket->read();
    if (!message) break;
    if (message->empty()) continue;
    const auto channel = static_cast<unsigned char>((*message)[0]);
    const std::string_view data = std::string_view(*message).substr(1);
    if (channel == kStdin && !data.empty()) {
      auto task = p->session->writeStdin(std::string(data));
      auto written = co_await std::move(task);
      if (!written.ok()) log()->debug("Stdin write failed err={}", written.message());
    } else if (channel == kResize) {
      resize(*p->session, data);
    } else if (channel == kClose && p->v5 && data.size() == 1 &&
               static_cast<unsigned char>(data[0]) == kStdin) {
      p->session->closeStdin();
    }
  }
  p->session->cancel();
}

asio::awaitable<void> pumpOutput(std::shared_ptr<Pumps> p) {
  while (true) {
    auto output = co_await p->session->read();
    if (!output) co_return;
    const unsigned char channel = output->stream == runtime::LogStream::kStderr ? kStderr : kStdout;
    const std::string message = frame(channel, output->data);
    const bool written = co_await p->socket->write(message);
    if (!written) {
      p->session->cancel();
      co_return;
    }
  }
}

// kubelet's first message: an empty one on the lowest channel the client reads.
unsigned char readyChannel(const runtime::StreamOptions& options) {
  if (options.stdout) return kStdout;
  if (options.stderr) return kStderr;
  return kError;
}

}  // namespace

base::StatusOr<runtime::StreamOptions> remoteCommandOptions(const HttpRequest& request) {
  const auto query = parseQuery(request.query);
  runtime::StreamOptions options;
  options.stdin = queryFlag(query, "input") || queryFlag(query, "stdin");
  options.stdout = queryFlag(query, "output") || queryFlag(query, "stdout");
  options.stderr = queryFlag(query, "error") || queryFlag(query, "stderr");
  options.tty = queryFlag(query, "tty");
  if (options.tty) options.stderr = false;
  if (!options.stdin && !options.stdout && !options.stderr) {
    return base::invalidArgumentError("you must specify at least 1 of stdin, stdout, stderr");
  }
  return options;
}

std::string exitStatusJson(const std::vector<std::string>& command, base::StatusOr<int> exit) {
  nlohmann::json status{{"metadata", nlohmann::json::object()}};
  if (!exit.ok()) {
    status.update({{"kind", "Status"},
                   {"apiVersion", "v1"},
                   {"status", "Failure"},
                   {"message", "Internal error occurred: error executing command in container: " +
                                   exit.status().message()},
                   {"reason", "InternalError"},
                   {"code", 500}});
  } else if (*exit == 0) {
    status["status"] = "Success";
  } else {
    const std::string code = std::to_string(*exit);
    status.update({{"status", "Failure"},
                   {"message",
                    "command terminated with non-zero exit code: error executing "
                    "command " +
                        joinCommand(command) + ", exit code " + code},
                   {"reason", "NonZeroExitCode"},
                   {"details", {{"causes", {{{"reason", "ExitCode"}, {"message", code}}}}}}});
  }
  return status.dump();
}

asio::awaitable<void> serveRemoteCommand(std::shared_ptr<HttpCall> call, runtime::Runtime& runtime,
                                         runtime::ContainerId id, std::vector<std::string> command,
                                         runtime::StreamOptions options) {
  if (!call->isWebSocketRequest()) {
    auto refuse = call->respond(statusResponse(
        400, "nodeagent serves exec and attach over WebSocket only (" + std::string(kV5) + ", " +
                 std::string(kV4) + "); SPDY is not supported for them"));
    co_await std::move(refuse);
    co_return;
  }
  auto p = std::make_shared<Pumps>();
  auto accept = call->acceptWebSocket({std::string(kV5), std::string(kV4), std::string(kV1)});
  p->socket = co_await std::move(accept);
  if (!p->socket) co_return;
  p->v5 = p->socket->protocol() == kV5;
  const bool status_json = p->v5 || p->socket->protocol() == kV4;
  auto start =
      command.empty() ? runtime.attach(id, options) : runtime.execStream(id, command, options);
  auto session = co_await std::move(start);
  if (!session.ok()) {
    const std::string status =
        status_json ? exitStatusJson(command, session.status()) : session.status().message();
    const std::string message = frame(kError, status);
    co_await p->socket->write(message);
    co_await p->socket->close();
    co_return;
  }
  p->session = std::move(*session);
  const std::string ready = frame(readyChannel(options), "");
  co_await p->socket->write(ready);
  auto executor = co_await asio::this_coro::executor;
  asio::co_spawn(executor, pumpInput(p), asio::detached);
  auto output = pumpOutput(p);
  co_await std::move(output);
  auto wait = p->session->wait();
  auto exit = co_await std::move(wait);
  std::string status;
  if (status_json) {
    status = exitStatusJson(command, exit);
  } else if (!exit.ok() || *exit != 0) {
    status = exit.ok() ? "command terminated with exit code " + std::to_string(*exit)
                       : exit.status().message();
  }
  if (!status.empty()) {
    const std::string message = frame(kError, status);
    co_await p->socket->write(message);
  }
  co_await p->socket->close();
}

}  // namespace nodeagent::agent
