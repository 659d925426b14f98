// kubelet's remotecommand server (/exec and /attach): one runtime::StreamSession pumped to and
// from the client over either of kubelet's transports, which carry the same streams (stdin,
// stdout, stderr, error, resize):
// - a WebSocket (v5.channel.k8s.io, v4.channel.k8s.io, channel.k8s.io): each binary message is
//   a channel byte and data: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize
//   ({"Width":W,"Height":H}), and in v5 255 closes a channel (stdin's end of input);
// - a plain SPDY/3.1 upgrade (v4, v3, v2.channel.k8s.io, channel.k8s.io; see
//   kubelet_remote_command_spdy.h): the client opens one stream per channel.
// From v4 the error channel carries a Status JSON with the exit code; before, only a failure's
// message. A request that asks for neither upgrade is refused with a Status naming both.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime/runtime.h"
#include "agent/runtime/stream_session.h"
#include "agent/server/http_server.h"
#include "agent/server/spdy_session.h"
#include "base/clock.h"

namespace nodeagent::agent {

// The streams a request asks for (kubelet's NewOptions: stdin, stdout, stderr, tty from the
// query; with tty, stderr is dropped). An error names what is wrong (at least one stream).
base::StatusOr<runtime::StreamOptions> remoteCommandOptions(const HttpRequest& request);

// The v4/v5 error channel's Status: Success, or Failure with reason NonZeroExitCode and the exit
// code as an ExitCode cause (kubelet's ServeExec), or an InternalError for `error`.
std::string exitStatusJson(const std::vector<std::string>& command, base::StatusOr<int> exit);
// What the older protocols write on the error channel instead: that Status's message for a
// failure, "" for success.
std::string exitStatusMessage(const std::vector<std::string>& command, base::StatusOr<int> exit);

struct RemoteCommandLimits {
  // How long the SPDY client has to open the streams its request asked for (kubelet's
  // stream creation timeout).
  base::Duration stream_creation_timeout = std::chrono::seconds(30);
  SpdyLimits spdy;
};

// The client's end of one exec or attach, as a transport carries it (kubelet's remoteContext).
// On the call's strand.
class RemoteCommandStreams {
 public:
  virtual ~RemoteCommandStreams() = default;
  // Feeds the client's input to `session` (stdin and its end, terminal sizes); returns once the
  // client went away or the connection ended (the session is then cancelled).
  virtual asio::awaitable<void> pumpInput(runtime::StreamSession& session) = 0;
  // Sends a piece of output on the stdout or stderr stream; false once the client is gone.
  virtual asio::awaitable<bool> writeOutput(runtime::LogStream stream, std::string_view data) = 0;
  // Whether the error stream carries a Status JSON (v4 and later).
  virtual bool statusJson() const = 0;
  // Writes `status` on the error stream (unless empty), then ends the connection.
  virtual asio::awaitable<void> finish(std::string status) = 0;
};

// Input shared by the transports: stdin data for the session (a failed write is only logged:
// the command may have closed its stdin), and a resize message (malformed ones are ignored).
asio::awaitable<void> sendStdin(runtime::StreamSession& session, std::string data);
void applyResize(runtime::StreamSession& session, std::string_view json);

// Serves an exec (`command` non-empty) or an attach to the running container `id`: upgrades the
// call (WebSocket or SPDY), starts the session, pumps the streams until the output ended and
// writes the exit status on the error stream. On the call's strand.
asio::awaitable<void> serveRemoteCommand(std::shared_ptr<HttpCall> call, base::Clock& clock,
                                         runtime::Runtime& runtime, runtime::ContainerId id,
                                         std::vector<std::string> command,
                                         runtime::StreamOptions options,
                                         RemoteCommandLimits limits = {});

}  // namespace nodeagent::agent
