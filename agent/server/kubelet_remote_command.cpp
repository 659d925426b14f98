#include "agent/server/kubelet_remote_command.h"

#include <nlohmann/json.hpp>

#include <exception>

#include "agent/server/kubelet_remote_command_spdy.h"
#include "agent/server/kubelet_request.h"
#include "agent/server/spdy_upgrade.h"
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

nlohmann::json exitStatus(const std::vector<std::string>& command, base::StatusOr<int> exit) {
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
  return status;
}

// The WebSocket channels (kubelet's wsstream connection).
class WebSocketStreams final : public RemoteCommandStreams {
 public:
  explicit WebSocketStreams(std::unique_ptr<WebSocket> socket)
      : socket_(std::move(socket)), v5_(socket_->protocol() == kV5) {}

  // The client's messages: stdin, resizes, v5's close of stdin. Ends when the socket does (the
  // client went away, or the server closed it after the exit).
  asio::awaitable<void> pumpInput(runtime::StreamSession& session) override {
    while (true) {
      auto reading = socket_->read();
      auto message = co_await std::move(reading);
      if (!message) break;
      if (message->empty()) continue;
      const auto channel = static_cast<unsigned char>((*message)[0]);
      const std::string_view data = std::string_view(*message).substr(1);
      if (channel == kStdin && !data.empty()) {
        auto writing = sendStdin(session, std::string(data));
        co_await std::move(writing);
      } else if (channel == kResize) {
        applyResize(session, data);
      } else if (channel == kClose && v5_ && data.size() == 1 &&
                 static_cast<unsigned char>(data[0]) == kStdin) {
        session.closeStdin();
      }
    }
  }

  asio::awaitable<bool> writeOutput(runtime::LogStream stream, std::string_view data) override {
    const unsigned char channel = stream == runtime::LogStream::kStderr ? kStderr : kStdout;
    const std::string message = frame(channel, data);
    auto writing = socket_->write(message);
    co_return co_await std::move(writing);
  }

  bool statusJson() const override { return v5_ || socket_->protocol() == kV4; }

  asio::awaitable<void> finish(std::string status) override {
    if (!status.empty()) {
      const std::string message = frame(kError, status);
      auto writing = socket_->write(message);
      co_await std::move(writing);
    }
    auto closing = socket_->close();
    co_await std::move(closing);
  }

 private:
  std::unique_ptr<WebSocket> socket_;
  const bool v5_;
};

// kubelet's first message: an empty one on the lowest channel the client reads.
unsigned char readyChannel(const runtime::StreamOptions& options) {
  if (options.stdout) return kStdout;
  if (options.stderr) return kStderr;
  return kError;
}

asio::awaitable<std::shared_ptr<RemoteCommandStreams>> acceptWebSocketStreams(
    HttpCall& call, const runtime::StreamOptions& options) {
  auto accepting = call.acceptWebSocket({std::string(kV5), std::string(kV4), std::string(kV1)});
  std::unique_ptr<WebSocket> socket = co_await std::move(accepting);
  if (!socket) co_return nullptr;
  const std::string ready = frame(readyChannel(options), "");
  auto writing = socket->write(ready);
  co_await std::move(writing);
  co_return std::make_shared<WebSocketStreams>(std::move(socket));
}

// One session and the client's streams, held by both pumps.
struct Pumps {
  std::shared_ptr<RemoteCommandStreams> streams;
  runtime::StreamSessionPtr session;
};

// The client's input until it ends; whatever ends it (the client's close, or an error), the
// session is cancelled, so a command never outlives its client.
asio::awaitable<void> pumpInput(std::shared_ptr<Pumps> p) {
  try {
    auto pumping = p->streams->pumpInput(*p->session);
    co_await std::move(pumping);
  } catch (const std::exception& e) {
    log()->warn("Reading a remote command's input failed err={}", e.what());
  }
  p->session->cancel();
}

