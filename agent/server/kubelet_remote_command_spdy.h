// kubelet's remotecommand over a plain SPDY/3.1 upgrade (its httpstream server, what
// kube-apiserver and kubectl without WebSockets speak): the handshake agrees on
// v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io or channel.k8s.io (a client that
// names none gets channel.k8s.io), then the client opens one stream per channel, each with a
// `streamType` header: error always, stdin, stdout and stderr as the query asked, and resize
// for a TTY from v3. The command starts once they are all there; a client that has not opened
// them within the stream creation timeout has its connection closed. Streams of a type not
// asked for, or twice, are reset. stdin's FIN is the command's end of input; resize carries
// JSON sizes, one per line; the error stream gets the status, then every stream is closed.
#pragma once

#include <memory>
#include <string>

#include "agent/server/kubelet_remote_command.h"

namespace nodeagent::agent {

// The protocols, most preferred first, as a message lists them.
std::string spdyRemoteCommandProtocols();

// Upgrades the call (answering a refusal itself) and waits for the streams `options` asks for;
// null when the call was refused, the client went away or did not open them in time. On the
// call's strand.
asio::awaitable<std::shared_ptr<RemoteCommandStreams>> acceptSpdyCommandStreams(
    HttpCall& call, base::Clock& clock, runtime::StreamOptions options, RemoteCommandLimits limits);

}  // namespace nodeagent::agent
