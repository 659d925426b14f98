// The plain SPDY/3.1 upgrade of a kubelet API request (kubelet's httpstream handshake, shared by
// exec/attach and port-forward): `Connection: Upgrade`, `Upgrade: SPDY/3.1` and the stream
// protocol the client and the server agree on (`X-Stream-Protocol-Version`), answered in the 101.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/server/http_server.h"

namespace nodeagent::agent {

// Whether the comma-separated lists of the request's headers named `name` (case-insensitive)
// hold `token`.
bool headerOffers(const HttpRequest& request, std::string_view name, std::string_view token);
// Whether the request has a header named `name` (case-insensitive).
bool hasHeader(const HttpRequest& request, std::string_view name);
// Whether the call asks for `Upgrade: SPDY/3.1`.
bool isSpdyUpgrade(const HttpCall& call);

struct SpdyUpgrade {
  std::unique_ptr<ByteStream> transport;  // null: the call was answered (refused) or failed
  std::string protocol;                   // agreed; "" for a client that named none
};

// httpstream's handshake: the first protocol the client offers (X-Stream-Protocol-Version, in
// its order) that is in `server_protocols`, named in the 101. A client that names none is an
// old one, served all the same with protocol "". One that names only others is answered 403,
// a request that is no SPDY upgrade 400.
asio::awaitable<SpdyUpgrade> acceptSpdyUpgrade(HttpCall& call,
                                               std::vector<std::string> server_protocols);

}  // namespace nodeagent::agent