asio::awaitable<void> pumpOutput(std::shared_ptr<Pumps> p) {
  while (true) {
    auto reading = p->session->read();
    auto output = co_await std::move(reading);
    if (!output) co_return;
    auto writing = p->streams->writeOutput(output->stream, output->data);
    const bool written = co_await std::move(writing);
    if (!written) {
      p->session->cancel();
      co_return;
    }
  }
}

std::string statusFor(const RemoteCommandStreams& streams, const std::vector<std::string>& command,
                      base::StatusOr<int> exit) {
  return streams.statusJson() ? exitStatusJson(command, std::move(exit))
                              : exitStatusMessage(command, std::move(exit));
}

// The transport-agnostic part: the session started, pumped both ways, its exit reported.
asio::awaitable<void> runRemoteCommand(std::shared_ptr<RemoteCommandStreams> streams,
                                       runtime::Runtime& runtime, runtime::ContainerId id,
                                       std::vector<std::string> command,
                                       runtime::StreamOptions options) {
  auto start =
      command.empty() ? runtime.attach(id, options) : runtime.execStream(id, command, options);
  auto session = co_await std::move(start);
  if (!session.ok()) {
    auto finishing = streams->finish(statusFor(*streams, command, session.status()));
    co_await std::move(finishing);
    co_return;
  }
  auto p = std::make_shared<Pumps>(Pumps{streams, std::move(*session)});
  auto executor = co_await asio::this_coro::executor;
  asio::co_spawn(executor, pumpInput(p), asio::detached);
  auto output = pumpOutput(p);
  co_await std::move(output);
  auto wait = p->session->wait();
  auto exit = co_await std::move(wait);
  auto finishing = streams->finish(statusFor(*streams, command, std::move(exit)));
  co_await std::move(finishing);
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
  return exitStatus(command, std::move(exit)).dump();
}

std::string exitStatusMessage(const std::vector<std::string>& command, base::StatusOr<int> exit) {
  const nlohmann::json status = exitStatus(command, std::move(exit));
  return status.value("status", "") == "Success" ? "" : status.value("message", "");
}

asio::awaitable<void> sendStdin(runtime::StreamSession& session, std::string data) {
  auto writing = session.writeStdin(std::move(data));
  const base::Status written = co_await std::move(writing);
  if (!written.ok()) log()->debug("Stdin write failed err={}", written.message());
}

void applyResize(runtime::StreamSession& session, std::string_view json) {
  const auto size = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!size.is_object()) return;
  auto dimension = [&](const char* name) -> int64_t {
    auto it = size.find(name);
    return it != size.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  const int64_t width = dimension("Width");
  const int64_t height = dimension("Height");
  if (width <= 0 || height <= 0 || width > 0xffff || height > 0xffff) return;
  session.resize({static_cast<uint16_t>(width), static_cast<uint16_t>(height)});
}

asio::awaitable<void> serveRemoteCommand(std::shared_ptr<HttpCall> call, base::Clock& clock,
                                         runtime::Runtime& runtime, runtime::ContainerId id,
                                         std::vector<std::string> command,
                                         runtime::StreamOptions options,
                                         RemoteCommandLimits limits) {
  std::shared_ptr<RemoteCommandStreams> streams;
  if (call->isWebSocketRequest()) {
    auto accepting = acceptWebSocketStreams(*call, options);
    streams = co_await std::move(accepting);
  } else if (isSpdyUpgrade(*call)) {
    auto accepting = acceptSpdyCommandStreams(*call, clock, options, limits);
    streams = co_await std::move(accepting);
  } else {
    auto refusing = call->respond(statusResponse(
        400, "unable to upgrade: exec and attach need a WebSocket (" + std::string(kV5) + ", " +
                 std::string(kV4) + ", " + std::string(kV1) + ") or an Upgrade to SPDY/3.1 (" +
                 spdyRemoteCommandProtocols() + ")"));
    co_await std::move(refusing);
    co_return;
  }
  if (!streams) co_return;
  auto running =
      runRemoteCommand(std::move(streams), runtime, std::move(id), std::move(command), options);
  co_await std::move(running);
}

}  // namespace nodeagent::agent
