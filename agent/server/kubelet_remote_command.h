// kubelet's remotecommand server over WebSocket (/exec and /attach): the v5.channel.k8s.io,
// v4.channel.k8s.io and channel.k8s.io protocols. Each binary message is a channel byte and
// data: 0 stdin, 1 stdout, 2 stderr, 3 error (v4+: a Status JSON with the exit code), 4 resize
// ({"Width":W,"Height":H}), and in v5 255 closes a channel (stdin's end of input). SPDY is not
// served: a request without a WebSocket upgrade is refused with a Status naming the protocols.
#pragma once

#include <string>
#include <vector>

#include "agent/runtime/runtime.h"
#include "agent/runtime/stream_session.h"
#include "agent/server/http_server.h"

namespace nodeagent::agent {

// The streams a request asks for (kubelet's NewOptions: stdin, stdout, stderr, tty from the
// query; with tty, stderr is dropped). An error names what is wrong (at least one stream).
base::StatusOr<runtime::StreamOptions> remoteCommandOptions(const HttpRequest& request);

// The v4/v5 error channel's Status: Success, or Failure with reason NonZeroExitCode and the exit
// code as an ExitCode cause (kubelet's ServeExec), or an InternalError for `error`.
std::string exitStatusJson(const std::vector<std::string>& command, base::StatusOr<int> exit);

// Serves an exec (`command` non-empty) or an attach to the running container `id`: upgrades the
// call to a WebSocket, starts the session, pumps the streams until the output ended and writes
// the exit status on the error channel. On the call's strand.
asio::awaitable<void> serveRemoteCommand(std::shared_ptr<HttpCall> call, runtime::Runtime& runtime,
                                         runtime::ContainerId id, std::vector<std::string> command,
                                         runtime::StreamOptions options);

}  // namespace nodeagent::agent
